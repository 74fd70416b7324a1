"""`build_invalidation_sensor`: request runs for exactly the stale asset partitions.

Each tick: (1) a quick check, from the cursor, whether any table got a new commit or had the
commit it was read at changed (two `stat`s per Delta table), a folder source changed, a root
asset gained partitions, a requested run is still pending, or a retry is due; if none,
SkipReason at once, without planning or reading the event log. (2) Otherwise sync the partition
state, plan, leave out partitions of runs already queued or running and partitions backing off
after failures, and request the runs of the plan that wait for no other run
(`dagster_partlake.planning.runs`, the same runs `partlake plan` shows): upstream before downstream,
partitions of one asset batched as its backfill policy allows. With them, up to
`max_chained_runs` runs of the next levels that wait only for those: they carry
`partlake/waits_for` and wait in their run until those have committed what they write
(`dagster_partlake.io_manager.chain`), so their start-up overlaps that work instead of following
the next tick. Runs carry the tags `partlake/sensor`, `partlake/reasons` and
`partlake/partitions`, visible in the UI. (3) With `watch_seconds`, a tick that requests nothing
keeps checking until then (every `WATCH_POLL_SECONDS`) whether a table moved or one of its runs
in flight ended, and if so goes back to (1): a commit or a run's end between the daemon's passes
(every 5 s) is acted on at once instead of at the next pass.

A partition whose run failed is retried after `retry_base_seconds * 2**(failures-1)` (capped at
`retry_max_seconds`), not every tick; the retry carries `partlake/attempt` and a run key of its
own. At most `max_runs_in_flight` of its runs are queued or running at once. A table whose Delta
log cannot be read holds back itself and its downstream closure (nothing is requested there); the
tick logs the error, and fails with it when it has nothing else to request, so the UI shows it
until the log is repaired.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from dagster import (
    DagsterRun,
    DagsterRunStatus,
    DefaultSensorStatus,
    PartitionKeyRange,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from dagster_partlake.compat import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)
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
from dagster_partlake.layout import resolve_root
from dagster_partlake.metadata import CHAIN_TAG, UPSTREAM_FAILED_TAG, WAITS_FOR_TAG
from dagster_partlake.planning.graph import LakeGraph, repository_root
from dagster_partlake.planning.planner import Key, StalePartition, render_partition
from dagster_partlake.planning.runs import PlannedRun
from dagster_partlake.planning.session import PlanningSession, PlanResult
from dagster_partlake.spec.load import checked_selection

if TYPE_CHECKING:
    from dagster import DagsterInstance, DagsterRun

    from dagster_partlake.compat import AssetGraph

SENSOR_TAG = "partlake/sensor"
ATTEMPT_TAG = "partlake/attempt"  # on retries: 2 for the first retry of a failed partition
PRIORITY_TAG = "dagster/priority"  # Dagster's run queue starts higher values first (default 0)
IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]

# How often a watching tick re-checks the tables (two `stat`s per table).
WATCH_POLL_SECONDS = 0.2
# ... and whether a run of the sensor in flight ended, every this many checks (a query of the
# run storage: once a second).
RUNS_POLL_EVERY = 5
# Dagster ends a sensor evaluation after 60 s (its gRPC timeout): a tick must end well before.
MAX_WATCH_SECONDS = 45.0

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
    resolved = resolve_root(root or repository_root(repository, io_manager_key))
    state = _states.get((name, resolved))
    if state is None or state.asset_graph is not asset_graph:
        graph = LakeGraph(asset_graph=asset_graph, root=resolved)
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
    max_chained_runs: int = 4,
    watch_seconds: float = 0.0,
) -> SensorDefinition:
    """A sensor that keeps every partitioned Delta asset of the code location fresh.

    Args:
        name: sensor name (also the value of the `partlake/sensor` run tag).
        root: lake root; default: the code location's `DeltaPartitionIOManager(root=...)`, else
            `$PARTLAKE_HOME`, else `.partlake`.
        minimum_interval_seconds: least time between ticks. The Dagster daemon evaluates
            sensors every 5 s at most; with the default, 2 s, this one ticks on every pass (at
            5 s, half its passes fall just under the minimum and are skipped). A tick that
            finds no new commit costs two `stat`s per table, and a run that finishes is
            followed by the runs that wait for it within seconds.
        retry_base_seconds: wait before retrying a failed partition; doubles per failure.
        retry_max_seconds: longest wait between retries.
        max_runs_in_flight: most runs of this sensor queued or running at once; further runs
            (e.g. the years of partitions of a new asset) are requested as those finish.
        io_manager_key: the resource key of the code location's `DeltaPartitionIOManager`,
            whose `root` is the lake's.
        default_status: whether the sensor starts running when the code location loads.
        max_chained_runs: most runs per tick requested ahead of the runs they read (the next
            levels of a closure, when whether they run does not hang on an early cutoff): each
            is launched at once, starts Spark, and waits in its run until those have committed
            (`dagster_partlake.io_manager.chain`), instead of waiting for a later tick. 0:
            request a run only once the runs it reads have ended.
        watch_seconds: how long a tick that requests nothing keeps checking (every
            `WATCH_POLL_SECONDS`) whether a table got a commit or one of its runs in flight
            ended, and evaluates again when one did. The daemon starts a pass every 5 s; a
            watch of about 4.5 s covers the time between its passes, so a source rewrite (or
            the end of a run that others wait for) is acted on within a second instead of
            0-5 s later. Each such tick then lasts that long (one code-server thread watching;
            the daemon evaluates its other sensors after it unless `sensors: use_threads`).
            0 (default): skip at once. At most 45 s (Dagster ends an evaluation after 60 s).

    Example:
        .. code-block:: python

            defs = Definitions(assets=[...], sensors=[build_invalidation_sensor()], ...)
    """
    settings = _Settings(
        name=name,
        root=root,
        retry_base_seconds=retry_base_seconds,
        retry_max_seconds=retry_max_seconds,
        max_runs_in_flight=max_runs_in_flight,
        io_manager_key=io_manager_key,
        max_chained_runs=max_chained_runs,
        watch_seconds=watch_seconds,
    )

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


@dataclass(frozen=True)
class _Settings:
    """A sensor's parameters (see `build_invalidation_sensor`)."""

    name: str
    root: str | None
    retry_base_seconds: int
    retry_max_seconds: int
    max_runs_in_flight: int = 20
    io_manager_key: str = "io_manager"
    max_chained_runs: int = 0
    watch_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.max_runs_in_flight < 1:
            raise ValueError(
                f"max_runs_in_flight must be at least 1, got {self.max_runs_in_flight}"
            )
        if self.max_chained_runs < 0:
            raise ValueError(f"max_chained_runs must be 0 or more, got {self.max_chained_runs}")
        if not 0 <= self.watch_seconds <= MAX_WATCH_SECONDS:
            raise ValueError(
                f"watch_seconds must be between 0 and {MAX_WATCH_SECONDS:g} (Dagster ends a "
                f"sensor evaluation after 60 s), got {self.watch_seconds}; about 4.5 covers the "
                "daemon's 5 s between passes"
            )


