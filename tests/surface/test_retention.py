"""Partition retention through a user's own code location and the real commands.

The user keeps the last 3 days of `raw_events` (archived before removal, the days before the
newest one compacted into one file each), `user_counts` forgets with it (`cascade`) and
`daily_counts` keeps its history. On local disk: `partlake plan` shows the rules and what they
retire, `partlake maintain --retention` lists what it would remove (nothing committed), then
`--apply` archives and removes, and nothing is rebuilt or made stale; a new write into the
retired range is a warning; a rule that retires everything is refused at load. On the S3
server: the maintenance job under `dagster job execute` does the same. A fault drill kills the
retention between its archive commit and its removal, twice; the next run finishes it without
archiving twice.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.servers import S3Server
from tests.surface.options import covers
from tests.surface.project import UserProject

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_retention"
CODE = """
import os

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    build_maintenance_job,
    partlake_asset_checks,
    partlake_source,
)

options = {options}
days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-09")
one_run = dg.BackfillPolicy.single_run()
events = partlake_source("events", partitions_def=days)


@dg.asset(
    partitions_def=days,
    backfill_policy=one_run,
    metadata={
        "partlake/retention": {
            "keep_last": {keep_last},
            "archive": "archive/raw_events",
            "compact_after": 1,
        }
    },
)
def raw_events(events: DataFrame) -> DataFrame:
    return events.repartition(3)  # several files per day, for the archive compaction


@dg.asset(partitions_def=days, backfill_policy=one_run)
def daily_counts(raw_events: DataFrame) -> DataFrame:
    return raw_events.groupBy("date").agg(F.count("*").alias("n"))


@dg.asset(
    partitions_def=days,
    backfill_policy=one_run,
    metadata={"partlake/retention": {"cascade": True}},
)
def user_counts(raw_events: DataFrame) -> DataFrame:
    return raw_events.groupBy("date", "user").agg(F.count("*").alias("n"))


spark = SparkResource(master="local[1]", storage_options=options)
assets = [events, raw_events, daily_counts, user_counts]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets=assets),
    jobs=[build_maintenance_job()],
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(
            spark=spark, root={root}, storage_options=options
        ),
    },
    executor=dg.in_process_executor,
)
"""
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]
RETIRED, KEPT = DAYS[:2], DAYS[2:]
EVENTS = [{"date": d, "user": f"u{i % 2}", "n": i} for d in DAYS for i in range(6)]


def _lake(project: UserProject, s3: S3Server | None, prefix: str) -> tuple[str, dict[str, str]]:
    if s3 is None:
        return str(project.lake), {}
    return s3.uri(f"{prefix}/lake"), s3.storage_options()


def _setup(
    tmp_path: Path, s3: S3Server | None = None, *, keep_last: int = 3
) -> tuple[UserProject, str, dict[str, str]]:
    """The user's project with the source written and a first `partlake run`."""
    extra = {}
    if s3 is not None:
        extra = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}
    project = UserProject(tmp_path, extra_env=extra)
    lake, options = _lake(project, s3, f"retention-{uuid.uuid4().hex[:8]}")
    shown = {k: v for k, v in options.items() if not k.startswith("AWS_SECRET")}
    project.write(
        MODULE,
        CODE,
        options=repr(shown),
        root=repr(lake) if s3 is not None else "None",
        keep_last=keep_last,
    )
    write_deltalake(
        f"{lake}/warehouse/events",
        pa.Table.from_pylist(EVENTS),
        partition_by=["date"],
        storage_options=options or None,
    )
    project.ok("partlake", "run", "-m", MODULE)
    return project, lake, options


def _rows(where: str, options: dict[str, str]) -> dict[str, int]:
    """Rows per date of the Delta table at `where`."""
    table = DeltaTable(where, storage_options=options or None).to_pyarrow_table()
    found: dict[str, int] = {}
    for day in table.column("date").to_pylist():
        found[str(day)] = found.get(str(day), 0) + 1
    return found


def _files(where: str, options: dict[str, str]) -> dict[str, int]:
    """Live files per date."""
    actions = DeltaTable(where, storage_options=options or None).get_add_actions(flatten=True)
    days = pa.table(actions).column("partition.date").to_pylist()
    return {d: days.count(d) for d in sorted(set(days))}


