"""A Kafka topic as a source, as a user declares it: a streaming asset reads the topic with Spark's
Kafka source and commits each micro-batch once, its table partitioned by the events' date, so the
daily asset reading it goes stale exactly for the days that received messages; a run with
nothing new commits nothing; a continuous stream run stops on SIGTERM after its batch in flight.
Counted message by message against a real broker (KRaft) on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from tests.servers import KafkaBroker, wait_until
from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli, pytest.mark.kafka]

MODULE = "shop_clicks"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame, functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    KafkaTopic,
    SparkResource,
    partlake_asset_checks,
    partlake_source,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-10")
clicks = partlake_source(
    "clicks",
    kafka=KafkaTopic(
        "clicks",
        bootstrap_servers="{servers}",
        options={"client.id": "shop-clicks"},
        options_env={"client.rack": "SHOP_RACK"},
        starting_offsets="earliest",
    ),
)
# Only what arrives after its first run.
live = partlake_source("live", kafka=KafkaTopic("live", starting_offsets="latest"))
EVENT = "id long, day string"


def _events(messages: DataFrame) -> DataFrame:
    event = F.from_json(F.col("value").cast("string"), EVENT).alias("e")
    return messages.select(event, "partition", "offset").select(
        "e.id", F.col("e.day").alias("date"), "partition", "offset"
    )


@dg.asset(partitions_def=days, metadata={"partlake/stream": {"mode": "available_now"}})
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
assets = [clicks, live, click_events, daily_clicks, live_events]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""


def _messages(ids: range, day: str) -> list[tuple[str, str]]:
    return [(str(i), json.dumps({"id": i, "day": day})) for i in ids]


@pytest.fixture(scope="module")
def shop(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The user's project over two new topics, 150 messages over two days sent, run once."""
    for topic in ("clicks", "live"):
        kafka.create_topic(topic, partitions=2)
    project = UserProject(
        tmp_path_factory.mktemp("kafka"),
        {"PARTLAKE_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "SHOP_RACK": "rack-1"},
    )
    project.write(MODULE, CODE, servers=kafka.bootstrap_servers)
    kafka.produce(
        "clicks", _messages(range(100), "2024-01-01") + _messages(range(100, 150), "2024-01-02")
    )
    plan = project.ok("partlake", "plan", "-m", MODULE, "--select", "click_events,daily_clicks")
    run = project.ok("partlake", "run", "-m", MODULE, "--select", "click_events,daily_clicks")
    return {"project": project, "kafka": kafka, "plan": plan, "run": run}


def _ids(project: UserProject, table: str) -> list[int]:
    return [row[0] for row in table_rows(project.lake / "warehouse" / table, ["id"])]


@covers(
    "partlake_source(kafka=)",
    "setting partlake/kafka",
    "KafkaTopic",
    "KafkaTopic(topic=)",
    "KafkaTopic(bootstrap_servers=)",
    "KafkaTopic(options=)",
    "KafkaTopic(options_env=)",
    "KafkaTopic(starting_offsets=)",
)
def test_each_message_is_committed_once_into_its_days_partition(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    assert "click_events: 1 stale (missing 1)" in shop["plan"], shop["plan"]
    assert "then, where its new rows land, maybe stale: daily_clicks" in shop["plan"]
    lines = outcome_lines(shop["run"])
    assert lines[0].startswith("[OK] click_events - (missing, 150 rows,"), lines
    assert len(lines) == 3, lines
    assert _ids(project, "click_events") == list(range(150))
    assert table_rows(project.lake / "warehouse" / "daily_clicks", ["date", "count"]) == [
        ("2024-01-01", 100),
        ("2024-01-02", 50),
    ]
    project.assert_fresh(MODULE)


def test_new_messages_make_stale_exactly_the_days_they_land_in(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    kafka: KafkaBroker = shop["kafka"]
    kafka.produce("clicks", _messages(range(150, 170), "2024-01-03"))
    select = ("--select", "click_events,daily_clicks")
    plan = project.ok("partlake", "plan", "-m", MODULE, *select)
    assert "click_events: 1 stale (upstream_changed 1)" in plan, plan
    run = project.ok("partlake", "run", "-m", MODULE, *select)
    lines = outcome_lines(run)
    assert lines == sorted(lines) and len(lines) == 2, run
    assert lines[0].startswith("[OK] click_events - (upstream_changed, 20 rows,"), lines
    assert lines[1].startswith("[OK] daily_clicks 2024-01-03 (missing, 1 rows,"), lines
    assert _ids(project, "click_events") == list(range(170))
    project.assert_fresh(MODULE)


def test_a_run_with_nothing_new_commits_nothing(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    table = str(project.lake / "warehouse" / "click_events")
    version = DeltaTable(table).version()
    # A run nothing asked for (a partitioned stream runs without a partition key, as the
    # sensor and `partlake run` start it): a user's script starting one.
    project.ok(
        "python",
        "-c",
        "import dagster as dg, shop_clicks as m; "
        "job = m.defs.resolve_implicit_global_asset_job_def(); "
        "result = job.execute_in_process(instance=dg.DagsterInstance.get(), "
        "asset_selection=[dg.AssetKey('click_events')]); assert result.success",
    )
    assert DeltaTable(table).version() == version
    assert _ids(project, "click_events") == list(range(170))


@pytest.mark.extended  # CI: continuous streams in tests/test_stream_cancel.py
def test_a_continuous_stream_stops_after_its_batch_and_goes_on_from_there(
    shop: dict[str, Any], tmp_path: Path
) -> None:
    project: UserProject = shop["project"]
    kafka: KafkaBroker = shop["kafka"]
    kafka.produce("live", _messages(range(10), "2024-01-01"))  # before: never read (latest)

    def run_until(count: int) -> None:
        log = tmp_path / f"live-{count}.log"
        proc = project.start(
            "dagster", "asset", "materialize", "-m", MODULE, "--select", "live_events", log=log
        )
        try:
            # The query starts at the topic's end: send once it is listening.
            wait_until(
                lambda: "streaming live_events (continuous)" in log.read_text(errors="replace"),
                timeout=180,
                interval=0.5,
                what="the continuous stream to start",
            )
            time.sleep(2)
            first = 10 + (count - 30) if count > 30 else 10
            kafka.produce("live", _messages(range(first, first + 30), "2024-01-02"))
            wait_until(
                lambda: len(_live_ids(project)) >= count,
                timeout=180,
                interval=1,
                what=f"{count} rows in live_events",
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) is not None
        finally:
            if proc.poll() is None:
                proc.kill()

    run_until(30)
    assert _live_ids(project) == list(range(10, 40))
    run_until(60)  # goes on from its checkpoint: nothing lost, nothing twice
    assert _live_ids(project) == list(range(10, 70))


def _live_ids(project: UserProject) -> list[int]:
    table = project.lake / "warehouse" / "live_events"
    if not (table / "_delta_log").is_dir():
        return []
    return [row[0] for row in table_rows(table, ["id"])]
