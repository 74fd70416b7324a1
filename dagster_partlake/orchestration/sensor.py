"""`build_invalidation_sensor`: request runs for exactly the stale asset partitions.

Each tick: (1) a quick check, from the cursor, whether any table got a new commit or had the
commit it was read at changed (two `stat`s per Delta table), a folder source changed, a root
asset gained partitions, a requested run is still pending, or a retry is due; if none,
SkipReason at once, without planning or reading the event log. (2) Otherwise sync the partition
state, plan, leave out partitions of runs (and backfills) already in flight and partitions
backing off after failures, and request what can run now (`orchestration.run_requests`'s
`next_requests`, which a run of the refresh also asks for its next level, `orchestration.chain`).
A tick never sleeps, polls or waits for a thread: its time is its own work (the quick check,
planning, reporting, requesting).

How a refresh runs is the sensor's `refresh`:

- `"runs"` (default): the runs of the plan that wait for no other run
  (`dagster_partlake.planning.runs`, the same runs `partlake plan` shows), upstream before
  downstream, partitions of one asset batched as its backfill policy allows. The next level of
  a closure is requested by the first tick after what it reads is committed: the cursor stays
  `pending` while runs are in flight, and the sensor ticks on every pass of the daemon
  (`minimum_interval_seconds`), so a level follows the one before within one pass (5 s at most).
  Every run of one refresh carries the same `partlake/refresh` tag (the UI's run list filtered
  by it shows the refresh as one chain), and a failed run stops its downstream: what reads its
  partitions stays stale, and is not requested, until it succeeds.
- `"backfill"`: one Dagster asset backfill per verdict (`RunRequest.for_asset_graph_subset`)
  covering every stale partition whose runs do not hang on an early cutoff or on an earlier
  partition of the same asset (a merge's later days: Dagster would run them side by side); the
  backfill daemon runs it level by level, the UI shows it as one backfill with a status per
  partition, and a failed partition fails its downstream in the backfill. Slower: Dagster's
  backfill daemon takes one step of every backfill every 30 s (docs: Operating the daemon).

Runs carry the tags `partlake/sensor`, `partlake/refresh`, `partlake/reasons` and
`partlake/partitions`, visible in the UI. The partlake_fresh results of the partitions a tick
requests are recorded by the tick itself, before their runs exist; the others by a thread
(`dagster_partlake.freshness.report`).

A partition whose run failed is retried after `retry_base_seconds * 2**(failures-1)` (capped at
`retry_max_seconds`), not every tick; the retry carries `partlake/attempt` and a run key of its
own. At most `max_runs_in_flight` of its runs are queued or running at once. A table whose Delta
log cannot be read holds back itself and its downstream closure (nothing is requested there); the
tick logs the error, and fails with it when it has nothing else to request, so the UI shows it
until the log is repaired.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from dagster_partlake.compat import backfills_in_progress
from dagster_partlake.delta.state import StateCache
from dagster_partlake.errors import TableUnreadableError
from dagster_partlake.faults import fault_point
from dagster_partlake.freshness.report import (
    MISSING_CHECKS,
    FreshnessReport,
    FreshnessReporter,
    ReportWriter,
    checked_assets,
)
from dagster_partlake.metadata import REFRESH_TAG, UPSTREAM_FAILED_TAG
from dagster_partlake.orchestration.chain import request_next_level
from dagster_partlake.orchestration.run_requests import (
    SENSOR_TAG,
    SENSORS,
    Refresh,
    RefreshSettings,
    failed_partition,
    failure_key,
    in_flight_runs,
    next_requests,
    run_partitions,
)
from dagster_partlake.planning.graph import LakeGraph, repository_lake
from dagster_partlake.planning.planner import Key, StalePartition, render_partition
from dagster_partlake.planning.runs import PlannedRun
from dagster_partlake.planning.session import PlanningSession, PlanResult
from dagster_partlake.processes import on_run_committed
from dagster_partlake.spec.load import checked_selection
from dagster_partlake.storage.location import lake_location

if TYPE_CHECKING:
    from dagster import AssetCheckEvaluation, DagsterInstance

    from dagster_partlake.compat import AssetGraph

# The partlake_fresh results a tick records itself (those of the partitions it requests runs
# for), at most: about a second of Dagster event writes on SQLite. Past this, the runs' own
# check steps say them (the UI shows those partitions' checks in progress from the start).
MAX_RECORDED_IN_TICK = 300

# One state cache per sensor and one planning session per sensor and lake per process: the code
# server keeps them across ticks, so a tick re-reads and re-converts only the tables whose version
# moved, and plans only what that changed.
_caches: dict[str, StateCache] = {}
_states: dict[tuple[str, str], _State] = {}


@dataclass
class _State:
    """What one sensor keeps across ticks for one code location and lake."""

    asset_graph: AssetGraph  # the code location it was made for (a reload makes a new one)
    session: PlanningSession
    reporter: FreshnessReporter
    writer: ReportWriter | None = None  # made at the first report, with the tick's instance


@dataclass
class _Cursor:
    """What a tick leaves for the next one (stored as JSON by Dagster)."""

    versions: dict[str, int] = field(default_factory=dict)  # table versions planned against
    horizon: dict[str, str] = field(default_factory=dict)  # root assets' newest partitions
    # json([asset, key]) -> [failures so far, time of the next retry]
    failures: dict[str, list[float]] = field(default_factory=dict)
    pending: bool = False  # runs requested, running or waiting: plan again next tick
    checked_at: float = 0.0
    failures_seen_until: float = 0.0  # update time of the newest failed run already counted
    refresh: str = ""  # the `partlake/refresh` id of the refresh in progress ("" when fresh)

    @classmethod
    def from_json(cls, text: str | None) -> _Cursor:
        data = json.loads(text) if text else {}
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        cursor = cls(**known)
        if "failures_seen_until" not in data:  # a cursor of an earlier version
            cursor.failures_seen_until = cursor.checked_at
        return cursor

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def _state(
    context: SensorEvaluationContext, name: str, root: str | None, io_manager_key: str
) -> _State:
    """The code location's planning session and reporter, made anew only when the code location
    was reloaded (the state cache is kept); the lake root is the sensor's `root`, else the code
    location's DeltaPartitionIOManager's, else the default (as for `partlake plan` on the same
    module)."""
    repository = context.repository_def
    assert repository is not None, "the sensor needs its code location (repository_def)"
    asset_graph = repository.asset_graph
    # Resolved on every tick: the default root follows $PARTLAKE_HOME.
    configured = repository_lake(repository, io_manager_key)
    lake = lake_location(
        root or configured, configured.storage_options if configured is not None else None
    )
    resolved = lake.uri
    state = _states.get((name, resolved))
    if state is None or state.asset_graph is not asset_graph:
        # The sensor's `root` alone overrides where the tables are; else each asset's IO
        # manager says (its default lake: the one under `io_manager_key`).
        graph = LakeGraph(
            asset_graph=asset_graph, root=lake if root else None, io_manager_key=io_manager_key
        )
        session = PlanningSession(graph, _caches.setdefault(name, StateCache()))
        reporter = state.reporter if state is not None else FreshnessReporter()
        writer = state.writer if state is not None else None
        state = _states[(name, resolved)] = _State(asset_graph, session, reporter, writer)
    return state


def build_invalidation_sensor(
    name: str = "partlake_invalidation",
    *,
    root: str | None = None,
    minimum_interval_seconds: int = 2,
    retry_base_seconds: int = 60,
    retry_max_seconds: int = 3600,
    max_runs_in_flight: int = 20,
    io_manager_key: str = "io_manager",
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
    max_chained_runs: int | None = None,
    watch_seconds: float | None = None,
    refresh: Refresh = "runs",
) -> SensorDefinition:
    """A sensor that keeps every partitioned Delta asset of the code location fresh.

    Args:
        name: sensor name (also the value of the `partlake/sensor` run tag).
        root: lake root; default: the code location's `DeltaPartitionIOManager(root=...)`, else
            `$PARTLAKE_HOME`, else `.partlake`.
        minimum_interval_seconds: least time between ticks. The Dagster daemon evaluates
            sensors every 5 s at most; with the default, 2 s, this one ticks on every pass, so
            a source commit, or the commit the next level of a refresh reads, is acted
            on within 5 s. A tick that finds no new commit costs two `stat`s per table.
        retry_base_seconds: wait before retrying a failed partition; doubles per failure.
        retry_max_seconds: longest wait between retries.
        max_runs_in_flight: most runs of this sensor queued or running at once; further runs
            (e.g. the years of partitions of a new asset) are requested as those finish.
        io_manager_key: the resource key of the code location's `DeltaPartitionIOManager`,
            whose `root` is the lake's.
        default_status: whether the sensor starts running when the code location loads.
        max_chained_runs: deprecated and ignored: runs are no longer requested ahead of the
            runs they read; the next level of a refresh is requested by the first tick after
            what it reads is committed (accepted with a warning).
        watch_seconds: deprecated and ignored: a tick no longer watches the tables; it ticks
            on every pass of the daemon (`minimum_interval_seconds`) and returns at once
            (accepted with a warning).
        refresh: `"runs"` (default): the sensor requests each level of a refresh as runs, the
            next level once what it reads is committed; `"backfill"`: one Dagster asset
            backfill per verdict, run by Dagster's backfill daemon (slower: it steps every
            30 s). See the module docstring.

    Example:
        .. code-block:: python

            defs = Definitions(assets=[...], sensors=[build_invalidation_sensor()], ...)
    """
    _warn_deprecated(max_chained_runs, watch_seconds)
    settings = RefreshSettings(
        name=name,
        root=root,
        retry_base_seconds=retry_base_seconds,
        retry_max_seconds=retry_max_seconds,
        max_runs_in_flight=max_runs_in_flight,
        io_manager_key=io_manager_key,
        refresh=refresh,
    )

    # A run this sensor requests asks for the next level of its refresh once it has committed
    # (`orchestration.chain`): the run's process knows the sensor's settings by its name.
    SENSORS[name] = settings
    on_run_committed(request_next_level)

    # The daemon refuses run requests from a sensor without a target; an asset selection makes
    # Dagster run each request's assets in the code location's asset job. It is all assets, and
    # checks their partlake settings when the code location loads (`spec.load`).
    @sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        asset_selection=checked_selection(),
        description="Requests runs for the asset partitions that are out of date (partlake).",
    )
    def _invalidation(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        return evaluate(context, settings)

    return _invalidation


def _warn_deprecated(max_chained_runs: int | None, watch_seconds: float | None) -> None:
    if max_chained_runs is not None:
        warnings.warn(
            "build_invalidation_sensor(max_chained_runs=...) is deprecated and ignored: no run "
            "starts early to wait for another any more; the next level of a refresh is requested "
            "by the first tick after what it reads is committed. Remove the argument.",
            DeprecationWarning,
            stacklevel=3,
        )
    if watch_seconds is not None:
        warnings.warn(
            "build_invalidation_sensor(watch_seconds=...) is deprecated and ignored: a tick no "
            "longer watches the tables; the sensor ticks on every pass of the daemon "
            "(minimum_interval_seconds) and each tick returns at once. Remove the argument.",
            DeprecationWarning,
            stacklevel=3,
        )


def evaluate(
    context: SensorEvaluationContext, settings: RefreshSettings
) -> SensorResult | SkipReason:
    """One tick of the sensor (see the module docstring).

    Raises:
        TableUnreadableError: a table cannot be read and nothing else can be requested, so the
            tick fails with its message (with requests, the message is logged on the tick).
    """
    now = time.time()
    cursor = _Cursor.from_json(context.cursor)
    state = _state(context, settings.name, settings.root, settings.io_manager_key)
    session, graph, instance = state.session, state.session.graph, context.instance
    horizon = graph.horizon(instance)
    if _nothing_moved(cursor, session, horizon, now):
        return SkipReason("No new commits in any table since the last tick: nothing to plan.")

    fault_point("sensor_tick")
    in_flight = in_flight_runs(instance, settings.name)
    failures, seen_until = _count_failures(instance, graph, settings, cursor, now)
    result = session.plan(dynamic_partitions_store=instance)
    stale = {failure_key(i.asset, i.partition) for i in result.plan.items}
    held = {a for u in result.plan.unreadable for a in u.held}
    # Fresh again: forget. Held behind an unreadable table: keep, it was neither judged nor run.
    failures = {k: v for k, v in failures.items() if k in stale or failed_partition(k)[0] in held}
    backfills: list[tuple[str, list[tuple[str, Key]]]] = []
    if settings.refresh == "backfill":
        backfills = _backfills(instance, graph, settings.name, state.asset_graph)
    refresh_id = (cursor.refresh or uuid.uuid4().hex[:12]) if result.plan.items else ""
    report = _report(context, state, result)
    level = next_requests(
        session,
        result,
        state.asset_graph,
        settings,
        refresh_id=refresh_id,
        in_flight=in_flight,
        failures=failures,
        now=now,
        backfills=backfills,
        before_requesting=lambda chosen: _record_requested(context, state, report, chosen),
    )
    new_cursor = _Cursor(
        versions=result.versions,
        horizon=horizon,
        failures=failures,
        pending=bool(
            level.requests or in_flight or backfills or level.runs.runs or level.runs.waiting
        )
        or report.waiting > 0,
        checked_at=now,
        failures_seen_until=seen_until,
        refresh=refresh_id,
    ).to_json()
    errors = [u.message for u in result.plan.unreadable]
    for message in errors:
        context.log.error(message)
    for absent in result.plan.absent_sources:
        context.log.warning(absent.message)
    if level.deferred:
        context.log.info(
            f"{len(level.deferred)} run(s) requested next tick: partlake_fresh results of their "
            "partitions were being recorded at this moment, and must land before the runs exist."
        )
    if not level.requests:
        if errors:
            raise TableUnreadableError(" ".join(errors))
        reason = _skip_text(
            result.plan.items, level.running, level.backing_off, failures, now, backfills
        )
        context.log.info(reason)
        return SensorResult(skip_reason=SkipReason(reason), cursor=new_cursor)
    _log_requested(context, level.chosen, settings.refresh, refresh_id)
    return SensorResult(run_requests=level.requests, cursor=new_cursor)


def _nothing_moved(
    cursor: _Cursor, session: PlanningSession, horizon: dict[str, str], now: float
) -> bool:
    """The quick check: no table moved, no root asset gained partitions, nothing is pending and
    no retry is due since the tick that left `cursor`."""
    retry_due = any(retry_at <= now for _, retry_at in cursor.failures.values())
    return bool(
        cursor.versions
        and not cursor.pending
        and not retry_due
        and horizon == cursor.horizon
        and not session.moved(cursor.versions)
    )


def _backfills(
    instance: DagsterInstance, graph: LakeGraph, name: str, asset_graph: AssetGraph
) -> list[tuple[str, list[tuple[str, Key]]]]:
    """This sensor's asset backfills in progress, each with the (asset, partition) pairs it
    targets, in the planner's names."""
    found = []
    for backfill_id, pairs in backfills_in_progress(instance, {SENSOR_TAG: name}, asset_graph):
        named = [(key.to_user_string(), partition) for key, partition in pairs]
        found.append((backfill_id, [(a, k) for a, k in named if a in graph.assets]))
    return found


