"""A run requested ahead of the runs it reads waits for them in its run (`io_manager.chain`):
against a real Dagster instance, with the awaited runs executed for real in a thread."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from dagster import (
    AssetCheckResult,
    DagsterInstance,
    DagsterRun,
    Definitions,
    Failure,
    RunsFilter,
    asset,
    asset_check,
    instance_for_test,
    job,
    op,
)

from dagster_partlake.errors import UpstreamRunFailedError
from dagster_partlake.io_manager.chain import RESUMED, wait_for_upstream_runs, waits_for
from dagster_partlake.metadata import CHAIN_TAG, UPSTREAM_FAILED_TAG, WAITS_FOR_TAG


@op
def takes_a_second() -> None:
    time.sleep(1.0)


@op
def breaks() -> None:
    time.sleep(0.5)
    raise Failure("the quality gate failed")


@job
def upstream_ok() -> None:
    takes_a_second()


@job
def upstream_fails() -> None:
    breaks()


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as instance:
        yield instance


def waiting_run(instance: DagsterInstance, *chain_ids: str) -> DagsterRun:
    run = DagsterRun(
        job_name="downstream", run_id=str(uuid.uuid4()), tags={WAITS_FOR_TAG: ",".join(chain_ids)}
    )
    instance.add_run(run)
    return run


def later(seconds: float, job_def, instance: DagsterInstance, chain_id: str) -> threading.Thread:
    """Start `job_def` as the run tagged `chain_id`, `seconds` from now, in a thread."""

    def go() -> None:
        time.sleep(seconds)
        job_def.execute_in_process(
            instance=instance, tags={CHAIN_TAG: chain_id}, raise_on_error=False
        )

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_waits_until_every_awaited_run_has_succeeded_and_says_what_it_waits_for(
    instance: DagsterInstance, caplog: pytest.LogCaptureFixture
) -> None:
    run = waiting_run(instance, "first", "second")
    threads = [
        later(0.0, upstream_ok, instance, "first"),
        later(1.5, upstream_ok, instance, "second"),  # not even created when the wait starts
    ]
    caplog.set_level(logging.INFO, logger="dagster_partlake.io_manager.chain")
    waited = wait_for_upstream_runs(instance, run, None, poll=0.05)
    for thread in threads:
        thread.join(timeout=30)
    second = instance.get_runs(filters=RunsFilter(tags={CHAIN_TAG: "second"}))[0]
    assert second.is_success
    assert waited >= 2.4  # created after 1.5 s, its op takes 1 s
    said = [r.getMessage() for r in caplog.records if r.name == "dagster_partlake.io_manager.chain"]
    waiting = f"Waiting for the run tagged {CHAIN_TAG}=second (not created yet) to succeed"
    assert any(m.startswith(waiting) for m in said), said
    assert any(f"run {second.run_id[:8]} (" in m and "succeeded" in m for m in said), said
    assert said[-1] == f"{RESUMED} after {waited:.1f} s of waiting; this run goes on."
    assert UPSTREAM_FAILED_TAG not in instance.get_run_by_id(run.run_id).tags  # type: ignore[union-attr]


def test_an_awaited_run_that_fails_ends_the_wait_with_an_error_and_a_tag(
    instance: DagsterInstance,
) -> None:
    run = waiting_run(instance, "broken")
    thread = later(0.0, upstream_fails, instance, "broken")
    with pytest.raises(UpstreamRunFailedError) as raised:
        wait_for_upstream_runs(instance, run, None, poll=0.05)
    thread.join(timeout=30)
    failed = instance.get_runs(filters=RunsFilter(tags={CHAIN_TAG: "broken"}))[0]
    message = str(raised.value)
    assert f"run {failed.run_id[:8]}" in message and "ended FAILURE" in message
    assert "computed and committed nothing" in message
    tags = instance.get_run_by_id(run.run_id).tags  # type: ignore[union-attr]
    assert tags[UPSTREAM_FAILED_TAG] == failed.run_id


def test_an_awaited_run_that_never_starts_ends_the_wait_after_the_start_timeout(
    instance: DagsterInstance,
) -> None:
    run = waiting_run(instance, "never")
    started = time.monotonic()
    with pytest.raises(UpstreamRunFailedError, match=r"had not started after 1 s \(not created"):
        wait_for_upstream_runs(instance, run, None, start_timeout=1.0, poll=0.05)
    assert time.monotonic() - started < 5
    assert instance.get_run_by_id(run.run_id).tags[UPSTREAM_FAILED_TAG] == "never"  # type: ignore[union-attr]


def test_a_re_execution_does_not_wait(instance: DagsterInstance) -> None:
    """Re-executing a run that ended because what it waited for failed (Dagster copies the
    tags) runs it, rather than failing again on the old failure."""
    parent = waiting_run(instance, "gone")
    child = DagsterRun(
        job_name="downstream",
        run_id=str(uuid.uuid4()),
        tags=dict(parent.tags),
        parent_run_id=parent.run_id,
        root_run_id=parent.run_id,
    )
    instance.add_run(child)
    assert waits_for(parent) == ["gone"]
    assert waits_for(child) == []
    assert wait_for_upstream_runs(instance, child, None, start_timeout=0.1) == 0.0


def test_an_instance_that_stops_answering_for_a_while_is_waited_out(
    instance: DagsterInstance, caplog: pytest.LogCaptureFixture
) -> None:
    """The run storage's database goes away (as PostgreSQL restarting) and comes back: the wait
    says so and goes on; gone for longer than the bound, its error ends the wait."""
    import os
    from pathlib import Path

    run = waiting_run(instance, "first")
    later(0.0, upstream_ok, instance, "first").join(timeout=30)
    runs_db = Path(instance.root_directory) / "history" / "runs.db"
    assert runs_db.is_file()
    aside = runs_db.with_name("runs.db.aside")

    def outage(seconds: float) -> threading.Thread:
        os.replace(runs_db, aside)  # queries now meet an empty database: "no such table"

        def back() -> None:
            time.sleep(seconds)
            os.replace(aside, runs_db)

        thread = threading.Thread(target=back, daemon=True)
        thread.start()
        return thread

    caplog.set_level(logging.INFO, logger="dagster_partlake.io_manager.chain")
    back = outage(1.0)
    waited = wait_for_upstream_runs(instance, run, None, poll=0.05, unreachable_timeout=30)
    back.join()
    assert waited >= 0.9
    assert "Could not read run statuses from the Dagster instance (OperationalError" in caplog.text
    assert "asking again for up to 30 s" in caplog.text

    back = outage(3.0)
    with pytest.raises(Exception, match="no such table"):
        wait_for_upstream_runs(instance, run, None, poll=0.05, unreachable_timeout=0.5)
    back.join()


def test_goes_on_once_the_awaited_run_has_committed_every_asset_before_it_ends(
    instance: DagsterInstance, caplog: pytest.LogCaptureFixture
) -> None:
    """The awaited run's asset is materialized, then its check step takes 3 s: what the
    waiting run reads is written, so it goes on while the awaited run is still running."""

    @asset
    def written() -> int:
        return 1

    @asset_check(asset=written)
    def slow_check() -> AssetCheckResult:
        time.sleep(3.0)
        return AssetCheckResult(passed=True)

    run = waiting_run(instance, "upstream")

    def go() -> None:
        job_def = Definitions(
            assets=[written], asset_checks=[slow_check]
        ).resolve_implicit_global_asset_job_def()
        job_def.execute_in_process(
            instance=instance,
            tags={CHAIN_TAG: "upstream"},
            asset_selection=[written.key],  # the run names its assets, as the sensor's runs do
        )

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    caplog.set_level(logging.INFO, logger="dagster_partlake.io_manager.chain")
    wait_for_upstream_runs(instance, run, None, poll=0.05)
    upstream = instance.get_runs(filters=RunsFilter(tags={CHAIN_TAG: "upstream"}))[0]
    assert not upstream.is_finished  # its check step is still sleeping
    assert "has committed every asset it writes" in caplog.text
    thread.join(timeout=30)
    assert instance.get_run_by_id(upstream.run_id).is_success  # type: ignore[union-attr]
