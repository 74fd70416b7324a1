"""Streams and dimensions under a real `dagster dev` (the UI's server):

- a `continuous` streaming run cancelled through Dagster's own termination path (GraphQL
  `terminateRun`, what the UI's Terminate button sends): the run ends CANCELED, the query stopped
  after the micro-batch in flight, nothing is half-committed, and the stream goes on from its
  checkpoint afterwards with every input row exactly once;
- a date x region x product asset's partition keys as the UI reads them: every dimension named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import materialize
from deltalake import DeltaTable

from dagster_partlake.delta.table import log_versions, read_record
from tests import stream_defs
from tests.conftest import cli_env
from tests.servers import DagsterDev, dagster_dev, wait_until

pytestmark = [pytest.mark.dagster_cli, pytest.mark.spark]

LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
  }
}"""
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
    env.update(STREAM_MODE="continuous", STREAM_TRIGGER="1 second")
    stream_defs.drop_events(lake, "a.json", range(0, 20))
    log = tmp_path / "dagster-dev.log"
    with dagster_dev(env, log, modules=["tests.stream_defs", "tests.dimensions_defs"]) as server:
        _dimensions_in_the_ui(server)
        launched = server.graphql(
            LAUNCH,
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
        wait_until(lambda: _rows(lake) == list(range(20)), timeout=300, what="the first batch")
        # The query keeps running: a new file is committed by a later micro-batch.
        stream_defs.drop_events(lake, "b.json", range(20, 35))
        wait_until(lambda: _rows(lake) == list(range(35)), timeout=120, what="a later batch")
        assert _status(server, run_id) == "STARTED"

        outcome = server.graphql(TERMINATE, runId=run_id)["terminateRun"]
        assert outcome["__typename"] == "TerminateRunSuccess", outcome
        wait_until(
            lambda: _status(server, run_id) == "CANCELED", timeout=180, what="the run canceled"
        )
        messages = _messages(server, run_id)
        assert any("stopping after the micro-batch in flight" in m for m in messages), messages
    root = lake / "warehouse" / "events"
    # Nothing half-committed: every batch commit holds exactly the rows its record says, and no
    # staged file of a batch in flight was left behind.
    assert _rows(lake) == list(range(35))
    staging = root / "_partlake_staging"
    assert not staging.exists() or not any(staging.iterdir())
    batches = _batch_records(root)
    assert sum(sum(r.rows_by_partition.values()) for r in batches) == 35
    # The stream goes on from its checkpoint: only the new file is read.
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    stream_defs.drop_events(lake, "c.json", range(35, 40))
    assets = stream_defs.build()
    defs = stream_defs.definitions(assets)
    result = materialize(
        assets[:2], selection=[assets[1].key], resources=defs.resources, instance=instance
    )
    assert result.success
    assert _rows(lake) == list(range(40))
    assert len(_batch_records(root)) == len(batches) + 1


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


def _messages(server: DagsterDev, run_id: str) -> list[str]:
    events = server.graphql(LOGS, runId=run_id)["logsForRun"]["events"]
    return [json.dumps(e.get("message", "")) for e in events]
