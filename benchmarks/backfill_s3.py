"""The full backfill with the lake on S3, against the same hand-written PySpark job on S3.

    .venv/bin/python -m benchmarks.backfill_s3 [--days 30] [--regions 8] [--rows 28000]
        [--repeats 3] [--out benchmarks/out/backfill_s3_30d.json]

The workload of benchmarks/backfill.py (raw_events `days` x `regions` x `rows`, the example
chain clean_events -> daily_region_stats -> monthly_region_stats with its gates). Four kinds,
interleaved, `--repeats` times, each on a fresh copy of the same source table:

- floor: benchmarks/floor_job.py on local disk;
- partlake_local: `partlake run` with the lake on local disk (local Spark);
- floor_s3: the same PySpark job reading the source from S3 and writing its tables there (s3a);
- partlake_s3: `partlake run` with the lake on S3 (`PARTLAKE_LAKE_ROOT=s3://lake/...`): Spark's
  workers write the Parquet files through pyarrow's S3 filesystem, delta-rs commits with
  create-only PUTs, the planner reads the logs through the store.

The S3 server is s3proxy (scripts/s3_server.py, its filesystem backend on this machine's disk),
started once with the JVM's full JIT (`--full-jit`: the tests' C1-only JIT starts faster but
serves slower). A source copy on S3 is uploaded through the server (setup, not measured).
Reported: every sample, the medians, partlake / floor per repeat for each place and their medians
(the ratio the docs quote), and where partlake's time went.
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
    PY,
    REPO,
    _free_port,
    lake_copy,
    make_source,
    ok_lines,
    run_timed,
)
from benchmarks.backfill_phases import floor_phases, median_phases, partlake_phases
from benchmarks.workload import add_workload_arguments, load_average, workload_of

KINDS = ("floor", "partlake_local", "floor_s3", "partlake_s3")
PAIRS = {"local": ("partlake_local", "floor"), "s3": ("partlake_s3", "floor_s3")}
S3_SCRIPT = REPO / "scripts" / "s3_server.py"
BUCKET = "lake"


def start_server(state: Path) -> dict[str, str]:
    """s3proxy on a free port with the full JIT; the AWS variables for its clients."""
    state.mkdir(parents=True, exist_ok=True)
    started = subprocess.run(
        [PY, str(S3_SCRIPT), "--state", str(state), "start", "--port", str(_free_port()),
         "--bucket", BUCKET, "--full-jit"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if started.returncode != 0:
        raise SystemExit(f"the S3 server did not start: {started.stderr[-2000:]}")
    print(f"  {started.stdout.strip()}", file=sys.stderr)
    lines = subprocess.run(
        [PY, str(S3_SCRIPT), "--state", str(state), "env"], capture_output=True, text=True
    ).stdout.splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines)


def s3_copy(
    work: Path, name: str, source: Path, data: Path, aws: dict[str, str]
) -> tuple[str, dict[str, str]]:
    """A lake on S3 with a copy of the source table (its files put straight into the server's
    data folder), and the environment of a process using it."""
    import pyarrow.fs as pafs

    from dagster_partlake.storage.location import TableLocation

    _, env = lake_copy(work, name, source)
    root = f"s3://{BUCKET}/{name}"
    target = TableLocation.parse(f"{root}/warehouse/raw_events", aws)
    fs, path = target.arrow()
    # Through the server (PUTs): objects copied onto its disk directly would lack their ETags.
    pafs.copy_files(str(source), path, destination_filesystem=fs, use_threads=True)
    env.update(aws)
    env["PARTLAKE_LAKE_ROOT"] = root
    return root, env


def once(kind: str, work: Path, golden: Path, data: Path, aws: dict[str, str], repeat: int,
         asset_partitions: int) -> dict[str, Any]:  # fmt: skip
    name = f"{kind}_{repeat}"
    if kind.endswith("_s3"):
        root, env = s3_copy(work, name, golden, data, aws)
        source, out = f"{root}/warehouse/raw_events", f"{root}/floor_out"
    else:
        lake, env = lake_copy(work, name, golden)
        source, out = str(lake / "warehouse" / "raw_events"), str(lake / "floor_out")
    if kind.startswith("floor"):
        command = [PY, "-m", "benchmarks.floor_job", source, out]
        run = run_timed(command, env, f"{kind} (one PySpark job), repeat {repeat}")
        sample = {"seconds": run.seconds, "phases": floor_phases(run.stdout, run.seconds)}
    else:
        run = run_timed([*PARTLAKE, "run", "-m", MODULE], env, f"{kind}, repeat {repeat}")
        assert ok_lines(run.stdout) == asset_partitions, run.stdout[-2000:]
        split = partlake_phases(Path(env["DAGSTER_HOME"]), run.started, run.ended)
        sample = {"seconds": run.seconds, "phases": split["phases"]}
    shutil.rmtree(work / name, ignore_errors=True)
    shutil.rmtree(data / BUCKET / name, ignore_errors=True)
    return sample


def summarize(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    times = {k: [s["seconds"] for s in v] for k, v in samples.items()}
    per_repeat = {
        place: [p / f for p, f in zip(times[mine], times[floor], strict=True)]
        for place, (mine, floor) in PAIRS.items()
    }
    return {
        "repeats": len(times["floor"]),
        "order": list(KINDS),
        "samples": {k: [round(t, 2) for t in v] for k, v in times.items()},
        "median": {k: round(statistics.median(v), 2) for k, v in times.items()},
        "min": {k: round(min(v), 2) for k, v in times.items()},
        "max": {k: round(max(v), 2) for k, v in times.items()},
        "ratios_per_repeat": {k: [round(r, 3) for r in v] for k, v in per_repeat.items()},
        "ratio_median_of_repeats": {
            f"partlake_over_floor_{k}": round(statistics.median(v), 3)
            for k, v in per_repeat.items()
        },
        "s3_over_local_median": {
            "floor": round(
                statistics.median(times["floor_s3"]) / statistics.median(times["floor"]), 3
            ),
            "partlake": round(
                statistics.median(times["partlake_s3"])
                / statistics.median(times["partlake_local"]),
                3,
            ),
        },
        "phases_median": {k: median_phases([s["phases"] for s in v]) for k, v in samples.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_workload_arguments(parser, days=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "backfill_s3_30d.json"))
    args = parser.parse_args(argv)
    workload = workload_of(args)
    asset_partitions = workload.asset_partitions
    work = Path(tempfile.mkdtemp(prefix="partlake-backfill-s3-"))
    result: dict[str, Any] = {
        "workload": workload.as_json(),
        "machine": {
            "cores": os.cpu_count(),
            "load_average_at_start": load_average(),
            "note": "a 2-core machine shared with other engineers' test runs and benchmarks",
        },
        "s3_server": "s3proxy 4.1.0 (filesystem-nio2 backend on local disk), full JIT",
    }
    state = work / "s3"
    try:
        print(f"setup: source table in {work}", file=sys.stderr)
        golden = work / "source"
        made = make_source(golden, args.days, workload.region_names, args.rows)
        result["setup_source_s"] = round(made, 1)
        aws = start_server(state)
        data = state / "data"
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        for repeat in range(1, args.repeats + 1):
            for kind in KINDS:
                samples[kind].append(once(kind, work, golden, data, aws, repeat, asset_partitions))
        result["backfill"] = summarize(samples)
        result["machine"]["load_average_at_end"] = load_average()
    finally:
        subprocess.run(
            [PY, str(S3_SCRIPT), "--state", str(state), "stop"], stdout=sys.stderr, timeout=120
        )
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