def _record_requested(
    context: SensorEvaluationContext,
    state: _State,
    report: FreshnessReport,
    runs: Sequence[PlannedRun],
) -> tuple[PlannedRun, ...]:
    """Record now the partlake_fresh results of the partitions `runs` write, and hand the rest
    of `report` to the writer's thread: Dagster shows a partition's newest result row, and a
    run's row is made when the run is created, so a result recorded after it would hide the
    run's own until the next tick. The runs to request now; the others wait for the next tick
    (the thread was recording results of their partitions at this moment)."""
    writer = state.writer
    assert writer is not None  # made by `_report`
    requested = {(i.asset, i.partition) for run in runs for i in run.items}
    busy, earlier = writer.claim(requested)
    now = tuple(r for r in runs if not any((i.asset, i.partition) in busy for i in r.items))
    mine = {(i.asset, i.partition) for run in now for i in run.items}
    own: list[AssetCheckEvaluation] = []
    rest: list[AssetCheckEvaluation] = []
    for evaluation in report.evaluations:
        pair = (evaluation.asset_key.to_user_string(), evaluation.partition)
        (own if pair in mine else rest).append(evaluation)
    # Taken back from the thread: those of runs left for the next tick go back to it.
    reports = [replace(r, evaluations=_of(r, mine)) for r in earlier]
    rest_earlier = [replace(r, evaluations=_of(r, requested - mine)) for r in earlier]
    reports.append(FreshnessReport(tuple(own), 0, report.report_id))
    count = sum(len(r.evaluations) for r in reports)
    if count > MAX_RECORDED_IN_TICK:
        # Left to the runs' own check steps: a result recorded after a run exists hides its own.
        context.log.info(
            f"{count} partlake_fresh results of requested partitions: the runs' own check "
            f"steps say them (at most {MAX_RECORDED_IN_TICK} are recorded by a tick)."
        )
        reports = []
    started = time.perf_counter()
    for part in reports:
        writer.record_now(context.instance, part)
    if count and reports:
        context.log.info(
            f"Recorded {count} partlake_fresh result(s) of the requested partitions in "
            f"{(time.perf_counter() - started) * 1000:,.0f} ms."
        )
    for part in rest_earlier:
        writer.submit(part)
    writer.submit(FreshnessReport(tuple(rest), report.waiting, report.report_id))
    return now


