"""Merge benchmark: upsert 1% of the keys of a large table, partlake merge vs a full rewrite.

    .venv/bin/python -m benchmarks.merge_scale [--rows 10000000] [--files 40] [--out PATH]

The target table (`id`, `name`, `score`, `updated`) is unpartitioned and written sorted by `id`
into `--files` files, as a dimension table that grows by appending new ids usually is. Two change
batches of 1% of the rows each, measured side by side in one process on one Spark session:

- `recent`: 1% of the keys, drawn from the newest 2% of ids (new entities change most), plus as
  many new keys;
- `uniform`: 1% of the keys drawn uniformly from all ids, plus as many new keys.

For each: `merge_rows` (the IO manager's `merge` kind) on a fresh copy of the table, and the
hand-written PySpark job a user would write without it: read the whole table, drop the changed
keys with a left anti join, union the batch, write everything, commit the new files replacing all
old ones. Both results are checked equal (row count and an order-independent checksum). JSON goes
to stdout and `--out`; the target (not a test) is merge <= 0.2x the full rewrite. With uniform
keys every file holds a changed key, so the merge cannot skip files: that case shows the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dagster_partlake.delta import PartitionSelection, write_partitions
from dagster_partlake.delta.table import live_files, load_table
from dagster_partlake.delta.writer import stage_partitions
from dagster_partlake.kinds.merge import merge_rows
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import commit_staged

TARGET_RATIO = 0.2


def build_table(spark: SparkSession, path: str, rows: int, files: int) -> None:
    df = (
        spark.range(rows)
        .select(
            F.col("id"),
            F.concat(F.lit("user"), F.col("id").cast("string")).alias("name"),
            (F.col("id") % 1000).alias("score"),
            F.lit("2024-01-01").alias("updated"),
        )
        .repartitionByRange(files, "id")
        .sortWithinPartitions("id")
    )
    # With min/max statistics of the key in the log, as partlake's merge kind writes them.
    staged = stage_partitions(
        df,
        path,
        partition_by=[],
        selection=PartitionSelection.everything(),
        partition_ids=["__all__"],
        stats_columns=["id"],
    )
    commit_staged(staged)


def batch(spark: SparkSession, rows: int, case: str, seed: int = 7) -> DataFrame:
    changed = rows // 100
    ids = spark.range(changed)
    if case == "recent":
        low = rows - rows // 50
        key = (F.lit(low) + (F.abs(F.xxhash64(F.col("id"), F.lit(seed))) % (rows // 50))).alias(
            "id"
        )
    else:
        key = (F.abs(F.xxhash64(F.col("id"), F.lit(seed))) % rows).alias("id")
    updates = ids.select(key).dropDuplicates(["id"])
    new = spark.range(rows, rows + changed)
    return (
        updates.unionByName(new)
        .select(
            "id",
            F.lit("changed").alias("name"),
            F.lit(-1).cast("long").alias("score"),
            F.lit("2024-01-02").alias("updated"),
        )
        .repartition(2)
    )


def full_rewrite(spark: SparkSession, path: str, changes: DataFrame) -> None:
    """The hand-written job: everything read, everything written, one commit."""
    table = load_table(path)
    files = live_files(table, PartitionSelection.everything())
    current = spark.read.parquet(*("file://" + f.absolute_path(path) for f in files))
    result = current.join(changes.select("id"), on="id", how="left_anti").unionByName(changes)
    write_partitions(
        result,
        path,
        partition_by=[],
        selection=PartitionSelection.everything(),
        partition_ids=["__all__"],
    )


def checksum(spark: SparkSession, path: str) -> tuple[int, int]:
    table = load_table(path)
    files = live_files(table, PartitionSelection.everything())
    df = spark.read.parquet(*("file://" + f.absolute_path(path) for f in files))
    row = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.xxhash64("id", "name", "score", "updated").cast("decimal(38,0)")).alias("h"),
    ).collect()[0]
    return int(row["n"]), int(row["h"])


def main(argv: list[str] | None = None) -> int:
    # Spark's Python workers (which write the files) run this interpreter, as SparkResource does.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--work", default="/tmp/partlake_merge_bench")
    parser.add_argument("--out", default="benchmarks/out/merge_scale.json")
    args = parser.parse_args(argv)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    shutil.rmtree(args.work, ignore_errors=True)
    base = os.path.join(args.work, "base")
    started = time.perf_counter()
    build_table(spark, base, args.rows, args.files)
    print(f"built {args.rows:,} rows in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    results: dict[str, Any] = {
        "rows": args.rows,
        "files": args.files,
        "changed_keys": args.rows // 100,
        "new_keys": args.rows // 100,
        "target_ratio": TARGET_RATIO,
        "cases": {},
    }
    for case in ("recent", "uniform"):
        timings: dict[str, float] = {}
        sums = {}
        changes = batch(spark, args.rows, case)
        staged = os.path.join(args.work, f"{case}-changes")
        changes.write.parquet("file://" + staged)
        changes = spark.read.parquet("file://" + staged)  # both sides read the same batch
        for how in ("full_rewrite", "merge"):
            copy = os.path.join(args.work, f"{case}-{how}")
            shutil.copytree(base, copy)
            started = time.perf_counter()
            if how == "merge":
                merged = merge_rows(
                    changes,
                    copy,
                    unique_key=["id"],
                    partition_by=[],
                    selection=PartitionSelection.everything(),
                    record_for=lambda _b: CommitRecord("bench", (), None, "bench"),
                )
                rewritten = merged.files_rewritten
                metrics = merged.metrics
            else:
                full_rewrite(spark, copy, changes)
            timings[how] = time.perf_counter() - started
            sums[how] = checksum(spark, copy)
        assert sums["merge"] == sums["full_rewrite"], sums
        ratio = timings["merge"] / timings["full_rewrite"]
        results["cases"][case] = {
            "merge_seconds": round(timings["merge"], 2),
            "full_rewrite_seconds": round(timings["full_rewrite"], 2),
            "ratio": round(ratio, 3),
            "met": ratio <= TARGET_RATIO,
            "files_rewritten_by_merge": rewritten,
            "merge_metrics": metrics,
            "rows_after": sums["merge"][0],
        }
        print(f"{case}: {results['cases'][case]}", file=sys.stderr)
    spark.stop()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
