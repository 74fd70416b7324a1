"""Backfill benchmark: partlake vs one hand-written Spark job vs one Dagster run per partition.

    .venv/bin/python -m benchmarks.backfill [--days 90] [--regions 8] [--rows 28000]
        [--naive-sample 3] [--out benchmarks/out/backfill.json] [--png benchmarks/out/backfill.png]

Workload W: raw_events with `days` x `regions` daily partitions of `rows` rows each (default
90 x 8 x 28,000 = 20.2M rows) and the example chain clean_events -> daily_region_stats ->
monthly_region_stats (benchmarks/backfill_defs.py). Measured side by side, in this order, each in
its own fresh copy of the same source table:

- partlake_local: `partlake run` with the local default (one local Spark in that process);
- partlake_shared: `partlake run` against a Spark Connect server started beforehand (its start-up
  is reported, not counted, as for any shared cluster);
- floor: benchmarks/floor_job.py, the same transformations in one PySpark job;
- naive: one `dagster asset materialize` per daily partition (clean_events + daily_region_stats),
  sequential, each starting its own local Spark, timed on `naive_sample` partitions and one
  monthly partition and extrapolated to the whole workload (said so in the output);
- noop: `partlake run` again with nothing changed (local and shared; median of 3, all 3 kept);
- refresh: rewrite one source partition, then `partlake run` until everything is fresh (local:
  includes starting and warming up a JVM; shared: on the Connect server, warm from the backfill);
- scattered_refresh: rewrite up to 8 source partitions that no partition range joins (one run
  each), then `partlake run --max-parallel 1` vs `partlake run` (as many runs at once as the
  Dagster pool `partlake` allows: 2 in scripts/dagster.yaml), on the Connect server.

Prints JSON (and writes it to --out) and a PNG bar chart (--png). Wall-clock seconds throughout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
PARTLAKE = [PY, "-m", "dagster_partlake.cli"]
DAGSTER = str(Path(PY).parent / "dagster")
MODULE = "benchmarks.backfill_defs"


def make_source(path: Path, days: int, regions: list[str], rows: int) -> float:
    """Write the source table, one commit per day (setup, not measured). Returns seconds."""
    from definitions.ingest import generate

    started = time.perf_counter()
    start = dt.date(2024, 1, 1)
    for d in range(days):
        day = start + dt.timedelta(days=d)
        table = pa.concat_tables(generate(day, r, rows) for r in regions)
        write_deltalake(str(path), table, mode="append", partition_by=["date", "region"])
    return time.perf_counter() - started


def lake_copy(work: Path, name: str, source: Path) -> tuple[Path, dict[str, str]]:
    lake = work / name
    (lake / "warehouse").mkdir(parents=True)
    shutil.copytree(source, lake / "warehouse" / "raw_events")
    home = lake / "dagster"
    home.mkdir()
    shutil.copy(REPO / "scripts" / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PARTLAKE_HOME": str(lake),
        "DAGSTER_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    return lake, env


def timed(command: list[str], env: dict[str, str], label: str) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    finished = (
        proc.stdout.startswith("Everything is fresh") or " refreshed, 0 failed." in proc.stdout
    )
    if proc.returncode != 0 or (command[:3] == PARTLAKE and "run" in command and not finished):
        raise SystemExit(
            f"{label} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    print(f"  {label}: {seconds:.1f} s", file=sys.stderr)
    return seconds, proc.stdout


def noop(result: dict, name: str, env: dict[str, str], samples: int = 3) -> float:
    """Median of `samples` no-op `partlake run`s (each sample is in result[name + "_samples"])."""
    times = []
    for _ in range(samples):
        seconds, out = timed([*PARTLAKE, "run", "-m", MODULE], env, f"partlake run ({name})")
        assert "Everything is fresh" in out, out[-2000:]
        times.append(seconds)
    result[f"{name}_samples"] = [round(t, 2) for t in times]
    return statistics.median(times)


def ok_lines(output: str) -> int:
    return sum(1 for line in output.splitlines() if line.startswith("[OK]"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--regions", type=int, default=8)
    parser.add_argument("--rows", type=int, default=28_000, help="rows per source partition")
    parser.add_argument(
        "--naive-sample", type=int, default=3, help="daily partitions timed for the naive peer"
    )
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "backfill.json"))
    parser.add_argument("--png", default=str(REPO / "benchmarks" / "out" / "backfill.png"))
    parser.add_argument("--work", help="working directory (default: a temporary one, removed)")
    args = parser.parse_args(argv)

    os.environ["BENCH_REGIONS"] = str(args.regions)
    regions = [f"r{i}" for i in range(args.regions)]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="partlake-backfill-"))
    work.mkdir(parents=True, exist_ok=True)
    months = sorted(
        {(dt.date(2024, 1, 1) + dt.timedelta(days=d)).strftime("%Y-%m") for d in range(args.days)}
    )
    daily_partitions = args.days * args.regions
    monthly_partitions = len(months) * args.regions
    result: dict[str, object] = {
        "workload": {
            "days": args.days,
            "regions": args.regions,
            "rows_per_partition": args.rows,
            "source_rows": args.days * args.regions * args.rows,
            "daily_partitions": daily_partitions,
            "monthly_partitions": monthly_partitions,
            "asset_partitions": 2 * daily_partitions + monthly_partitions,
        },
        "machine": {"cores": os.cpu_count()},
        "notes": [],
    }
    try:
        print(f"setup: source table in {work}", file=sys.stderr)
        golden = work / "source"
        result["setup_source_s"] = round(make_source(golden, args.days, regions, args.rows), 1)

        seconds: dict[str, float] = {}
        lake, env = lake_copy(work, "local", golden)
        seconds["partlake_local"], out = timed(
            [*PARTLAKE, "run", "-m", MODULE], env, "partlake run (local)"
        )
        assert ok_lines(out) == 2 * daily_partitions + monthly_partitions, out[-2000:]
        seconds["noop"] = noop(result, "noop", env)
        from definitions.ingest import write_partition

        refresh_day = dt.date(2024, 1, 1) + dt.timedelta(days=min(45, args.days - 1))
        refresh_region = regions[min(3, len(regions) - 1)]
        write_partition(refresh_day, refresh_region, args.rows, seed=1, root=str(lake))
        seconds["refresh"], out = timed(
            [*PARTLAKE, "run", "-m", MODULE], env, "partlake run (refresh)"
        )
        assert ok_lines(out) == 3, out[-2000:]

        from dagster_partlake.spark.server import start_connect, stop

        shared_lake, shared_env = lake_copy(work, "shared", golden)
        server_root = str(work / "servers")
        started = time.perf_counter()
        info = start_connect(server_root, port=_free_port(), master="local[*]", driver_memory="4g")
        result["connect_server_start_s"] = round(time.perf_counter() - started, 1)
        try:
            shared_env["PARTLAKE_SPARK_REMOTE"] = info.url
            run = [*PARTLAKE, "run", "-m", MODULE]
            seconds["partlake_shared"], out = timed(run, shared_env, "partlake run (Spark Connect)")
            assert ok_lines(out) == 2 * daily_partitions + monthly_partitions
            seconds["noop_shared"] = noop(result, "noop_shared", shared_env)
            write_partition(refresh_day, refresh_region, args.rows, seed=1, root=str(shared_lake))
            seconds["refresh_shared"], out = timed(
                run, shared_env, "partlake run (refresh, Connect)"
            )
            assert ok_lines(out) == 3, out[-2000:]

            # Scattered changes: one run per partition, so the runs can go in parallel.
            scattered = [
                (dt.date(2024, 1, 1) + dt.timedelta(days=2 * i), regions[i % len(regions)])
                for i in range(min(8, (args.days + 1) // 2))
            ]
            for label, seed, extra in [("serial", 2, ["--max-parallel", "1"]), ("pool", 3, [])]:
                for day, region in scattered:
                    write_partition(day, region, args.rows, seed=seed, root=str(shared_lake))
                seconds[f"scattered_refresh_{label}"], out = timed(
                    [*run, *extra], shared_env, f"partlake run (scattered refresh, {label})"
                )
                assert ok_lines(out) >= 2 * len(scattered), out[-2000:]
                result[f"scattered_refresh_{label}_parallelism"] = next(
                    line for line in out.splitlines() if line.startswith("Executing ")
                )
            result["scattered_partitions"] = len(scattered)
        finally:
            stop(server_root, "connect")

        floor_lake, floor_env = lake_copy(work, "floor", golden)
        seconds["floor"], _ = timed(
            [
                PY,
                "-m",
                "benchmarks.floor_job",
                str(floor_lake / "warehouse" / "raw_events"),
                str(floor_lake / "floor_out"),
            ],
            floor_env,
            "floor (one PySpark job)",
        )

        naive_lake, naive_env = lake_copy(work, "naive", golden)
        sample_days = [dt.date(2024, 1, 1) + dt.timedelta(days=d) for d in range(args.naive_sample)]

        def naive(select: str, key: str) -> float:
            command = [
                DAGSTER,
                "asset",
                "materialize",
                "-m",
                MODULE,
                "--select",
                select,
                "--partition",
                key,
            ]
            return timed(command, naive_env, f"naive dagster asset materialize {key}")[0]

        daily_times = [
            naive("clean_events,daily_region_stats", f"{day.isoformat()}|{regions[0]}")
            for day in sample_days
        ]
        monthly_time = naive("monthly_region_stats", f"2024-01|{regions[0]}")
        per_daily = sum(daily_times) / len(daily_times)
        seconds["naive_extrapolated"] = (
            per_daily * daily_partitions + monthly_time * monthly_partitions
        )
        result["naive"] = {
            "sampled_daily_partitions": len(daily_times),
            "seconds_per_daily_partition": round(per_daily, 2),
            "seconds_per_monthly_partition": round(monthly_time, 2),
            "method": (
                f"timed {len(daily_times)} daily partitions (clean_events + daily_region_stats in "
                "one `dagster asset materialize` each) and 1 monthly partition, then "
                "extrapolated to "
                f"{daily_partitions} daily and {monthly_partitions} monthly partitions"
            ),
        }
        result["seconds"] = {k: round(v, 1) for k, v in seconds.items()}
        best = min(seconds["partlake_local"], seconds["partlake_shared"])
        result["ratios"] = {
            "partlake_local_over_floor": round(seconds["partlake_local"] / seconds["floor"], 2),
            "partlake_shared_over_floor": round(seconds["partlake_shared"] / seconds["floor"], 2),
            "naive_over_partlake_local": round(
                seconds["naive_extrapolated"] / seconds["partlake_local"], 1
            ),
            "naive_over_partlake_shared": round(
                seconds["naive_extrapolated"] / seconds["partlake_shared"], 1
            ),
            "refresh_over_full_backfill": round(seconds["refresh"] / seconds["partlake_local"], 3),
            "refresh_shared_over_full_backfill_shared": round(
                seconds["refresh_shared"] / seconds["partlake_shared"], 3
            ),
            "noop_seconds": round(seconds["noop"], 1),
            "noop_shared_seconds": round(seconds["noop_shared"], 1),
            "scattered_refresh_serial_over_pool": round(
                seconds["scattered_refresh_serial"] / seconds["scattered_refresh_pool"], 2
            ),
            "best_partlake_over_floor": round(best / seconds["floor"], 2),
        }
        result["targets"] = {
            "partlake_over_floor": "<= 1.5",
            "naive_over_partlake": ">= 10",
            "refresh_over_full_backfill": "<= 0.05",
            "noop_seconds": "<= 2",
        }
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    _chart(result, args.png)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chart(result: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no PNG", file=sys.stderr)
        return
    seconds = result["seconds"]
    labels = [
        "floor",
        "partlake_local",
        "partlake_shared",
        "refresh",
        "refresh_shared",
        "scattered_refresh_serial",
        "scattered_refresh_pool",
        "noop",
        "noop_shared",
        "naive_extrapolated",
    ]
    values = [seconds[k] for k in labels]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    colors = ["#888", "#2b7", "#2a9", "#49c", "#49c", "#97c", "#97c", "#4ac", "#4ac", "#c54"]
    bars = ax.bar(labels, values, color=colors)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log scale)")
    w = result["workload"]
    ax.set_title(f"Backfill of {w['source_rows']:,} rows, {w['asset_partitions']} asset partitions")
    for bar, value in zip(bars, values, strict=True):
        ax.annotate(
            f"{value:,.1f}", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom"
        )
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
