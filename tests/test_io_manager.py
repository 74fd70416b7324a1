"""DeltaPartitionIOManager inside real Dagster runs, real Spark, real Delta tables."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from dagster import (
    AssetIn,
    AssetKey,
    AssetsDefinition,
    DagsterInstance,
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    MonthlyPartitionsDefinition,
    StaticPartitionsDefinition,
    TimeWindowPartitionMapping,
    asset,
    materialize,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, table_path
from dagster_partlake.errors import PartitionMismatchError
from tests.conftest import delta_rows

pytestmark = pytest.mark.spark


def resources(lake: Path) -> dict:
    spark = SparkResource(master="local[2]")
    return {"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake))}


def run(
    assets: list,
    lake: Path,
    instance: DagsterInstance,
    partition_key: str | None = None,
    tags: dict | None = None,
    selection: list[str] | None = None,
):
    result = materialize(
        assets,
        partition_key=partition_key,
        resources=resources(lake),
        instance=instance,
        tags=tags,
        selection=selection,
    )
    assert result.success
    return result


def table(lake: Path, name: str) -> Path:
    return Path(table_path(str(lake), AssetKey(name)))


def latest_metadata(instance: DagsterInstance, name: str, partition: str | None = None) -> dict:
    from dagster import AssetRecordsFilter

    records = instance.fetch_materializations(
        AssetRecordsFilter(
            asset_key=AssetKey(name), asset_partitions=[partition] if partition else None
        ),
        limit=1,
    ).records
    assert records, f"no materialization of {name} {partition}"
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def test_unpartitioned_assets_round_trip(spark, lake: Path, instance) -> None:
    @asset
    def numbers() -> DataFrame:
        return SparkResource().spark_session.range(5).withColumnRenamed("id", "n")

    @asset
    def doubled(numbers: DataFrame) -> DataFrame:
        return numbers.select((F.col("n") * 2).alias("n2"))

    for _ in range(2):
        run([numbers, doubled], lake, instance)
    assert delta_rows(table(lake, "doubled")) == [(n * 2,) for n in range(5)]
    assert DeltaTable(str(table(lake, "doubled"))).version() == 2  # create + 2 writes


def test_static_partitions_with_partition_expr(spark, lake: Path, instance) -> None:
    colors = StaticPartitionsDefinition(["red", "blue"])

    @asset(partitions_def=colors, metadata={"partition_expr": "color"})
    def paint(context) -> DataFrame:
        return spark.createDataFrame(
            [(context.partition_key, i) for i in range(3)], "color string, i int"
        )

    @asset(partitions_def=colors, metadata={"partition_expr": "color"})
    def paint_copy(paint: DataFrame) -> DataFrame:
        return paint.withColumn("i", F.col("i") + 10)

    for key in ["red", "blue", "red"]:
        run([paint, paint_copy], lake, instance, partition_key=key)
    assert delta_rows(table(lake, "paint_copy")) == sorted(
        (i + 10, c) for c in ["red", "blue"] for i in range(3)
    )


def test_dynamic_partitions(spark, lake: Path, instance) -> None:
    customers = DynamicPartitionsDefinition(name="customer")
    instance.add_dynamic_partitions("customer", ["acme", "globex"])

    @asset(partitions_def=customers)
    def orders(context) -> DataFrame:
        return spark.createDataFrame([(context.partition_key, 1)], "customer string, qty int")

    for key in ["acme", "globex"]:
        run([orders], lake, instance, partition_key=key)
    assert delta_rows(table(lake, "orders")) == [(1, "acme"), (1, "globex")]


def daily_and_monthly() -> tuple[AssetsDefinition, AssetsDefinition]:
    daily = DailyPartitionsDefinition(start_date="2024-01-01")
    monthly = MonthlyPartitionsDefinition(start_date="2024-01", fmt="%Y-%m")

    @asset(partitions_def=daily)
    def visits(context) -> DataFrame:
        day = dt.date.fromisoformat(context.partition_key)
        session = SparkResource().spark_session
        return session.createDataFrame(
            [(day, day.day * 10 + i) for i in range(2)], "date date, visits long"
        )

    @asset(
        partitions_def=monthly,
        metadata={"partition_expr": "month"},
        ins={"visits": AssetIn(partition_mapping=TimeWindowPartitionMapping())},
    )
    def monthly_visits(visits: DataFrame) -> DataFrame:
        return visits.groupBy(F.trunc("date", "month").alias("month")).agg(
            F.sum("visits").alias("visits"), F.count(F.lit(1)).alias("rows")
        )

    return visits, monthly_visits


def test_daily_to_monthly_mapped_read(spark, lake: Path, instance) -> None:
    visits, monthly_visits = daily_and_monthly()
    for key in ["2024-01-30", "2024-01-31", "2024-02-01", "2024-02-02"]:
        run([visits], lake, instance, partition_key=key)
    run(
        [visits, monthly_visits],
        lake,
        instance,
        partition_key="2024-01",
        selection=["monthly_visits"],
    )
    run(
        [visits, monthly_visits],
        lake,
        instance,
        partition_key="2024-02",
        selection=["monthly_visits"],
    )
    # January reads exactly its days (30, 31), February exactly its own (1, 2);
    # day d holds the visits d*10 and d*10+1.
    assert delta_rows(table(lake, "monthly_visits"), ["month", "visits", "rows"]) == [
        (dt.date(2024, 1, 1), 300 + 301 + 310 + 311, 4),
        (dt.date(2024, 2, 1), 10 + 11 + 20 + 21, 4),
    ]
    meta = latest_metadata(instance, "monthly_visits", "2024-02")
    assert meta["partlake/upstream_versions"] == {"visits": 4}


def test_unpartitioned_downstream_reads_all_partitions(spark, lake: Path, instance) -> None:
    visits, _ = daily_and_monthly()

    @asset
    def total(visits: DataFrame) -> DataFrame:
        return visits.agg(F.sum("visits").alias("total"), F.count(F.lit(1)).alias("rows"))

    for key in ["2024-01-01", "2024-01-02", "2024-01-03"]:
        run([visits], lake, instance, partition_key=key)
    run([visits, total], lake, instance, selection=["total"])
    assert delta_rows(table(lake, "total")) == [(10 + 11 + 20 + 21 + 30 + 31, 6)]


# The example code location: daily x region multi-partitions, a range run, metadata, mapping.


def example_assets() -> list:
    from definitions import defs

    return list(defs.assets)  # type: ignore[arg-type]


def ingest(
    lake: Path, dates: list[str], regions: list[str], rows: int = 200, seed: int = 0
) -> None:
    from definitions.ingest import write_partition

    for date in dates:
        for region in regions:
            write_partition(dt.date.fromisoformat(date), region, rows, seed, root=str(lake))


def test_multi_partition_range_run_is_one_commit_per_asset(spark, lake: Path, instance) -> None:
    ingest(lake, ["2024-01-01", "2024-01-02"], ["eu", "us", "apac"])
    raw_version = DeltaTable(str(table(lake, "raw_events"))).version()
    run(
        example_assets(),
        lake,
        instance,
        selection=["clean_events", "daily_region_stats"],
        tags={
            ASSET_PARTITION_RANGE_START_TAG: "2024-01-01|eu",
            ASSET_PARTITION_RANGE_END_TAG: "2024-01-02|apac",
        },
    )
    clean = DeltaTable(str(table(lake, "clean_events")))
    assert clean.version() == 1  # the empty create, then six partitions in one commit
    commit = clean.history(1)[0]["partlake"]
    assert sorted(commit["partition_keys"]) == sorted(
        f"{d}|{r}" for d in ["2024-01-01", "2024-01-02"] for r in ["eu", "us", "apac"]
    )
    assert commit["upstream_versions"] == {"raw_events": raw_version}
    assert commit["code_version"] == "1" and commit["asset_key"] == "clean_events"
    stats = delta_rows(table(lake, "daily_region_stats"), ["date", "region", "events"])
    assert len(stats) == 6
    raw = delta_rows(table(lake, "raw_events"), ["date", "region", "user_id"])
    for date, region, events in stats:
        assert events == sum(1 for d, r, u in raw if d == date and r == region and u is not None)


def test_single_partition_materialization_metadata_and_idempotence(
    spark, lake: Path, instance
) -> None:
    ingest(lake, ["2024-01-02"], ["eu", "us"])
    clean_path = table(lake, "clean_events")
    result = run(
        example_assets(), lake, instance, partition_key="2024-01-02|eu", selection=["clean_events"]
    )
    first = delta_rows(clean_path)
    run(example_assets(), lake, instance, partition_key="2024-01-02|us", selection=["clean_events"])
    us_files = {f for f in DeltaTable(str(clean_path)).file_uris() if "region=us" in f}
    run(example_assets(), lake, instance, partition_key="2024-01-02|eu", selection=["clean_events"])
    after = delta_rows(clean_path)
    assert [r for r in after if r[-1] == "eu"] == [r for r in first if r[-1] == "eu"]
    assert us_files <= set(DeltaTable(str(clean_path)).file_uris())

    meta = latest_metadata(instance, "clean_events", "2024-01-02|eu")
    assert meta["partlake/table_version"] == 3
    assert meta["partlake/code_version"] == "1"
    assert meta["partlake/upstream_versions"] == {"raw_events": 1}
    assert meta["dagster/row_count"] == sum(1 for r in after if r[-1] == "eu")
    # Where the output's time went, nested as documented (benchmarks/backfill.py splits runs by
    # them); rounded to ms, hence the slack.
    seconds = {k.removeprefix("partlake/"): v for k, v in meta.items() if k.endswith("_seconds")}
    parts = seconds["stage_seconds"] + seconds["staged_files_seconds"] + seconds["gates_seconds"]
    assert seconds["output_seconds"] >= seconds["write_seconds"] > 0
    assert seconds["write_seconds"] + 0.005 >= parts + seconds["commit_seconds"]
    assert seconds["commit_seconds"] + 0.001 >= seconds["publish_seconds"] >= 0
    assert seconds["stage_seconds"] > 0 and seconds["gates_seconds"] > 0
    assert seconds["read_seconds"] > 0
    commit = DeltaTable(str(clean_path)).history(1)[0]["partlake"]
    assert commit["run_id"] != result.run_id  # the latest commit is the third run's
    assert commit["partition_keys"] == ["2024-01-02|eu"]


def test_monthly_example_reads_its_month_of_daily_partitions(spark, lake: Path, instance) -> None:
    ingest(lake, ["2024-01-30", "2024-01-31", "2024-02-01"], ["eu"], rows=50)
    assets = example_assets()
    for key in ["2024-01-30|eu", "2024-01-31|eu", "2024-02-01|eu"]:
        run(
            assets,
            lake,
            instance,
            partition_key=key,
            selection=["clean_events", "daily_region_stats"],
        )
    run(assets, lake, instance, partition_key="2024-01|eu", selection=["monthly_region_stats"])
    daily = delta_rows(table(lake, "daily_region_stats"), ["date", "events"])
    january = [e for d, e in daily if d.month == 1]
    assert delta_rows(
        table(lake, "monthly_region_stats"), ["month", "region", "events", "days"]
    ) == [(dt.date(2024, 1, 1), "eu", sum(january), 2)]


def test_dynamic_partition_keys_are_validated_against_the_instance(instance) -> None:
    from dagster_partlake.partitions.keys import validate_keys

    customers = DynamicPartitionsDefinition(name="customer")
    instance.add_dynamic_partitions("customer", ["acme"])
    validate_keys(customers, ["acme"], asset_name="orders", dynamic_partitions_store=instance)
    with pytest.raises(
        PartitionMismatchError,
        match=r"'ghost' is not in the partitions of asset orders \(dynamic partitions 'customer'\)",
    ):
        validate_keys(customers, ["ghost"], asset_name="orders", dynamic_partitions_store=instance)


def test_returning_something_else_than_a_dataframe_is_explained(
    spark, lake: Path, instance
) -> None:
    @asset
    def not_a_frame() -> list:
        return [1, 2]

    result = materialize(
        [not_a_frame], resources=resources(lake), instance=instance, raise_on_error=False
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert "returned list; DeltaPartitionIOManager stores Spark DataFrames" in str(failure)


def test_max_commit_attempts_below_one_is_refused_at_load() -> None:
    """Zero attempts would fail every write with 'could not commit ... after 0 attempts'."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="max_commit_attempts"):
        DeltaPartitionIOManager(max_commit_attempts=0)


