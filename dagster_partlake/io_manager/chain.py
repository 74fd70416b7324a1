"""Runs requested ahead of the runs they read: wait in the run, before any step, for those runs.

The invalidation sensor requests, in one tick, a closure's first runs and the runs that read
what those write (`RunPlan.chainable`), tagged `partlake/waits_for` with the first runs'
`partlake/chain` ids. Such a run is launched at once, so its launch and its Spark session start
while the runs it reads compute; `DeltaPartitionIOManager` then holds it here, at resource set-up
(before any step claims a pool slot), until those runs have committed what they write (every
asset of theirs materialized) or succeeded. Without this, the next level of a closure waits for
the sensor's next tick, a launch and its own Spark start-up.

A run waited for that fails or is canceled before that ends this run too, with
`UpstreamRunFailedError` and the tag `partlake/upstream_failed` (the sensor does not count that
as a failure of this run's partitions: they are requested again once what they read is fresh).
A run waited for that has not started after `START_TIMEOUT_SECONDS` (a full queue) ends it the
same way, freeing its place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterLogManager,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)

from dagster_partlake.errors import UpstreamRunFailedError
from dagster_partlake.metadata import (
    CHAIN_TAG,
    PARTITIONS_TAG,
    UPSTREAM_FAILED_TAG,
    WAITS_FOR_TAG,
)

_log = logging.getLogger(__name__)
START_TIMEOUT_SECONDS = 300.0  # a run waited for that is still queued after this: give up
POLL_SECONDS = 0.25
STILL_WAITING_EVERY_SECONDS = 30.0
UNREACHABLE_SECONDS = 120.0  # the instance not answering status queries this long: give up
RESUMED = "Every run this run waits for has written what it reads"  # the line ending the wait
FAILED = (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED, DagsterRunStatus.CANCELING)
NOT_STARTED = (DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING)


def waits_for(run: DagsterRun) -> list[str]:
    """The chain ids of the runs `run` was requested to wait for (none: an ordinary run, or a
    re-execution, which carries its parent's tags but was started by hand or by a retry, after
    the runs its parent waited for ended)."""
    if run.parent_run_id is not None:
        return []
    return [v for v in (run.tags or {}).get(WAITS_FOR_TAG, "").split(",") if v]


@dataclass
class _Awaited:
    chain_id: str
    run: DagsterRun | None = None  # None until created

    def describe(self) -> str:
        if self.run is None:
            return f"the run tagged {CHAIN_TAG}={self.chain_id} (not created yet)"
        assets = ", ".join(k.to_user_string() for k in self.run.asset_selection or ())
        keys = self.run.tags.get(PARTITIONS_TAG, "")
        return f"run {self.run.run_id[:8]} ({assets}{f' [{keys}]' if keys else ''})"


def wait_for_upstream_runs(
    instance: DagsterInstance,
    run: DagsterRun,
    log: DagsterLogManager | None,
    *,
    start_timeout: float = START_TIMEOUT_SECONDS,
    poll: float = POLL_SECONDS,
    unreachable_timeout: float = UNREACHABLE_SECONDS,
) -> float:
    """Block until every run `run` waits for has succeeded or committed every asset it writes
    (what is left of it then does not change what `run` reads), saying what it waits for; the
    seconds waited.

    Raises:
        UpstreamRunFailedError: one of them failed or was canceled, or has not started after
            `start_timeout` seconds; `run` is tagged `partlake/upstream_failed` first.
        Exception: the instance's error, once it has not answered status queries for
            `unreachable_timeout` seconds (a database restarting is waited out).
    """
    say = log.info if log is not None else _log.info
    awaited = [_Awaited(chain_id) for chain_id in waits_for(run)]
    if not awaited:
        return 0.0
    started = time.monotonic()
    said: dict[str, str] = {}  # chain id -> the status last logged
    last_said = started
    unreachable: float | None = None  # since when the instance has not answered
    while awaited:
        for item in list(awaited):
            try:
                found = instance.get_runs(
                    filters=RunsFilter(tags={CHAIN_TAG: item.chain_id}), limit=1
                )
            except Exception as error:  # the instance's database restarting, say: ask again
                unreachable = _unreachable(error, unreachable, unreachable_timeout, say)
                break
            unreachable = None
            item.run = found[0] if found else None
            status = item.run.status if item.run is not None else None
            waited = time.monotonic() - started
            if status == DagsterRunStatus.SUCCESS:
                say(f"{item.describe()} succeeded.")
                awaited.remove(item)
                continue
            if status == DagsterRunStatus.STARTED and _all_written(instance, item.run):
                # What it writes is committed; what is left of it (check steps, tear-down,
                # Dagster's bookkeeping) does not change what this run reads.
                say(f"{item.describe()} has committed every asset it writes.")
                awaited.remove(item)
                continue
            if status in FAILED or (status in (None, *NOT_STARTED) and waited > start_timeout):
                _give_up(instance, run, item, status, waited)
            if said.get(item.chain_id) != _status(item):
                said[item.chain_id] = _status(item)
                say(
                    f"Waiting for {item.describe()} to succeed ({_status(item)}): it writes "
                    "partitions this run reads."
                )
        if not awaited:
            break
        if time.monotonic() - last_said >= STILL_WAITING_EVERY_SECONDS:
            last_said = time.monotonic()
            say(
                f"Still waiting after {last_said - started:.0f} s for "
                + "; ".join(f"{a.describe()} ({_status(a)})" for a in awaited)
            )
        time.sleep(poll)
    waited = time.monotonic() - started
    say(f"{RESUMED} after {waited:.1f} s of waiting; this run goes on.")
    return waited


def _unreachable(
    error: Exception, since: float | None, timeout: float, say: Callable[[str], None]
) -> float:
    """Note a failed status query; raise it once the instance has not answered for `timeout`
    seconds. When it first stopped answering."""
    now = time.monotonic()
    if since is None:
        say(
            f"Could not read run statuses from the Dagster instance ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}); asking again for up to "
            f"{timeout:.0f} s."
        )
        return now
    if now - since > timeout:
        raise error
    return since


def _all_written(instance: DagsterInstance, run: DagsterRun | None) -> bool:
    """Whether `run` has recorded a materialization of every asset it targets: each asset's
    step commits all its partitions at once, and records them after the commit."""
    if run is None or not run.asset_selection:
        return False
    records = instance.get_records_for_run(
        run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
    ).records
    written = {
        r.event_log_entry.dagster_event.asset_key
        for r in records
        if r.event_log_entry.dagster_event
    }
    return set(run.asset_selection) <= written


def _status(item: _Awaited) -> str:
    return item.run.status.value if item.run is not None else "not created"


def _give_up(
    instance: DagsterInstance,
    run: DagsterRun,
    item: _Awaited,
    status: DagsterRunStatus | None,
    waited: float,
) -> None:
    upstream_id = item.run.run_id if item.run is not None else item.chain_id
    instance.add_run_tags(run.run_id, {UPSTREAM_FAILED_TAG: upstream_id})
    if status in FAILED:
        what = f"ended {status.value}" if status is not None else "failed"
    else:
        what = f"had not started after {waited:.0f} s ({_status(item)}; the run queue is full)"
    raise UpstreamRunFailedError(
        f"{item.describe()}, which writes partitions this run reads, {what}. This run computed "
        "and committed nothing; the invalidation sensor requests its partitions again once "
        "what they read is fresh."
    )