def evaluate(context: SensorEvaluationContext, settings: _Settings) -> SensorResult | SkipReason:
    """One tick of the sensor (see the module docstring). With `settings.watch_seconds`, a tick
    that requests nothing watches until then for a table to move or a run of this sensor in
    flight to end, and then evaluates again.

    Raises:
        TableUnreadableError: a table cannot be read and nothing else can be requested, so the
            tick fails with its message (with requests, the message is logged on the tick).
    """
    started = time.time()
    until = started + settings.watch_seconds
    cursor_text = context.cursor
    while True:
        outcome, cursor_text, in_flight = _evaluate_once(context, cursor_text, settings)
        if isinstance(outcome, SensorResult) and outcome.run_requests:
            return outcome
        state = _state(context, settings.name, settings.root, settings.io_manager_key)
        versions = _Cursor.from_json(cursor_text).versions
        what = _watch(state.session, versions, context.instance, in_flight, until)
        if what is None:
            return outcome
        context.log.info(f"{what} after {time.time() - started:.1f} s of this tick's watch.")


def _evaluate_once(
    context: SensorEvaluationContext, cursor_text: str | None, settings: _Settings
) -> tuple[SensorResult | SkipReason, str | None, list[str]]:
    """Plan and request once: (the outcome, the cursor it leaves, ids of this sensor's runs in
    flight)."""
    name, root, io_manager_key = settings.name, settings.root, settings.io_manager_key
    retry_base_seconds, retry_max_seconds = settings.retry_base_seconds, settings.retry_max_seconds
    max_runs_in_flight, max_chained_runs = settings.max_runs_in_flight, settings.max_chained_runs
    now = time.time()
    cursor = _Cursor.from_json(cursor_text)
    state = _state(context, name, root, io_manager_key)
    session, graph, instance = state.session, state.session.graph, context.instance
    horizon = graph.horizon(instance)
    retry_due = any(retry_at <= now for _, retry_at in cursor.failures.values())
    if (
        cursor.versions
        and not cursor.pending
        and not retry_due
        and horizon == cursor.horizon
        and not session.moved(cursor.versions)
    ):
        skip = SkipReason("No new commits in any table since the last tick: nothing to plan.")
        return skip, cursor_text, []

    fault_point("sensor_tick")
    in_flight = instance.get_runs(filters=RunsFilter(tags={SENSOR_TAG: name}, statuses=IN_FLIGHT))
    ids = [run.run_id for run in in_flight]
    failures, seen_until = _count_failures(
        instance, graph, name, cursor, now, retry_base_seconds, retry_max_seconds
    )
    result = session.plan(dynamic_partitions_store=instance)
    stale = {_fkey(i.asset, i.partition) for i in result.plan.items}
    held = {a for u in result.plan.unreadable for a in u.held}
    # Fresh again: forget. Held behind an unreadable table: keep, it was neither judged nor run.
    failures = {k: v for k, v in failures.items() if k in stale or _unfkey(k)[0] in held}
    running = _running(graph, in_flight)
    backing_off = _backing_off(failures, now)
    runs = session.runs(result, blocked=_union(running, backing_off))
    room = max(0, max_runs_in_flight - len(in_flight))
    ready = runs.ready[:room]
    chained = runs.chainable([r.number for r in ready], min(max_chained_runs, room - len(ready)))
    requests = _requests(graph, [*ready, *chained], name, result.versions, failures)
    report = _report(context, state, result)
    new_cursor = _Cursor(
        versions=result.versions,
        horizon=horizon,
        failures=failures,
        pending=bool(requests or in_flight or len(runs.runs) > len(requests) or runs.waiting)
        or report.waiting > 0,
        checked_at=now,
        failures_seen_until=seen_until,
    ).to_json()
    errors = [u.message for u in result.plan.unreadable]
    for message in errors:
        context.log.error(message)
    if not requests:
        if errors:
            raise TableUnreadableError(" ".join(errors))
        reason = _skip_text(result.plan.items, running, backing_off, failures, now)
        context.log.info(reason)
        return SensorResult(skip_reason=SkipReason(reason), cursor=new_cursor), new_cursor, ids
    _log_requested(context, [*ready, *chained])
    if chained:
        context.log.info(
            f"{len(chained)} of the {len(requests)} runs wait in their run for the runs writing "
            "what they read (tag partlake/waits_for), so their launch and Spark start-up "
            "overlap that work."
        )
    _record_before_runs(context, state)
    return SensorResult(run_requests=requests, cursor=new_cursor), new_cursor, ids


