"""Incremental inputs and run guards in real Dagster runs on real Spark and Delta: log-based and
watermark inputs read exactly the new rows, a second run reads nothing and is not planned, a
failed run re-reads, a rewritten upstream fails clearly; guards skip or fail a run."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dagster import AssetIn, AssetsDefinition, Definitions, asset, materialize
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    model_kind_metadata,
    partlake_source,
)
from dagster_partlake.delta.state import StateCache
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from dagster_partlake.records.queries import newest_record
from dagster_partlake.storage.location import table_path
from tests.conftest import delta_rows

pytestmark = pytest.mark.spark

events = partlake_source("events")
FAILING = {"on": False}


def _consumer(incremental: Any, extra: dict | None = None) -> AssetsDefinition:
    @asset(
        ins={"events": AssetIn(metadata={"partlake/incremental": incremental})},
        metadata={**model_kind_metadata("append"), **(extra or {})},
    )
    def event_log(events: DataFrame) -> DataFrame:
        if FAILING["on"]:
            raise RuntimeError("the asset failed on purpose")
        return events.select("id", "updated_at")

    return event_log


def _resources(lake: Path) -> dict[str, Any]:
    spark = SparkResource(master="local[2]")
    return {"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake))}


def _append(lake: Path, ids: range, hour: int, mode: str = "append") -> None:
    """Another system appends rows (id, updated_at) to the events table."""
    at = dt.datetime(2024, 1, 1, hour, tzinfo=dt.UTC)
    table = pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "updated_at": pa.array([at] * len(ids), pa.timestamp("us", tz="UTC")),
        }
    )
    write_deltalake(table_path(str(lake), ["events"]), table, mode=mode)


def _run(lake: Path, instance: Any, consumer: AssetsDefinition) -> Any:
    return materialize(
        [events, consumer],
        selection=[consumer.key],
        resources=_resources(lake),
        instance=instance,
        raise_on_error=False,
    )


def _stale(lake: Path, consumer: AssetsDefinition) -> list[tuple[str, str]]:
    graph = LakeGraph(Definitions(assets=[events, consumer], resources=_resources(lake)))
    return [(i.asset, i.reason) for i in make_plan(graph, StateCache()).plan.items]


def _because(lake: Path, consumer: AssetsDefinition) -> tuple[str, ...]:
    graph = LakeGraph(Definitions(assets=[events, consumer], resources=_resources(lake)))
    (item,) = make_plan(graph, StateCache()).plan.items
    return item.because


def _log(lake: Path) -> list[int]:
    return [row[0] for row in delta_rows(table_path(str(lake), ["event_log"]), ["id"])]


@pytest.mark.parametrize("incremental", ["log", {"column": "updated_at"}])
def test_an_incremental_input_reads_exactly_the_new_rows(
    spark, lake: Path, instance, incremental: Any
) -> None:
    consumer = _consumer(incremental)
    _append(lake, range(0, 5), hour=1)
    assert _run(lake, instance, consumer).success
    assert _log(lake) == list(range(5))

    _append(lake, range(5, 8), hour=2)
    assert _stale(lake, consumer) == [("event_log", "upstream_changed")]
    # The plan names the range the run will read.
    expected = (
        "events[versions 1..1]"
        if incremental == "log"
        else "events[updated_at > 2024-01-01 01:00:00]"
    )
    assert _because(lake, consumer) == (expected,)
    assert _run(lake, instance, consumer).success
    # Each row once: the second run read only the three new rows.
    assert _log(lake) == list(range(8))
    assert _stale(lake, consumer) == []

    # Nothing new: a forced run reads nothing.
    assert _run(lake, instance, consumer).success
    assert _log(lake) == list(range(8))

    # A failed run records nothing: the next run reads the same rows again.
    _append(lake, range(8, 10), hour=3)
    FAILING["on"] = True
    try:
        assert not _run(lake, instance, consumer).success
    finally:
        FAILING["on"] = False
    assert _run(lake, instance, consumer).success
    assert _log(lake) == list(range(10))
    record = newest_record(table_path(str(lake), ["event_log"]))
    assert record is not None
    if incremental == "log":
        version = DeltaTable(table_path(str(lake), ["events"])).version()
        assert record.upstream_versions["events"] == version
    else:
        assert record.watermarks["events"] == {"value": "2024-01-01 03:00:00", "type": "timestamp"}


def test_a_watermark_skips_late_rows_at_or_below_it(spark, lake: Path, instance) -> None:
    consumer = _consumer({"column": "updated_at"})
    _append(lake, range(0, 3), hour=5)
    assert _run(lake, instance, consumer).success
    _append(lake, range(3, 5), hour=4)  # older than the watermark: not read
    _append(lake, range(5, 6), hour=6)
    assert _run(lake, instance, consumer).success
    assert _log(lake) == [0, 1, 2, 5]


def test_a_rewritten_upstream_fails_a_log_input_unless_a_full_reread_is_allowed(
    spark, lake: Path, instance
) -> None:
    consumer = _consumer("log")
    _append(lake, range(0, 4), hour=1)
    assert _run(lake, instance, consumer).success
    version = DeltaTable(table_path(str(lake), ["event_log"])).version()
    _append(lake, range(100, 102), hour=2, mode="overwrite")

    failed = _run(lake, instance, consumer)
    assert not failed.success
    error = next(e for e in failed.all_events if e.event_type_value == "STEP_FAILURE")
    message = error.step_failure_data.error.to_string()
    assert "reads events incrementally from its log, but it removed or rewrote data" in message
    assert "allow_full_reread" in message
    assert DeltaTable(table_path(str(lake), ["event_log"])).version() == version

    reread = _consumer({"mode": "log", "allow_full_reread": True})
    assert _run(lake, instance, reread).success
    assert _log(lake) == [0, 1, 2, 3, 100, 101]


def test_fail_if_no_input_fails_an_empty_run(spark, lake: Path, instance) -> None:
    consumer = _consumer("log", {"partlake/fail_if_no_input": True})
    _append(lake, range(0, 2), hour=1)
    assert _run(lake, instance, consumer).success
    before = DeltaTable(table_path(str(lake), ["event_log"])).version()
    empty = _run(lake, instance, consumer)
    assert not empty.success
    error = next(e for e in empty.all_events if e.event_type_value == "STEP_FAILURE")
    assert "event_log read no rows (events: 0)" in error.step_failure_data.error.to_string()
    assert DeltaTable(table_path(str(lake), ["event_log"])).version() == before


def test_conditions_skip_or_fail_a_run(spark, lake: Path, instance) -> None:
    skip_small = {
        "partlake/conditions": [
            {"expression": "events_rows >= 3", "description": "a batch of 3", "action": "skip"},
            {"expression": "input_rows < 100", "description": "no flood", "action": "fail"},
        ]
    }
    consumer = _consumer("log", skip_small)
    _append(lake, range(0, 2), hour=1)
    result = _run(lake, instance, consumer)
    assert result.success
    # Skipped: nothing written, but consumed, so the plan does not ask for it again.
    assert _log(lake) == []
    assert _stale(lake, consumer) == []

    _append(lake, range(2, 5), hour=2)
    assert _run(lake, instance, consumer).success
    assert _log(lake) == [2, 3, 4]

    _append(lake, range(5, 205), hour=3)
    flood = _run(lake, instance, consumer)
    assert not flood.success
    error = next(e for e in flood.all_events if e.event_type_value == "STEP_FAILURE")
    assert "run condition 'no flood' (input_rows < 100) does not hold" in (
        error.step_failure_data.error.to_string()
    )
    assert _log(lake) == [2, 3, 4]


def test_an_asset_level_declaration_applies_to_its_inputs(spark, lake: Path, instance) -> None:
    @asset(metadata={**model_kind_metadata("append"), "partlake/incremental": "log"})
    def event_log(events: DataFrame) -> DataFrame:
        return events.select("id", "updated_at")

    _append(lake, range(0, 2), hour=1)
    assert _run(lake, instance, event_log).success
    _append(lake, range(2, 3), hour=2)
    assert _because(lake, event_log) == ("events[versions 1..1]",)
    assert _run(lake, instance, event_log).success
    assert _log(lake) == [0, 1, 2]