def _stale(project: UserProject) -> list[dict[str, Any]]:
    items = json.loads(project.ok("partlake", "plan", "-m", MODULE, "--json"))
    return [i for i in items if "reason" in i]


@covers("setting partlake/retention")
def test_retention_on_disk_plan_maintain_and_a_write_into_the_retired_range(
    tmp_path: Path,
) -> None:
    project, lake, options = _setup(tmp_path)
    raw = f"{lake}/warehouse/raw_events"
    assert _rows(raw, options) == dict.fromkeys(DAYS, 6)
    assert all(n > 1 for n in _files(raw, options).values())

    # The plan shows each rule and what it retires; nothing is stale.
    text = project.ok("partlake", "plan", "-m", MODULE)
    assert "Everything is fresh" in text, text
    assert (
        "raw_events: keep the last 3 date partition(s); archive to archive/raw_events; compact "
        "all but the last 1 date: retires date before 2024-01-03T00:00:00+00:00; 2 retired "
        "partition(s) hold data: 2024-01-01, 2024-01-02 (partlake maintain --retention removes "
        "them)"
    ) in text, text
    assert (
        "user_counts: cascade from upstream retirements: retires what reads raw_events "
        "retired (date before 2024-01-03T00:00:00+00:00); 2 retired partition(s) hold data"
    ) in text
    listed = json.loads(project.ok("partlake", "plan", "-m", MODULE, "--json"))
    rules = {i["asset"]: i for i in listed if "retention" in i}
    assert rules["raw_events"]["retired_with_data"] == RETIRED
    assert rules["user_counts"]["retired_with_data"] == RETIRED
    assert not [i for i in listed if "reason" in i]

    # A dry run lists the partitions and rows and commits nothing.
    version = DeltaTable(raw).version()
    dry = project.ok("partlake", "maintain", "-m", MODULE, "--retention")
    assert (
        "raw_events: would remove 2 retired partition(s), 12 row(s) (date before "
        "2024-01-03T00:00:00+00:00), after a copy to"
    ) in dry, dry
    assert "2024-01-01 (6 rows), 2024-01-02 (6 rows)" in dry
    assert "would compact 2 partition(s) older than the last 1" in dry
    assert DeltaTable(raw).version() == version
    assert not os.path.exists(f"{lake}/archive/raw_events")

    # Applied: archived, then removed in one commit with dataChange true; old days compacted.
    done = project.ok("partlake", "maintain", "-m", MODULE, "--retention", "--apply")
    assert "raw_events: removed 2 retired partition(s), 12 row(s)" in done, done
    assert "user_counts: removed 2 retired partition(s)" in done, done
    assert _rows(raw, options) == dict.fromkeys(KEPT, 6)
    assert _rows(f"{lake}/archive/raw_events", options) == dict.fromkeys(RETIRED, 6)
    assert set(_rows(f"{lake}/warehouse/user_counts", options)) == set(KEPT)
    assert set(_rows(f"{lake}/warehouse/daily_counts", options)) == set(DAYS)  # no cascade
    files = _files(raw, options)
    assert files["2024-01-03"] == files["2024-01-04"] == 1 and files["2024-01-05"] > 1
    removal = [
        c
        for c in DeltaTable(raw).history()
        if c.get("partlake_maintenance", {}).get("operation") == "retention"
    ]
    assert len(removal) == 1 and removal[0]["partlake_maintenance"]["partitions"] == RETIRED
    # The UI (the project's Dagster instance): the removed days' partlake_fresh passed, "retired".
    assert set(_checks(project, "raw_events")) == set(RETIRED)

    # Nothing is rebuilt, nothing reading the removed days is stale.
    assert _stale(project) == []
    again = project.ok("partlake", "maintain", "-m", MODULE, "--retention")
    assert "raw_events: no retired partition holds data" in again, again

    # The source system writes a retired day again: a warning, not a rebuild.
    write_deltalake(
        f"{lake}/warehouse/events",
        pa.Table.from_pylist([r for r in EVENTS if r["date"] == "2024-01-01"]),
        partition_by=["date"],
        mode="overwrite",
        predicate="date = '2024-01-01'",
    )
    text = project.ok("partlake", "plan", "-m", MODULE)
    assert "Everything is fresh" in text, text
    assert "Warning: data written into a retired range, not rebuilt: events[2024-01-01]" in text
    assert _stale(project) == []

    # A rule that would retire every partition is refused when the code location loads.
    project.write(MODULE, CODE, options="{}", root="None", keep_last=0)
    refused = project.run("partlake", "plan", "-m", MODULE)
    assert refused.returncode == 1
    assert (
        "Error: partlake/retention of asset raw_events has keep_last 0, a window that would "
        "retire every partition"
    ) in refused.stderr, refused.stderr


