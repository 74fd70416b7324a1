"""Deep invalidation end to end on the example: storage change -> plan -> sensor -> runs."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dagster_partlake.delta.state import StateCache
from dagster_partlake.orchestration.sensor import SENSOR_TAG, build_invalidation_sensor
from dagster_partlake.planning.session import make_plan
from tests.conftest import cli_env, run_partlake, sensor_tick

pytestmark = pytest.mark.spark

EXPECTED = {
    ("clean_events", "2024-01-02|eu"),
    ("daily_region_stats", "2024-01-02|eu"),
    ("monthly_region_stats", "2024-01|eu"),
    # The example's SQL models (definitions/sql/) over raw_events and daily_region_stats.
    ("staging/events", "2024-01-02|eu"),
    ("marts/user_activity", "2024-01-02|eu"),
    ("marts/monthly_region_summary", "2024-01|eu"),
}


tick = sensor_tick


def execute(defs, instance, request) -> None:
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance,
        asset_selection=request.asset_selection,
        partition_key=request.partition_key,
        tags=request.tags,
    )
    assert result.success


def requested(request) -> set[tuple[str, str]]:
    keys = (
        [request.partition_key]
        if request.partition_key
        else request.tags["partlake/partitions"].split(", ")
    )
    return {(a.to_user_string(), k) for a in request.asset_selection for k in keys}


def test_source_rewrite_invalidates_exactly_its_downstream_closure(example, lake, instance) -> None:
    defs, graph = example
    from definitions.ingest import write_partition

    sensor = build_invalidation_sensor("inv", minimum_interval_seconds=1)
    requests, cursor, skip = tick(defs, instance, sensor, None)
    assert requests == [] and skip == "Everything is fresh."
    requests, cursor, skip = tick(defs, instance, sensor, cursor)
    assert requests == [] and skip.startswith("No new commits")

    write_partition(dt.date(2024, 1, 2), "eu", 200, seed=1, root=str(lake))
    plan = make_plan(graph, StateCache()).plan
    assert {(i.asset, i.partition) for i in plan.items} == EXPECTED
    assert {i.reason for i in plan.items} == {"upstream_changed"}
    because = {i.asset: i.because for i in plan.items}
    assert because["clean_events"] == because["staging/events"] == ("raw_events[2024-01-02|eu]",)

    seen: set[tuple[str, str]] = set()
    for _ in range(5):
        requests, cursor, skip = tick(defs, instance, sensor, cursor)
        if not requests:
            break
        for request in requests:
            assert request.tags[SENSOR_TAG] == "inv"
            assert request.tags["partlake/reasons"] == "upstream_changed"
            batch = requested(request)
            assert not batch & seen, "a partition was requested twice"
            seen |= batch
            execute(defs, instance, request)
    assert seen == EXPECTED
    assert skip == "Everything is fresh."
    requests, cursor, skip = tick(defs, instance, sensor, cursor)
    assert requests == [] and skip.startswith("No new commits")


def test_deprecated_watch_and_chain_arguments_are_accepted_with_a_warning_naming_the_fix(
    example, lake, instance
) -> None:
    """`watch_seconds` and `max_chained_runs` are accepted, say what replaced them, and change
    nothing: the tick after a rewrite requests only the runs that wait for no other run."""
    defs, _ = example
    from definitions.ingest import write_partition

    with pytest.warns(DeprecationWarning, match="watch_seconds=.*no longer watches"):
        watching = build_invalidation_sensor("old", watch_seconds=4.5)
    with pytest.warns(DeprecationWarning, match="max_chained_runs=.*no run starts early"):
        chaining = build_invalidation_sensor("old", max_chained_runs=4)
    _, cursor, skip = tick(defs, instance, watching, None)
    assert skip == "Everything is fresh."
    write_partition(dt.date(2024, 1, 2), "eu", 200, seed=3, root=str(lake))
    requests, _, _ = tick(defs, instance, chaining, cursor)
    assert [sorted(k.to_user_string() for k in r.asset_selection) for r in requests] == [
        ["clean_events", "daily_region_stats", "marts/user_activity", "staging/events"]
    ]
    assert all("partlake/waits_for" not in r.tags for r in requests)


def test_refresh_mode_out_of_range_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="refresh must be one of 'runs', 'backfill', got 'later'"):
        build_invalidation_sensor("inv", refresh="later")  # type: ignore[arg-type]


def test_each_level_is_requested_by_the_first_tick_after_what_it_reads_has_ended(
    example, lake, instance
) -> None:
    """While the first level's run is in flight a tick requests nothing (it returns at once);
    once it has ended, the next tick requests the next level, under the same refresh id; the
    partlake_fresh results of requested partitions are recorded by the tick itself, before the
    runs exist."""
    from dagster import AssetCheckKey

    defs, _ = example
    from definitions.ingest import write_partition

    sensor = build_invalidation_sensor("lvl")
    _, cursor, _ = tick(defs, instance, sensor, None)
    write_partition(dt.date(2024, 1, 2), "eu", 200, seed=4, root=str(lake))
    [first], cursor, _ = tick(defs, instance, sensor, cursor)
    refresh_id = first.tags["partlake/refresh"]
    assert refresh_id and json.loads(cursor)["refresh"] == refresh_id
    # Recorded by the tick, not left to the writer's thread: failed, before the run exists.
    infos = instance.event_log_storage.get_asset_check_partition_info(
        [AssetCheckKey(k, "partlake_fresh") for k in first.asset_selection],
        partition_keys=["2024-01-02|eu"],
    )
    assert len(infos) == 4 and all(i.latest_execution_status.value == "FAILED" for i in infos)

    job = defs.resolve_implicit_global_asset_job_def()
    queued = instance.create_run_for_job(
        job_def=job,
        tags={**first.tags, "dagster/partition": "2024-01-02|eu"},
        asset_selection=frozenset(first.asset_selection),
    )
    again, cursor, skip = tick(defs, instance, sensor, cursor)
    assert again == [] and "wait for running or backing-off runs" in skip
    instance.delete_run(queued.run_id)
    execute(defs, instance, first)
    second, cursor, _ = tick(defs, instance, sensor, cursor)
    assert set().union(*(requested(r) for r in second)) == {
        ("monthly_region_stats", "2024-01|eu"),
        ("marts/monthly_region_summary", "2024-01|eu"),
    }
    assert {r.tags["partlake/refresh"] for r in second} == {refresh_id}
    for request in second:
        execute(defs, instance, request)
    done, cursor, skip = tick(defs, instance, sensor, cursor)
    assert done == [] and skip == "Everything is fresh."
    assert json.loads(cursor)["refresh"] == ""


def test_a_backfill_refresh_requests_one_asset_backfill_of_the_closure(
    example, lake, instance
) -> None:
    """`refresh="backfill"`: one request for an asset backfill of the whole closure (two
    partitions definitions), tagged like the runs; while it is in progress, nothing more."""
    from dagster._core.execution.backfill import PartitionBackfill

    defs, _ = example
    from definitions.ingest import write_partition

    sensor = build_invalidation_sensor("bf", refresh="backfill")
    _, cursor, _ = tick(defs, instance, sensor, None)
    # The first day: the merge marts/user_activity must apply the next day again after it,
    # which Dagster's backfill would run side by side: that day is left to the next backfill.
    write_partition(dt.date(2024, 1, 1), "eu", 200, seed=5, root=str(lake))
    [request], cursor, _ = tick(defs, instance, sensor, cursor)
    subset = request.asset_graph_subset
    assert subset is not None
    first_day = {(a, k.replace("2024-01-02", "2024-01-01")) for a, k in EXPECTED}
    assert {
        (p.asset_key.to_user_string(), p.partition_key) for p in subset.iterate_asset_partitions()
    } == first_day
    assert request.tags[SENSOR_TAG] == "bf" and request.tags["partlake/refresh"]
    instance.add_backfill(
        PartitionBackfill.from_asset_graph_subset(
            backfill_id="bfill1",
            dynamic_partitions_store=instance,
            backfill_timestamp=time.time(),
            asset_graph_subset=subset,
            tags=request.tags,
            title=None,
            description=None,
            run_config=None,
        )
    )
    again, cursor, skip = tick(defs, instance, sensor, cursor)
    assert again == [] and "backfill(s) bfill1" in skip
    assert "1 reading those" in skip  # marts/user_activity[2024-01-02|eu], after the backfill


def test_in_flight_and_failing_partitions_are_not_requested_again(example, lake, instance) -> None:
    defs, graph = example
    from definitions.ingest import write_partition

    patient = build_invalidation_sensor("inv", retry_base_seconds=3600)
    _, cursor, _ = tick(defs, instance, patient, None)
    write_partition(dt.date(2024, 1, 1), "us", 200, seed=2, root=str(lake))
    requests, cursor, _ = tick(defs, instance, patient, cursor)
    # One run: the lakehouse assets, the SQL model reading raw_events and the merge reading it
    # (the same partition, so Dagster runs them together).
    assert sorted(sorted(k.to_user_string() for k in r.asset_selection) for r in requests) == [
        ["clean_events", "daily_region_stats", "marts/user_activity", "staging/events"],
    ]
    assert {r.partition_key for r in requests} == {"2024-01-01|us"}

    # The requested runs are queued: the next tick must not request them again.
    job = defs.resolve_implicit_global_asset_job_def()
    runs = [
        instance.create_run_for_job(
            job_def=job,
            tags={**request.tags, "dagster/partition": "2024-01-01|us"},
            asset_selection=frozenset(request.asset_selection),
        )
        for request in requests
    ]
    again, cursor, skip = tick(defs, instance, patient, cursor)
    assert again == [] and "wait for running or backing-off runs" in skip

    # They fail: backing off for an hour, no request on the next ticks.
    for run in runs:
        instance.report_run_failed(run)
    before_failure = cursor
    again, cursor, skip = tick(defs, instance, patient, before_failure)
    assert again == [] and "backing-off" in skip
    assert json.loads(cursor)["failures"] == {
        json.dumps([asset, "2024-01-01|us"]): [
            1,
            pytest.approx(json.loads(cursor)["checked_at"] + 3600),
        ]
        for asset in ["clean_events", "daily_region_stats", "marts/user_activity", "staging/events"]
    }
    again, cursor, skip = tick(defs, instance, patient, cursor)
    assert again == []

    # The same failure seen by a sensor without backoff: requested again at once.
    eager = build_invalidation_sensor("inv", retry_base_seconds=0)
    again, _, _ = tick(defs, instance, eager, before_failure)
    assert [r.partition_key for r in again] == ["2024-01-01|us"]
    # A retry needs a run key of its own: the daemon skips a run key it has already seen.
    assert not {r.run_key for r in again} & {r.run_key for r in requests}
    assert {r.tags["partlake/attempt"] for r in again} == {"2"}


NO_OP_PROBE = """
import sys
from dagster_partlake.cli import main
try:
    main(["run", "-m", "definitions"])