def _of(report: FreshnessReport, pairs: set[tuple[str, Key]]) -> tuple[AssetCheckEvaluation, ...]:
    """The results of `report` about `pairs` ((asset, partition))."""
    return tuple(
        e for e in report.evaluations if (e.asset_key.to_user_string(), e.partition) in pairs
    )


# Lines a tick logs about the partitions it requests, at most.
MAX_LOGGED = 50


def _log_requested(
    context: SensorEvaluationContext, runs: Sequence[PlannedRun], refresh: Refresh, refresh_id: str
) -> None:
    """What the tick requests, then one tick log line per requested partition, in
    `partlake plan`'s words: `clean_events[2024-01-02|eu] upstream_changed because
    raw_events[2024-01-02|eu]`."""
    items = [item for run in runs for item in run.items]
    what = "one asset backfill" if refresh == "backfill" else f"{len(runs)} run(s)"
    context.log.info(
        f"Refresh {refresh_id}: {what} for {len(items)} stale asset partition(s) "
        f"(tag {REFRESH_TAG}={refresh_id})."
    )
    for item in items[:MAX_LOGGED]:
        because = f" because {', '.join(item.because)}" if item.because else ""
        context.log.info(f"{render_partition(item.asset, item.partition)} {item.reason}{because}")
    if len(items) > MAX_LOGGED:
        context.log.info(f"... and {len(items) - MAX_LOGGED} more (`partlake plan` lists them)")