def test_a_dependency_the_asset_does_not_load_is_recorded_as_the_run_found_it(
    spark, lake: Path, instance
) -> None:
    """`deps=[raw]`: the asset reads raw's table itself; its commit records raw's partitions
    as they were when the run started, so the plan is empty after the run, and a rewrite of
    one partition of raw makes exactly the partition that maps to it stale (it was stale
    forever: no input was loaded, so nothing said what the write was computed from)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from dagster_partlake import partlake_source
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan

    days = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
    raw = partlake_source("raw", partitions_def=days, root=str(lake))
    raw_path = str(lake / "warehouse" / "raw")

    @asset(partitions_def=days, deps=[raw])
    def counted(context) -> DataFrame:  # noqa: ANN001
        rows = DeltaTable(raw_path).to_pyarrow_table().to_pylist()
        day = context.partition_key
        n = sum(1 for r in rows if r["date"] == day)
        return spark.createDataFrame([(day, n)], "date string, n long")

    def write(day: str, n: int) -> None:
        table = pa.table({"date": [day] * n, "v": list(range(n))})
        write_deltalake(
            raw_path, table, partition_by=["date"], mode="overwrite", predicate=f"date = '{day}'"
        )

    write_deltalake(raw_path, pa.table({"date": ["2024-01-01"], "v": [0]}), partition_by=["date"])
    write("2024-01-02", 2)
    from dagster import Definitions

    defs = Definitions(assets=[raw, counted], resources=resources(lake))
    for day in ("2024-01-01", "2024-01-02"):
        materialize(
            [raw, counted],
            selection=[counted.key],
            partition_key=day,
            instance=instance,
            resources=resources(lake),
        )
    assert not make_plan(LakeGraph(defs, root=str(lake)), StateCache()).plan
    write("2024-01-02", 3)
    stale = make_plan(LakeGraph(defs, root=str(lake)), StateCache()).plan
    assert [(i.asset, i.partition, i.reason) for i in stale.items] == [
        ("counted", "2024-01-02", "upstream_changed")
    ]
    materialize(
        [raw, counted],
        selection=[counted.key],
        partition_key="2024-01-02",
        instance=instance,
        resources=resources(lake),
    )
    assert delta_rows(lake / "warehouse" / "counted", ["date", "n"]) == [
        ("2024-01-01", 1),
        ("2024-01-02", 3),
    ]
    assert not make_plan(LakeGraph(defs, root=str(lake)), StateCache()).plan
