"""Sources written by other systems: observed per partition, planned, read."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster import (
    DailyPartitionsDefinition,
    Definitions,
    asset,
    materialize,
)
from dagster._core.definitions.observe import observe  # not re-exported by dagster 1.13
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source
from dagster_partlake.delta.state import StateCache
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from tests.conftest import delta_rows

pytestmark = pytest.mark.spark


def test_delta_source_is_observed_with_one_data_version_per_partition(lake: Path, instance) -> None:
    from definitions.ingest import write_partition
    from definitions.partitions import daily_region

    write_partition(dt.date(2024, 1, 2), "eu", 10, root=str(lake))
    write_partition(dt.date(2024, 1, 3), "us", 10, root=str(lake))
    raw = partlake_source("raw_events", partitions_def=daily_region, root=str(lake))
    result = observe([raw], instance=instance)
    assert result.success
    observed = [
        e.event_specific_data.asset_observation
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    observations = {o.partition: o.tags["dagster/data_version"] for o in observed}
    assert set(observations) == {"2024-01-02|eu", "2024-01-03|us"}
    state = StateCache().sync(str(lake / "warehouse" / "raw_events"))
    assert observations["2024-01-02|eu"] == str(state.last_updated[("2024-01-02", "eu")])


def write_folder_partition(root: Path, day: str, values: list[int]) -> None:
    folder = root / f"day={day}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"v": values}), folder / f"part-{time.time_ns()}.parquet")


def test_folder_source_change_is_planned_and_read(spark, lake: Path, instance, monkeypatch) -> None:
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    daily = DailyPartitionsDefinition(start_date="2024-01-01")
    landing = lake / "landing" / "readings"
    source = partlake_source(
        "readings",
        partitions_def=daily,
        folder=True,
        path="landing/readings",
        metadata={"partition_expr": "day"},
    )

    @asset(partitions_def=daily, code_version="1", metadata={"partition_expr": "day"})
    def readings_total(readings: DataFrame) -> DataFrame:
        return readings.groupBy("day").sum("v").withColumnRenamed("sum(v)", "total")

    spark_resource = SparkResource(master="local[2]")
    resources = {
        "spark": spark_resource,
        "io_manager": DeltaPartitionIOManager(spark=spark_resource, root=str(lake)),
    }
    defs = Definitions(assets=[source, readings_total], resources=resources)
    write_folder_partition(landing, "2024-01-02", [1, 2])
    write_folder_partition(landing, "2024-01-03", [10])

    graph = LakeGraph(defs)
    plan = make_plan(graph, StateCache()).plan
    assert {(i.asset, i.partition, i.reason) for i in plan.items} == {
        ("readings_total", "2024-01-02", "missing"),
        ("readings_total", "2024-01-03", "missing"),
    }
    for key in ["2024-01-02", "2024-01-03"]:
        assert materialize(
            [source, readings_total],
            partition_key=key,
            resources=resources,
            instance=instance,
            selection=[readings_total],
        ).success
    assert not make_plan(graph, StateCache()).plan

    # Another file lands in one day's folder: only that day is stale, and is recomputed.
    later = time.time() + 5
    write_folder_partition(landing, "2024-01-02", [100])
    newest = max((landing / "day=2024-01-02").iterdir(), key=lambda p: p.stat().st_mtime)
    os.utime(newest, (later, later))
    plan = make_plan(graph, StateCache()).plan
    assert [(i.asset, i.partition, i.reason, i.because) for i in plan.items] == [
        ("readings_total", "2024-01-02", "upstream_changed", ("readings[2024-01-02]",))
    ]
    assert materialize(
        [source, readings_total],
        partition_key="2024-01-02",
        resources=resources,
        instance=instance,
        selection=[readings_total],
    ).success
    assert delta_rows(lake / "warehouse" / "readings_total", ["day", "total"]) == [
        ("2024-01-02", 103),
        ("2024-01-03", 10),
    ]
    assert not make_plan(graph, StateCache()).plan