def _watch(
    session: PlanningSession,
    versions: Mapping[str, int],
    instance: DagsterInstance,
    in_flight: Sequence[str],
    until: float,
) -> str | None:
    """What happened first, checking every `WATCH_POLL_SECONDS` until `until`: a table moved
    from `versions`, or a run of `in_flight` ended (every `RUNS_POLL_EVERY` checks); None if
    neither did."""
    polls = 0
    while time.time() + WATCH_POLL_SECONDS <= until:
        time.sleep(WATCH_POLL_SECONDS)
        polls += 1
        if session.moved(versions):
            return "A table got a commit"
        if in_flight and polls % RUNS_POLL_EVERY == 0:
            still = instance.get_run_ids(
                filters=RunsFilter(run_ids=list(in_flight), statuses=IN_FLIGHT)
            )
            if len(still) < len(in_flight):
                return "A run of this sensor ended"
    return None


# How long a tick that requests runs waits for its partlake_fresh results to be recorded.
RECORD_BEFORE_RUNS_SECONDS = 10.0


def _record_before_runs(context: SensorEvaluationContext, state: _State) -> None:
    """Wait (a bounded time) until this tick's partlake_fresh results are recorded, before its
    runs are created. Dagster shows a partition's newest result row, and a run's row is made
    when the run is created: a failed result recorded after it would hide the run's passed one
    until the next tick reports the partition fresh again."""
    if state.writer is None or state.writer.flush(RECORD_BEFORE_RUNS_SECONDS):
        return
    context.log.warning(
        f"partlake_fresh results still being recorded after {RECORD_BEFORE_RUNS_SECONDS:.0f} s; "
        "runs requested anyway: a partition a run refreshes meanwhile may show its stale "
        "result until the next tick reports it fresh."
    )