except SystemExit:
    pass
print("loaded:", sorted(m for m in ("deltalake", "pyarrow", "sqlalchemy") if m in sys.modules))
"""


def test_partlake_cli_plan_json_and_run_twice(example, lake, instance, tmp_path) -> None:
    from definitions.ingest import write_partition

    write_partition(dt.date(2024, 1, 2), "eu", 150, seed=3, root=str(lake))
    env = cli_env(tmp_path, lake)
    home = tmp_path / "dagster_home"
    plan = run_partlake("plan", "-m", "definitions", "--json", env=env, timeout=120)
    assert plan.returncode == 0, plan.stderr[-3000:]
    items = json.loads(plan.stdout)
    # Every item names its dimensions' values.
    assert items[0]["dimensions"] == {"date": "2024-01-02", "region": "eu"}
    for item in items:
        assert set(item.pop("dimensions")) in ({"date", "region"}, {"month", "region"})
    assert items == [
        {
            "asset": "clean_events",
            "partition": "2024-01-02|eu",
            "reason": "upstream_changed",
            "because": ["raw_events[2024-01-02|eu]"],
        },
        {
            "asset": "daily_region_stats",
            "partition": "2024-01-02|eu",
            "reason": "upstream_changed",
            "because": ["clean_events[2024-01-02|eu]"],
        },
        {
            "asset": "marts/monthly_region_summary",
            "partition": "2024-01|eu",
            "reason": "upstream_changed",
            "because": ["daily_region_stats[2024-01-02|eu]"],
        },
        {
            "asset": "marts/user_activity",
            "partition": "2024-01-02|eu",
            "reason": "upstream_changed",
            "because": ["staging/events[2024-01-02|eu]"],
        },
        {
            "asset": "monthly_region_stats",
            "partition": "2024-01|eu",
            "reason": "upstream_changed",
            "because": ["daily_region_stats[2024-01-02|eu]"],
        },
        {
            "asset": "staging/events",
            "partition": "2024-01-02|eu",
            "reason": "upstream_changed",
            "because": ["raw_events[2024-01-02|eu]"],
        },
    ]
    text = run_partlake(
        "plan", "-m", "definitions", "--select", "clean_events", env=env, timeout=120
    )
    assert "clean_events: 1 stale (upstream_changed 1)" in text.stdout
    assert "monthly_region_stats" not in text.stdout
    # The runs the plan becomes: shown as text, as JSON, and exactly what `partlake run` runs.
    text = run_partlake("plan", "-m", "definitions", env=env, timeout=120)
    # The stale assets of each partition that Dagster can run together share one run.
    assert text.stdout.rstrip().endswith(
        "Runs: 2, upstream first (one Dagster run each):\n"
        "  run 1: clean_events, daily_region_stats, staging/events, marts/user_activity  "
        "2024-01-02|eu\n"
        "  run 2: marts/monthly_region_summary, monthly_region_stats  2024-01|eu  after run 1"
    ), text.stdout
    runs = run_partlake("plan", "-m", "definitions", "--runs-json", env=env, timeout=120)
    assert runs.returncode == 0, runs.stderr[-3000:]
    planned = json.loads(runs.stdout)
    assert planned == [
        {
            "run": 1,
            "assets": [
                "clean_events",
                "daily_region_stats",
                "staging/events",
                "marts/user_activity",
            ],
            "partition_key": "2024-01-02|eu",
            "partition_range": None,
            "partitions": ["2024-01-02|eu"],
            "reasons": ["upstream_changed"],
            "waits_for": [],
        },
        {
            "run": 2,
            "assets": ["marts/monthly_region_summary", "monthly_region_stats"],
            "partition_key": "2024-01|eu",
            "partition_range": None,
            "partitions": ["2024-01|eu"],
            "reasons": ["upstream_changed"],
            "waits_for": [1],
        },
    ]
    both = run_partlake("plan", "-m", "definitions", "--json", "--runs-json", env=env)
    assert both.returncode == 2 and "choose one" in both.stderr

    first = run_partlake("run", "-m", "definitions", env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    # This instance sets no pool limit: one run at a time.
    assert "Executing up to 1 run(s) at a time (no Dagster pool limit applies)." in first.stdout
    lines = [line for line in first.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == 6
    assert lines[0].startswith("[OK] clean_events 2024-01-02|eu (upstream_changed, ")
    assert " rows, " in lines[0] and lines[0].endswith(" ms)")
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    recorded = DagsterInstance.from_ref(InstanceRef.from_dir(str(home))).get_runs()
    executed = sorted(
        (sorted(k.to_user_string() for k in r.asset_selection), r.tags["partlake/partitions"])
        for r in recorded
    )
    assert executed == sorted((sorted(p["assets"]), p["partitions"][0]) for p in planned)

    # Nothing changed: the second run must not start Spark at all (Java is made unreachable).
    no_java = {
        **env,
        "JAVA_HOME": str(tmp_path / "no-java"),
        "PATH": str(Path(sys.executable).parent),
    }
    second = run_partlake("run", "-m", "definitions", env=no_java, timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.strip() == "Everything is fresh: nothing to run."
    # ...nor open the Dagster instance's storage, nor read a table: the table states persisted
    # by the first run (stamped with their latest commit) are enough.
    probe = subprocess.run(
        [sys.executable, "-c", NO_OP_PROBE],
        cwd=Path(__file__).parent.parent,
        env=no_java,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.splitlines() == ["Everything is fresh: nothing to run.", "loaded: []"]

    # A new commit to the source after all that is seen by the next process.
    write_partition(dt.date(2024, 1, 1), "us", 120, seed=4, root=str(lake))
    replan = run_partlake("plan", "-m", "definitions", "--json", env=env, timeout=120)
    assert replan.returncode == 0, replan.stderr[-3000:]
    assert {(i["asset"], i["partition"]) for i in json.loads(replan.stdout)} == {
        ("clean_events", "2024-01-01|us"),
        ("daily_region_stats", "2024-01-01|us"),
        ("monthly_region_stats", "2024-01|us"),
        ("staging/events", "2024-01-01|us"),
        # A merge applies its days in order: the next day is applied again after it.
        ("marts/user_activity", "2024-01-01|us"),
        ("marts/user_activity", "2024-01-02|us"),
        ("marts/monthly_region_summary", "2024-01|us"),
    }

    bad = run_partlake("plan", "-m", "definitions", "--select", "nope", env=env, timeout=120)
    assert bad.returncode == 1
    errors = [line for line in bad.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == [errors[0]] and errors[0].startswith("Error: unknown asset(s) nope; the code")
