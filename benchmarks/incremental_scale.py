"""Incremental benchmark: an event table of 20M rows gains 1% new rows; a log-based incremental
`append` asset vs the same transformation re-reading the whole table.

    .venv/bin/python -m benchmarks.incremental_scale [--rows 20000000] [--files 40] [--rounds 2]

Two Dagster assets over the source table `events` (`event_id`, `user_id`, `amount`, `ts`),
materialized with `dagster.materialize` through `DeltaPartitionIOManager` on one local Spark
session, side by side in one process:

- `enriched_incremental`: kind `append`, its input `partlake/incremental: "log"`: it reads only
  the files added to `events` since the version its last commit consumed (from the Delta log)
  and appends their transformed rows;
- `enriched_full`: kind `table`: it re-reads all of `events` and rewrites its whole table, what a
  pipeline without incremental inputs does.

Both are built once (first run: both read everything, not timed against each other). Then each
round appends 1% new rows to `events` in one Delta commit and materializes both; the two outputs
must be equal (row count and an order-independent checksum). JSON to stdout and `--out`; the
target (not a test) is incremental <= 0.1x the full re-read, median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from dagster import AssetIn, DagsterInstance, asset, materialize
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    model_kind_metadata,
    partlake_source,
)
from dagster_partlake.delta import PartitionSelection, commit_staged, stage_partitions
from dagster_partlake.delta.table import live_files, load_table
from dagster_partlake.storage.location import table_path

TARGET_RATIO = 0.1
events = partlake_source("events")


def transform(df: DataFrame) -> DataFrame:
    """The same work on both sides: a filter, derived columns and a hash per row."""
    return df.where(F.col("amount") >= 0).select(
        "event_id",
        "user_id",
        (F.col("amount") * 1.2).alias("amount_gross"),
        F.to_date("ts").alias("day"),
        F.xxhash64("event_id", "user_id").alias("fingerprint"),
    )


@asset(
    ins={"events": AssetIn(metadata={"partlake/incremental": "log"})},
    metadata=model_kind_metadata("append"),
)
def enriched_incremental(events: DataFrame) -> DataFrame:
    return transform(events)


@asset  # unpartitioned: kind `table`, the whole table rewritten
def enriched_full(events: DataFrame) -> DataFrame:
    return transform(events)


def event_rows(spark: SparkSession, start: int, count: int) -> DataFrame:
    return spark.range(start, start + count).select(
        F.col("id").alias("event_id"),
        (F.col("id") % 100_003).alias("user_id"),
        ((F.col("id") * 7919) % 10_000 / 100.0 - 5).alias("amount"),
        (F.lit(1_704_067_200) + F.col("id") % 2_592_000).cast("timestamp").alias("ts"),
    )


def add_events(spark: SparkSession, root: str, start: int, count: int, files: int) -> None:
    """One Delta commit adding `count` events (no file removed: an append-only event log)."""
    staged = stage_partitions(
        event_rows(spark, start, count).repartition(files),
        root,
        partition_by=[],
        selection=PartitionSelection.everything(),
        partition_ids=["__all__"],
        removal="none",
    )
    commit_staged(staged)


def checksum(spark: SparkSession, root: str) -> tuple[int, int]:
    files = live_files(load_table(root), PartitionSelection.everything())
    df = spark.read.parquet(*("file://" + f.absolute_path(root) for f in files))
    row = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.col("fingerprint").cast("decimal(38,0)")).alias("h"),
    ).collect()[0]
    return int(row["n"]), int(row["h"])


def run(asset_def: Any, resources: dict[str, Any], instance: DagsterInstance) -> float:
    started = time.perf_counter()
    result = materialize(
        [events, asset_def], selection=[asset_def.key], resources=resources, instance=instance
    )
    assert result.success
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", default="/tmp/partlake_incremental_bench")
    parser.add_argument("--out", default="benchmarks/out/incremental_scale.json")
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    spark_resource = SparkResource(
        master="local[2]",
        spark_conf={"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"},
    )
    resources = {
        "spark": spark_resource,
        "io_manager": DeltaPartitionIOManager(spark=spark_resource, root=args.work),
    }
    spark = spark_resource.spark_session
    root = table_path(args.work, ["events"])
    new_rows = args.rows // 100

    started = time.perf_counter()
    add_events(spark, root, 0, args.rows, args.files)
    print(f"built {args.rows:,} events in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    with DagsterInstance.ephemeral() as instance:
        first = {
            a.key.to_user_string(): run(a, resources, instance)
            for a in (enriched_incremental, enriched_full)
        }
        print(f"first runs: {first}", file=sys.stderr)
        rounds = []
        total = args.rows
        for n in range(args.rounds):
            add_events(spark, root, total, new_rows, max(1, args.files // 100))
            total += new_rows
            incremental = run(enriched_incremental, resources, instance)
            full = run(enriched_full, resources, instance)
            sums = {
                name: checksum(spark, table_path(args.work, [name]))
                for name in ("enriched_incremental", "enriched_full")
            }
            assert sums["enriched_incremental"] == sums["enriched_full"], sums
            rounds.append(
                {
                    "round": n + 1,
                    "events_rows": total,
                    "output_rows": sums["enriched_full"][0],
                    "incremental_seconds": round(incremental, 2),
                    "full_reread_seconds": round(full, 2),
                    "ratio": round(incremental / full, 3),
                }
            )
            print(f"round {n + 1}: {rounds[-1]}", file=sys.stderr)
    ratio = statistics.median(r["ratio"] for r in rounds)
    results: dict[str, Any] = {
        "benchmark": "incremental_scale",
        "rows": args.rows,
        "files": args.files,
        "new_rows_per_round": new_rows,
        "first_run_seconds": {k: round(v, 2) for k, v in first.items()},
        "rounds": rounds,
        "median_ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    spark.stop()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