def _running(graph: LakeGraph, in_flight: Sequence[DagsterRun]) -> dict[str, set[Key]]:
    """The partitions the sensor's runs in flight target."""
    blocked: dict[str, set[Key]] = {}
    for run in in_flight:
        for asset, key in _run_partitions(graph, run):
            blocked.setdefault(asset, set()).add(key)
    return blocked


def _backing_off(failures: Mapping[str, list[float]], now: float) -> dict[str, set[Key]]:
    """The failed partitions whose next retry is not due yet."""
    blocked: dict[str, set[Key]] = {}
    for fkey, (_, retry_at) in failures.items():
        if retry_at > now:
            asset, key = _unfkey(fkey)
            blocked.setdefault(asset, set()).add(key)
    return blocked


def _union(*maps: Mapping[str, set[Key]]) -> dict[str, set[Key]]:
    joined: dict[str, set[Key]] = {}
    for blocked in maps:
        for asset, keys in blocked.items():
            joined.setdefault(asset, set()).update(keys)
    return joined


# Lines a tick logs about the partitions it requests, at most.
MAX_LOGGED = 50


def _log_requested(context: SensorEvaluationContext, runs: Sequence[PlannedRun]) -> None:
    """One tick log line per requested partition, in `partlake plan`'s words:
    `clean_events[2024-01-02|eu] upstream_changed because raw_events[2024-01-02|eu]`."""
    items = [item for run in runs for item in run.items]
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
) -> str:
    """Why a tick that planned requests nothing: everything is fresh, or what the stale
    partitions wait for (runs in flight, a retry)."""
    if not stale:
        return "Everything is fresh."
    in_flight = sum(1 for i in stale if i.partition in running.get(i.asset, ()))
    retrying = [i for i in stale if i.partition in backing_off.get(i.asset, ())]
    parts = []
    if in_flight:
        parts.append(f"{in_flight} in runs in flight")
    if retrying:
        first = min(retrying, key=lambda i: failures[_fkey(i.asset, i.partition)][1])
        due = failures[_fkey(first.asset, first.partition)][1] - now
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
    # Recorded by the writer rather than returned as the tick's asset_events, which Dagster
    # 1.13 would refuse for a partition reported before (`compat.record_check_evaluations`).
    state.writer.submit(report)
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
    name: str,
    cursor: _Cursor,
    now: float,
    retry_base_seconds: int,
    retry_max_seconds: int,
) -> tuple[dict[str, list[float]], float]:
    """The cursor's failures plus the runs that failed since, each counted once; and the update
    time of the newest failed run counted."""
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
            continue  # ended because a run it waited for failed: that run's failure counts
        for asset, key in _run_partitions(graph, record.dagster_run):
            count = int(failures.get(_fkey(asset, key), [0, 0])[0]) + 1
            wait = min(retry_max_seconds, retry_base_seconds * 2 ** (count - 1))
            failures[_fkey(asset, key)] = [count, now + wait]
    return failures, newest


