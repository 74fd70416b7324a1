"""The warm Spark as a user meets it: a code location with `SparkResource(master="local[2]",
warm_idle_seconds=30)` (warm is the default) run by `dagster asset materialize`, each run its own
process. The first run starts the warm Spark, the second attaches to the same JVM, and nothing
the first leaves behind reaches the second: its SQL settings, temporary views, cached data,
registered functions, the Python state of its modules in the run's process and in Spark's
Python workers. `partlake spark status` shows the warm Spark (processes, idle time, memory,
log) and `partlake spark stop` stops it; the next run starts another; after that one is killed,
the next run starts another again and says so in one line; left without a run, it stops itself.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.surface.options import covers
from tests.surface.project import UserProject, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_warm"
CODE = """
import json

import dagster as dg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

import shop_state
from dagster_partlake import DeltaPartitionIOManager, SparkResource

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")


def bump(n):
    # Runs in Spark's Python workers: state a worker would carry to a later task.
    shop_state.worker_calls += 1
    return shop_state.worker_calls


@dg.asset(partitions_def=days, metadata={"partition_expr": "date"})
def probe(context: dg.AssetExecutionContext, spark: SparkResource) -> DataFrame:
    session = spark.spark_session
    own = SparkSession.builder.getOrCreate()  # a habit of many: the same session
    seen = {
        "same_session": own is session,
        "app_id": session.sparkContext.applicationId,
        "flag": session.conf.get("spark.sql.shop.flag", "unset"),
        "views": sorted(t.name for t in session.catalog.listTables() if t.isTemporary),
        "function": session.catalog.functionExists("shout"),
        "landing_cached": session.read.parquet(shop_state.LANDING).storageLevel.useMemory,
        "landing_rows": session.read.parquet(shop_state.LANDING).count(),
        "module_runs": shop_state.runs,
        "worker_calls": session.range(1).select(F.udf(bump, LongType())("id")).first()[0],
    }
    # What this run leaves behind.
    session.conf.set("spark.sql.shop.flag", context.partition_key)
    session.range(3).createOrReplaceTempView("leftover")
    session.udf.register("shout", lambda s: s.upper())
    session.read.parquet(shop_state.LANDING).cache().count()
    shop_state.runs += 1
    rows = [(context.partition_key, json.dumps(seen))]
    return session.createDataFrame(rows, "date string, seen string")


spark = SparkResource(master="local[2]", warm_idle_seconds=30)
defs = dg.Definitions(
    assets=[probe],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""
STATE = """
LANDING = "{landing}"
runs = 0
worker_calls = 0
"""


def _land(folder: Path, name: str, rows: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"n": list(range(rows))}), folder / name)


def _materialize(project: UserProject, day: str) -> Any:
    return project.run(
        "dagster", "asset", "materialize", "-m", MODULE, "--select", "probe", "--partition", day
    )


def _seen(project: UserProject, day: str) -> dict[str, Any]:
    rows = dict(table_rows(project.lake / "warehouse" / "probe", ["date", "seen"]))
    return json.loads(rows[day])


def _status(project: UserProject) -> Any:
    return project.run("partlake", "spark", "status")


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("warm")
    # A folder of its own: the runs here start, stop and kill their warm Sparks.
    project = UserProject(root, extra_env={"PARTLAKE_SPARK_WARM_DIR": str(root / "warm")})
    landing = root / "landing"
    _land(landing, "a.parquet", 5)
    project.write(MODULE, CODE)
    project.write("shop_state", STATE, landing=landing)
    runs = [_materialize(project, "2024-01-01")]
    # Between the runs, another system adds rows to what the first run cached.
    _land(landing, "b.parquet", 2)
    runs.append(_materialize(project, "2024-01-02"))
    status = _status(project)
    stopped = project.run("partlake", "spark", "stop", "--warm")
    after_stop = _status(project)
    yield {
        "project": project,
        "runs": runs,
        "status": status,
        "stopped": stopped,
        "after_stop": after_stop,
        "root": root,
    }
    project.run("partlake", "spark", "stop", "--warm")


@covers("SparkResource(warm=)")
def test_runs_share_one_warm_spark_and_nothing_of_a_run_reaches_the_next(
    shop: dict[str, Any],
) -> None:
    project: UserProject = shop["project"]
    for done in shop["runs"]:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first, second = _seen(project, "2024-01-01"), _seen(project, "2024-01-02")
    # Started by the first run, quietly (its own log says so); the second attached to it.
    assert "warm Spark" not in shop["runs"][0].stderr + shop["runs"][1].stderr
    assert first["app_id"] == second["app_id"]  # one JVM, one Spark application
    assert first["same_session"] and second["same_session"]
    for seen in (first, second):
        assert seen["flag"] == "unset"  # SQL settings
        assert seen["views"] == []  # temporary views
        assert seen["function"] is False  # registered functions
        assert seen["landing_cached"] is False  # cached data
        assert seen["module_runs"] == 0  # the run process's module state
        assert seen["worker_calls"] == 1  # a Python worker's module state
    assert (first["landing_rows"], second["landing_rows"]) == (5, 7)


def test_status_shows_the_warm_spark_and_stop_stops_it(shop: dict[str, Any]) -> None:
    status = shop["status"]
    assert status.returncode == 0, status.stdout + status.stderr
    line = next(x for x in status.stdout.splitlines() if x.startswith("warm Spark: running"))
    for part in ("local[2]", "process(es) attached", "of 30 s before it stops", "MiB", "spark.log"):
        assert part in line, line
    assert "Spark Connect server: not running" in status.stdout
    assert "warm Spark stopped: pid" in shop["stopped"].stdout, shop["stopped"].stdout
    after = shop["after_stop"]
    assert after.returncode == 3 and "warm Spark: not running" in after.stdout, after.stdout


@covers("SparkResource(warm_idle_seconds=)")
def test_a_killed_warm_spark_is_started_again_and_an_idle_one_stops(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    started = _materialize(project, "2024-01-03")
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
    assert "is gone" not in started.stderr  # the stopped one was not taken for dead
    killed_app = _seen(project, "2024-01-03")["app_id"]
    assert killed_app != _seen(project, "2024-01-01")["app_id"]  # a new one, as stopped
    state = json.loads(next((shop["root"] / "warm").glob("*/state.json")).read_text())
    for pid in (state["jvm_pid"], state["pid"]):
        os.kill(pid, signal.SIGKILL)
    again = _materialize(project, "2024-01-03")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    said = [x for x in again.stderr.splitlines() if "is gone; starting a new one" in x]
    assert len(said) == 1 and f"pid {state['pid']}" in said[0], again.stderr[-3000:]
    assert _seen(project, "2024-01-03")["app_id"] != killed_app
    # Left without a run for warm_idle_seconds, it stops itself.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if _status(project).returncode == 3:
            break
        time.sleep(2)
    assert "warm Spark: not running" in _status(project).stdout
