"""Streams and dimensions under a real `dagster dev` (the UI's server):

- a `continuous` streaming run cancelled through Dagster's own termination path (GraphQL
  `terminateRun`, what the UI's Terminate button sends) while a micro-batch is in flight (paused
  at the fault point `stream_batch`, staged and not committed): the run waits for that batch,
  which commits whole with its `txn`, then ends CANCELED without committing a later batch; the
  stream goes on from its checkpoint afterwards with every input row exactly once. While the
  stream runs, the planner and the sensor never request it, and what reads it is stale for
  exactly the partitions its committed batches touched;
- a date x region x product asset's partition keys as the UI reads them: every dimension named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import materialize
from deltalake import DeltaTable

from dagster_partlake.delta.table import log_versions
from dagster_partlake.faults import POINTS_FILE
from dagster_partlake.layout import log_dir
from dagster_partlake.records.queries import read_record
from tests import stream_defs
from tests.conftest import cli_env
from tests.servers import LAUNCH_RUN, DagsterDev, dagster_dev, wait_until

pytestmark = [pytest.mark.dagster_cli, pytest.mark.spark]

TERMINATE = """
mutation($runId: String!) {
  terminateRun(runId: $runId) {
    __typename
    ... on TerminateRunFailure { message }
    ... on PythonError { message }
  }
}"""
STATUS = """
query($runId: ID!) { runOrError(runId: $runId) { ... on Run { status } } }"""
LOGS = """
query($runId: ID!) {
  logsForRun(runId: $runId) {
    ... on EventConnection { events { __typename ... on MessageEvent { message } } }
  }
}"""


def _rows(lake: Path) -> list[int]:
    root = lake / "warehouse" / "events"
    if not (root / "_delta_log").exists():
        return []
    return sorted(r["event_id"] for r in DeltaTable(str(root)).to_pyarrow_table().to_pylist())


def _status(server: DagsterDev, run_id: str) -> str:
    return server.graphql(STATUS, runId=run_id)["runOrError"]["status"]


def test_a_continuous_stream_cancelled_from_dagster_stops_cleanly(
    spark, lake: Path, tmp_path: Path, instance, monkeypatch
) -> None:
    env = cli_env(tmp_path, lake)
    drill = tmp_path / "drill"  # fault points (`dagster_partlake.faults`): the batch in flight
    drill.mkdir()
    env.update(STREAM_MODE="continuous", STREAM_TRIGGER="1 second", PARTLAKE_FAULT_DIR=str(drill))
    # The first micro-batch touches two days of ten.
    stream_defs.drop_events(lake, "a.json", range(0, 20), day="2024-01-02")
    stream_defs.drop_events(lake, "a2.json", range(20, 30), day="2024-01-04")
    first_days = {"2024-01-02", "2024-01-04"}
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    log = tmp_path / "dagster-dev.log"
    with dagster_dev(env, log, modules=["tests.stream_defs", "tests.dimensions_defs"]) as server:
        _dimensions_in_the_ui(server)
        launched = server.graphql(
            LAUNCH_RUN,
            params={
                "selector": {
                    "repositoryLocationName": "tests.stream_defs",
                    "repositoryName": "__repository__",
                    "jobName": "__ASSET_JOB",
                    "assetSelection": [{"path": ["events"]}],
                },
                "mode": "default",
                "runConfigData": {},
            },
        )["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]
        wait_until(lambda: _rows(lake) == list(range(30)), timeout=300, what="the first batch")
        assert _status(server, run_id) == "STARTED"
        # While it runs, the stream is never planned nor requested; what reads it is stale for
        # exactly the days its batch touched.
        _planned_beside_the_stream(instance, first_days)

        # The next micro-batch pauses staged, before its commit: a batch in flight.
        (drill / POINTS_FILE).write_text("stream_batch:1")
        stream_defs.drop_events(lake, "b.json", range(30, 45), day="2024-01-06")
        paused = drill / "stream_batch.1.paused"
        wait_until(
            lambda: paused.exists() and paused.read_text().strip(),
            timeout=120,
            interval=0.5,
            what="the second batch to pause before its commit",
        )
        assert _rows(lake) == list(range(30))
        _planned_beside_the_stream(instance, first_days)  # a staged batch is not data yet
        # A file that lands during the batch in flight: the cancelled run must leave it.
        stream_defs.drop_events(lake, "c.json", range(45, 50), day="2024-01-07")

        outcome = server.graphql(TERMINATE, runId=run_id)["terminateRun"]
        assert outcome["__typename"] == "TerminateRunSuccess", outcome
        wait_until(
            lambda: any(STOPPING in m for m in _messages(server, run_id)),
            timeout=60,
            interval=0.5,
            what="the run to say it stops after the batch in flight",
        )
        # The cancel waits for the batch: nothing of it is committed yet, the run not over.
        assert _status(server, run_id) == "CANCELING"
        assert _rows(lake) == list(range(30))
        (drill / "stream_batch.1.release").touch()
        wait_until(
            lambda: _status(server, run_id) == "CANCELED", timeout=180, what="the run canceled"
        )
        messages = _messages(server, run_id)
    # The batch that was in flight is data now: its day is stale too, and only it.
    _planned_beside_the_stream(instance, {*first_days, "2024-01-06"})
    root = lake / "warehouse" / "events"
    # The batch in flight committed whole: all its rows, in one commit carrying its txn.
    assert _rows(lake) == list(range(45))
    batches = _batch_records(root)
    assert [(r.stream_batch, dict(r.rows_by_partition)) for r in batches] == [
        (0, {"2024-01-02": 20, "2024-01-04": 10}),
        (1, {"2024-01-06": 15}),
    ]
    assert {r.run_id for r in batches} == {run_id}
    in_flight = batches[1]
    assert in_flight.table_version is not None and in_flight.stream_query is not None
    txns = _txns(root, in_flight.table_version)
    streams = [t for t in txns if t[0].startswith("partlake-stream:")]
    assert streams == [(in_flight.stream_query, 1)]
    assert any(
        f"micro-batch 1 committed as version {in_flight.table_version}: 15 row(s)" in m
        for m in messages
    ), messages
    # No later batch (c.json) nor any other commit came from the cancelled run.
    assert DeltaTable(str(root)).version() == in_flight.table_version
    # Nothing half-committed: no staged file of a batch was left behind.
    staging = root / "_partlake_staging"
    assert not staging.exists() or not any(staging.iterdir())
    # The stream goes on from its checkpoint: only the file the cancelled run left is read, once.
    monkeypatch.delenv("PARTLAKE_FAULT_DIR", raising=False)
    assets = stream_defs.build()
    defs = stream_defs.definitions(assets)
    result = materialize(
        assets[:2], selection=[assets[1].key], resources=defs.resources, instance=instance
    )
    assert result.success
    assert _rows(lake) == list(range(50))
    after = _batch_records(root)
    assert [(r.stream_batch, dict(r.rows_by_partition)) for r in after[2:]] == [
        (2, {"2024-01-07": 5})
    ]
    assert after[2].run_id == result.run_id


STOPPING = "stopping after the micro-batch in flight"


def _planned_beside_the_stream(instance: Any, touched: set[str]) -> None:
    """The plan and a sensor tick of the continuous stream's code location: the stream is never
    in them, daily_totals is stale for exactly the days in `touched`."""
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan
    from tests.conftest import sensor_tick

    defs = stream_defs.definitions(stream_defs.build("continuous", trigger="1 second"))
    plan = make_plan(LakeGraph(defs), StateCache()).plan
    assert "events" not in {i.asset for i in plan.items}, plan.items
    totals = {(i.partition, i.reason) for i in plan.items if i.asset == "daily_totals"}
    assert totals == {(day, "missing") for day in touched}, plan.items
    sensor = defs.get_sensor_def("partlake_invalidation")
    requests, _cursor, _skip = sensor_tick(defs, instance, sensor, None)
    requested = {(k.to_user_string(), r.partition_key) for r in requests for k in r.asset_selection}
    assert not any(asset == "events" for asset, _key in requested), requested
    assert {key for asset, key in requested if asset == "daily_totals"} == touched, requested


KEYS = """
{ assetNodes(assetKeys: [{path: ["clean_sales"]}]) {
    partitionKeysByDimension { name partitionKeys }
} }"""


def _dimensions_in_the_ui(server: DagsterDev) -> None:
    """What the UI shows of a date x region x product asset: the time dimension, and the static
    ones combined into one whose name and keys name each of them."""
    node = server.graphql(KEYS)["assetNodes"][0]
    dims = {d["name"]: d["partitionKeys"] for d in node["partitionKeysByDimension"]}
    assert dims["region/product"] == ["eu/shoes", "eu/hats", "us/shoes", "us/hats"]
    assert dims["date"] == ["2024-01-01", "2024-01-02"]


def _batch_records(root: Path) -> list[Any]:
    found = [read_record(str(root), v) for v in log_versions(str(root))]
    return [r for r in found if r is not None and r.stream_batch is not None]


def _txns(root: Path, version: int) -> list[tuple[str, int]]:
    """The application transactions (`txn` actions: app id, version) a commit carries."""
    path = Path(log_dir(str(root))) / f"{version:020d}.json"
    actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a]


def _messages(server: DagsterDev, run_id: str) -> list[str]:
    events = server.graphql(LOGS, runId=run_id)["logsForRun"]["events"]
    return [json.dumps(e.get("message", "")) for e in events]