def _attempt(run: PlannedRun, failures: Mapping[str, list[float]]) -> int:
    """How many times the run's partitions have failed so far (0 on a first request)."""
    counts = [failures.get(_fkey(i.asset, i.partition), [0, 0])[0] for i in run.items]
    return int(max(counts, default=0))


def _requests(
    graph: LakeGraph,
    runs: Sequence[PlannedRun],
    name: str,
    versions: Mapping[str, int],
    failures: Mapping[str, list[float]],
) -> list[RunRequest]:
    """The run requests of `runs`, upstream first: a run that waits for others (requested in
    the same tick) is tagged with their chain ids and a lower priority, so the run queue starts
    the runs it waits for before it."""
    digests: dict[int, str] = {}
    for run in runs:  # upstream first: a run's digest covers those of the runs it waits for
        after = [digests[n] for n in run.waits_for]
        digests[run.number] = _digest(run, versions, _attempt(run, failures), after)
    awaited = {n for r in runs for n in r.waits_for}
    requests = []
    for run in runs:
        attempt = _attempt(run, failures)
        tags = {SENSOR_TAG: name, **run.run_tags()}
        if attempt:
            tags[ATTEMPT_TAG] = str(attempt + 1)
        if run.number in awaited:
            tags[CHAIN_TAG] = digests[run.number]
        if run.waits_for:
            tags[WAITS_FOR_TAG] = ",".join(digests[n] for n in run.waits_for)
            tags[PRIORITY_TAG] = "-1"
        kwargs: dict[str, Any] = {}
        if run.partition_key is not None:
            kwargs["partition_key"] = run.partition_key
        requests.append(
            RunRequest(
                run_key=f"{name}:{digests[run.number]}",
                asset_selection=[graph.assets[a].key for a in run.assets],
                tags=tags,
                **kwargs,
            )
        )
    return requests


def _digest(
    run: PlannedRun, versions: Mapping[str, int], attempt: int, after: Sequence[str]
) -> str:
    """Same run against the same table versions = same digest, so the same run key (Dagster
    skips a run key it has seen); new commits give a new key, and so does a retry after a
    failure, which Dagster would otherwise skip as already requested, and a run waiting for a
    retried one."""
    value: list[object] = [run.assets, run.keys, sorted(versions.items()), attempt]
    if after:
        value.append(list(after))
    return hashlib.sha1(json.dumps(value, default=str).encode()).hexdigest()[:16]


def _run_partitions(graph: LakeGraph, run: DagsterRun) -> list[tuple[str, Key]]:
    """(asset, partition key) pairs a Dagster run targets, from its asset selection and tags."""
    pairs: list[tuple[str, Key]] = []
    tags = run.tags or {}
    for asset_key in run.asset_selection or []:
        asset = graph.assets.get(asset_key.to_user_string())
        if asset is None:
            continue
        keys: Sequence[Key] = [None]
        if PARTITION_NAME_TAG in tags:
            keys = [tags[PARTITION_NAME_TAG]]
        elif ASSET_PARTITION_RANGE_START_TAG in tags and asset.partitions_def is not None:
            keys = asset.partitions_def.get_partition_keys_in_range(
                PartitionKeyRange(
                    tags[ASSET_PARTITION_RANGE_START_TAG], tags[ASSET_PARTITION_RANGE_END_TAG]
                )
            )
        pairs.extend((asset.name, k) for k in keys)
    return pairs


def _fkey(asset: str, key: Key) -> str:
    return json.dumps([asset, key])


def _unfkey(value: str) -> tuple[str, Key]:
    asset, key = json.loads(value)
    return asset, key
