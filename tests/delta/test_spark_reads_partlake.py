"""Spark's own Delta reads every table partlake writes (issue 34, point 2).

One test over the example's filled lake (the lakehouse chain and the SQL models), to which it
adds the model kinds' tables (two daily user exports and the feeds: merge, scd2, append,
tracked, the self-dependent model, the incremental inputs), a deleted row and a restored
partition (`clean_events`), and a stream's table (two micro-batches through the stream's commit,
`kinds.stream.write_batch`) that is then compacted. For every table, `spark.read.format("delta")`
with `versionAsOf` gives the rows, schema and partition values partlake's reader gives at its
first and its last version, and at every version of the tables changed by a delete, a restore, a
stream's batches and a compaction; `DESCRIBE HISTORY` lists the versions partlake's log reader
sees. (Every versioned Delta read rebuilds that version's snapshot in Spark jobs, about 2 s
here: every version of every table took more than a minute of CI.)
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from dagster import AssetKey
from pyspark.sql import DataFrame

from dagster_partlake import table_path
from dagster_partlake.delta.reader import open_table, read_partitions
from dagster_partlake.delta.schema import arrow_to_spark
from dagster_partlake.delta.selection import Box, PartitionSelection
from dagster_partlake.kinds.stream import write_batch
from dagster_partlake.maintenance.compact import compact_table
from dagster_partlake.maintenance.delete import delete_rows
from dagster_partlake.maintenance.restore import restore_partitions
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.records.record import CommitRecord
from tests.conftest import lake_jars

pytestmark = pytest.mark.spark


def _rows(df: DataFrame, columns: list[str]) -> list[tuple]:
    return sorted(
        (tuple(row[c] for c in columns) for row in df.select(*columns).collect()),
        key=lambda r: tuple((v is None, str(v)) for v in r),
    )


def _models(lake: Path, graph, instance) -> None:  # type: ignore[no-untyped-def]
    """The example's model kinds run over two daily exports and the feeds."""
    from definitions.exports import write_export
    from definitions.feeds import append_changes, drop_payments

    for day in (dt.date(2024, 1, 1), dt.date(2024, 1, 2)):
        write_export(day, 20, root=str(lake))
    append_changes(1, root=str(lake))
    drop_payments(1, root=str(lake))
    outcomes = refresh(graph, instance)
    assert outcomes and all(o.ok for o in outcomes), [o for o in outcomes if not o.ok]


def _changed_lake(spark, lake: Path) -> set[str]:  # type: ignore[no-untyped-def]
    """A deleted row, a restored partition, a stream's table compacted; the tables changed."""
    events = table_path(str(lake), AssetKey("clean_events"))
    one = open_table(events)
    first, second = sorted(
        {tuple(f.partition_values.items()) for f in one.live_files(PartitionSelection.everything())}
    )[:2]

    def delete_one(values: tuple) -> int:
        where = " AND ".join(f"{col} = '{val}'" for col, val in values)
        event = spark.read.format("delta").load(events).where(where).first()["event_id"]
        done = delete_rows(spark, events, f"event_id = '{event}' AND {where}")
        assert done.version is not None
        return done.version

    delete_one(first)  # stays deleted
    before = delete_one(second) - 1
    restored = restore_partitions(
        events, before, selection=PartitionSelection((Box({c: frozenset([v]) for c, v in second}),))
    )
    assert restored.version is not None

    stream = table_path(str(lake), AssetKey("stream_copy"))
    record = CommitRecord(asset_key="stream_copy", partition_keys=(), code_version="1", run_id="r")
    for batch in range(2):
        df = spark.createDataFrame(
            [(batch * 10 + i, "eu" if i % 2 else "us") for i in range(6)], "id long, region string"
        )
        write_batch(
            df,
            stream,
            app_id="query-1",
            batch_id=batch,
            partition_by=("region",),
            partition_id=lambda values: str(values["region"]),
            record=record,
        )
    compacted = compact_table(spark, stream)
    assert compacted.version is not None, compacted
    return {events, stream}


def test_spark_delta_reads_every_partlake_table_and_its_versions(  # type: ignore[no-untyped-def]
    spark, example, lake: Path, instance
):
    if not lake_jars():
        pytest.fail("the Delta JARs are missing: run `make install` (it fetches them).")
    _models(lake, example[1], instance)
    changed = _changed_lake(spark, lake)
    tables = sorted(str(log.parent) for log in lake.rglob("_delta_log"))
    kinds = ("users", "users_history", "user_export_log", "plan_counts", "user_days", "payments")
    for name in kinds:  # merge, scd2, append, tracked, self-dependent, incremental append
        assert table_path(str(lake), AssetKey(name)) in tables, (name, tables)
    assert set(changed) <= set(tables), tables
    for root in tables:
        latest = open_table(root)
        history = spark.sql(f"DESCRIBE HISTORY delta.`{root}`").collect()
        assert sorted(h["version"] for h in history) == list(range(latest.version + 1)), root
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{root}`").first()
        assert tuple(detail["partitionColumns"]) == latest.partition_by, root
        everything = PartitionSelection.everything()
        last = latest.version
        versions = range(last + 1) if root in changed else sorted({0, last})
        for version in versions:
            ours = read_partitions(spark, root, everything, version=version)
            theirs = spark.read.format("delta").option("versionAsOf", version).load(root)
            where = f"{root} at version {version}"
            assert ours.version == version
            expected_schema = arrow_to_spark(open_table(root, version=version).schema)
            assert [(f.name, f.dataType) for f in theirs.schema.fields] == [
                (f.name, f.dataType) for f in expected_schema.fields
            ], where
            columns = theirs.columns
            rows = _rows(theirs, columns)
            assert _rows(ours.df, columns) == rows, where
            partitions = {
                tuple(f.partition_values[c] for c in latest.partition_by)
                for f in open_table(root, version=version).live_files(everything)
            }
            at = [columns.index(c) for c in latest.partition_by]
            spark_values = {tuple(None if r[i] is None else str(r[i]) for i in at) for r in rows}
            assert spark_values == partitions if latest.partition_by else True, where
