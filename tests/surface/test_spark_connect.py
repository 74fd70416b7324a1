"""`SparkResource(remote=...)` as a user sets it up: a Spark Connect server started with
`partlake spark start`, the code location pointing at it through an environment variable of its
own. Before the server runs, the same code location pointed at a closed port: `partlake run`
says once that it waits, gives up after about `connect_wait_seconds` naming the server, and
commits nothing; Ctrl-C ends `partlake run` and `dagster asset materialize` while they wait.
Then `partlake run` on the server writes the rows and the plan is empty.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.servers import free_port
from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_connect"
CODE = """
import os

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
spark = SparkResource(
    remote=os.environ["SHOP_SPARK_REMOTE"],
    connect_wait_seconds=int(os.environ.get("SHOP_CONNECT_WAIT", "60")),
)
orders = partlake_source("orders", partitions_def=days)


@dg.asset(partitions_def=days, backfill_policy=dg.BackfillPolicy.single_run())
def order_totals(orders: DataFrame) -> DataFrame:
    return orders.groupBy("date").agg(F.sum("amount").alias("amount"), F.count("*").alias("n"))


defs = dg.Definitions(
    assets=[orders, order_totals],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""
WAIT = 5  # connect_wait_seconds of the unreachable server
WAITING = "waiting for the Spark Connect server"


def _interrupted(project: UserProject, log: Path, *args: str) -> tuple[int, float]:
    """Start a command, press Ctrl-C once it waits for the server: (exit code, seconds it took
    to end after the Ctrl-C)."""
    proc = project.start(*args, log=log)
    try:
        deadline = time.monotonic() + 120
        while WAITING not in log.read_text():
            assert proc.poll() is None, f"{args} ended before waiting: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{args} never waited: {log.read_text()[-3000:]}"
            time.sleep(0.2)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends Ctrl-C to its process group
        pressed = time.monotonic()
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = -1
        return code, time.monotonic() - pressed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("connect")
    project = UserProject(root)
    project.write(MODULE, CODE)
    orders = [{"date": d, "amount": a} for d in ("2024-01-01", "2024-01-02") for a in (1, 2, 3)]
    write_deltalake(
        str(project.lake / "warehouse" / "orders"),
        pa.Table.from_pylist(orders),
        partition_by=["date"],
    )
    closed = f"sc://127.0.0.1:{free_port()}"  # nothing listens there
    gone = UserProject(
        root, extra_env={"SHOP_SPARK_REMOTE": closed, "SHOP_CONNECT_WAIT": str(WAIT)}
    )
    started = time.monotonic()
    unreachable = gone.run("partlake", "run", "-m", MODULE)
    unreachable_seconds = time.monotonic() - started
    patient = UserProject(root, extra_env={"SHOP_SPARK_REMOTE": closed, "SHOP_CONNECT_WAIT": "600"})
    interrupted = {
        "partlake": _interrupted(patient, root / "run.log", "partlake", "run", "-m", MODULE),
        "dagster": _interrupted(
            patient, root / "materialize.log", "dagster", "asset", "materialize", "-m", MODULE,
            "--select", "order_totals", "--partition", "2024-01-01",
        ),
    }  # fmt: skip
    committed_before = (project.lake / "warehouse" / "order_totals").exists()
    port = free_port()
    project.ok(
        "partlake", "spark", "start", "--port", str(port), "--master", "local[2]",
        "--driver-memory", "1g", timeout=300,
    )  # fmt: skip
    try:
        live = UserProject(root, extra_env={"SHOP_SPARK_REMOTE": f"sc://127.0.0.1:{port}"})
        run = live.ok("partlake", "run", "-m", MODULE)
        live.assert_fresh(MODULE)
    finally:
        project.run("partlake", "spark", "stop", timeout=120)
    return {
        "project": project,
        "closed": closed,
        "unreachable": unreachable,
        "unreachable_seconds": unreachable_seconds,
        "interrupted": interrupted,
        "committed_before": committed_before,
        "run": run,
    }


@covers("SparkResource(remote=)")
def test_partlake_run_computes_on_the_spark_connect_server(shop: dict[str, Any]) -> None:
    lines = outcome_lines(shop["run"])
    assert len(lines) == 2 and all(line.startswith("[OK]") for line in lines), shop["run"]
    warehouse = shop["project"].lake / "warehouse"
    assert table_rows(warehouse / "order_totals", ["date", "amount", "n"]) == [
        ("2024-01-01", 6, 3),
        ("2024-01-02", 6, 3),
    ]


@covers("SparkResource(connect_wait_seconds=)")
def test_an_unreachable_server_is_waited_for_once_then_named(shop: dict[str, Any]) -> None:
    proc, closed = shop["unreachable"], shop["closed"]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    waits = [line for line in out.splitlines() if line.startswith("[WARN]")]
    assert waits == [
        f"[WARN] {WAITING} {closed}, which does not answer; each call is retried for up to {WAIT} s"
    ], out
    assert f"Error: the Spark Connect server {closed} did not answer" in out, out
    # Python, Dagster and the code location load in a few seconds; then the bounded wait.
    assert shop["unreachable_seconds"] < WAIT + 15, shop["unreachable_seconds"]
    assert not shop["committed_before"]


def test_ctrl_c_ends_a_command_waiting_for_the_server(shop: dict[str, Any]) -> None:
    code, seconds = shop["interrupted"]["partlake"]
    assert (code, seconds < 5) == (130, True), (code, seconds)
    code, seconds = shop["interrupted"]["dagster"]
    assert code != 0 and seconds < 5, (code, seconds)