def _skip_text(
    stale: Sequence[StalePartition],
    running: Mapping[str, set[Key]],
    backing_off: Mapping[str, set[Key]],
    failures: Mapping[str, list[float]],
    now: float,
    backfills: Sequence[tuple[str, Sequence[tuple[str, Key]]]] = (),
) -> str:
    """Why a tick that planned requests nothing: everything is fresh, or what the stale
    partitions wait for (runs or backfills in flight, a retry)."""
    if not stale:
        return "Everything is fresh."
    in_flight = sum(1 for i in stale if i.partition in running.get(i.asset, ()))
    retrying = [i for i in stale if i.partition in backing_off.get(i.asset, ())]
    parts = []
    if in_flight:
        where = "runs in flight"
        if backfills:
            where += f" or backfill(s) {', '.join(b for b, _ in backfills)}"
        parts.append(f"{in_flight} in {where}")
    if retrying:
        first = min(retrying, key=lambda i: failures[failure_key(i.asset, i.partition)][1])
        due = failures[failure_key(first.asset, first.partition)][1] - now
        parts.append(
            f"{len(retrying)} backing off after a failed run (next retry: "
            f"{render_partition(first.asset, first.partition)} in {due:,.0f} s)"
        )
    rest = len(stale) - in_flight - len(retrying)
    if rest:
        parts.append(f"{rest} reading those")
    return (
        f"{len(stale)} stale asset partition(s) wait for running or backing-off runs: "
        f"{'; '.join(parts)}."
    )


