"""Warm run workers (`MonitoredRunLauncher(warm_workers=1)`) under a real `dagster dev`: a run
launched from the UI's GraphQL is handed to a worker that has imported the code location and
attached to the warm Spark (its step starts no JVM), shows in Dagster's event log as any run does,
and its worker runs nothing else; a warm run is cancelled through Dagster's termination; a
worker whose code changed on disk is never handed a run."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dagster_partlake.orchestration.warm import WARM_TAG, WORKER_TAG
from tests.conftest import REPO_ROOT, subprocess_env
from tests.servers import LAUNCH_RUN, DagsterDev, dagster_dev, wait_until
from tests.surface.options import covers
from tests.surface.project import table_rows

pytestmark = [pytest.mark.daemon, pytest.mark.dagster_cli, pytest.mark.spark]

CODE = '''
import time
from pathlib import Path

import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, SparkResource

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-10")
VERSION = "{version}"


@dg.asset(partitions_def=days, required_resource_keys={"spark"})
def numbers(context: dg.AssetExecutionContext) -> DataFrame:
    spark = context.resources.spark.spark_session
    rows = [(context.partition_key, VERSION, i) for i in range(20)]
    return spark.createDataFrame(rows, "date string, version string, n long")


@dg.asset
def waits() -> None:
    """Waits until cancelled (or two minutes)."""
    for _ in range(240):
        time.sleep(0.5)


spark = SparkResource(master="local[1]")
defs = dg.Definitions(
    assets=[numbers, waits],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
'''
RUN = """
query($runId: ID!) { runOrError(runId: $runId) { ... on Run {
  status tags { key value } } } }"""
EVENTS = """
query($runId: ID!) { logsForRun(runId: $runId) { ... on EventConnection {
  events { __typename ... on MessageEvent { message }
    ... on MaterializationEvent { metadataEntries { label } } } } } }"""
TERMINATE = """
mutation($runId: String!) { terminateRun(runId: $runId) { __typename } }"""


def _launch(dev: DagsterDev, asset: str, partition: str | None = None) -> str:
    tags = [{"key": "dagster/partition", "value": partition}] if partition else []
    reply = dev.graphql(
        LAUNCH_RUN,
        params={
            "selector": {
                "repositoryLocationName": "warm_numbers",
                "repositoryName": "__repository__",
                "jobName": "__ASSET_JOB",
                "assetSelection": [{"path": [asset]}],
            },
            "mode": "default",
            "runConfigData": {},
            "executionMetadata": {"tags": tags},
        },
    )["launchRun"]
    assert reply["__typename"] == "LaunchRunSuccess", reply
    return reply["run"]["runId"]


def _run(dev: DagsterDev, run_id: str) -> dict[str, Any]:
    found = dev.graphql(RUN, runId=run_id)["runOrError"]
    return {"status": found["status"], "tags": {t["key"]: t["value"] for t in found["tags"]}}


def _ended(dev: DagsterDev, run_id: str, timeout: float = 300) -> dict[str, Any]:
    wait_until(
        lambda: _run(dev, run_id)["status"] in ("SUCCESS", "FAILURE", "CANCELED"),
        timeout=timeout,
        interval=0.5,
        what=f"run {run_id} to end",
    )
    return _run(dev, run_id)


def _ready_workers(dev: DagsterDev) -> list[psutil.Process]:
    """The warm workers in `dagster dev`'s process group that have attached to the warm
    Spark (each attached process has a file named by its pid in the warm Spark's folder)."""
    group = os.getpgid(dev.pid)
    attached = {
        int(entry.name.split("-")[0])
        for entry in Path(os.environ["PARTLAKE_SPARK_WARM_DIR"]).glob("*/clients/*")
    }
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "dagster_partlake.orchestration.warm" not in cmdline:
            continue
        try:
            if os.getpgid(proc.pid) == group and proc.pid in attached:
                found.append(proc)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return found


def _event_types(dev: DagsterDev, run_id: str) -> list[str]:
    events = dev.graphql(EVENTS, runId=run_id)["logsForRun"]["events"]
    return [e["__typename"] for e in events]


@covers("MonitoredRunLauncher(warm_workers=)")
def test_runs_are_handed_to_warm_workers(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    module = code / "warm_numbers.py"
    module.write_text(CODE.replace("{version}", "1"))
    home = tmp_path / "dagster_home"
    home.mkdir()
    config = (REPO_ROOT / "scripts" / "dagster.yaml").read_text()
    config = config.replace(
        "  class: MonitoredRunLauncher\n",
        "  class: MonitoredRunLauncher\n  config:\n    warm_workers: 1\n",
    )
    (home / "dagster.yaml").write_text(config)
    lake = tmp_path / "lake"
    env = subprocess_env(
        DAGSTER_HOME=str(home),
        PARTLAKE_HOME=str(lake),
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=os.pathsep.join([str(code), str(REPO_ROOT)]),
    )
    log = tmp_path / "dagster-dev.log"
    with dagster_dev(env, log, modules=["warm_numbers"]) as dev:
        # The first run: no worker is warm yet; it gets a worker of its own, and the pool
        # starts one for the next.
        cold = _launch(dev, "numbers", "2024-01-01")
        assert _ended(dev, cold)["status"] == "SUCCESS"
        assert WARM_TAG not in _run(dev, cold)["tags"]
        assert WORKER_TAG in _run(dev, cold)["tags"]
        wait_until(lambda: _ready_workers(dev), timeout=240, interval=1, what="a warm worker")
        time.sleep(3)  # attached to the warm Spark and its ready line read

        warm = _launch(dev, "numbers", "2024-01-02")
        run = _ended(dev, warm)
        assert run["status"] == "SUCCESS", run
        pid = int(run["tags"][WARM_TAG])
        # Shown as any run: the same kinds of events, in Dagster's event log.
        assert set(_event_types(dev, warm)) >= {
            "RunStartingEvent", "RunStartEvent", "ExecutionStepStartEvent",
            "MaterializationEvent", "RunSuccessEvent",
        }  # fmt: skip
        labels = {
            entry["label"]
            for e in dev.graphql(EVENTS, runId=warm)["logsForRun"]["events"]
            if e["__typename"] == "MaterializationEvent"
            for entry in e["metadataEntries"]
        }
        assert "partlake/spark_start_seconds" not in labels, "the warm run started a JVM"
        # One run per worker: it has exited.
        wait_until(lambda: not psutil.pid_exists(pid), timeout=60, what="the worker to exit")
        assert table_rows(lake / "warehouse" / "numbers", ["date", "n"])[-1] == ("2024-01-02", 19)

        # Cancelled through Dagster's termination (the UI's Terminate button).
        wait_until(lambda: _ready_workers(dev), timeout=240, interval=1, what="a warm worker")
        time.sleep(3)
        waiting = _launch(dev, "waits")
        wait_until(lambda: _run(dev, waiting)["status"] == "STARTED", timeout=120, what="STARTED")
        assert WARM_TAG in _run(dev, waiting)["tags"]
        assert dev.graphql(TERMINATE, runId=waiting)["terminateRun"]["__typename"] == (
            "TerminateRunSuccess"
        )
        assert _ended(dev, waiting, timeout=120)["status"] == "CANCELED"

        # The code changes on disk: the worker that loaded the old code runs nothing.
        wait_until(lambda: _ready_workers(dev), timeout=240, interval=1, what="a warm worker")
        time.sleep(3)
        stale = {p.pid for p in _ready_workers(dev)}
        module.write_text(CODE.replace("{version}", "2"))
        changed = _launch(dev, "numbers", "2024-01-03")
        run = _ended(dev, changed)
        assert run["status"] == "SUCCESS", run
        assert int(run["tags"].get(WARM_TAG, 0)) not in stale
        assert ("2024-01-03", "2") in table_rows(
            lake / "warehouse" / "numbers", ["date", "version"]
        )
    shutil.rmtree(lake, ignore_errors=True)
