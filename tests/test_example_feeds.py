"""The example's incremental inputs through the real `partlake` CLI: a change feed read by
watermark into a merge, and a landing folder consumed once with archive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from definitions.feeds import append_changes, drop_payments
from tests.conftest import cli_env, delta_rows, run_partlake

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

SELECT = "user_plans,payments"


@pytest.mark.extended  # CI: tests/surface/test_inputs.py, tests/test_incremental.py
def test_the_feeds_are_read_incrementally_and_planned_exactly(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    env = cli_env(tmp_path, lake)
    append_changes(1, root=str(lake))
    drop_payments(1, root=str(lake))
    drop_payments(2, root=str(lake))
    first = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[OK] payments - (missing, 200 rows" in first.stdout
    assert "[OK] user_plans - (missing, 20 rows" in first.stdout

    append_changes(2, root=str(lake))
    drop_payments(3, root=str(lake))
    plan = json.loads(
        run_partlake("plan", "-m", "definitions", "--select", SELECT, "--json", env=env).stdout
    )
    assert {(i["asset"], i["reason"], tuple(i["because"])) for i in plan} == {
        ("payments", "upstream_changed", ("payment_files",)),
        ("user_plans", "upstream_changed", ("user_changes[updated_at > 2024-01-01 01:00:00]",)),
    }
    second = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)
    assert second.returncode == 0, second.stdout + second.stderr
    # Only the new file and the new batch were read.
    assert "[OK] payments - (upstream_changed, 100 rows, 100 inserted" in second.stdout
    assert "[OK] user_plans - (upstream_changed, 10 rows, 0 inserted, 10 updated" in second.stdout
    again = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)
    assert "Everything is fresh: nothing to run." in again.stdout

    landing = lake / "warehouse" / "payment_files"
    assert sorted(p.name for p in landing.iterdir()) == ["_archive"]
    assert len(list((landing / "_archive").iterdir())) == 3
    ids = [r[0] for r in delta_rows(lake / "warehouse" / "payments", ["payment_id"])]
    assert len(ids) == len(set(ids)) == 300
    plans = dict(delta_rows(lake / "warehouse" / "user_plans", ["user_id", "plan"]))
    assert plans[2] == "pro" and plans[1] == "team"  # user 2 changed in batch 2, user 1 did not
