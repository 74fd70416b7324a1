"""A streaming lake for tests/test_streams.py, tests/stream_process.py and the streaming benchmark:
a landing folder of JSON files (written by another system) -> `events` (a streaming asset,
daily partitions) -> `daily_totals` (a batch asset per day); and `events` -> `event_copy`, a
stream of `events`' own new commits. `build(...)` makes them in any mode; the module's `defs`
(for `dagster dev -m tests.stream_defs` and `partlake -m tests.stream_defs`) take the mode from
the environment."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from dagster import DailyPartitionsDefinition, Definitions, asset, in_process_executor
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    build_invalidation_sensor,
    partlake_source,
)
from dagster_partlake.storage.location import table_path

SCHEMA = "event_id long, user_id long, amount long, ts timestamp"
# Ten days (2024-01-01..2024-01-10) keep the plans of the tests short.
daily = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-11")


def build(
    mode: str = "available_now",
    options: dict[str, str] | None = None,
    trigger: str = "2 seconds",
    fmt: str = "json",
) -> list[Any]:
    """The lake's assets, `events` streaming in `mode` from files of format `fmt`."""
    stream: dict[str, object] = {"mode": mode, "format": fmt}
    if fmt != "parquet":
        stream["schema"] = SCHEMA
    if mode == "continuous":
        stream["trigger_interval"] = trigger
    if options:
        stream["options"] = options
    landing = partlake_source("landing", folder=True, description="Files dropped by a feed")

    @asset(partitions_def=daily, metadata={"partlake/stream": stream}, code_version="1")
    def events(landing: DataFrame) -> DataFrame:
        """Each landed event, in its day's partition."""
        return landing.withColumn("date", F.to_date("ts"))

    @asset(partitions_def=daily, code_version="1")
    def daily_totals(events: DataFrame) -> DataFrame:
        return events.groupBy("date").agg(
            F.count(F.lit(1)).alias("events"), F.sum("amount").alias("amount")
        )

    # Unpartitioned in Dagster (a run of a partitioned asset without a partition key cannot
    # read a partitioned input), its table partitioned by date all the same.
    @asset(metadata={"partlake/stream": {}, "partlake/partition_by": ["date"]}, code_version="1")
    def event_copy(events: DataFrame) -> DataFrame:
        """The new commits of `events`, streamed from its log."""
        return events.select("event_id", "user_id", "amount", "date")

    return [landing, events, daily_totals, event_copy]


def definitions(
    assets: list[Any],
    spark: SparkResource | None = None,
    root: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> Definitions:
    """The assets over the lake at `root` (default `$PARTLAKE_HOME`), read and written with
    `storage_options` (an object store's)."""
    spark = spark or SparkResource(master="local[2]")
    io_manager = DeltaPartitionIOManager(
        spark=spark, root=root, storage_options=storage_options or {}
    )
    return Definitions(
        assets=assets,
        sensors=[build_invalidation_sensor(minimum_interval_seconds=5)],
        resources={"spark": spark, "io_manager": io_manager},
        executor=in_process_executor,
    )


# `STREAM_MODE=continuous` (`STREAM_TRIGGER`), `STREAM_FILES_PER_TRIGGER=n` (n files a batch).
_files = os.environ.get("STREAM_FILES_PER_TRIGGER")
ASSETS = build(
    os.environ.get("STREAM_MODE", "available_now"),
    {"maxFilesPerTrigger": _files} if _files else None,
    os.environ.get("STREAM_TRIGGER", "2 seconds"),
)
landing, events, daily_totals, event_copy = ASSETS
defs = definitions(ASSETS)


def landing_dir(root: str | Path) -> Path:
    return Path(table_path(str(root), ["landing"]))


def drop_events(
    root: str | Path, name: str, ids: range, day: str = "2024-01-02", fmt: str = "json"
) -> Path:
    """A feed drops one file of events (written aside, then renamed: it appears whole)."""
    folder = landing_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    rows = event_rows(ids, day)
    hidden = folder / f".{name}.tmp"
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), hidden)
    elif fmt == "csv":
        lines = [",".join(str(r[c]) for c in ("event_id", "user_id", "amount")) for r in rows]
        stamps = [r["ts"].isoformat() for r in rows]
        body = [f"{line},{stamp}" for line, stamp in zip(lines, stamps, strict=True)]
        hidden.write_text("\n".join(body) + "\n", encoding="utf-8")
    else:
        hidden.write_bytes(_json_lines(rows))
    path = folder / name
    os.replace(hidden, path)
    return path


def event_rows(ids: range, day: str = "2024-01-02") -> list[dict[str, Any]]:
    """The events of a dropped file: ids `ids`, at times in `day`."""
    start = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
    return [
        {
            "event_id": i,
            "user_id": i % 7,
            "amount": i % 100,
            "ts": start + dt.timedelta(seconds=i % 86_400),
        }
        for i in ids
    ]


def json_events(ids: range, day: str = "2024-01-02") -> bytes:
    """A JSON file of events as `drop_events` drops it (a test on an object store puts it there
    whole, with one PUT)."""
    return _json_lines(event_rows(ids, day))


def _json_lines(rows: list[dict[str, Any]]) -> bytes:
    lines = [json.dumps({**r, "ts": r["ts"].isoformat()}) for r in rows]
    return ("\n".join(lines) + "\n").encode()
