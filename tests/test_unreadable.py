"""A damaged Delta log: one clear error, and only the broken table's downstream closure waits."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from dagster import AssetKey
from deltalake import DeltaTable

from dagster_partlake.delta.state import StateCache
from dagster_partlake.errors import TableUnreadableError
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.orchestration.sensor import build_invalidation_sensor
from dagster_partlake.planning.session import make_plan
from tests.conftest import REPO_ROOT, cli_env, run_partlake, sensor_tick

pytestmark = pytest.mark.spark


def damage_newest_commit(table: Path) -> tuple[Path, bytes]:
    """Truncate the newest commit file in the middle of a record (as a dying copy would)."""
    newest = max((table / "_delta_log").glob("*.json"))
    original = newest.read_bytes()
    newest.write_bytes(original[: len(original) // 2])
    return newest, original


def log_files(table: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((table / "_delta_log").iterdir())}


def test_damaged_table_holds_back_its_closure_and_says_what_to_do(
    example, lake: Path, instance, tmp_path: Path
) -> None:
    defs, graph = example
    from definitions.ingest import write_partition

    warehouse = lake / "warehouse"
    daily = warehouse / "daily_region_stats"
    commit, original = damage_newest_commit(daily)
    write_partition(dt.date(2024, 1, 1), "us", 200, seed=5, root=str(lake))

    env = cli_env(tmp_path, lake)
    expected_error = (
        f"Error: the Delta log of daily_region_stats at {daily} cannot be read: commit file "
        f"_delta_log/{commit.name} is damaged (line "
    )
    text = run_partlake("plan", "-m", "definitions", env=env, timeout=120)
    assert text.returncode == 1
    assert "Traceback" not in text.stderr and "Kernel error" not in text.stderr
    # The example's sources its demo writes later have no table yet: each said once.
    absent = [x for x in text.stderr.splitlines() if x.startswith("Warning: source ")]
    assert {x.split(":")[1].split()[-1] for x in absent} == {
        "user_exports",
        "user_changes",
        "payment_files",
    }, text.stderr
    errors = [x for x in text.stderr.strip().splitlines() if x not in absent]
    assert len(errors) == 1 and errors[0].startswith(expected_error), text.stderr
    assert "Restore the file from a backup" in errors[0]
    assert "nothing that depends on daily_region_stats" in errors[0]
    assert "clean_events: 1 stale (upstream_changed 1)" in text.stdout
    assert text.stdout.rstrip().endswith(
        "Not planned until the table of daily_region_stats can be read: daily_region_stats, "
        "marts/monthly_region_summary, monthly_region_stats"
    )
    as_json = run_partlake("plan", "-m", "definitions", "--json", env=env, timeout=120)
    assert as_json.returncode == 1
    assert [x for x in as_json.stderr.splitlines() if x.startswith("Error:")][0].startswith(
        expected_error
    )
    stale = {(i["asset"], i["partition"], i["reason"]) for i in json.loads(as_json.stdout)}
    assert stale == {
        ("clean_events", "2024-01-01|us", "upstream_changed"),
        # The example's SQL models over raw_events (a merge applies the next day again).
        ("staging/events", "2024-01-01|us", "upstream_changed"),
        ("marts/user_activity", "2024-01-01|us", "upstream_changed"),
        ("marts/user_activity", "2024-01-02|us", "upstream_changed"),
    }

    # The sensor refreshes what does not depend on the broken table, and nothing else.
    sensor = build_invalidation_sensor("inv", minimum_interval_seconds=1)
    requests, cursor, _ = sensor_tick(defs, instance, sensor, None)
    # clean_events and the SQL models of the same partition share one run.
    assert ("2024-01-01|us", ["clean_events", "staging/events", "marts/user_activity"]) in [
        (r.partition_key, [a.to_user_string() for a in r.asset_selection]) for r in requests
    ]
    free = {"clean_events", "staging/events", "marts/user_activity"}
    job = defs.resolve_implicit_global_asset_job_def()
    for _ in range(5):
        assert {a.to_user_string() for r in requests for a in r.asset_selection} <= free
        for request in requests:
            assert job.execute_in_process(
                instance=instance,
                asset_selection=request.asset_selection,
                partition_key=request.partition_key,
                tags=request.tags,
            ).success
        # With nothing else to request, the tick fails with the same message (shown in the UI).
        try:
            requests, cursor, _ = sensor_tick(defs, instance, sensor, cursor)
        except Exception as error:  # noqa: BLE001 - the tick's failure, checked below
            failed_tick = error
            break
    else:
        raise AssertionError("the sensor kept requesting runs; its tick never failed")
    assert expected_error[len("Error: ") :] in _messages(failed_tick)

    # Materializing the downstream by hand fails with the message and writes nothing.
    broken_log = log_files(daily)
    monthly_version = DeltaTable(str(warehouse / "monthly_region_stats")).version()
    result = job.execute_in_process(
        instance=instance,
        asset_selection=[AssetKey("monthly_region_stats")],
        partition_key="2024-01|us",
        raise_on_error=False,
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert expected_error[len("Error: ") :] in _messages(failure)
    assert DeltaTable(str(warehouse / "monthly_region_stats")).version() == monthly_version
    assert log_files(daily) == broken_log

    # Repaired: what was held back is planned again (the new clean_events partition changed
    # underneath it) and refreshed.
    commit.write_bytes(original)
    plan = make_plan(graph, StateCache()).plan
    assert not plan.unreadable
    assert {(i.asset, i.partition, i.reason) for i in plan.items} == {
        ("daily_region_stats", "2024-01-01|us", "upstream_changed"),
        ("monthly_region_stats", "2024-01|us", "upstream_changed"),
        ("marts/monthly_region_summary", "2024-01|us", "upstream_changed"),
    }
    outcomes = refresh(graph, instance)
    assert outcomes and all(o.ok for o in outcomes)
    assert not make_plan(graph, StateCache()).plan


def _messages(error: object) -> str:
    """Every message in an exception chain (or a Dagster SerializableErrorInfo chain)."""
    parts = []
    while error is not None:
        parts.append(str(getattr(error, "message", "")) or str(error))
        error = getattr(error, "cause", None) or getattr(error, "__cause__", None)
    return "\n".join(parts)


def test_a_missing_commit_is_named(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from dagster_partlake.delta.table import load_table

    path = tmp_path / "t"
    for i in range(4):
        write_deltalake(str(path), pa.table({"a": [i]}), mode="append")
    (path / "_delta_log" / f"{2:020d}.json").unlink()
    with pytest.raises(TableUnreadableError, match=r"commit 2 is missing \(the log jumps from "):
        load_table(str(path), table_name="t")


def test_partlake_fresh_never_fails_a_run_on_a_damaged_table(
    example, lake: Path, tmp_path: Path
) -> None:
    """The check executed on its own in the code location (as the UI's "Execute" runs it) over
    a table whose log is damaged: it cannot judge, says why in the run's log, reports nothing,
    and the run still succeeds."""
    import subprocess
    import sys

    from dagster import DagsterEventType, DagsterInstance

    damage_newest_commit(lake / "warehouse" / "daily_region_stats")
    env = cli_env(tmp_path, lake)
    executed = subprocess.run(
        [
            *(str(Path(sys.executable).with_name("dagster")), "job", "execute"),
            *("-m", "definitions", "-j", "__ASSET_JOB"),
            *("--op-selection", "daily_region_stats_partlake_fresh"),
            *("--tags", json.dumps({"dagster/partition": "2024-01-01|eu"})),
        ],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert executed.returncode == 0, executed.stderr[-3000:]
    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    [run] = instance.get_runs()
    logged = [e.message for e in instance.all_logs(run.run_id)]
    [warning] = [m for m in logged if m.startswith("partlake_fresh could not judge")]
    assert "daily_region_stats" in warning and "is damaged" in warning, warning
    assert not any(
        e.dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
        for e in instance.all_logs(run.run_id)
        if e.dagster_event is not None
    )
