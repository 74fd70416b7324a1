"""The delta-spark writer vs partlake's writer on the backfill (issue 34, point 6).

    .venv/bin/python -m benchmarks.native_writer [--days 30] [--regions 8] [--rows 28000]
        [--repeats 3] [--out benchmarks/out/native_writer.json]

The workload of benchmarks/backfill.py (raw_events -> clean_events -> daily_region_stats ->
monthly_region_stats, gates included; benchmarks/backfill_defs.py): `partlake run` of the full
backfill with local Spark, once with the IO manager's `writer="partlake"` (Spark's Python
workers write the files, delta-rs commits) and once with `writer="delta-spark"` (Spark's Delta
writes and commits through `replaceWhere`), `--repeats` times interleaved (partlake,
delta-spark, partlake, ...), each on a fresh copy of the same source table. Every run must
materialize every partition, and afterwards the plan must be empty (`partlake plan`).

Prints JSON (and writes it to --out): every sample, medians, min, max, and the median of the
per-repeat ratios delta-spark / partlake. Wall-clock seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.backfill import (
    MODULE,
    PARTLAKE,
    REPO,
    lake_copy,
    make_source,
    ok_lines,
    run_timed,
)
from benchmarks.workload import add_workload_arguments, load_average, workload_of

WRITERS = ("partlake", "delta-spark")


def once(writer: str, lake: Path, env: dict[str, str], repeat: int, partitions: int) -> float:
    """One full backfill committed by `writer`; its seconds (checked complete and fresh)."""
    env = {**env, "BENCH_WRITER": writer}
    run = run_timed([*PARTLAKE, "run", "-m", MODULE], env, f"{writer} writer, repeat {repeat}")
    assert ok_lines(run.stdout) == partitions, run.stdout[-2000:]
    plan = subprocess.run(
        [*PARTLAKE, "plan", "-m", MODULE, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(plan.stdout) == [], plan.stdout[-2000:]  # the lake is fresh
    return run.seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_workload_arguments(parser, days=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "native_writer.json"))
    args = parser.parse_args(argv)

    workload = workload_of(args)
    partitions = workload.asset_partitions
    work = Path(tempfile.mkdtemp(prefix="partlake-native-writer-"))
    result: dict[str, Any] = {
        "workload": workload.as_json(),
        "machine": {"cores": os.cpu_count(), "load_average_at_start": load_average()},
        "notes": [
            "The machine was shared with other engineers' tests while this ran: the samples "
            "carry that noise; the interleaving spreads it over both writers."
        ],
    }
    try:
        golden = work / "source"
        made = make_source(golden, args.days, workload.region_names, args.rows)
        result["setup_source_s"] = round(made, 1)
        samples: dict[str, list[float]] = {w: [] for w in WRITERS}
        for repeat in range(1, args.repeats + 1):
            for writer in WRITERS:
                lake, env = lake_copy(work, f"{writer}_{repeat}", golden)
                samples[writer].append(once(writer, lake, env, repeat, partitions))
                shutil.rmtree(lake, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [d / p for d, p in zip(samples["delta-spark"], samples["partlake"], strict=True)]
    result["backfill"] = {
        "order": list(WRITERS),
        "samples": {w: [round(s, 2) for s in v] for w, v in samples.items()},
        "median": {w: round(statistics.median(v), 2) for w, v in samples.items()},
        "min": {w: round(min(v), 2) for w, v in samples.items()},
        "max": {w: round(max(v), 2) for w, v in samples.items()},
        "delta_spark_over_partlake_median_of_ratios": round(statistics.median(ratios), 3),
    }
    result["machine"]["load_average_at_end"] = load_average()
    text = json.dumps(result, indent=2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