def _report(context: SensorEvaluationContext, state: _State, result: PlanResult) -> FreshnessReport:
    """The partlake_fresh results of the verdicts that changed; a one-line warning when the
    code location registers no partlake_fresh check."""
    repository = context.repository_def
    assert repository is not None
    checked = checked_assets(repository.asset_graph.asset_check_keys)
    graph = state.session.graph
    if not checked and any(
        a.partitions_def is not None and not a.is_source for a in graph.assets.values()
    ):
        context.log.warning(MISSING_CHECKS)
    memo = state.session.memo
    assert memo is not None  # a plan was just made
    if state.writer is None or state.writer.root_directory != context.instance.root_directory:
        state.writer = ReportWriter(context.instance)
    errors = state.writer.take_errors()
    for message in errors:
        context.log.warning(message)
    if errors:  # what was said is unknown now: start over from what the instance holds
        state.reporter = FreshnessReporter()
    report = state.reporter.report(
        context.instance, result, memo.verdicts, checked, skip_passed=state.writer.idle
    )
    # Recorded by the tick and the writer (`_record_requested`) rather than returned as the
    # tick's asset_events, which Dagster 1.13 would refuse for a partition reported before
    # (`compat.record_check_evaluations`).
    if report.evaluations:
        context.log.info(
            f"Reporting {len(report.evaluations)} partlake_fresh result(s): {report.failed} "
            f"stale, {len(report.evaluations) - report.failed} fresh"
            + (f"; {report.waiting} more next tick" if report.waiting else "")
        )
    return report


