"""Reporting `partlake_fresh` results: only the verdicts that changed since the last report.

At a hundred thousand partitions per asset, reporting every verdict on every tick would cost
minutes of Dagster event writes. A `FreshnessReporter` remembers what it last said per asset:
the plan's stale partitions of that asset (the same mapping object the planning session keeps,
so an asset whose verdicts did not move is skipped by one identity test). A report then says
failed (warn) for each partition stale now with another verdict than before, and passed for each
partition no longer stale. Before its first report of an asset, it reads what the instance holds
(the latest result per partition), so a new process neither repeats every passed result nor
leaves a partition failed that became fresh while nothing reported. A partition a run already
reported passed (its check step) is not reported again, and one a run in progress planned to
check waits for that run: Dagster keeps a run's result in the row it planned when the run was
created, so a result recorded meanwhile would stay the newest and hide the run's. A report holds
at most `limit` results (None: no limit); the rest follow in the next ones.

Results are recorded under a report id, in place of a run id. Dagster takes a partition's latest
result to be its newest row (one per run id and partition; a second result under the same id
updates the row in place, which may then no longer be the newest). So a reporter keeps one id
until a partition comes up again, then takes a new one; on a SQLite instance each id is a file.

The sensor hands its reports to a `ReportWriter`, which records them in a thread of its own, in
order: a Dagster event costs milliseconds (tens on SQLite), so a tick that reported synchronously
would take longer the more verdicts changed, and a tick's cost must stay its plan's. The results
of the partitions a tick requests runs for are the exception: they must be recorded before those
runs exist (Dagster keeps a run's result in the row it plans when the run is created, and shows a
partition's newest row), so the tick records them itself (`ReportWriter.record_now`), after
taking back what the thread still holds for the same partitions (`ReportWriter.claim`); a run
whose partitions the thread is recording at that moment is requested on the next tick instead.
Nothing waits for the thread. A report that could not be recorded is said on the next tick, and
the reporter then starts over from what the instance holds.

`MISSING_CHECKS` and `checked_assets` are declared with the check (`freshness.check`, which a
code location imports anyway) and re-exported here.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dagster import AssetCheckKey, AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from dagster_partlake.compat import record_check_evaluations, targeting_latest_materializations
from dagster_partlake.freshness.check import MISSING_CHECKS as MISSING_CHECKS
from dagster_partlake.freshness.check import checked_assets as checked_assets
from dagster_partlake.freshness.check import (
    fresh_evaluation,
    retired_evaluation,
    stale_evaluation,
)
from dagster_partlake.metadata import FRESH_CHECK

if TYPE_CHECKING:
    from dagster import AssetCheckEvaluation

    from dagster_partlake.columnar.interner import Key
    from dagster_partlake.planning.planner import StalePartition
    from dagster_partlake.planning.session import PlanResult

# Results per report: what a sensor tick writes to the instance at most (about 330 a second).
DEFAULT_LIMIT = 5_000
# A run in these may still execute its check steps.
IN_PROGRESS = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


@dataclass(frozen=True)
class FreshnessReport:
    """The results to record now, and how many changed verdicts wait for the next report."""

    evaluations: tuple[AssetCheckEvaluation, ...]
    waiting: int
    report_id: str

    @property
    def failed(self) -> int:
        return sum(not e.passed for e in self.evaluations)


class FreshnessReporter:
    """What the `partlake_fresh` check last said of each partition, kept by a long-lived process
    (the sensor's code server) across plans."""

    def __init__(self, limit: int | None = DEFAULT_LIMIT) -> None:
        self.limit = limit
        # Per asset: the stale partitions last reported (the plan memo's own mapping).
        self._said: dict[str, Mapping[Key, StalePartition]] = {}
        # Partitions whose change was not reported yet (over the limit), per asset.
        self._backlog: dict[str, set[Key]] = {}
        # The id results are recorded under, and the partitions it holds a result for.
        self._report_id = _new_report_id()
        self._under_id: set[tuple[str, Key]] = set()

    def report(
        self,
        instance: DagsterInstance,
        result: PlanResult,
        verdicts: Mapping[str, Mapping[Key, StalePartition]],
        checked: Mapping[str, AssetKey],
        *,
        skip_passed: bool = True,
    ) -> FreshnessReport:
        """The results that tell what changed in `verdicts` (the stale partitions per asset of
        `result`'s plan, as the session memo holds them), for the assets in `checked` (name ->
        key of the assets that have the check). `skip_passed=False`: report a partition fresh
        again even if a run's result already says so (while earlier reports are still being
        recorded, the instance may not show the newest result yet)."""
        for name, key in checked.items():
            now = verdicts.get(name, _NONE)
            before = self._said.get(name)
            if before is None:
                before = _stored_failures(instance, key)
            if before is not now:
                keys = {k for k, item in now.items() if before.get(k) != item}
                keys.update(k for k in before if k not in now)
                if keys:
                    self._backlog.setdefault(name, set()).update(keys)
            self._said[name] = now
        evaluations: list[AssetCheckEvaluation] = []
        shown = _as_shown(result, set(self._backlog))
        for name in list(self._backlog):
            keys = self._backlog[name]
            room = None if self.limit is None else self.limit - len(evaluations)
            taken = [keys.pop() for _ in range(len(keys) if room is None else min(room, len(keys)))]
            if name in checked:
                passed, planned = _said_by_runs(instance, checked[name], self._said[name], taken)
                if not skip_passed:
                    passed = set()
                keys.update(planned)  # looked at again next tick, when the run may have said it
                evaluations.extend(
                    self._evaluation(name, p, checked[name], result, shown)
                    for p in taken
                    if p not in passed and p not in planned
                )
            if not keys or name not in checked:
                del self._backlog[name]
        waiting = sum(len(keys) for keys in self._backlog.values())
        reported = {(e.asset_key.to_user_string(), e.partition or "") for e in evaluations}
        if not reported.isdisjoint(self._under_id):
            self._report_id, self._under_id = _new_report_id(), set()
        self._under_id |= reported
        return FreshnessReport(tuple(evaluations), waiting, self._report_id)

    def _evaluation(
        self,
        name: str,
        partition: Key,
        key: AssetKey,
        result: PlanResult,
        shown: Mapping[tuple[str, Key], StalePartition],
    ) -> AssetCheckEvaluation:
        state = result.inputs.states.get(name, {}).get(partition)
        updated = state.last_updated if state is not None else None
        item = self._said[name].get(partition)
        retired = result.inputs.retired.get(name)
        if item is None and retired is not None and retired.contains(partition):
            return retired_evaluation(key, partition, retired.rule)
        if item is None:
            return fresh_evaluation(key, partition, updated)
        return stale_evaluation(key, shown.get((name, partition), item), updated)


_NONE: Mapping[Key, StalePartition] = {}


def record_report(instance: DagsterInstance, report: FreshnessReport) -> None:
    """Record a report's results in the instance, under its report id."""
    if report.evaluations:
        evaluations = targeting_latest_materializations(instance, report.evaluations)
        record_check_evaluations(instance, evaluations, report.report_id)


class ReportWriter:
    """Records reports in a thread of its own, in the order they come, through an instance of
    its own (a sensor's context instance is closed after its tick)."""

    def __init__(self, instance: DagsterInstance) -> None:
        # An instance without a ref (ephemeral, in memory) cannot be opened again: record
        # synchronously into it.
        self._instance = instance
        self.root_directory = instance.root_directory
        self._ref = None if instance.is_ephemeral else instance.get_ref()
        self._queue: deque[FreshnessReport] = deque()
        self._recording: FreshnessReport | None = None  # taken off the queue, being recorded
        self._ready = threading.Condition()  # guards the queue and `_recording`
        self._thread: threading.Thread | None = None
        self._errors: list[str] = []
        self._lock = threading.Lock()
        _writers.add(self)

    def submit(self, report: FreshnessReport) -> None:
        """Record `report` soon (at once, for an instance without a ref)."""
        if not report.evaluations:
            return
        if self._ref is None:
            self._record(self._instance, report)
            return
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="partlake-fresh-reports", daemon=True
                )
                self._thread.start()
            self._queue.append(report)
            self._ready.notify()

    def record_now(self, instance: DagsterInstance, report: FreshnessReport) -> None:
        """Record `report` in this thread, through `instance` (a tick's own results: those of
        the partitions it requests runs for, recorded before the runs are created)."""
        self._record(instance, report)

    def claim(
        self, partitions: Collection[tuple[str, Key]]
    ) -> tuple[set[tuple[str, Key]], list[FreshnessReport]]:
        """Take the results of `partitions` ((asset, partition) pairs) out of the reports not
        recorded yet, for the caller to record itself (before newer ones). Returns the pairs of
        the report being recorded at this moment (their results may land at any time now) and
        the results taken, as reports under their own ids."""
        if not partitions:
            return set(), []
        wanted = set(partitions)
        taken: list[FreshnessReport] = []
        with self._ready:
            kept: deque[FreshnessReport] = deque()
            for report in self._queue:
                mine = tuple(e for e in report.evaluations if _pair(e) in wanted)
                if not mine:
                    kept.append(report)
                    continue
                taken.append(replace(report, evaluations=mine, waiting=0))
                left = tuple(e for e in report.evaluations if _pair(e) not in wanted)
                if left:
                    kept.append(replace(report, evaluations=left))
            self._queue = kept
            recording = self._recording
        busy = set()
        if recording is not None:
            busy = {p for p in map(_pair, recording.evaluations) if p in wanted}
        return busy, taken

    @property
    def idle(self) -> bool:
        """Whether every submitted report is recorded (or failed)."""
        with self._ready:
            return not self._queue and self._recording is None

    def flush(self, timeout: float) -> bool:
        """Wait until every submitted report is recorded; False if `timeout` passed first (for
        a process that stops, and for tests: a sensor tick never waits for this)."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while self._queue or self._recording is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._ready.wait(left)
        return True

    def take_errors(self) -> list[str]:
        """Why reports could not be recorded since the last call."""
        with self._lock:
            errors, self._errors = self._errors, []
        return errors

    def _run(self) -> None:
        assert self._ref is not None
        instance = DagsterInstance.from_ref(self._ref)
        while True:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                report = self._recording = self._queue.popleft()
            try:
                self._record(instance, report)
            finally:
                with self._ready:
                    self._recording = None
                    self._ready.notify_all()

    def _record(self, instance: DagsterInstance, report: FreshnessReport) -> None:
        try:
            record_report(instance, report)
        except Exception as error:  # noqa: BLE001 - said on the next tick, never lost silently
            message = (
                f"{len(report.evaluations)} partlake_fresh result(s) could not be recorded "
                f"({type(error).__name__}: {error}); they are reported again from what the "
                "instance holds."
            )
            _log.warning(message)
            with self._lock:
                self._errors.append(message)


def _pair(evaluation: AssetCheckEvaluation) -> tuple[str, Key]:
    """(asset, partition) of a result, as the planner names them."""
    return evaluation.asset_key.to_user_string(), evaluation.partition


_log = logging.getLogger(__name__)
_writers: weakref.WeakSet[ReportWriter] = weakref.WeakSet()


def flush_reports(timeout: float = 30.0) -> bool:
    """Wait until every `ReportWriter` of this process has recorded what it was given (a code
    server that stops gives them this long); False if `timeout` passed first."""
    deadline = time.monotonic() + timeout
    return all(w.flush(max(0.0, deadline - time.monotonic())) for w in list(_writers))


atexit.register(flush_reports)


def _new_report_id() -> str:
    return f"partlake-fresh-{uuid.uuid4()}"


def _said_by_runs(
    instance: DagsterInstance,
    key: AssetKey,
    stale: Mapping[Key, StalePartition],
    partitions: Collection[Key],
) -> tuple[set[Key], set[Key]]:
    """Of `partitions`, the fresh ones whose latest result passed and still holds (a run's
    check step reported it after writing the partition), and the fresh ones whose latest
    execution a run still in progress planned (its check step will say it): nothing to say about
    either now."""
    fresh = [p for p in partitions if p is not None and p not in stale]
    if not fresh:
        return set(), set()
    from dagster_partlake.compat import CHECK_PASSED, CHECK_PLANNED

    infos = instance.event_log_storage.get_asset_check_partition_info(
        [AssetCheckKey(key, FRESH_CHECK)], partition_keys=fresh
    )
    passed: set[Key] = {
        i.partition_key
        for i in infos
        if i.latest_execution_status == CHECK_PASSED and i.is_current and i.partition_key
    }
    planning: dict[Key, str] = {
        i.partition_key: i.latest_planned_run_id
        for i in infos
        if i.latest_execution_status == CHECK_PLANNED and i.partition_key
    }
    if not planning:
        return passed, set()
    unfinished = {
        r.dagster_run.run_id
        for r in instance.get_run_records(
            filters=RunsFilter(run_ids=list(set(planning.values())), statuses=IN_PROGRESS)
        )
    }
    return passed, {p for p, run_id in planning.items() if run_id in unfinished}


def _as_shown(result: PlanResult, assets: Collection[str]) -> dict[tuple[str, Key], StalePartition]:
    """The plan's items of `assets` as `partlake plan --json` shows them (an incremental
    input's `because` names the range it reads, not the upstream partitions)."""
    if not assets:
        return {}
    return {(i.asset, i.partition): i for i in result.plan.items if i.asset in assets}


def _stored_failures(instance: DagsterInstance, key: AssetKey) -> Mapping[Key, StalePartition]:
    """The partitions whose latest stored `partlake_fresh` result failed, as stale with an
    unknown verdict (so each is reported again: passed if fresh now, its verdict if stale)."""
    from dagster_partlake.compat import CHECK_FAILED

    infos = instance.event_log_storage.get_asset_check_partition_info(
        [AssetCheckKey(key, FRESH_CHECK)]
    )
    return {
        info.partition_key: _UNKNOWN
        for info in infos
        if info.latest_execution_status == CHECK_FAILED
    }


class _Unknown:
    """A verdict no plan gave: unequal to every stale item, so a partition holding it is
    reported again."""

    def __eq__(self, other: object) -> bool:
        return other is self

    __hash__ = object.__hash__


_UNKNOWN: StalePartition = _Unknown()  # type: ignore[assignment]
