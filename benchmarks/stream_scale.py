"""Streaming benchmark: a landing folder of JSON event files gains 1%-sized increments; an
`available_now` streaming asset processes each one, against a full re-read of the folder.

    .venv/bin/python -m benchmarks.stream_scale [--rows 10000000] [--files 50] [--rounds 3]

The streaming asset `events` (`partlake/stream`: JSON files with a schema, daily partitions,
`dagster.materialize` through `DeltaPartitionIOManager` on one local Spark session) reads the
landing folder with Spark's file source and commits each micro-batch exactly once:

- first run: every file of the folder (`--rows` rows in `--files` files), one or more
  micro-batches; throughput = rows / run time (a Dagster run: its own start-up included), next
  to the same rows read and written by a plain Spark job;
- each round: one new file of `--rows / 100` rows is dropped (its modification time is its
  arrival), then one `available_now` run: its run time, throughput, and the latency from the
  file's arrival to its micro-batch's commit (`partlake/stream_latency_ms_*`, from Spark's file
  source log in the checkpoint);
- against it, the same round done without a stream: Spark re-reads every file of the folder and
  rewrites every day's partition (`write_partitions`, what a batch pipeline without state does).

The two tables must hold the same rows (count and checksum) after every round. JSON to stdout
and `--out`; the target (not a test) is an increment run <= 0.1x the full re-read, median over
the rounds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, DailyPartitionsDefinition, asset, materialize
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source
from dagster_partlake.delta import PartitionSelection, write_partitions
from dagster_partlake.storage.location import table_path

TARGET_RATIO = 0.1
DAYS = 8  # the events fall on 2024-01-01 .. 2024-01-08
SCHEMA = "event_id long, user_id long, amount long, ts timestamp"

landing = partlake_source("landing", folder=True)


@asset(
    partitions_def=DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-09"),
    metadata={"partlake/stream": {"format": "json", "schema": SCHEMA}},
)
def events(landing: DataFrame) -> DataFrame:
    return landing.withColumn("date", F.to_date("ts"))


def write_file(folder: Path, name: str, start: int, count: int) -> None:
    """One JSON file of `count` events, written aside and renamed: it arrives whole."""
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    step = DAYS * 86_400 / max(count, 1)
    hidden = folder / f".{name}.tmp"
    with hidden.open("w", encoding="utf-8") as out:
        for i in range(start, start + count):
            ts = base + dt.timedelta(seconds=int((i - start) * step))
            out.write(
                f'{{"event_id":{i},"user_id":{i % 100_003},"amount":{i % 10_000},'
                f'"ts":"{ts.isoformat()}"}}\n'
            )
    os.replace(hidden, folder / name)


def stream_run(resources: dict[str, Any], instance: DagsterInstance) -> tuple[float, Any]:
    started = time.perf_counter()
    result = materialize(
        [landing, events], selection=[events.key], resources=resources, instance=instance
    )
    assert result.success
    seconds = time.perf_counter() - started
    return seconds, result.asset_materializations_for_node("events")[-1].metadata


def full_reread(spark: SparkSession, folder: Path, root: str) -> float:
    """Without a stream: read every file of the folder, rewrite every day's partition."""
    started = time.perf_counter()
    df = spark.read.schema(SCHEMA).json("file://" + str(folder)).withColumn("date", F.to_date("ts"))
    write_partitions(
        df,
        root,
        partition_by=["date"],
        selection=PartitionSelection.everything(),
        partition_ids=["__all__"],
    )
    return time.perf_counter() - started


def checksum(spark: SparkSession, root: str) -> tuple[int, int]:
    from deltalake import DeltaTable

    df = spark.read.parquet(*DeltaTable(root).file_uris())
    row = df.agg(F.count(F.lit(1)).alias("n"), F.sum("event_id").alias("s")).collect()[0]
    return int(row["n"]), int(row["s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/tmp/partlake_stream_bench")
    parser.add_argument("--out", default="benchmarks/out/stream_scale.json")
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    os.environ["PARTLAKE_HOME"] = args.work
    spark_resource = SparkResource(
        master="local[2]",
        spark_conf={"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"},
    )
    resources = {
        "spark": spark_resource,
        "io_manager": DeltaPartitionIOManager(spark=spark_resource, root=args.work),
    }
    spark = spark_resource.spark_session
    folder = Path(table_path(args.work, ["landing"]))
    folder.mkdir(parents=True)
    per_file = args.rows // args.files
    started = time.perf_counter()
    for n in range(args.files):
        write_file(folder, f"base-{n:04d}.json", n * per_file, per_file)
    total = per_file * args.files
    print(f"wrote {total:,} events in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    streamed = table_path(args.work, ["events"])
    full_root = table_path(args.work, ["events_full"])
    # Untimed: one read of every file, so neither side pays the JVM's warm-up.
    spark.read.schema(SCHEMA).json("file://" + str(folder)).count()
    with DagsterInstance.ephemeral() as instance:
        first_full = full_reread(spark, folder, full_root)
        seconds, metadata = stream_run(resources, instance)
        first = {
            "rows": total,
            "seconds": round(seconds, 2),
            "rows_per_second": round(total / seconds),
            "batches": metadata["partlake/stream_batches"].value,
        }
        print(f"first run: {first}, full read {first_full:.1f} s", file=sys.stderr)
        rounds = [
            _round(
                n,
                spark,
                folder,
                resources,
                instance,
                total + n * (args.rows // 100),
                args.rows // 100,
                streamed,
                full_root,
            )  # fmt: skip
            for n in range(args.rounds)
        ]
    ratio = statistics.median(r["ratio"] for r in rounds)
    results: dict[str, Any] = {
        "benchmark": "stream_scale",
        "rows": total,
        "files": args.files,
        "increment_rows": args.rows // 100,
        "first_run": first,
        "first_full_read_seconds": round(first_full, 2),
        "rounds": rounds,
        "median_ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO,
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0],
    }
    spark.stop()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


def _round(
    n: int,
    spark: SparkSession,
    folder: Path,
    resources: dict[str, Any],
    instance: DagsterInstance,
    start: int,
    count: int,
    streamed: str,
    full_root: str,
) -> dict[str, Any]:
    write_file(folder, f"inc-{n:04d}.json", start, count)
    seconds, metadata = stream_run(resources, instance)
    full = full_reread(spark, folder, full_root)
    sums = (checksum(spark, streamed), checksum(spark, full_root))
    assert sums[0] == sums[1], sums
    result = {
        "round": n + 1,
        "table_rows": sums[0][0],
        "increment_rows": count,
        "stream_run_seconds": round(seconds, 2),
        "stream_rows_per_second": round(count / seconds),
        "latency_ms_mean": metadata["partlake/stream_latency_ms_mean"].value,
        "latency_ms_max": metadata["partlake/stream_latency_ms_max"].value,
        "full_reread_seconds": round(full, 2),
        "ratio": round(seconds / full, 3),
    }
    print(f"round {n + 1}: {result}", file=sys.stderr)
    return result


if __name__ == "__main__":
    sys.exit(main())