def _count_failures(
    instance: DagsterInstance,
    graph: LakeGraph,
    settings: RefreshSettings,
    cursor: _Cursor,
    now: float,
) -> tuple[dict[str, list[float]], float]:
    """The cursor's failures plus the runs that failed since, each counted once; and the update
    time of the newest failed run counted."""
    name = settings.name
    retry_base_seconds, retry_max_seconds = settings.retry_base_seconds, settings.retry_max_seconds
    failures = dict(cursor.failures)
    seen_until = cursor.failures_seen_until
    records = instance.get_run_records(
        filters=RunsFilter(
            tags={SENSOR_TAG: name},
            statuses=[DagsterRunStatus.FAILURE],
            updated_after=dt.datetime.fromtimestamp(seen_until, tz=dt.UTC) if seen_until else None,
        )
    )
    newest = seen_until
    for record in records:
        updated = record.update_timestamp.timestamp()
        if updated <= seen_until:
            continue
        newest = max(newest, updated)
        if UPSTREAM_FAILED_TAG in record.dagster_run.tags:
            # A run of an earlier version, requested ahead of a run it waited for, which failed
            # (that run's failure counts).
            continue
        for asset, key in run_partitions(graph, record.dagster_run):
            count = int(failures.get(failure_key(asset, key), [0, 0])[0]) + 1
            wait = min(retry_max_seconds, retry_base_seconds * 2 ** (count - 1))
            failures[failure_key(asset, key)] = [count, now + wait]
    return failures, newest
