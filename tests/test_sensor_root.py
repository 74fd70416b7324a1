"""The sensor and sources find the lake where the code location's IO manager keeps it, and count
each failed run once. No JVM: the source is written with delta-rs and nothing is materialized."""

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from dagster import DailyPartitionsDefinition, Definitions, asset
from dagster._core.definitions.observe import observe  # not re-exported by dagster 1.13
from deltalake import write_deltalake
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, build_invalidation_sensor, partlake_source
from dagster_partlake.storage.location import table_path
from tests.conftest import sensor_tick

DAYS = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
raw = partlake_source("raw", partitions_def=DAYS)


@asset(partitions_def=DAYS, code_version="1")
def clean(raw: DataFrame) -> DataFrame:
    return raw


def code_location(lake: Path, **sensor_args) -> Definitions:
    return Definitions(
        assets=[raw, clean],
        sensors=[build_invalidation_sensor("inv", **sensor_args)],
        resources={"io_manager": DeltaPartitionIOManager(root=str(lake))},
    )


def write_raw(lake: Path, day: str) -> None:
    write_deltalake(
        table_path(str(lake), ["raw"]),
        pa.table({"date": [dt.date.fromisoformat(day)], "v": [1]}),
        mode="append",
        partition_by=["date"],
    )


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch) -> Path:
    """$PARTLAKE_HOME points at an empty lake: only the IO manager's root has data."""
    empty = tmp_path / "not-the-lake"
    empty.mkdir()
    monkeypatch.setenv("PARTLAKE_HOME", str(empty))
    return empty


def test_the_sensor_plans_the_io_managers_lake(lake: Path, elsewhere: Path, instance) -> None:
    write_raw(lake, "2024-01-02")
    defs = code_location(lake)
    requests, _, skip = sensor_tick(defs, instance, defs.get_sensor_def("inv"), None)
    assert [
        (r.partition_key, [a.to_user_string() for a in r.asset_selection]) for r in requests
    ] == [("2024-01-02", ["clean"])], skip


def test_a_source_is_observed_in_the_io_managers_lake(
    lake: Path, elsewhere: Path, instance
) -> None:
    write_raw(lake, "2024-01-03")
    result = observe(
        [raw], instance=instance, resources={"io_manager": DeltaPartitionIOManager(root=str(lake))}
    )
    assert result.success
    observed = [
        e.event_specific_data.asset_observation.partition
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    assert observed == ["2024-01-03"]


def test_a_failed_run_is_counted_once(lake: Path, instance, monkeypatch) -> None:
    """A failure recorded while a tick was being evaluated (after the tick's start, before its
    query) used to be counted by that tick and again by the next one."""
    import dagster_partlake.orchestration.sensor as sensor_module

    write_raw(lake, "2024-01-02")
    defs = code_location(lake, retry_base_seconds=3600)
    sensor = defs.get_sensor_def("inv")
    [request], cursor, _ = sensor_tick(defs, instance, sensor, None)
    run = instance.create_run_for_job(
        job_def=defs.resolve_implicit_global_asset_job_def(),
        tags={**request.tags, "dagster/partition": request.partition_key},
        asset_selection=frozenset(request.asset_selection),
    )
    instance.report_run_failed(run)
    failed_at = instance.get_run_record_by_id(run.run_id).update_timestamp.timestamp()

    # This tick started just before the failure was recorded.
    real_time = sensor_module.time.time
    monkeypatch.setattr(sensor_module.time, "time", lambda: failed_at - 5)
    _, cursor, _ = sensor_tick(defs, instance, sensor, cursor)
    monkeypatch.setattr(sensor_module.time, "time", real_time)
    _, cursor, skip = sensor_tick(defs, instance, sensor, cursor)
    failures = json.loads(cursor)["failures"]
    assert [count for count, _ in failures.values()] == [1], failures
    assert "backing-off" in skip


def test_an_asset_of_an_io_manager_without_a_root_is_in_the_default_lake(
    lake: Path, elsewhere: Path
) -> None:
    """The code location's `io_manager` names a root; an asset written by a second IO manager
    without one (`io_manager_key="plain_io"`) lives in the default lake ($PARTLAKE_HOME), also
    for the sensor and `partlake_stale()`, which see the asset graph alone (no resources)."""
    from dagster_partlake.planning.graph import LakeGraph

    @asset(partitions_def=DAYS, io_manager_key="plain_io")
    def copy(raw: DataFrame) -> DataFrame:
        return raw

    defs = Definitions(
        assets=[raw, clean, copy],
        resources={
            "io_manager": DeltaPartitionIOManager(root=str(lake)),
            "plain_io": DeltaPartitionIOManager(),
        },
    )
    expected = {"raw": lake, "clean": lake, "copy": elsewhere}
    for graph in (LakeGraph(defs), LakeGraph(asset_graph=defs.resolve_asset_graph())):
        assert {n: a.path for n, a in graph.assets.items()} == {
            n: table_path(str(root), [n]) for n, root in expected.items()
        }
