"""Managed assets without upstream assets: every partition that exists now is due until written."""

import datetime as dt
import json
from pathlib import Path

import pytest
from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    DailyPartitionsDefinition,
    Definitions,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    asset,
)
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, SparkResource, build_invalidation_sensor
from dagster_partlake.delta.state import StateCache
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan, runs_for
from tests.conftest import cli_env, run_partlake, sensor_tick

pytestmark = pytest.mark.spark


tick = sensor_tick


def batches_of(graph: LakeGraph, result):
    return runs_for(graph, result)


def test_root_assets_are_planned_run_and_then_fresh(
    spark, lake: Path, instance, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    from tests.root_defs import daily_shop, defs

    graph = LakeGraph(defs)
    result = make_plan(graph, StateCache(), dynamic_partitions_store=instance)
    existing = sorted(daily_shop.get_partition_keys())
    assert len(existing) == 6  # three whole days x two shops
    by_asset = result.plan.by_asset()
    assert sorted(by_asset) == ["order_stats", "orders"]  # no store registered yet
    assert [(i.partition, i.reason, i.because) for i in by_asset["orders"]] == [
        (k, "missing", ()) for k in existing
    ]
    assert [(i.partition, i.because) for i in by_asset["order_stats"]] == [
        (k, (f"orders[{k}]",)) for k in existing
    ]
    # Both single-run assets with the same partitions: one run over the whole 2-D range.
    ready = batches_of(graph, result).runs
    assert [(b.assets, b.partition_range) for b in ready] == [
        (("orders", "order_stats"), (existing[0], existing[-1]))
    ]

    # The CLI on the empty lake says the same.
    env = cli_env(tmp_path, lake)
    cli = run_partlake("plan", "-m", "tests.root_defs", "--json", env=env, timeout=120)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert [(i["asset"], i["partition"], i["reason"]) for i in json.loads(cli.stdout)] == [
        *[("order_stats", k, "missing") for k in existing],
        *[("orders", k, "missing") for k in existing],
    ]

    # The sensor requests that run, validated as the daemon validates it.
    sensor = defs.get_sensor_def("roots")
    requests, cursor, _ = tick(defs, instance, sensor, None)
    assert [sorted(a.to_user_string() for a in r.asset_selection) for r in requests] == [
        ["order_stats", "orders"]
    ]
    assert requests[0].tags["dagster/asset_partition_range_start"] == existing[0]
    assert requests[0].tags["dagster/asset_partition_range_end"] == existing[-1]
    assert requests[0].tags["partlake/reasons"] == "missing"

    # A registered dynamic partition exists now: its asset is due.
    instance.add_dynamic_partitions("stores", ["berlin"])
    result = make_plan(graph, StateCache(), dynamic_partitions_store=instance)
    assert [(i.partition, i.reason) for i in result.plan.by_asset()["store_catalog"]] == [
        ("berlin", "missing")
    ]

    outcomes = refresh(graph, instance)
    assert outcomes and all(o.ok for o in outcomes), outcomes
    assert sorted((o.asset, o.partition) for o in outcomes) == sorted(
        [("orders", k) for k in existing]
        + [("order_stats", k) for k in existing]
        + [("store_catalog", "berlin")]
    )
    assert not make_plan(graph, StateCache(), dynamic_partitions_store=instance).plan

    # Nothing moved: the sensor skips without planning. A new store is a new partition that
    # exists: the next tick plans and requests exactly it.
    requests, cursor, skip = tick(defs, instance, sensor, None)
    assert requests == [] and skip == "Everything is fresh."
    requests, cursor, skip = tick(defs, instance, sensor, cursor)
    assert requests == [] and skip.startswith("No new commits")
    instance.add_dynamic_partitions("stores", ["lisbon"])
    requests, cursor, skip = tick(defs, instance, sensor, cursor)
    assert [
        (r.partition_key, [a.to_user_string() for a in r.asset_selection]) for r in requests
    ] == [("lisbon", ["store_catalog"])]


YEARS_AGO = DailyPartitionsDefinition(start_date="2016-01-01")


@asset(partitions_def=YEARS_AGO, code_version="1")
def history(context: AssetExecutionContext, spark: SparkResource) -> DataFrame:
    day = dt.date.fromisoformat(context.partition_key)
    return spark.spark_session.createDataFrame([(day, 1)], "date date, n int")


BY_SHOP = MultiPartitionsDefinition(
    {"date": YEARS_AGO, "shop": StaticPartitionsDefinition([f"shop{i}" for i in range(10)])}
)


@asset(partitions_def=BY_SHOP, backfill_policy=BackfillPolicy.multi_run(1000), code_version="1")
def shop_history(context: AssetExecutionContext, spark: SparkResource) -> DataFrame:
    raise AssertionError("never run in this test")


def test_an_unbounded_daily_root_asset_is_planned_and_requested_in_bounded_batches(
    lake: Path, instance
) -> None:
    """Ten years of days (x 10 shops): all missing; requested as the backfill policy allows, and
    never more than `max_runs_in_flight` runs of the sensor at once."""
    spark = SparkResource(master="local[2]")
    sensor = build_invalidation_sensor("years", max_runs_in_flight=5)
    defs = Definitions(
        assets=[history, shop_history],
        sensors=[sensor],
        resources={
            "spark": spark,
            "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake)),
        },
    )
    graph = LakeGraph(defs)
    result = make_plan(graph, StateCache())
    days = YEARS_AGO.get_partition_keys()
    assert len(days) > 3650
    by_asset = result.plan.by_asset()
    assert [i.partition for i in by_asset["history"]] == days
    assert len(by_asset["shop_history"]) == len(days) * 10
    ready = batches_of(graph, result).runs
    # No policy: one run per day. multi_run(1000): ranges of at most 1,000 partitions.
    assert sum(1 for b in ready if b.assets == ("history",)) == len(days)
    shop_batches = [b for b in ready if b.assets == ("shop_history",)]
    assert all(len(b.keys) <= 1000 for b in shop_batches)
    assert sum(len(b.keys) for b in shop_batches) == len(days) * 10

    requests, cursor, _ = tick(defs, instance, sensor, None)
    assert len(requests) == 5
    assert json.loads(cursor)["pending"] is True
    # Those five are queued: the next tick requests no more until some of them finish.
    job = defs.resolve_implicit_global_asset_job_def()
    for request in requests:
        instance.create_run_for_job(
            job_def=job,
            tags=request.tags,
            asset_selection=frozenset(request.asset_selection),
        )
    requests, cursor, skip = tick(defs, instance, sensor, cursor)
    assert requests == [] and "wait for running or backing-off runs" in skip