@pytest.mark.s3
@covers("setting partlake/retention", "MaintenanceConfig(retention_dry_run=)")
def test_retention_by_the_maintenance_job_under_dagster_on_s3(tmp_path: Path, s3: S3Server) -> None:
    project, lake, options = _setup(tmp_path, s3)
    job = ("dagster", "job", "execute", "-m", MODULE, "-j", "partlake_maintenance")
    dry = tmp_path / "dry.yaml"
    dry.write_text(
        "ops:\n  partlake_maintenance_tables:\n    config:\n"
        "      operations: [retention]\n      retention_dry_run: true\n"
    )
    project.ok(*job, "-c", str(dry))
    assert _rows(f"{lake}/warehouse/raw_events", options) == dict.fromkeys(DAYS, 6)
    project.ok(*job)
    assert _rows(f"{lake}/warehouse/raw_events", options) == dict.fromkeys(KEPT, 6)
    assert _rows(f"{lake}/archive/raw_events", options) == dict.fromkeys(RETIRED, 6)
    assert set(_rows(f"{lake}/warehouse/user_counts", options)) == set(KEPT)
    assert set(_rows(f"{lake}/warehouse/daily_counts", options)) == set(DAYS)
    assert _stale(project) == []
    # The UI: the removed days' partlake_fresh results passed, saying "retired".
    assert _checks(project, "raw_events") == {
        day: "retired (date before 2024-01-03T00:00:00+00:00): never rebuilt" for day in RETIRED
    }
    assert set(_checks(project, "user_counts")) == set(RETIRED)


def _checks(project: UserProject, asset: str) -> dict[str, str]:
    """The passed partlake_fresh results of `asset` that say "retired", by partition."""
    from dagster import AssetCheckKey, AssetKey, DagsterInstance

    with DagsterInstance.from_config(str(project.dagster_home)) as instance:
        records = instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey(asset), "partlake_fresh"), limit=200
        )
    found = {}
    for record in records:
        evaluation = record.event.dagster_event.event_specific_data if record.event else None
        described = getattr(evaluation, "description", None) or ""
        if evaluation is not None and evaluation.passed and described.startswith("retired"):
            found[evaluation.partition] = described
    return found


@pytest.mark.faults  # a fault drill: `make test-faults`
def test_retention_killed_between_its_archive_and_its_removal_twice(tmp_path: Path) -> None:
    project, lake, options = _setup(tmp_path)
    raw, archive = f"{lake}/warehouse/raw_events", f"{lake}/archive/raw_events"
    drill = tmp_path / "drill"
    drill.mkdir()
    project.extra_env["PARTLAKE_FAULT_DIR"] = str(drill)
    for attempt in (1, 2):
        for old in drill.glob("*.paused"):
            old.unlink()
        (drill / "points").write_text("retention_archived@raw_events:1")
        log = tmp_path / f"maintain-{attempt}.log"
        proc = project.start(
            "partlake", "maintain", "-m", MODULE, "--retention", "--apply", log=log
        )
        paused = drill / "retention_archived.1.paused"
        deadline = time.monotonic() + 300
        while not paused.exists():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        # Both readable: the archive holds the retired days, the table still has them too.
        assert _rows(archive, options) == dict.fromkeys(RETIRED, 6)
        assert _rows(raw, options) == dict.fromkeys(DAYS, 6)
        assert len(DeltaTable(archive).history()) == 2  # created, then one copy: never twice
    (drill / "points").write_text("")
    done = project.ok("partlake", "maintain", "-m", MODULE, "--retention", "--apply")
    assert "0 file(s) copied" in done and "already there" in done, done
    assert _rows(raw, options) == dict.fromkeys(KEPT, 6)
    assert _rows(archive, options) == dict.fromkeys(RETIRED, 6)
    assert _stale(project) == []
