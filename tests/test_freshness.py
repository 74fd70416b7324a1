"""partlake's verdicts where Dagster shows them: `partlake_fresh` results and `partlake_stale()`.

On the example lake (real Spark, real Delta tables, a real Dagster instance): the sensor's ticks
report only the verdicts that changed, each run's check step reports the partitions it wrote,
`partlake plan --report` does what a tick does, and Dagster's own automation evaluation of
`partlake_stale()` requests exactly the stale closure, upstream first.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pytest
from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetsDefinition,
    AutomationCondition,
    Definitions,
    build_sensor_context,
    evaluate_automation_conditions,
)

from dagster_partlake import partlake_stale
from dagster_partlake.compat import CHECK_FAILED
from dagster_partlake.freshness.report import MISSING_CHECKS, flush_reports
from dagster_partlake.metadata import (
    BECAUSE_KEY,
    FRESH_CHECK,
    LAST_UPDATED_KEY,
    REASON_KEY,
    ROWS_KEY,
)
from tests.conftest import cli_env, run_partlake

pytestmark = pytest.mark.spark

CLOSURE = {
    ("clean_events", "2024-01-02|eu"),
    ("daily_region_stats", "2024-01-02|eu"),
    ("monthly_region_stats", "2024-01|eu"),
    # The example's SQL models (definitions/sql/) read the same source.
    ("staging/events", "2024-01-02|eu"),
    ("marts/user_activity", "2024-01-02|eu"),
    ("marts/monthly_region_summary", "2024-01|eu"),
}


def tick(defs, instance, sensor, cursor):  # type: ignore[no-untyped-def]
    """One tick as the daemon runs it: (run requests, cursor, skip message, the partlake_fresh
    results the tick recorded)."""
    repository = defs.get_repository_def()
    checked = [k for k in repository.asset_graph.asset_check_keys if k.name == FRESH_CHECK]
    before = {k: _newest_id(instance, k) for k in checked}
    context = build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        repository_def=repository,
        cursor=cursor,
        resources={
            k: r
            for k, r in repository.get_top_level_resources().items()
            if k in sensor.required_resource_keys
        },
    )
    with context:
        data = sensor.evaluate_tick(context)
    assert not data.asset_events  # the sensor records its results itself, in a thread
    assert flush_reports(timeout=60)
    recorded = [
        h.event.dagster_event.event_specific_data
        for k in checked
        for h in instance.event_log_storage.get_asset_check_execution_history(k, limit=1000)
        if h.id > before[k] and h.event is not None
    ]
    return list(data.run_requests or []), data.cursor or cursor, data.skip_message, recorded


def _newest_id(instance, key) -> int:  # type: ignore[no-untyped-def]
    history = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
    return history[0].id if history else 0


def _status(instance, asset: str, partition: str) -> str:  # type: ignore[no-untyped-def]
    """The status of the newest partlake_fresh execution (planned or recorded) of a partition."""
    [info] = instance.event_log_storage.get_asset_check_partition_info(
        [AssetCheckKey(AssetKey.from_user_string(asset), FRESH_CHECK)], partition_keys=[partition]
    )
    return str(info.latest_execution_status.value)


def latest(instance, asset: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Partition -> status of the newest partlake_fresh result of `asset`, as the UI's check
    partitions count it: only while it targets the partition's latest materialization."""
    infos = instance.event_log_storage.get_asset_check_partition_info(
        [AssetCheckKey(AssetKey.from_user_string(asset), FRESH_CHECK)]
    )
    return {
        i.partition_key: i.latest_execution_status.value if i.is_current else "NOT CURRENT"
        for i in infos
    }


