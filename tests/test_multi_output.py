"""What each output of a step recorded as consumed, and step times of assets with a key prefix,
in real Dagster runs on real Spark and Delta."""

from pathlib import Path

import pytest
from dagster import AssetIn, AssetKey, AssetOut, Definitions, asset, multi_asset
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, SparkResource
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import log_versions
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from dagster_partlake.records.queries import read_record
from dagster_partlake.storage.location import table_path

pytestmark = pytest.mark.spark


@asset(key_prefix=["sales"], code_version="1")
def orders(spark: SparkResource) -> DataFrame:
    return spark.spark_session.createDataFrame([(1, "ann"), (2, "bob")], "id long, who string")


@asset(code_version="1")
def customers(spark: SparkResource) -> DataFrame:
    return spark.spark_session.createDataFrame([("ann",), ("bob",), ("cy",)], "who string")


@multi_asset(
    ins={"orders": AssetIn(key=["sales", "orders"]), "customers": AssetIn("customers")},
    outs={"order_count": AssetOut(code_version="1"), "names": AssetOut(code_version="1")},
    internal_asset_deps={
        "order_count": {AssetKey(["sales", "orders"])},
        "names": {AssetKey("customers")},
    },
)
def summaries(orders: DataFrame, customers: DataFrame) -> tuple[DataFrame, DataFrame]:
    return orders.groupBy().count(), customers.select("who")


def last_record(lake: Path, *key: str):
    path = table_path(str(lake), list(key))
    return read_record(path, log_versions(path)[-1])


def test_each_output_records_its_own_inputs_and_steps_are_timed_by_step_key(
    spark, lake: Path, instance
) -> None:
    resource = SparkResource(master="local[2]")
    defs = Definitions(
        assets=[orders, customers, summaries],
        resources={
            "spark": resource,
            "io_manager": DeltaPartitionIOManager(spark=resource, root=str(lake)),
        },
    )
    graph = LakeGraph(defs)
    outcomes = refresh(graph, instance)
    assert outcomes and all(o.ok for o in outcomes), outcomes

    assert set(last_record(lake, "order_count").consumed) == {"sales/orders"}
    assert set(last_record(lake, "names").consumed) == {"customers"}
    # Both outputs recorded what they read, so nothing looks changed afterwards.
    assert not make_plan(graph, StateCache()).plan

    # The prefixed asset's time is its step's ("sales__orders"), not the whole run's.
    [prefixed] = [o for o in outcomes if o.asset == "sales/orders"]
    stats = {s.step_key: s for s in instance.get_run_step_stats(prefixed.run_id)}
    step = stats["sales__orders"]
    assert prefixed.ms == int((step.end_time - step.start_time) * 1000)
