"""Streaming assets (`partlake/stream`): micro-batches from a landing folder (JSON, CSV, Parquet)
or another table's new commits, written exactly once (one commit per batch with the query's
`txn`), planned as a whole and followed downstream by exactly the partitions they touched; a
run SIGKILLed around a batch's commit and restarted commits every input row once; vacuum keeps
the checkpoint; bad declarations are refused. Real Spark, Delta, Dagster runs and processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest
from dagster import AssetKey, materialize
from deltalake import DeltaTable
from pyspark.sql import DataFrame

from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.stream_source import StreamSourceError
from dagster_partlake.delta.table import log_versions
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.incremental.streams import StreamSpec, stream_of
from dagster_partlake.layout import STREAM_DIR
from dagster_partlake.maintenance.vacuum import vacuum_table
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.planner import (
    Dependency,
    PartitionState,
    PlanAsset,
    PlanInput,
    Record,
    plan,
)
from dagster_partlake.planning.replan import changed_partitions, full, replan
from dagster_partlake.planning.session import make_plan
from dagster_partlake.records.queries import read_record
from dagster_partlake.records.record import CommitRecord
from tests import stream_defs
from tests.conftest import REPO_ROOT, cli_env, delta_files, run_partlake, subprocess_env

# -- the declaration (no Spark) ---------------------------------------------------------------


def test_a_stream_declaration_is_read_and_checked() -> None:
    assert stream_of({}, asset_name="a") is None
    assert stream_of({"partlake/stream": {}}, asset_name="a") == StreamSpec()
    spec = stream_of(
        {
            "partlake/stream": {
                "mode": "continuous",
                "trigger_interval": "5 seconds",
                "format": "csv",
                "schema": "id long",
                "options": {"header": True},
            }
        },
        asset_name="a",
    )
    assert spec is not None and spec.continuous and spec.options == {"header": "True"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"mode": "sometimes"}, "use 'available_now'"),
        ({"format": "json"}, "without a schema"),
        ({"format": "xml"}, "json, csv, parquet"),
        ({"mode": "continuous", "trigger_interval": "soon"}, "write it like '10 seconds'"),
        ({"trigger_interval": "5 seconds"}, "set mode 'continuous'"),
        ({"schema": "id long"}, "gives a schema but no format"),
        ({"checkpoint": "/tmp"}, "unknown key"),
        ("yes", "give a dict"),
    ],
)
def test_bad_stream_declarations_are_refused(value: Any, message: str) -> None:
    with pytest.raises(PartlakeConfigError, match=message):
        stream_of({"partlake/stream": value}, asset_name="a")


# -- planning a stream as a whole (no Spark) ----------------------------------------------------


def _stream_world(consumed: int | None, landing: int, code: str = "1") -> PlanInput:
    """landing (folder) -> events (stream, daily) -> totals (daily, identity)."""
    up = Dependency("landing", lambda _k: [None], lambda _k: ["d1", "d2"])
    ident = Dependency("events", lambda k: [k], lambda k: [k], identity=True)
    assets = [
        PlanAsset("landing", is_source=True, partitioned=False),
        PlanAsset("events", deps=(up,), code_version=code, stream=True),
        PlanAsset("totals", deps=(ident,), code_version="1"),
    ]
    records = {}
    if consumed is not None:
        records["events"] = {None: Record("1", None, {"landing": {None: consumed}})}
    return PlanInput(
        assets=assets,
        states={
            "landing": {None: PartitionState(landing)},
            "events": {"d1": PartitionState(50)},
            "totals": {"d1": PartitionState(60)},
        },
        records={
            **records,
            "totals": {"d1": Record("1", 60, {"events": {"d1": 50}})},
        },
    )


@pytest.mark.parametrize(
    ("consumed", "landing", "code", "expected"),
    [
        (None, 10, "1", [("events", None, "missing")]),
        (10, 10, "1", []),
        (10, 20, "1", [("events", None, "upstream_changed")]),
        (10, 10, "2", [("events", None, "code_changed")]),
    ],
)
def test_a_stream_is_planned_as_a_whole_and_replanned_alike(
    consumed: int | None, landing: int, code: str, expected: list[tuple[str, Any, str]]
) -> None:
    world = _stream_world(consumed, landing, code)
    found = plan(world)
    # Its staleness is not spread over partitions: totals[d1] read what events wrote.
    assert [(i.asset, i.partition, i.reason) for i in found.items] == expected
    before = full(_stream_world(10, 10))
    again = replan(before, world, changed_partitions(before.inputs, world))
    assert again.plan.items == found.items


# -- real streams -------------------------------------------------------------------------------


def _defs(**options: Any) -> tuple[Any, list[Any]]:
    assets = stream_defs.build(**options)
    return stream_defs.definitions(assets), assets


def _stream(defs: Any, assets: list[Any], instance: Any, name: str = "events") -> Any:
    asset = next(a for a in assets if a.key == AssetKey(name))
    upstream = [a for a in assets if a.key != asset.key]
    result = materialize(
        [*upstream, asset], selection=[asset.key], resources=defs.resources, instance=instance
    )
    assert result.success
    return result


def _ids(lake: Path, table: str = "events") -> list[int]:
    return sorted(
        r["event_id"]
        for r in DeltaTable(str(lake / "warehouse" / table)).to_pyarrow_table().to_pylist()
    )


def _duckdb_ids(lake: Path, table: str = "events") -> list[int]:
    uris = DeltaTable(str(lake / "warehouse" / table)).file_uris()
    rows = duckdb.sql(f"select event_id from read_parquet({uris!r}, hive_partitioning=true)")
    return sorted(r[0] for r in rows.fetchall())


def _stale(defs: Any) -> list[tuple[str, Any, str]]:
    return sorted(
        (
            (i.asset, i.partition, i.reason)
            for i in make_plan(LakeGraph(defs), StateCache()).plan.items
        ),
        key=lambda t: (t[0], t[1] or ""),
    )


@pytest.mark.spark
def test_available_now_batches_commit_once_and_downstream_follows_the_touched_days(
    spark, lake: Path, instance, monkeypatch
) -> None:
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    defs, assets = _defs(options={"maxFilesPerTrigger": "1"})
    stream_defs.drop_events(lake, "a.json", range(0, 30), day="2024-01-02")
    stream_defs.drop_events(lake, "b.json", range(30, 50), day="2024-01-03")
    assert ("events", None, "missing") in _stale(defs)

    result = _stream(defs, assets, instance)
    assert _ids(lake) == list(range(50)) == _duckdb_ids(lake)
    metadata = result.asset_materializations_for_node("events")[-1].metadata
    assert metadata["partlake/stream_batches"].value == 2  # one file per micro-batch
    assert metadata["dagster/row_count"].value == 50
    assert (
        0
        <= metadata["partlake/stream_latency_ms_mean"].value
        <= metadata["partlake/stream_latency_ms_max"].value
    )
    # One append commit per batch, carrying the query's txn, then the run's closing record.
    root = str(lake / "warehouse" / "events")
    records = [read_record(root, v) for v in log_versions(root)]
    batches = [r for r in records if r is not None and r.stream_batch is not None]
    assert [(r.stream_batch, r.partition_keys, r.kind) for r in batches] == [
        (0, ("2024-01-02",), "append"),
        (1, ("2024-01-03",), "append"),
    ]
    assert DeltaTable(root).transaction_version(batches[0].stream_query) == 1
    assert records[-1] is not None and records[-1].stream_batch is None
    assert records[-1].consumed["landing"]
    # The stream is fresh; each day it wrote is due downstream, and nothing else.
    assert _stale(defs) == [
        ("daily_totals", "2024-01-02", "missing"),
        ("daily_totals", "2024-01-03", "missing"),
        ("event_copy", None, "missing"),
    ]
    outcomes = refresh(LakeGraph(defs), instance)
    assert all(o.ok for o in outcomes) and not _stale(defs)

    # A new file of one day: the stream as a whole, then exactly that day downstream.
    stream_defs.drop_events(lake, "c.json", range(50, 60), day="2024-01-03")
    assert _stale(defs) == [("events", None, "upstream_changed")]
    outcomes = refresh(LakeGraph(defs), instance)
    ran = sorted((o.asset, o.partition) for o in outcomes)
    assert ran == [("daily_totals", "2024-01-03"), ("event_copy", None), ("events", None)]
    assert [o.rows for o in outcomes if o.asset == "events"] == [10]
    assert _ids(lake) == list(range(60))
    # event_copy streamed events' new commits only: every row once.
    assert _ids(lake, "event_copy") == list(range(60)) == _duckdb_ids(lake, "event_copy")
    totals = DeltaTable(str(lake / "warehouse" / "daily_totals")).to_pyarrow_table().to_pylist()
    assert sorted((str(r["date"]), r["events"]) for r in totals) == [
        ("2024-01-02", 30),
        ("2024-01-03", 30),
    ]
    # Run again with nothing new: no batch, and still fresh.
    _stream(defs, assets, instance)
    assert _ids(lake) == list(range(60)) and not _stale(defs)
    # A row delete in the stream's table stands (the stream is where data enters): only what
    # reads the touched day is stale.
    from dagster_partlake.maintenance.delete import delete_rows

    delete_rows(spark, root, "event_id = 55")
    assert ("daily_totals", "2024-01-03", "upstream_changed") in _stale(defs)
    assert not any(s[0] == "events" for s in _stale(defs))


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_landing_folders(spark, lake: Path, instance, monkeypatch, fmt: str):
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    defs, assets = _defs(fmt=fmt)
    stream_defs.drop_events(lake, f"a.{fmt}", range(0, 20), fmt=fmt)
    stream_defs.drop_events(lake, f"b.{fmt}", range(20, 25), fmt=fmt)
    _stream(defs, assets, instance)
    assert _ids(lake) == list(range(25))


@pytest.mark.spark
def test_a_table_stream_refuses_a_rewritten_upstream(spark, lake: Path, instance, monkeypatch):
    from dagster_partlake.maintenance.delete import delete_rows

    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    defs, assets = _defs()
    stream_defs.drop_events(lake, "a.json", range(0, 10))
    _stream(defs, assets, instance)
    _stream(defs, assets, instance, "event_copy")
    delete_rows(spark, str(lake / "warehouse" / "events"), "event_id = 3")
    copy = next(a for a in assets if a.key == AssetKey("event_copy"))
    result = materialize(
        [a for a in assets if a.key != copy.key] + [copy],
        selection=[copy.key],
        resources=defs.resources,
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    text = str(failure.message) + str(failure.cause.message if failure.cause else "")
    assert "removed or rewrote rows" in text
    assert _ids(lake, "event_copy") == list(range(10))
    assert StreamSourceError.__doc__


@pytest.mark.spark
def test_vacuum_never_removes_the_checkpoint(spark, lake: Path, instance, tmp_path, monkeypatch):
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    defs, assets = _defs()
    stream_defs.drop_events(lake, "a.json", range(0, 10))
    _stream(defs, assets, instance)
    root = lake / "warehouse" / "events"
    checkpoint = sorted(p.relative_to(root) for p in (root / STREAM_DIR).rglob("*"))
    assert checkpoint
    result = vacuum_table(str(root), retention_hours=0, force=True)
    assert not any(f.startswith(STREAM_DIR) for f in result.files)
    env = cli_env(tmp_path, lake)
    proc = run_partlake(
        "maintain", "-m", "tests.stream_defs", "--select", "events", "vacuum",
        "--retention-hours", "0", "--force", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.relative_to(root) for p in (root / STREAM_DIR).rglob("*")) == checkpoint
    # The stream goes on from its checkpoint: the old file is not read again.
    stream_defs.drop_events(lake, "b.json", range(10, 15))
    _stream(defs, assets, instance)
    assert _ids(lake) == list(range(15))


@pytest.mark.spark
def test_bad_streaming_assets_are_refused(spark, lake: Path, instance, monkeypatch) -> None:
    from dagster import asset

    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    landing = stream_defs.build()[0]
    stream_defs.drop_events(lake, "a.json", range(0, 3))

    @asset(metadata={"partlake/stream": {"format": "json", "schema": stream_defs.SCHEMA},
                     "partlake/kind": "table"})  # fmt: skip
    def as_table(landing: DataFrame) -> DataFrame:
        return landing

    @asset(metadata={"partlake/stream": {}})  # a folder input needs a format
    def no_format(landing: DataFrame) -> DataFrame:
        return landing

    for bad, message in [
        (as_table, "a stream appends each micro-batch"),
        (no_format, "set 'format'"),
    ]:
        defs = stream_defs.definitions([landing, bad])
        result = materialize(
            [landing, bad], selection=[bad.key], resources=defs.resources, instance=instance,
            raise_on_error=False,
        )  # fmt: skip
        assert not result.success
        error = result.get_step_failure_events()[0].step_failure_data.error
        assert message in str(error.message) + str(error.cause.message if error.cause else "")
        assert not (lake / "warehouse" / bad.key.path[0]).exists()


# -- killed and restarted -----------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("when", ["before_commit", "after_commit"])
def test_a_stream_killed_mid_batch_and_restarted_commits_every_row_once(
    spark, lake: Path, instance, monkeypatch, when: str
) -> None:
    for i in range(4):
        stream_defs.drop_events(lake, f"f{i}.json", range(i * 25, i * 25 + 25))
    victim = subprocess.run(
        [sys.executable, "-m", "tests.stream_process", str(lake), when, "2"],
        cwd=REPO_ROOT,
        env=subprocess_env(SPARK_LOCAL_IP="127.0.0.1", STREAM_FILES_PER_TRIGGER="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-3000:]
    _reap_jvm(lake / "jvm.pid")
    root = lake / "warehouse" / "events"
    committed = list(range(75)) if when == "after_commit" else list(range(50))
    assert _ids(lake) == committed  # batches 0, 1 (and 2) landed whole, nothing more
    if when == "before_commit":
        # Batch 2's Parquet files, written where they would live, never committed.
        assert {str(p) for p in root.rglob("*.parquet")} - delta_files(root)

    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    defs, assets = _defs(options={"maxFilesPerTrigger": "1"})
    result = _stream(defs, assets, instance)
    assert _ids(lake) == list(range(100)) == _duckdb_ids(lake)
    metadata = result.asset_materializations_for_node("events")[-1].metadata
    replayed = metadata["partlake/stream_replayed_batches"].value
    assert replayed == ([2] if when == "after_commit" else [])
    batches = [
        r.stream_batch
        for v in log_versions(str(root))
        if (r := read_record(str(root), v)) is not None and r.stream_batch is not None
    ]
    assert batches == [0, 1, 2, 3]  # each batch committed exactly once


def _reap_jvm(pid_file: Path) -> None:
    """The killed run's JVM, if it had one of its own, exits with its parent; wait for it (by
    its pid) so no Spark of a dead test lingers."""
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)


def test_commit_records_keep_the_stream_fields() -> None:
    record = CommitRecord("events", ("2024-01-02",), "1", "r", stream_query="q", stream_batch=4)
    again = CommitRecord.from_commit_info(record.to_commit_info())
    assert again is not None and (again.stream_query, again.stream_batch) == ("q", 4)
    assert CommitRecord.from_commit_info(CommitRecord("e", (), None, None).to_commit_info()) == (
        CommitRecord("e", (), None, None)
    )


@pytest.mark.spark
def test_partlake_plan_run_and_the_sensor_take_a_stream_as_one_run(
    spark, lake: Path, tmp_path: Path, instance, monkeypatch
) -> None:
    from tests.conftest import sensor_tick

    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    env = cli_env(tmp_path, lake)
    stream_defs.drop_events(lake, "a.json", range(0, 10), day="2024-01-02")
    plan_text = run_partlake("plan", "-m", "tests.stream_defs", env=env)
    assert plan_text.returncode == 0, plan_text.stderr[-3000:]
    print(plan_text.stdout)
    lines = plan_text.stdout.splitlines()
    at = lines.index("events: 1 stale (missing 1)")
    assert lines[at + 1].split() == ["-", "missing", "because", "landing"]
    assert "  run 1: events  -" in lines
    defs = stream_defs.defs
    sensor = defs.get_sensor_def("partlake_invalidation")
    requests, _cursor, _skip = sensor_tick(defs, instance, sensor, None)
    assert [(r.asset_selection, r.partition_key) for r in requests] == [
        ([AssetKey("events")], None)
    ]

    # event_copy (a stream of events' table) is left to the in-process test above: its Python
    # streaming source would start its own workers here.
    select = ["--select", "events,daily_totals"]
    run = run_partlake("run", "-m", "tests.stream_defs", *select, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(run.stdout)
    lines = run.stdout.splitlines()
    assert any(line.startswith("[OK] events - (missing, 10 rows,") for line in lines)
    assert any(line.startswith("New data from stream(s): 1 more stale") for line in lines)
    assert any(line.startswith("[OK] daily_totals 2024-01-02 (missing, 1 rows,") for line in lines)
    again = run_partlake("plan", "-m", "tests.stream_defs", *select, env=env)
    assert again.stdout.strip() == "Everything is fresh: no asset partition needs to run."


def test_a_partitioned_stream_of_a_partitioned_input_is_refused_with_the_fix() -> None:
    from dagster import asset

    landing, events = stream_defs.build()[:2]

    @asset(partitions_def=stream_defs.daily, metadata={"partlake/stream": {}})
    def copy(events: DataFrame) -> DataFrame:
        return events

    with pytest.raises(PartlakeConfigError, match="Drop copy's partitions_def and keep its"):
        LakeGraph(stream_defs.definitions([landing, events, copy]))
