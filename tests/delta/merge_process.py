"""A merge or scd2 writer in its own process that stops just before its commit, for crash tests.

    python -m tests.delta.merge_process ROOT KIND SYNC_DIR

KIND: 'merge' (upsert ids 5..14 into region 'eu') or 'scd2' (apply a snapshot). The process
rewrites and publishes its files, touches SYNC_DIR/<pid>.ready instead of committing, and sleeps
until killed.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time

from pyspark.sql import SparkSession

import dagster_partlake.delta.transaction as transaction_module
import dagster_partlake.kinds.merge as merge_module
import dagster_partlake.kinds.scd2 as scd2_module
from dagster_partlake.delta import PartitionSelection
from dagster_partlake.records.record import CommitRecord


def main() -> None:
    root, kind, sync_dir = sys.argv[1:4]
    # Spark's Python workers (which write the files) run this interpreter, as SparkResource does.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )

    def hang(*_args: object, **_kwargs: object) -> None:
        open(os.path.join(sync_dir, f"{os.getpid()}.ready"), "w").close()
        time.sleep(600)

    # Both commit through the one transaction: hang at its commit, the files written and the
    # actions worked out, nothing committed.
    transaction_module._commit_once = hang  # type: ignore[assignment]
    record = CommitRecord("t", (), None, "victim")
    if kind == "merge":
        df = spark.range(5, 15).selectExpr("id", "'eu' as region", "'new' as name")
        merge_module.merge_rows(
            df,
            root,
            unique_key=["id"],
            partition_by=["region"],
            selection=PartitionSelection.everything(),
            record_for=lambda _b: record,
        )
    else:
        df = spark.range(5, 15).selectExpr("id", "'new' as name")
        scd2_module.apply_snapshot(
            df,
            root,
            unique_key=["id"],
            snapshot_time=dt.datetime(2024, 1, 5, tzinfo=dt.UTC),
            newest_applied=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
            record_for=lambda _m: record,
        )


if __name__ == "__main__":
    main()
