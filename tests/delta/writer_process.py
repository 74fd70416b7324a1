"""A writer in its own process, with its own local Spark, for concurrency and crash tests.

    python -m tests.delta.writer_process ROOT DATE REGION ROWS OFFSET MODE SYNC_DIR PARTIES

MODE: 'commit' stages, waits until PARTIES writers are staged (files in SYNC_DIR), commits and
prints the CommitResult as JSON; 'hang-staged' / 'hang-published' stop before the commit (the
files written where they will live, not committed: the two were one step apart when writes
staged into a folder and then moved), touch SYNC_DIR/<pid>.ready and sleep until killed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sys
import time

from pyspark.sql import SparkSession

from dagster_partlake.delta import Box, DateRanges, PartitionSelection
from dagster_partlake.delta.writer import stage_partitions
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import commit_staged


def main() -> None:
    root, date, region, rows, offset, mode, sync_dir, parties = sys.argv[1:9]
    # Spark's Python workers (which write the files) run this interpreter, as SparkResource does.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    day = dt.date.fromisoformat(date)
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    df = spark.range(int(rows)).selectExpr(
        f"id + {int(offset)} as id", f"date'{date}' as date", f"'{region}' as region"
    )
    selection = PartitionSelection(
        (
            Box(
                {
                    "date": DateRanges(((day, day + dt.timedelta(days=1)),)),
                    "region": frozenset({region}),
                }
            ),
        )
    )
    staged = stage_partitions(
        df,
        root,
        partition_by=["date", "region"],
        selection=selection,
        partition_ids=[f"{date}|{region}"],
    )
    ready = os.path.join(sync_dir, f"{os.getpid()}.ready")
    open(ready, "w").close()
    if mode.startswith("hang"):
        time.sleep(600)
        return
    deadline = time.time() + 300
    while len([n for n in os.listdir(sync_dir) if n.endswith(".ready")]) < int(parties):
        if time.time() > deadline:
            raise SystemExit("timed out waiting for the other writers")
        time.sleep(0.02)
    record = CommitRecord(
        asset_key="t",
        partition_keys=(f"{date}|{region}",),
        code_version=None,
        run_id=str(os.getpid()),  # which writer won
    )
    result = commit_staged(staged, record=record)
    print(json.dumps(dataclasses.asdict(result)))
    spark.stop()


if __name__ == "__main__":
    main()
