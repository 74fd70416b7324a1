"""The example's quality gates through the real `partlake` CLI and a real Dagster instance: a
batch of raw events with missing event ids stops at clean_events' gate, commits nothing, shows
a failed asset check, and `partlake plan` says which gate the last run failed."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance
from deltalake import DeltaTable

from dagster_partlake.storage.location import table_path
from definitions.ingest import write_partition
from tests.conftest import cli_env, run_partlake

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

SELECT = "clean_events,daily_region_stats"
DAY = dt.date(2024, 1, 1)


@pytest.mark.extended  # CI: tests/surface/test_gates.py, tests/test_gates.py
def test_a_failed_gate_stops_the_batch_and_the_plan_names_it(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    env = cli_env(tmp_path, lake)
    for region in ("eu", "us"):
        write_partition(DAY, region, 100, root=str(lake))
    first = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    clean = table_path(str(lake), ["clean_events"])
    version = DeltaTable(clean).version()

    # 2024-01-01|eu again, with the event id of three rows missing.
    write_partition(DAY, "eu", 100, seed=3, root=str(lake), missing_ids=3)
    failed = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)

    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "[FAILED] clean_events 2024-01-01|eu" in failed.stdout
    # clean_events keeps one row per (event_id, date, region): the three become one.
    assert re.search(
        r"constraint not_null_user_id_event_id failed: 1 of \d+ rows violate "
        r"'user_id, event_id not null'",
        failed.stdout,
    )
    # daily_region_stats shares the run, which stopped at clean_events.
    assert "[OK] daily_region_stats" not in failed.stdout
    assert DeltaTable(clean).version() == version

    plan = run_partlake("plan", "-m", "definitions", "--select", SELECT, env=env)
    assert plan.returncode == 0, plan.stderr
    line = next(x for x in plan.stdout.splitlines() if x.strip().startswith("2024-01-01|eu"))
    assert "upstream_changed" in line
    assert line.rstrip().endswith("last run failed: not_null_user_id_event_id")
    as_json = json.loads(
        run_partlake("plan", "-m", "definitions", "--select", SELECT, "--json", env=env).stdout
    )
    clean_items = [i for i in as_json if i["asset"] == "clean_events"]
    assert [(i["partition"], i.get("last_run_failed")) for i in clean_items] == [
        ("2024-01-01|eu", ["not_null_user_id_event_id"])
    ]

    instance = DagsterInstance.from_ref(_ref(env))
    try:
        history = instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey("clean_events"), "not_null_user_id_event_id"), limit=1
        )
        evaluation = history[0].event.dagster_event.event_specific_data
        assert history[0].status.value == "FAILED"
        assert evaluation.metadata["partlake/offending"].value == 1
    finally:
        instance.dispose()

    # The upstream fixes the batch: the gate passes, the plan is empty again.
    write_partition(DAY, "eu", 100, seed=4, root=str(lake))
    fixed = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    after = run_partlake("plan", "-m", "definitions", "--select", SELECT, env=env)
    assert "Everything is fresh" in after.stdout


def _ref(env: dict[str, str]):
    from dagster._core.instance.ref import InstanceRef

    return InstanceRef.from_dir(env["DAGSTER_HOME"])
