"""Fault drills of the Kafka source (`make test-faults`, not in `make test`): a stream run killed
between its micro-batch's write and its commit, twice; and the broker stopped and started under a
continuous stream. Counted message by message: every message in the table exactly once, and the
daily asset reading it right, after the stream goes on.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dagster_partlake.faults import DIR_ENV, POINTS_FILE
from tests.servers import KafkaBroker, kafka_broker, wait_until
from tests.surface.project import UserProject, table_rows

pytestmark = [pytest.mark.faults, pytest.mark.spark, pytest.mark.dagster_cli, pytest.mark.kafka]

MODULE = "drill_clicks"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame, functions as F

from dagster_partlake import DeltaPartitionIOManager, KafkaTopic, SparkResource, partlake_source

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-10")
clicks = partlake_source("clicks", kafka=KafkaTopic("clicks"))
live = partlake_source("live", kafka=KafkaTopic("live"))
EVENT = "id long, day string"


def _events(messages: DataFrame) -> DataFrame:
    event = F.from_json(F.col("value").cast("string"), EVENT).alias("e")
    return messages.select(event).select("e.id", F.col("e.day").alias("date"))


STREAM = {"options": {"maxOffsetsPerTrigger": "40"}}  # micro-batches of 40 messages


@dg.asset(partitions_def=days, metadata={"partlake/stream": STREAM})
def click_events(clicks: DataFrame) -> DataFrame:
    return _events(clicks)


@dg.asset(partitions_def=days, backfill_policy=dg.BackfillPolicy.single_run())
def daily_clicks(click_events: DataFrame) -> DataFrame:
    return click_events.groupBy("date").count()


@dg.asset(
    metadata={
        "partlake/stream": {"mode": "continuous", "trigger_interval": "1 second"},
        "partlake/partition_by": ["date"],
    }
)
def live_events(live: DataFrame) -> DataFrame:
    return _events(live)


spark = SparkResource(master="local[2]")
defs = dg.Definitions(
    assets=[clicks, live, click_events, daily_clicks, live_events],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""


def _messages(ids: range, day: str) -> list[tuple[str, str]]:
    return [(str(i), json.dumps({"id": i, "day": day})) for i in ids]


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[tuple[UserProject, KafkaBroker, Path]]:
    """A broker of its own (the drills stop it), the user's project, and the fault folder."""
    with kafka_broker(tmp_path / "broker") as broker:
        folder = tmp_path / "faults"
        folder.mkdir()
        project = UserProject(
            tmp_path / "project",
            {"PARTLAKE_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers, DIR_ENV: str(folder)},
        )
        project.write(MODULE, CODE)
        for topic in ("clicks", "live"):
            broker.create_topic(topic, partitions=2)
        yield project, broker, folder


def _ids(project: UserProject, table: str) -> list[int]:
    where = project.lake / "warehouse" / table
    if not (where / "_delta_log").is_dir():
        return []
    return [row[0] for row in table_rows(where, ["id"])]


def _kill_group(proc: Any) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its JVM, without a goodbye
    proc.wait(timeout=60)


def test_a_stream_run_killed_between_its_write_and_its_commit_twice(
    drill: tuple[UserProject, KafkaBroker, Path], tmp_path: Path
) -> None:
    project, broker, folder = drill
    broker.produce(
        "clicks", _messages(range(100), "2024-01-01") + _messages(range(100, 160), "2024-01-02")
    )
    select = ("--select", "click_events,daily_clicks")
    for attempt in (1, 2):
        for old in [*folder.glob("*.paused"), *folder.glob("*.release")]:
            old.unlink()
        # The run's first micro-batch (40 messages) is staged, not committed: killed there.
        (folder / POINTS_FILE).write_text("stream_batch:1")
        log = tmp_path / f"run-{attempt}.log"
        proc = project.start("partlake", "run", "-m", MODULE, *select, log=log)
        try:
            marker = folder / "stream_batch.1.paused"
            wait_until(marker.exists, timeout=300, interval=0.5, what="the stream's batch")
        finally:
            _kill_group(proc)
        committed = _ids(project, "click_events")
        assert committed == sorted(set(committed)), "a message committed twice"
    (folder / POINTS_FILE).unlink()
    project.ok("partlake", "run", "-m", MODULE, *select)
    assert _ids(project, "click_events") == list(range(160))
    assert table_rows(project.lake / "warehouse" / "daily_clicks", ["date", "count"]) == [
        ("2024-01-01", 100),
        ("2024-01-02", 60),
    ]
    project.assert_fresh(MODULE)


def test_the_broker_stopped_and_started_under_a_continuous_stream(
    drill: tuple[UserProject, KafkaBroker, Path], tmp_path: Path
) -> None:
    project, broker, _folder = drill
    broker.produce("live", _messages(range(50), "2024-01-01"))

    def start(name: str) -> Any:
        log = tmp_path / f"{name}.log"
        proc = project.start(
            "dagster", "asset", "materialize", "-m", MODULE, "--select", "live_events", log=log
        )
        return proc

    proc = start("first")
    try:
        wait_until(
            lambda: len(_ids(project, "live_events")) >= 50, timeout=240, interval=1, what="50 rows"
        )
        broker.stop()
        time.sleep(10)  # the stream's consumer finds no broker
        broker.start()
        broker.produce("live", _messages(range(50, 120), "2024-01-02"))
        # The run survives the outage, or fails after Spark's timeout: either way a run of the
        # stream goes on from its checkpoint.
        deadline = time.monotonic() + 240
        while len(_ids(project, "live_events")) < 120 and time.monotonic() < deadline:
            if proc.poll() is not None:
                proc = start("again")
            time.sleep(1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except Exception:  # noqa: BLE001 - a stuck run is killed, the check below judges
                _kill_group(proc)
    assert _ids(project, "live_events") == list(range(120))
