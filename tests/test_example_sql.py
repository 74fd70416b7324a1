"""The example's SQL models (group `sql`, definitions/sql/) the way users reach them: `dagster
asset materialize` on a SQL asset, `partlake run`, rows compared with the Python assets of the
same logic, `partlake sql render` printing the SQL the run executed, and after an out-of-band
rewrite of raw_events the sensor (validated as the daemon validates it) and `partlake run`
refreshing exactly the closure."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance
from dagster._core.instance.ref import InstanceRef

from dagster_partlake.storage.location import table_path
from definitions.ingest import write_partition
from tests.conftest import REPO_ROOT, cli_env, delta_rows, run_partlake, sensor_tick

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

DAGSTER = str(Path(sys.executable).parent / "dagster")
DAYS = ["2024-01-01", "2024-01-02"]
REGIONS = ["eu", "us"]
EVENTS = ["event_id", "user_id", "event_type", "amount", "event_ts", "date", "region"]
STATS = ["events", "purchases", "revenue", "days"]


def check_rows(lake: Path, *, rewritten: tuple[str, str] | None = None) -> None:
    """staging/events = clean_events, marts/monthly_region_summary = monthly_region_stats (the
    same logic in Python), marts/user_activity = each user's activity on their latest day (after
    `rewritten`, a (date, region) applied again, only its users: a merge keeps the others)."""
    events = delta_rows(table_path(str(lake), ["staging", "events"]), EVENTS)
    assert events == delta_rows(table_path(str(lake), ["clean_events"]), EVENTS)
    assert len(events) > 0
    columns = ["month", "region", *STATS]
    assert delta_rows(table_path(str(lake), ["marts", "monthly_region_summary"]), columns) == (
        delta_rows(table_path(str(lake), ["monthly_region_stats"]), columns)
    )
    expected = latest_activity(events)
    rows = delta_rows(table_path(str(lake), ["marts", "user_activity"]), ACTIVITY)
    if rewritten is None:
        assert rows == expected
        return
    date, region = dt.date.fromisoformat(rewritten[0]), rewritten[1]
    again = [e for e in expected if e[1] == region and e[2] == date]
    assert again and set(again) <= set(rows)
    assert {(r[0], r[1]) for r in rows} >= {(e[0], e[1]) for e in expected}


ACTIVITY = ["user_id", "region", "last_date", "events", "last_seen"]


def latest_activity(events: list[tuple]) -> list[tuple]:
    """marts/user_activity from scratch: each user's latest day per region, with its events
    and last event time (ACTIVITY's columns but revenue)."""
    latest: dict[tuple[int, str], dict] = {}
    for event in (dict(zip(EVENTS, row, strict=True)) for row in events):
        key = (event["user_id"], event["region"])
        day = latest.setdefault(key, {"date": event["date"], "rows": []})
        if event["date"] > day["date"]:
            latest[key] = day = {"date": event["date"], "rows": []}
        if event["date"] == day["date"]:
            day["rows"].append(event)
    return sorted(
        (user, region, day["date"], len(day["rows"]), max(e["event_ts"] for e in day["rows"]))
        for (user, region), day in latest.items()
    )


def outcome_lines(stdout: str) -> set[tuple[str, str]]:
    return set(re.findall(r"^\[OK\] (\S+) (\S+) \(", stdout, re.MULTILINE))


@pytest.mark.extended  # CI: tests/surface/test_sql.py, tests/test_sql_runs.py
def test_example_sql_models(tmp_path: Path, lake: Path, monkeypatch) -> None:
    env = cli_env(tmp_path, lake)
    for day in DAYS:
        for region in REGIONS:
            write_partition(dt.date.fromisoformat(day), region, 200, root=str(lake))

    # `dagster asset materialize` on a SQL asset, one partition.
    proc = subprocess.run(
        [DAGSTER, "asset", "materialize", "-m", "definitions", "--select", "staging/events"]
        + ["--partition", "2024-01-02|eu"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    instance = DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"]))
    [record] = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(["staging", "events"])), limit=5
    ).records
    metadata = record.asset_materialization.metadata
    assert record.asset_materialization.partition == "2024-01-02|eu"
    lineage = metadata["dagster/column_lineage"].value.deps_by_column
    assert [(d.asset_key, d.column_name) for d in lineage["amount"]] == [
        (AssetKey("raw_events"), "amount")
    ]
    assert [c.name for c in metadata["dagster/column_schema"].value.columns] == EVENTS

    # `partlake run`: everything else, the SQL models as their kinds say.
    proc = run_partlake("run", "-m", "definitions", env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = outcome_lines(proc.stdout)
    assert ("staging/events", "2024-01-01|eu") in done
    assert ("staging/events", "2024-01-02|eu") not in done  # materialized above
    assert {("marts/monthly_region_summary", f"2024-01|{r}") for r in REGIONS} <= done
    assert {("marts/user_activity", f"{d}|{r}") for d in DAYS for r in REGIONS} <= done
    check_rows(lake)

    # An upstream system rewrites raw_events 2024-01-02|eu: the closure is stale, nothing else.
    write_partition(dt.date(2024, 1, 2), "eu", 200, seed=1, root=str(lake))
    closure = {
        ("clean_events", "2024-01-02|eu"),
        ("staging/events", "2024-01-02|eu"),
        ("daily_region_stats", "2024-01-02|eu"),
        ("marts/user_activity", "2024-01-02|eu"),
        ("monthly_region_stats", "2024-01|eu"),
        ("marts/monthly_region_summary", "2024-01|eu"),
    }
    plan = run_partlake("plan", "-m", "definitions", "--json", env=env)
    assert {(i["asset"], i["partition"]) for i in json.loads(plan.stdout)} == closure
    # The sensor, validated as the daemon validates it, requests the ready runs of the closure.
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    monkeypatch.setenv("PARTLAKE_CACHE_DIR", env["PARTLAKE_CACHE_DIR"])
    from definitions import defs

    sensor = defs.get_sensor_def("partlake_invalidation")
    requests, _, _ = sensor_tick(defs, instance, sensor, None)
    requested = {
        (key.to_user_string(), request.partition_key)
        for request in requests
        for key in request.asset_selection
    }
    assert ("staging/events", "2024-01-02|eu") in requested
    assert requested <= closure
    # `partlake run` refreshes exactly the closure.
    proc = run_partlake("run", "-m", "definitions", env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcome_lines(proc.stdout) == closure
    check_rows(lake, rewritten=("2024-01-02", "eu"))

    # `partlake sql render` prints the SQL each run executed (recorded in its metadata): the
    # first run of the month covered both regions, the last one 2024-01|eu alone.
    records = instance.fetch_materializations(
        AssetRecordsFilter(
            asset_key=AssetKey(["marts", "monthly_region_summary"]), asset_partitions=["2024-01|eu"]
        ),
        limit=5,
    ).records
    assert len(records) == 2
    for record, partitions, days in (
        (records[0], ["2024-01|eu"], 31),
        (records[1], ["2024-01|eu", "2024-01|us"], 62),
    ):
        render = run_partlake(
            "sql", "render", "-m", "definitions", "marts/monthly_region_summary",
            *(a for p in partitions for a in ("--partition", p)), env=env,
        )  # fmt: skip
        assert render.returncode == 0, render.stderr
        lines = render.stdout.splitlines()
        views = [line for line in lines if line.startswith("--   ")]
        query = "\n".join(line for line in lines if not line.startswith("--"))
        assert len(views) == 1 and re.fullmatch(
            rf"--   daily_region_stats__v[0-9a-f]{{8}} = daily_region_stats: {days} "
            r"partition\(s\): 2024-01-01\|eu, 2024-01-02\|eu \.\.\. 2024-01-31\|(eu|us)",
            views[0],
        ), views
        ran = record.asset_materialization.metadata["partlake/sql"].value
        assert ran == f"```sql\n{query.strip()}\n```"
    plan = run_partlake("plan", "-m", "definitions", "--json", env=env)
    assert json.loads(plan.stdout) == []


@pytest.mark.extended  # CI: tests/test_kinds.py (in-order kinds, a range day by day in one run)
def test_a_merge_models_later_days_refresh_in_one_run(tmp_path: Path, lake: Path) -> None:
    """marts/user_activity (a merge, each day on top of the one before) over four days: an old
    day rewritten makes its three later days stale, and `partlake plan` and `partlake run` apply
    them in one run after the day itself, each day its own commit, in order; the table is then
    exactly what applying every day from scratch gives."""
    env = cli_env(tmp_path, lake)
    days = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
    for day in days:
        write_partition(dt.date.fromisoformat(day), "eu", 200, root=str(lake))
    select = ("--select", "staging/events,marts/user_activity")
    activity = table_path(str(lake), ["marts", "user_activity"])

    def runs() -> list[tuple[list[str], str | None, list[str] | None, list[int]]]:
        plan = run_partlake("plan", "-m", "definitions", *select, "--runs-json", env=env)
        assert plan.returncode == 0, plan.stderr
        return [
            (r["assets"], r["partition_key"], r["partition_range"], r["waits_for"])
            for r in json.loads(plan.stdout)
        ]

    def check() -> None:
        events = delta_rows(table_path(str(lake), ["staging", "events"]), EVENTS)
        assert delta_rows(activity, ACTIVITY) == latest_activity(events)

    # The first fill: the staging range, then all four days of the merge in one range run.
    assert runs() == [
        (["staging/events"], None, ["2024-01-01|eu", "2024-01-04|eu"], []),
        (["marts/user_activity"], None, ["2024-01-01|eu", "2024-01-04|eu"], [1]),
    ]
    proc = run_partlake("run", "-m", "definitions", *select, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {("marts/user_activity", f"{d}|eu") for d in days} <= outcome_lines(proc.stdout)
    check()

    write_partition(dt.date(2024, 1, 1), "eu", 200, seed=3, root=str(lake))
    assert runs() == [
        (["staging/events", "marts/user_activity"], "2024-01-01|eu", None, []),
        (["marts/user_activity"], None, ["2024-01-02|eu", "2024-01-04|eu"], [1]),
    ]
    plan = run_partlake("plan", "-m", "definitions", *select, env=env)
    assert re.search(
        r"run 2: marts/user_activity +2024-01-02\|eu\.\.\.2024-01-04\|eu \(3 partitions\) +"
        r"after run 1",
        plan.stdout,
    ), plan.stdout
    refreshed = run_partlake("run", "-m", "definitions", *select, env=env, timeout=900)
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    assert outcome_lines(refreshed.stdout) == {("staging/events", "2024-01-01|eu")} | {
        ("marts/user_activity", f"{d}|eu") for d in days
    }
    # Each later day its own line with its own counts, and its own commit, in order, all of
    # one run.
    later = re.findall(
        r"^\[OK\] marts/user_activity (2024-01-0[234])\|eu \(upstream_changed, (\d+) inserted",
        refreshed.stdout,
        re.MULTILINE,
    )
    assert [d for d, _ in later] == days[1:], refreshed.stdout
    from dagster_partlake.delta.table import log_versions
    from dagster_partlake.records.queries import read_record

    records = [r for v in log_versions(activity) if (r := read_record(activity, v)) is not None]
    last = [r for r in records if r.run_id == records[-1].run_id]
    assert [r.partition_keys for r in last] == [(f"{d}|eu",) for d in days[1:]]
    check()
    assert runs() == []
