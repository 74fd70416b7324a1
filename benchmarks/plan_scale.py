"""How partlake's planner scales with the partition count, next to Dagster's own automation.

Synthetic lake: four Delta tables `src -> a1 -> a2 -> a3` (identity mappings), each with N
partitions `date` (daily, Delta `date` column) x `region` (static, 100 values), one tiny Parquet
file per partition (one file written once and hard-linked everywhere). `src` is a plain Delta table
written "by another system"; a1..a3 carry `partlake` commit infos exactly like
`DeltaPartitionIOManager.handle_output` writes them, so that everything starts fresh.

For every N (default 10000, 100000, 1000000) and every measured case a fresh subprocess is
started, so each case has its own peak memory (`resource.getrusage(RUSAGE_SELF).ru_maxrss` of
that process, plus psutil RSS sampled every 5 ms in a background thread during the timed call):

partlake (`make_plan` with a warm `StateCache`, synced once before timing):
  no_change       make_plan when nothing moved, and the sensor's quick check (per table, one
                  `stat` of `_delta_log/<version+1>.json` and one of `<version>.json`:
                  `dagster_partlake.gather.moved`)
  disk_cache      make_plan in a new process whose on-disk cache (table states and the saved
                  plan) a previous process filled: `partlake plan` the second time
  sensor_tick     the real sensor (`build_invalidation_sensor`): first tick, then skip ticks
  one_old_change  one src partition from the first week rewritten (new file + remove, one commit)
  ten_percent     10% of src partitions rewritten in one commit
Source changes are committed by a child process ("another system"), so they do not count in
the planner process' memory.

Dagster (`dagster.evaluate_automation_conditions`, SQLite instance) with a1..a3 given
`AutomationCondition.eager()` or `AutomationCondition.any_deps_updated()`: every partition of src
and a1..a3 reported as materialized, then: first evaluation (sets the cursor), no-change
evaluation, one old src partition reported (AssetMaterialization) + evaluation, 10% of src
partitions reported + evaluation.

Usage:
    .venv/bin/python benchmarks/plan_scale.py [--sizes 10000,100000,1000000] [--out FILE]
    (Dagster runs up to --dagster-max, 100,000 by default)

Prints the JSON to stdout (progress goes to stderr) and writes it to --out
(default benchmarks/out/plan_scale.json).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.plan_harness import measure_size, task_main  # noqa: E402
from benchmarks.plan_lake import Layout  # noqa: E402
from benchmarks.plan_report import log, print_summary  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_task"]:
        task_main(sys.stdin.read())
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="10000,100000,1000000", help="partitions per asset (comma-separated)"
    )
    parser.add_argument(
        "--out", default=str(REPO / "benchmarks" / "out" / "plan_scale.json"), help="JSON output"
    )
    parser.add_argument("--work", default="/tmp/partlake_plan_scale", help="scratch directory")
    parser.add_argument(
        "--dagster-dir",
        default="/dev/shm/partlake_plan_scale" if os.path.isdir("/dev/shm") else None,
        help="where the SQLite Dagster instances live (default /dev/shm: no fsync per event)",
    )
    parser.add_argument(
        "--report-budget",
        type=float,
        default=1800.0,
        help="seconds Dagster's public API may take to report all materializations of one size; "
        "beyond it Dagster is not measured at that size (the JSON says so)",
    )
    parser.add_argument("--dagster-timeout", type=float, default=1800.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-dagster", action="store_true")
    parser.add_argument(
        "--dagster-max",
        type=int,
        default=100_000,
        help="largest size at which Dagster is measured (at 1M its event reporting alone "
        "exceeds the time limit)",
    )
    parser.add_argument("--skip-partlake", action="store_true")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the scratch lakes")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    for n in sizes:
        Layout(n)

    import dagster
    import deltalake
    import psutil

    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "benchmarks/plan_scale.py",
        "command": " ".join(
            [os.path.relpath(sys.executable, REPO), "benchmarks/plan_scale.py", *argv]
        ),
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "load_average_1m_at_start": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "dagster": dagster.__version__,
            "deltalake": deltalake.__version__,
        },
        "method": {
            "process_per_case": "every (N, scenario, tool) runs in a fresh subprocess",
            "peak_rss_mb": "resource.getrusage(RUSAGE_SELF).ru_maxrss of that subprocess, read "
            "before any profiling (imports + cold sync + the scenario; source commits run in a "
            "grandchild process and are not counted); peak_rss_at_exit_mb includes profiling",
            "rss_peak_during_mb": "psutil RSS sampled every 5 ms by a thread during the timed call",
            "cpu_s": "time.process_time of the process during the timed call (all threads, the "
            "RSS sampler's too), next to the 1-minute load average right after it: on a shared "
            "machine the wall time of a call grows with the load, its CPU time much less",
            "timing": "time.perf_counter around make_plan / the sensor call / "
            "evaluate_automation_conditions; no_change = median of repeats",
            "quick_check_s": "mean of dagster_partlake.gather.moved (per table, an "
            "os.path.exists of _delta_log/<version+1>.json and a stat of <version>.json) over "
            "200 calls",
            "source_change": "a child process commits to src with delta-rs: a new hard-linked "
            "file per changed partition (modification_time = now) + RemoveAction of the old one",
            "ten_percent_repair": "before the 10% case, the one-old-change partition is made "
            "fresh again by commits to a1..a3 like their runs would write",
            "dagster_events": "src and a1..a3 partitions reported as AssetMaterialization "
            "(src included: eager() skips partitions whose deps are missing); source changes "
            "reported as runless AssetMaterialization of src",
            "profile": "cProfile of a second, separate call of the same kind (never of the timed "
            "one); profile_cold = make_plan with an empty StateCache",
        },
        "sizes": [],
    }
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        size_started = time.perf_counter()
        entry = measure_size(n, args)
        entry["wall_s"] = round(time.perf_counter() - size_started, 1)
        result["sizes"].append(entry)
        result["total_wall_s"] = round(time.perf_counter() - started, 1)
        out_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
        log(f"N={n}: done in {entry['wall_s']} s")
        if not args.keep:  # 4N files and ~4N folders: removing them takes a while at 100k
            begun = time.perf_counter()
            shutil.rmtree(os.path.join(args.work, f"n{n}"), ignore_errors=True)
            entry["scratch_cleanup_s"] = round(time.perf_counter() - begun, 1)
            result["total_wall_s"] = round(time.perf_counter() - started, 1)
            out_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print_summary(result)
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