def test_the_sensor_reports_changed_verdicts_and_runs_report_what_they_wrote(
    example, instance, lake: Path
) -> None:
    from dagster_partlake.orchestration.runner import refresh
    from definitions.ingest import write_partition

    defs, graph = example
    sensor = defs.get_sensor_def("partlake_invalidation")
    # The example's runs reported every partition they wrote, with its own rows.
    assert set(latest(instance, "clean_events").values()) == {"SUCCEEDED"}
    assert set(latest(instance, "clean_events")) == {
        f"{d}|{r}" for d in ("2024-01-01", "2024-01-02") for r in ("eu", "us")
    }
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey("clean_events"), FRESH_CHECK), limit=10
    )
    data = [h.event.dagster_event.event_specific_data for h in history]  # type: ignore[union-attr]
    rows = {d.partition: d.metadata[ROWS_KEY].value for d in data}  # type: ignore[union-attr]
    assert 150 < rows["2024-01-02|eu"] <= 200  # that partition's rows, not the run's
    assert all(LAST_UPDATED_KEY in d.metadata for d in data)  # type: ignore[union-attr]
    # The fill wrote the 4 partitions in one range run: its figures, shown on each partition's
    # materialization, are named as the batch's; none claims to be a partition's.
    [*materializations] = instance.fetch_materializations(
        AssetKey("clean_events"), limit=10
    ).records
    assert len(materializations) == 4
    for record in materializations:
        metadata = record.asset_materialization.metadata  # type: ignore[union-attr]
        assert metadata["partlake/batch_partitions"].value == 4
        assert sum(rows.values()) == metadata["partlake/batch_rows"].value
        assert "dagster/row_count" not in metadata and "partlake/partition_count" not in metadata

    requests, cursor, skip, events = tick(defs, instance, sensor, None)
    assert requests == [] and skip == "Everything is fresh." and events == []
    # Nothing moved since: the tick says so without planning.
    requests, cursor, skip, events = tick(defs, instance, sensor, cursor)
    assert skip == "No new commits in any table since the last tick: nothing to plan."

    write_partition(dt.date(2024, 1, 2), "eu", 180, seed=3, root=str(lake))
    requests, cursor, skip, events = tick(defs, instance, sensor, cursor)
    assert requests, skip
    failed = {(e.asset_key.to_user_string(), e.partition): e for e in events}
    assert set(failed) == CLOSURE and not any(e.passed for e in events)
    clean = failed[("clean_events", "2024-01-02|eu")]
    assert clean.metadata[REASON_KEY].value == "upstream_changed"
    assert clean.metadata[BECAUSE_KEY].value == ["raw_events[2024-01-02|eu]"]
    assert clean.severity.value == "WARN"
    # Nothing changed since: nothing reported again.
    _, cursor, _, again = tick(defs, instance, sensor, cursor)
    assert again == []
    assert latest(instance, "clean_events")["2024-01-02|eu"] == CHECK_FAILED.value

    assert all(o.ok for o in refresh(graph, instance))  # the runs report what they wrote
    assert latest(instance, "monthly_region_stats")["2024-01|eu"] == "SUCCEEDED"
    # A run that planned to check a partition and has not said it yet (one launched from the UI,
    # say): the tick leaves it to that run. Dagster keeps the run's result in the row it planned
    # when the run was created, so a result the sensor recorded now would stay the newest and
    # hide the run's.
    job = defs.resolve_implicit_job_def_def_for_assets([AssetKey("clean_events")])
    launched = instance.create_run_for_job(
        job_def=job,
        tags={"dagster/partition": "2024-01-02|eu"},
        asset_selection=frozenset({AssetKey("clean_events")}),
    )
    assert _status(instance, "clean_events", "2024-01-02|eu") == "PLANNED"
    # The runs' results said the rest already: the tick has nothing to add.
    _, cursor, skip, events = tick(defs, instance, sensor, cursor)
    assert events == []
    assert json.loads(cursor)["pending"] is True  # the next tick looks again
    # That run ends without checking it: the sensor says it then.
    instance.report_run_failed(launched)
    _, cursor, skip, events = tick(defs, instance, sensor, cursor)
    assert [(e.asset_key.to_user_string(), e.partition, e.passed) for e in events] == [
        ("clean_events", "2024-01-02|eu", True)
    ]
    requests, cursor, skip, events = tick(defs, instance, sensor, cursor)
    assert requests == [] and events == [], skip
    assert json.loads(cursor)["pending"] is False
    for asset, partition in CLOSURE:
        assert latest(instance, asset)[partition] == "SUCCEEDED"


def test_plan_report_records_verdicts_without_a_daemon(example, tmp_path: Path, lake) -> None:  # type: ignore[no-untyped-def]
    from dagster import DagsterInstance

    from definitions.ingest import write_partition

    env = cli_env(tmp_path, lake)
    write_partition(dt.date(2024, 1, 1), "us", 150, seed=5, root=str(lake))
    out = run_partlake("plan", "-m", "definitions", "--report", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        # Its closure: 3 Python assets and the example's SQL models reading the same source.
        "Reported 7 partlake_fresh result(s) to the Dagster instance: 7 stale, 0 fresh again."
        in out.stderr
    )
    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    assert latest(instance, "daily_region_stats") == {"2024-01-01|us": "FAILED"}


def test_partlake_stale_requests_the_stale_closure_upstream_first(example, instance, lake) -> None:  # type: ignore[no-untyped-def]
    from definitions.ingest import write_partition

    defs, _ = example
    stale_first = (
        partlake_stale()
        & ~AutomationCondition.in_progress()
        & ~AutomationCondition.any_deps_match(partlake_stale() | AutomationCondition.in_progress())
    )
    automated = Definitions(
        assets=[
            a.map_asset_specs(
                lambda spec: spec.replace_attributes(automation_condition=stale_first)
            )
            if isinstance(a, AssetsDefinition) and a.is_materializable
            else a
            for a in defs.assets  # type: ignore[union-attr]
        ],
        resources=defs.resources,
    )
    result = evaluate_automation_conditions(automated, instance)
    assert result.total_requested == 0

    write_partition(dt.date(2024, 1, 2), "eu", 180, seed=3, root=str(lake))
    result = evaluate_automation_conditions(automated, instance, cursor=result.cursor)
    # The stale closure's upstream end only: downstream waits for its stale upstream.
    assert result.get_requested_partitions(AssetKey("clean_events")) == {"2024-01-02|eu"}
    # The SQL model staging/events reads the same source: the other upstream end.
    assert result.get_requested_partitions(AssetKey(["staging", "events"])) == {"2024-01-02|eu"}
    assert result.total_requested == 2
    # Its evaluation names the reason: partlake_stale's upstream_changed child holds it.
    (clean,) = [r for r in result.results if r.key == AssetKey("clean_events")]
    labels = _true_labels(clean)
    assert "upstream_changed" in labels and "missing" not in labels


