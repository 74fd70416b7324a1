"""The example's model kinds (`definitions.models`) through the real `partlake` CLI: merge, scd2,
append and tracked tables checked row by row, and early cutoff after an unchanged export."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from dagster_partlake.storage.location import table_path
from definitions.exports import generate, write_export
from tests.conftest import cli_env, delta_rows, run_partlake

pytestmark = pytest.mark.spark

DAYS = [dt.date(2024, 1, 1) + dt.timedelta(days=n) for n in range(4)]


def exports(seeds: dict[dt.date, int] | None = None) -> dict[dt.date, list[tuple[int, str, str]]]:
    seeds = seeds or {}
    columns = ("user_id", "name", "plan")
    return {
        day: sorted(
            zip(
                *(generate(day, 50, seeds.get(day, 0)).column(c).to_pylist() for c in columns),
                strict=True,
            )
        )
        for day in DAYS
    }


def check_tables(lake: Path, by_day: dict[dt.date, list[tuple[int, str, str]]]) -> None:
    """users = every export upserted in day order; users_history = SCD2 of the exports;
    user_days = the running total of users per day."""
    totals, total = [], 0
    for day in DAYS:
        total += len(by_day[day])
        totals.append((day, total))
    assert delta_rows(table_path(str(lake), ["user_days"]), ["date", "total"]) == totals
    latest = {u: (n, p) for day in DAYS for u, n, p in by_day[day]}
    assert delta_rows(table_path(str(lake), ["users"]), ["user_id", "name", "plan"]) == sorted(
        (u, n, p) for u, (n, p) in latest.items()
    )
    rows = delta_rows(
        table_path(str(lake), ["users_history"]),
        ["user_id", "plan", "valid_from", "valid_to", "is_current"],
    )
    got = sorted(
        ((u, p, f.date(), t.date() if t else None, c) for u, p, f, t, c in rows),
        key=lambda r: (r[0], r[2]),
    )
    assert got == expected_history(by_day)


def expected_history(by_day: dict[dt.date, list[tuple[int, str, str]]]) -> list[tuple]:
    """SCD2 by hand: (user_id, plan, valid_from, valid_to, is_current)."""
    open_rows: dict[int, tuple[str, dt.date]] = {}
    closed: list[tuple] = []
    for day, rows in sorted(by_day.items()):
        now = {u: p for u, _, p in rows}
        for user, (plan, since) in list(open_rows.items()):
            if now.get(user) != plan:
                closed.append((user, plan, since, day, False))
                del open_rows[user]
        for user, plan in now.items():
            if user not in open_rows:
                open_rows[user] = (plan, day)
    current = [(u, p, since, None, True) for u, (p, since) in open_rows.items()]
    return sorted(closed + current, key=lambda r: (r[0], r[2]))


@pytest.mark.extended  # CI: tests/surface/test_kinds.py, tests/test_kinds.py
def test_example_model_kinds_through_partlake_run(tmp_path: Path, lake: Path) -> None:
    env = cli_env(tmp_path, lake)
    for day in DAYS:
        write_export(day, 50, root=str(lake))
    proc = run_partlake("run", "-m", "definitions", env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[OK] users 2024-01-01 (missing, " in proc.stdout
    assert " inserted, 0 updated, 0 deleted, 0 unchanged" in proc.stdout

    by_day = exports()
    check_tables(lake, by_day)
    log = delta_rows(table_path(str(lake), ["user_export_log"]), ["user_id"])
    assert len(log) == sum(len(rows) for rows in by_day.values())
    counts = delta_rows(table_path(str(lake), ["plan_counts"]), ["date", "plan", "users"])
    assert sum(n for _, _, n in counts) == len(log)
    plan = run_partlake("plan", "-m", "definitions", "--json", env=env)
    assert plan.returncode == 0 and json.loads(plan.stdout) == [], plan.stdout

    # The same export again: everything reading it runs, plan_counts comes out unchanged and
    # plan_mix is not run.
    write_export(DAYS[3], 50, root=str(lake))
    proc = run_partlake("run", "-m", "definitions", env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[OK] plan_counts 2024-01-04 (upstream_changed, " in proc.stdout
    for cut_off in ("plan_mix -", "user_days 2024-01-04"):
        assert f"[UNCHANGED] {cut_off} (upstream_changed, not run: its inputs came out" in (
            proc.stdout
        )
    check_tables(lake, by_day)  # re-applying the same export changed nothing
    assert "0 inserted, 0 updated, 0 deleted" in proc.stdout  # users_history: same snapshot
    assert len(delta_rows(table_path(str(lake), ["user_export_log"]), ["user_id"])) == len(
        log
    ) + len(by_day[DAYS[3]])
    plan = run_partlake("plan", "-m", "definitions", "--json", env=env)
    assert json.loads(plan.stdout) == [], plan.stdout

    # Day 2's export changes: users and users_history re-apply day 2 and then every later day,
    # in order (each waits for the previous run).
    write_export(DAYS[1], 50, seed=3, root=str(lake))
    plan = run_partlake("plan", "-m", "definitions", "--json", env=env)
    stale = {(i["asset"], i["partition"]): i for i in json.loads(plan.stdout)}
    for asset in ("users", "users_history"):
        assert stale[(asset, "2024-01-02")]["because"] == ["user_exports[2024-01-02]"]
        for day, previous in (("2024-01-03", "2024-01-02"), ("2024-01-04", "2024-01-03")):
            item = stale[(asset, day)]
            assert item["reason"] == "upstream_changed"
            assert item["because"] == [f"{asset}[{previous}]"]
    runs = run_partlake("plan", "-m", "definitions", "--runs-json", env=env)
    by_key = {(a, r["partition_key"]): r for r in json.loads(runs.stdout) for a in r["assets"]}
    for asset in ("users", "users_history"):
        for day, previous in (("2024-01-03", "2024-01-02"), ("2024-01-04", "2024-01-03")):
            assert by_key[(asset, day)]["waits_for"] == [by_key[(asset, previous)]["run"]]
    proc = run_partlake("run", "-m", "definitions", env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_tables(lake, exports({DAYS[1]: 3}))
    plan = run_partlake("plan", "-m", "definitions", "--json", env=env)
    assert json.loads(plan.stdout) == [], plan.stdout
