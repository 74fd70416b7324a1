"""The delta-spark writer (`partlake/writer: "delta-spark"`, `DeltaPartitionIOManager(writer=)`):
Spark's own Delta commits the replacing kinds, with partlake's commit record in `userMetadata`
and its application transactions, so `partlake plan` gives the same verdicts whichever writer
committed. Real Spark with Delta's JARs, real Dagster runs, real tables; the kinds and places it
does not write are refused with the way out."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    BackfillPolicy,
    DailyPartitionsDefinition,
    Definitions,
    asset,
    in_process_executor,
    materialize,
)
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    model_kind_metadata,
    partlake_source,
    table_path,
)
from dagster_partlake.delta.native import (
    check_native_location,
    delta_on_session,
    replace_where,
)
from dagster_partlake.delta.selection import Box, DateRanges, PartitionSelection
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import log_versions
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from dagster_partlake.records.queries import read_record
from dagster_partlake.storage.location import TableLocation
from tests.conftest import delta_rows

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
daily = DailyPartitionsDefinition(start_date=DAYS[0], end_date="2024-01-04")


def build(writer: str, lake: Path) -> Definitions:
    """events (a source delta-spark writes) -> clean (partition, three days a run) -> totals
    (table) and -> copy (partition, partlake's writer always); `writer` commits clean and
    totals."""
    events = partlake_source("events", partitions_def=daily)
    chosen = {"partlake/writer": writer}

    @asset(
        partitions_def=daily,
        code_version="1",
        backfill_policy=BackfillPolicy.single_run(),
        metadata={
            **chosen,
            "partlake/constraints": [{"expression": "amount >= 0", "name": "amount"}],
        },
    )
    def clean(events: DataFrame) -> DataFrame:
        return events.where("user_id is not null").select("user_id", "amount", "date")

    @asset(code_version="1", metadata=chosen)  # unpartitioned: kind table
    def totals(clean: DataFrame) -> DataFrame:
        return clean.groupBy("date").agg(F.sum("amount").alias("amount"))

    @asset(partitions_def=daily, code_version="1", metadata={"partlake/writer": "partlake"})
    def copy(clean: DataFrame) -> DataFrame:
        return clean

    spark = SparkResource(master="local[2]")
    return Definitions(
        assets=[events, clean, totals, copy],
        resources={
            "spark": spark,
            "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake)),
        },
        executor=in_process_executor,
    )


def write_events(spark, lake: Path, day: str, seed: int) -> None:  # type: ignore[no-untyped-def]
    """delta-spark replaces one day of the source (as another team's job would)."""
    rows = [(u if u % 7 else None, (u * seed) % 50, day) for u in range(1, 21)]
    df = spark.createDataFrame(rows, "user_id long, amount long, date string").withColumn(
        "date", F.to_date("date")
    )
    root = table_path(str(lake), AssetKey("events"))
    writer = df.write.format("delta").partitionBy("date")
    if not Path(root, "_delta_log").exists():
        writer.save(root)
        return
    writer.mode("overwrite").option("replaceWhere", f"date = '{day}'").save(root)


def stale(defs: Definitions) -> set[tuple[str, str | None, str]]:
    return {
        (i.asset, i.partition, i.reason)
        for i in make_plan(LakeGraph(defs), StateCache()).plan.items
    }


@pytest.mark.spark
@pytest.mark.parametrize("writer", ["delta-spark", "partlake"])
def test_plans_give_the_same_verdicts_whichever_writer_committed(
    spark, lake: Path, instance, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    assert delta_on_session(spark)
    defs = build(writer, lake)
    for n, day in enumerate(DAYS):
        write_events(spark, lake, day, seed=n + 1)
    outcomes = refresh(LakeGraph(defs), instance)
    assert outcomes and all(o.ok for o in outcomes), [o for o in outcomes if not o.ok]
    assert not stale(defs)
    clean = table_path(str(lake), AssetKey("clean"))
    events = delta_rows(table_path(str(lake), AssetKey("events")), ["user_id", "amount", "date"])
    expected = [r for r in events if r[0] is not None]
    assert delta_rows(clean, ["user_id", "amount", "date"]) == expected
    if writer == "delta-spark":
        _check_native_commits(clean, lake)

    # A source day rewritten: that day downstream, and the table reading all of clean.
    write_events(spark, lake, DAYS[1], seed=9)
    assert stale(defs) == {
        ("clean", DAYS[1], "upstream_changed"),
        ("copy", DAYS[1], "upstream_changed"),
        ("totals", None, "upstream_changed"),
    }
    assert all(o.ok for o in refresh(LakeGraph(defs), instance))
    assert not stale(defs)

    # Someone else deletes rows of clean's last day: out of band there, and what reads it.
    spark.sql(f"DELETE FROM delta.`{clean}` WHERE date = '{DAYS[2]}' AND amount < 20")
    assert stale(defs) == {
        ("clean", DAYS[2], "out_of_band"),
        ("copy", DAYS[2], "upstream_changed"),
        ("totals", None, "upstream_changed"),
    }
    assert all(o.ok for o in refresh(LakeGraph(defs), instance))
    assert not stale(defs)
    assert delta_rows(clean, ["user_id", "amount", "date"]) == [
        r
        for r in delta_rows(
            table_path(str(lake), AssetKey("events")), ["user_id", "amount", "date"]
        )
        if r[0] is not None
    ]


def _check_native_commits(clean: str, lake: Path) -> None:
    """Spark's Delta made clean's data commit: its record in userMetadata, with the commit's
    own time, which is each written partition's lastUpdated."""
    versions = log_versions(clean)
    last = versions[-1]
    info = json.loads(
        next(
            line
            for line in Path(clean, "_delta_log", f"{last:020d}.json").read_text().splitlines()
            if line.startswith('{"commitInfo"')
        )
    )["commitInfo"]
    assert info["operation"] == "WRITE" and "Delta-Lake" in info["engineInfo"]
    assert info["userMetadata"].startswith('{"partlake":{')
    record = read_record(clean, last)
    assert record is not None and sorted(record.partition_keys) == DAYS
    assert record.commit_time_ms == info["timestamp"]
    assert dict(record.rows_by_partition or {}) == {
        day: sum(1 for u in range(1, 21) if u % 7) for day in DAYS
    }
    state = StateCache().sync(clean)
    assert state is not None
    assert {v[0]: t for v, t in state.last_updated.items()} == dict.fromkeys(
        DAYS, info["timestamp"]
    )
    totals = table_path(str(lake), AssetKey("totals"))
    assert DeltaTable(totals).transaction_version("partlake:__all__") is not None


@pytest.mark.spark
def test_a_single_partition_write_names_its_partition_past_the_tables_transaction(
    spark, lake: Path, instance
) -> None:
    """A write of one partition carries `partlake:<key>` as its Delta transaction; Delta
    skips a write whose version is not above the table's, so the version is raised past it
    (here a partlake commit stamped far in the future)."""
    from deltalake.transaction import CommitProperties, Transaction

    @asset(partitions_def=daily, metadata={"partlake/writer": "delta-spark"})
    def day(context) -> DataFrame:
        return spark.createDataFrame(
            [(1, context.partition_key)], "n long, date string"
        ).withColumn("date", F.to_date("date"))

    resources = {"io_manager": DeltaPartitionIOManager(root=str(lake), writer="partlake")}
    assert materialize([day], partition_key=DAYS[0], resources=resources, instance=instance).success
    root = table_path(str(lake), AssetKey("day"))
    future = int(dt.datetime(2100, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    loaded = DeltaTable(root)
    loaded.create_write_transaction(
        [],
        mode="append",
        schema=loaded.schema(),
        partition_by=["date"],
        commit_properties=CommitProperties(
            app_transactions=[Transaction(f"partlake:{DAYS[0]}", future)]
        ),
    )
    before = DeltaTable(root).version()
    assert materialize([day], partition_key=DAYS[0], resources=resources, instance=instance).success
    table = DeltaTable(root)
    assert table.version() == before + 1
    assert table.transaction_version(f"partlake:{DAYS[0]}") == future + 1
    assert read_record(root, before + 1) is not None


@pytest.mark.spark
def test_gates_and_partitions_are_checked_before_delta_spark_commits(
    spark, lake: Path, instance
) -> None:
    @asset(
        partitions_def=daily,
        metadata={
            "partlake/writer": "delta-spark",
            "partlake/constraints": [{"expression": "n >= 0", "name": "pos"}],
        },
    )
    def checked(context) -> DataFrame:
        n = -1 if context.partition_key == DAYS[1] else 1
        return spark.createDataFrame([(n, context.partition_key)], "n long, date string")

    @asset(partitions_def=daily, metadata={"partlake/writer": "delta-spark"})
    def wrong_day(context) -> DataFrame:
        return spark.createDataFrame([(1, DAYS[2])], "n long, date string")

    resources = {"io_manager": DeltaPartitionIOManager(root=str(lake))}
    assert materialize(
        [checked], partition_key=DAYS[0], resources=resources, instance=instance
    ).success
    root = table_path(str(lake), AssetKey("checked"))
    version = DeltaTable(root).version()
    assert "quality gate failed on checked: constraint pos failed" in failure(
        [checked], DAYS[1], resources, instance
    )
    assert DeltaTable(root).version() == version
    message = failure([wrong_day], DAYS[0], resources, instance)
    assert "fall outside the partitions being written: date=2024-01-03" in message
    assert not Path(table_path(str(lake), AssetKey("wrong_day")), "date=2024-01-03").exists()


def failure(assets: list, key: str, resources: dict, instance) -> str:  # type: ignore[no-untyped-def]
    """The message of the step failure of a run that must fail."""
    result = materialize(
        assets, partition_key=key, resources=resources, instance=instance, raise_on_error=False
    )
    assert not result.success
    error = result.get_step_failure_events()[0].step_failure_data.error
    return str(error)


@pytest.mark.spark
def test_the_writer_setting_is_checked(spark, lake: Path, instance) -> None:
    @asset(partitions_def=daily, metadata=model_kind_metadata("merge", unique_key=["n"]))
    def merged(context) -> DataFrame:
        return spark.createDataFrame([(1, context.partition_key)], "n long, date string")

    @asset(partitions_def=daily, metadata={"partlake/writer": "spark"})
    def misnamed(context) -> DataFrame:
        return spark.createDataFrame([(1, context.partition_key)], "n long, date string")

    native = {"io_manager": DeltaPartitionIOManager(root=str(lake), writer="delta-spark")}
    message = failure([merged], DAYS[0], native, instance)
    assert "kind 'merge', which the delta-spark writer does not commit" in message
    assert "{'partlake/writer': 'partlake'}" in message
    message = failure([misnamed], DAYS[0], native, instance)
    assert "'partlake/writer' of asset misnamed is 'spark'; it must be one of" in message


def test_an_assets_writer_setting_is_checked_when_the_code_location_loads() -> None:
    from dagster import AssetKey

    from dagster_partlake.spec.model import model_spec

    def spec(metadata: dict) -> object:
        return model_spec(AssetKey("m"), metadata=metadata, partitions_def=daily, managed=True)

    merge = model_kind_metadata("merge", unique_key=["n"])
    with pytest.raises(PartlakeConfigError, match="kind 'merge', which the delta-spark writer"):
        spec({**merge, "partlake/writer": "delta-spark"})
    with pytest.raises(PartlakeConfigError, match="'partlake/writer' of asset m is 'spark'"):
        spec({"partlake/writer": "spark"})
    with pytest.raises(PartlakeConfigError, match="did you mean 'partlake/writer'"):
        spec({"partlake/writers": "delta-spark"})
    assert spec({"partlake/writer": "delta-spark"}).writer == "delta-spark"  # type: ignore[attr-defined]
    assert spec({}).writer is None  # type: ignore[attr-defined]  # the IO manager's


def test_object_stores_are_refused() -> None:
    with pytest.raises(PartlakeConfigError, match="S3SingleDriverLogStore .* plain PUT"):
        check_native_location(TableLocation("s3://lake/warehouse/t"), "t")
    with pytest.raises(PartlakeConfigError, match="local file systems only"):
        check_native_location(TableLocation("gs://lake/warehouse/t"), "t")
    check_native_location(TableLocation("/tmp/t"), "t")


def test_replace_where_predicates_type_each_value() -> None:
    selection = PartitionSelection(
        (
            Box(
                {
                    "date": DateRanges(((dt.date(2024, 1, 1), dt.date(2024, 1, 3)),)),
                    "r": frozenset({"eu", "o'k"}),
                }
            ),
            Box({"n": frozenset({"1", "2"})}),
        )
    )
    types = {"date": "date", "r": "string", "n": "long"}
    assert replace_where(selection, types) == (
        "(((`date` >= CAST('2024-01-01' AS DATE) AND `date` < CAST('2024-01-03' AS DATE)))"
        " AND `r` IN ('eu', 'o\\'k')) OR (`n` IN (CAST('1' AS LONG), CAST('2' AS LONG)))"
    )
    assert replace_where(PartitionSelection.everything(), types) is None
    with pytest.raises(ValueError, match="no partition"):
        replace_where(PartitionSelection.nothing(), types)