def _true_labels(result) -> set[str]:  # type: ignore[no-untyped-def]
    """Labels of the conditions in an evaluation tree that were true for some partition."""
    found = set()
    if result.true_subset.size and result.condition.get_label():
        found.add(result.condition.get_label())
    for child in result.child_results:
        found |= _true_labels(child)
    return found


def test_a_report_the_instance_refuses_is_said_not_lost(tmp_path: Path) -> None:
    """The writer records in its own thread; when the instance's storage is gone, the failure
    is kept for the next tick to say (which then reports again from what the instance holds)."""
    import shutil

    from dagster import AssetCheckEvaluation, instance_for_test

    from dagster_partlake.freshness.report import FreshnessReport, ReportWriter

    def report(partition: str) -> FreshnessReport:
        evaluation = AssetCheckEvaluation(
            asset_key=AssetKey("a"), check_name=FRESH_CHECK, passed=False, partition=partition
        )
        return FreshnessReport((evaluation,), 0, "partlake-fresh-test")

    (tmp_path / "home").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        writer = ReportWriter(instance)
        writer.submit(report("x"))
        assert writer.flush(timeout=60) and writer.take_errors() == []
        assert latest(instance, "a") == {"x": "FAILED"}
        shutil.rmtree(tmp_path / "home" / "history")  # the event log's storage vanishes
        writer.submit(report("y"))
        assert writer.flush(timeout=60)
        [error] = writer.take_errors()
        assert error.startswith("1 partlake_fresh result(s) could not be recorded (")
        assert writer.take_errors() == []


def test_the_writer_hands_back_queued_results_of_partitions_a_tick_requests(
    tmp_path: Path,
) -> None:
    """`ReportWriter.claim`: results not recorded yet of the partitions a tick requests runs for
    come back to the tick (which records them before the runs exist); the others stay queued;
    the report being recorded at that moment is named instead (its results may land any time)."""
    import threading

    from dagster import AssetCheckEvaluation, instance_for_test

    from dagster_partlake.freshness import report as report_module
    from dagster_partlake.freshness.report import FreshnessReport, ReportWriter

    def report(report_id: str, *partitions: str) -> FreshnessReport:
        evaluations = tuple(
            AssetCheckEvaluation(
                asset_key=AssetKey("a"), check_name=FRESH_CHECK, passed=False, partition=p
            )
            for p in partitions
        )
        return FreshnessReport(evaluations, 0, report_id)

    entered, release = threading.Event(), threading.Event()
    record = report_module.record_report

    def held(instance, first):  # type: ignore[no-untyped-def]
        if first.report_id == "partlake-fresh-1":
            entered.set()
            release.wait(60)
        record(instance, first)

    (tmp_path / "home").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        writer = ReportWriter(instance)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(report_module, "record_report", held)
            writer.submit(report("partlake-fresh-1", "x"))
            assert entered.wait(60)  # the thread is recording report 1
            writer.submit(report("partlake-fresh-2", "x", "y", "z"))
            busy, taken = writer.claim({("a", "x"), ("a", "y")})
            assert busy == {("a", "x")}
            assert [(t.report_id, [e.partition for e in t.evaluations]) for t in taken] == [
                ("partlake-fresh-2", ["x", "y"])
            ]
            assert not writer.idle
            release.set()
            assert writer.flush(timeout=60)
        assert latest(instance, "a") == {"x": "FAILED", "z": "FAILED"}  # y was handed back


def test_a_code_location_without_partlake_fresh_gets_one_warning_line(
    tmp_path: Path, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user who forgot `partlake_asset_checks(...)`: the sensor's tick log and `partlake plan`
    each say once which call to add (tests.hold_defs registers no checks)."""
    from dagster import instance_for_test

    from dagster_partlake import build_invalidation_sensor
    from tests.hold_defs import defs as hold

    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    sensor = build_invalidation_sensor()
    defs = Definitions(assets=hold.assets, resources=hold.resources, sensors=[sensor])
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    with instance_for_test() as instance:
        context = build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
        with context:
            context.log.addHandler(handler)  # beside the tick log the daemon keeps
            data = sensor.evaluate_tick(context)
        assert flush_reports(timeout=60)
    assert len(data.run_requests or []) == 4  # every partition missing: it still plans
    assert [m for m in said if "partlake_fresh" in m] == [MISSING_CHECKS]
    assert "partlake_asset_checks(assets)" in MISSING_CHECKS

    out = run_partlake("plan", "-m", "tests.hold_defs", env=cli_env(tmp_path, lake))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.splitlines() == [f"Warning: {MISSING_CHECKS}"]
