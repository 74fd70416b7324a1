"""An input pinned to an earlier version of its upstream table (`AssetIn` metadata), in real
Dagster runs with real Spark and Delta tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import AssetIn, AssetsDefinition, Definitions, asset, materialize
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, SparkResource
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import commit_info
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from dagster_partlake.records.queries import latest_records
from tests.conftest import delta_rows

pytestmark = pytest.mark.spark


def numbers_asset(values: list[int]) -> AssetsDefinition:
    @asset(name="numbers")
    def numbers(spark: SparkResource) -> DataFrame:
        return spark.spark_session.createDataFrame([(v,) for v in values], "n long")

    return numbers


def copy_asset(pin: dict[str, Any]) -> AssetsDefinition:
    @asset(ins={"numbers": AssetIn(metadata=pin)})
    def copy(numbers: DataFrame) -> DataFrame:
        return numbers

    return copy


def resources(lake: Path) -> dict[str, Any]:
    spark = SparkResource(master="local[2]")
    return {"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake))}


def write_numbers(lake: Path, instance: Any, values: list[int]) -> int:
    result = materialize([numbers_asset(values)], resources=resources(lake), instance=instance)
    assert result.success
    event = result.get_asset_materialization_events()[0]
    return event.materialization.metadata["partlake/table_version"].value


def test_an_input_pinned_to_a_version_reads_that_version(spark, lake: Path, instance) -> None:
    first = write_numbers(lake, instance, [1, 2, 3])
    second = write_numbers(lake, instance, [10, 20])
    assert second > first

    result = materialize(
        [numbers_asset([10, 20]), copy_asset({"partlake/version": first})],
        selection=["copy"],
        resources=resources(lake),
        instance=instance,
    )
    assert result.success
    assert delta_rows(lake / "warehouse" / "copy") == [(1,), (2,), (3,)]
    # The record says which version was read, in the Delta commit and in Dagster.
    record = latest_records(str(lake / "warehouse" / "copy"), ["__all__"])["__all__"]
    assert record.upstream_versions == {"numbers": first}
    event = result.get_asset_materialization_events()[0]
    assert event.materialization.metadata["partlake/upstream_versions"].data == {"numbers": first}
    # A pinned input does not make its asset stale when the upstream moves on.
    pinned = LakeGraph(
        Definitions(
            assets=[numbers_asset([10, 20]), copy_asset({"partlake/version": first})],
            resources=resources(lake),
        )
    )
    assert not make_plan(pinned, StateCache()).plan.items

    unpinned = materialize(
        [numbers_asset([10, 20]), copy_asset({})],
        selection=["copy"],
        resources=resources(lake),
        instance=instance,
    )
    assert unpinned.success
    assert delta_rows(lake / "warehouse" / "copy") == [(10,), (20,)]
    # The upstream moves on: only the unpinned reading of it is stale.
    write_numbers(lake, instance, [7])
    assert not make_plan(pinned, StateCache()).plan.items
    following = LakeGraph(
        Definitions(assets=[numbers_asset([7]), copy_asset({})], resources=resources(lake))
    )
    assert [(i.asset, i.reason) for i in make_plan(following, StateCache()).plan.items] == [
        ("copy", "upstream_changed")
    ]


def test_an_input_pinned_to_a_time_reads_the_version_of_that_time(
    spark, lake: Path, instance
) -> None:
    first = write_numbers(lake, instance, [1, 2, 3])
    write_numbers(lake, instance, [10, 20])
    table = str(lake / "warehouse" / "numbers")
    import datetime as dt

    at_first = dt.datetime.fromtimestamp(commit_info(table, first)["timestamp"] / 1000, dt.UTC)
    result = materialize(
        [numbers_asset([10, 20]), copy_asset({"partlake/timestamp": at_first.isoformat()})],
        selection=["copy"],
        resources=resources(lake),
        instance=instance,
    )
    assert result.success
    assert delta_rows(lake / "warehouse" / "copy") == [(1,), (2,), (3,)]
    record = latest_records(str(lake / "warehouse" / "copy"), ["__all__"])["__all__"]
    assert record.upstream_versions == {"numbers": first}


def test_a_pin_with_both_a_version_and_a_time_is_refused(spark, lake: Path, instance) -> None:
    write_numbers(lake, instance, [1])
    with pytest.raises(PartlakeConfigError, match="pins both partlake/version and partlake/time"):
        materialize(
            [
                numbers_asset([1]),
                copy_asset({"partlake/version": 1, "partlake/timestamp": "2024-01-01T00:00:00Z"}),
            ],
            selection=["copy"],
            resources=resources(lake),
            instance=instance,
        )
