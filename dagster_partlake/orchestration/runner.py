"""`partlake run`: execute a `RunPlan` as Dagster runs on the configured instance.

Each planned run (`planning.runs`) is one run of the code location's asset job, executed
in this process so every run shares one Spark session; runs are recorded in the Dagster instance
and show up in the UI. A run starts once every run it waits for has ended and every partition
it reads of them was written; a run that reads a partition whose write failed (or was skipped)
is skipped (its partitions stay stale for the next plan), and one whose upstream run failed
only in assets it does not read runs. Up to
`max_parallel` runs execute at once, each in its own thread (by default as many as the assets'
Dagster pool allows, see `orchestration.pools`); every step still claims a pool slot from
the instance, so runs launched elsewhere (the sensor's, the UI's) share the same limit.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from dagster import AssetCheckSeverity, DagsterError, DagsterInstance

from dagster_partlake.compat import threadsafe_in_process_runs
from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import log_versions
from dagster_partlake.metadata import FAILING_PARTITIONS_KEY, SKIPPED_KEY, plain
from dagster_partlake.orchestration.claims import Claims, Decision, already_written, decide
from dagster_partlake.orchestration.pools import PoolWait, parallelism, pool_waits
from dagster_partlake.orchestration.workers import (
    UNFINISHED,
    alive,
    describe_runs,
    free_slots,
    free_slots_of_ended_runs,
    instance_dir,
    mark_dead,
    reap_dead_runs,
    registered,
    this_process,
    worker_of_run,
)
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.planner import Key, StalePartition
from dagster_partlake.planning.runs import PlannedRun, RunPlan
from dagster_partlake.planning.session import PlanningSession
from dagster_partlake.records.queries import latest_records, read_record, run_records
from dagster_partlake.spark.resource import SparkResource, running_session
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    from dagster import JobDefinition
    from dagster_shared.error import SerializableErrorInfo

# "unchanged": not run, because the runs it waited for left its inputs as they were (early
# cutoff of a `tracked` upstream).
Status = Literal["ok", "failed", "skipped", "unchanged"]


@dataclass(frozen=True)
class Outcome:
    status: Status
    asset: str
    partition: Key
    reason: str
    rows: int | None
    ms: int | None
    run_id: str | None
    error: str | None = None
    # Row counts of an append, merge, scd2 or tracked write (rows_inserted, rows_updated, ...).
    metrics: Mapping[str, int] | None = None
    # What the write did besides: a warn gate that failed, a run condition that skipped it.
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "unchanged")


def refresh(
    graph: LakeGraph,
    instance: DagsterInstance,
    *,
    select: Sequence[str] | None = None,
    max_parallel: int | None = None,
    cache: StateCache | None = None,
    on_outcome: Callable[[Outcome], None] = lambda _o: None,
) -> list[Outcome]:
    """Plan the selected assets and execute the runs the plan becomes: `partlake run` without
    its printing.

    Args:
        max_parallel: runs executed at once; None for the limit of the assets' Dagster pool.
    """
    session = PlanningSession(graph, cache)
    result = session.plan(select=select, dynamic_partitions_store=instance)
    stale_assets = {item.asset for item in result.plan.items}
    workers = parallelism(instance, graph.pools(stale_assets), max_parallel).runs
    return execute_rounds(
        session,
        instance,
        session.runs(result),
        select=select,
        max_parallel=workers,
        on_outcome=on_outcome,
    )


# How often a run waiting for another process's run to end looks again.
HOLDER_POLL_SECONDS = 1.0

# Plans again after runs of streaming assets, at most this many times per `partlake run`.
STREAM_ROUNDS = 3


def execute_rounds(
    session: PlanningSession,
    instance: DagsterInstance,
    run_plan: RunPlan,
    *,
    select: Sequence[str] | None = None,
    max_parallel: int = 1,
    on_outcome: Callable[[Outcome], None] = lambda _o: None,
    on_notice: Callable[[str], None] = lambda _text: None,
) -> list[Outcome]:
    """`execute_runs`, then, while a streaming asset committed new data, plan again and run what
    that made stale: a stream's run decides which partitions it writes, so what reads them can
    only be planned after it (at most `STREAM_ROUNDS` more rounds)."""

    def execute(runs: RunPlan) -> list[Outcome]:
        return execute_runs(
            session,
            instance,
            runs,
            max_parallel=max_parallel,
            on_outcome=on_outcome,
            on_notice=on_notice,
        )

    outcomes = execute(run_plan)
    streams = {name for name, a in session.graph.assets.items() if a.stream == "available_now"}
    latest = outcomes
    for _ in range(STREAM_ROUNDS):
        if not any(o.asset in streams and o.status == "ok" and o.rows for o in latest):
            break
        result = session.plan(select=select, dynamic_partitions_store=instance)
        if not result.plan:
            break
        runs = session.runs(result)
        on_notice(
            f"New data from stream(s): {len(result.plan.items)} more stale asset partition(s) in "
            f"{len(runs.runs)} run(s)..."
        )
        latest = execute(runs)
        outcomes.extend(latest)
    return outcomes


def execute_runs(
    session: PlanningSession,
    instance: DagsterInstance,
    run_plan: RunPlan,
    *,
    max_parallel: int = 1,
    on_outcome: Callable[[Outcome], None] = lambda _o: None,
    on_notice: Callable[[str], None] = lambda _text: None,
) -> list[Outcome]:
    """Execute every run of `run_plan` (planned by `session`), each after the runs it waits for.

    First, runs left unfinished by `partlake run` processes of this host that are gone are marked
    failed and their pool slots freed (`workers.reap_dead_runs`). While a run's step waits for a
    pool slot, `on_notice` says which pool and which runs hold its slots (the waiting run's log
    in the UI says it too), and holders whose process is gone are marked failed.

    When the graph has `tracked` assets, a run that waited for others is planned again (by the
    same session: only what the earlier runs committed is judged again) before it starts: if
    none of its partitions is stale any more (the upstream came out unchanged), it is not run
    and its partitions are reported `unchanged`.

    Returns:
        One outcome per stale asset partition of the planned runs, in completion order.
    """
    if not run_plan.runs:
        return []
    for dead in reap_dead_runs(instance):
        on_notice(f"[FAILED] {dead.message}")
    graph = session.graph
    for freed in free_slots_of_ended_runs(instance, graph.pools(), by=_by()):
        on_notice(f"[FREED] {freed.message}")
    # One session for every run of this process; the runs' resources reuse it.
    session_started = _start_shared_session(graph)
    workers = max(1, max_parallel)
    schedule = _Schedule(session, instance, run_plan, workers, on_outcome, on_notice)
    watch = _PoolWatch(instance, graph.pools(), on_notice)
    pool = ThreadPoolExecutor(workers)
    try:
        with (
            registered(instance_dir(instance)),
            threadsafe_in_process_runs(instance, workers),
            watch,
        ):
            schedule.run(pool, watch)
        pool.shutdown(wait=True)
    except KeyboardInterrupt:
        # Ctrl-C ends the command at once: the runs in progress are not waited for (a step
        # may be inside a Spark call that answers late or never) but marked failed, their pool
        # slots freed; what they had not committed stays invisible.
        pool.shutdown(wait=False, cancel_futures=True)
        _interrupted(instance, watch.run_ids())
        session_started = False  # nor is the session stopped: the process ends now
        raise
    finally:
        if session_started:
            spark = running_session()
            if spark is not None:
                spark.stop()
    return schedule.outcomes


def _interrupted(instance: DagsterInstance, run_ids: Iterable[str]) -> None:
    """Mark failed the runs of this process still in progress when it was interrupted."""
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            continue
        instance.report_run_failed(run, "partlake run was interrupted (Ctrl-C) during this run")
        free_slots(instance, run_id)


class _Schedule:
    """Starts each planned run once the runs it waits for ended with what it reads of them
    written, skips it when a partition it reads was not written, and collects the outcomes."""

    def __init__(
        self,
        session: PlanningSession,
        instance: DagsterInstance,
        run_plan: RunPlan,
        workers: int,
        on_outcome: Callable[[Outcome], None],
        on_notice: Callable[[str], None] = lambda _text: None,
    ) -> None:
        graph = session.graph
        self.workers = workers  # runs executing at once
        assert graph.defs is not None, "partlake run needs the code location's Definitions"
        self.session = session
        self.instance = instance
        self.job = graph.defs.resolve_implicit_global_asset_job_def()
        self.on_outcome = on_outcome
        self.pending = list(run_plan.runs)
        self.ended: set[int] = set()  # numbers of the runs reported
        self.not_written: set[tuple[str, Key]] = set()  # failed or skipped so far
        self.outcomes: list[Outcome] = []
        self.cutoff = any(a.kind == "tracked" for a in graph.assets.values())
        self.claims = Claims(instance)
        self.on_notice = on_notice
        self.waiting: dict[int, str] = {}  # run number -> the other process's run it waits for

    def run(self, pool: ThreadPoolExecutor, watch: _PoolWatch) -> None:
        running: dict[Future[list[Outcome]], PlannedRun] = {}
        while self.pending or running:
            for run in list(self.pending):
                lost = [up for up in run.reads if up in self.not_written]
                if lost:
                    self.pending.remove(run)
                    self.report(run, _skipped(run, lost))
                elif len(running) >= self.workers:
                    break  # a run claims its partitions only as it starts
                elif all(w in self.ended for w in run.waits_for):
                    if run.waits_for and self.cutoff and self.still_fresh(run):
                        self.pending.remove(run)
                        self.report(run, _unchanged(run))
                        continue
                    run_id = str(uuid.uuid4())
                    decision = self.decide(run, run_id)
                    if decision is None:
                        continue  # another process's run computes its partitions: later
                    self.pending.remove(run)
                    if not decision.compute:
                        by = f"run {(decision.by or '')[:8]}"
                        why = f"not run: already written by {by} from the inputs it would read"
                        self.report(run, _unchanged(run, why))
                        continue
                    graph = self.session.graph
                    watch.add(run, run_id)
                    future = pool.submit(_execute, self.job, self.instance, graph, run, run_id)
                    running[future] = run
            if not running:
                if self.waiting:
                    time.sleep(HOLDER_POLL_SECONDS)  # a holder in another process ends
                    continue
                # Runs wait only for lower-numbered runs, so the first pending one can always
                # start or be skipped: nothing running means nothing is left.
                assert not self.pending, f"runs {[r.number for r in self.pending]} never start"
                break
            timeout = HOLDER_POLL_SECONDS if self.waiting else None
            done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                finished = running.pop(future)
                watch.discard(finished)
                self.report(finished, future.result())

    def decide(self, run: PlannedRun, run_id: str) -> Decision | None:
        """Whether `run` computes (claimed for `run_id`), or ends at once (its partitions
        written from the inputs it would read: `orchestration.claims`); None while a run of
        another process computes them, said once."""
        targets = run.targets
        with self.claims.locked(self.on_notice):
            decision = decide(
                self.claims,
                run_id,
                targets,
                written=lambda: already_written(self.session, targets, self.instance),
            )
        if not decision.held or decision.by is None:
            self.waiting.pop(run.number, None)
            return decision
        if self.waiting.get(run.number) != decision.by:
            self.waiting[run.number] = decision.by
            self.on_notice(
                f"run {run.number} waits for run {decision.by[:8]} of another process, which "
                f"computes {decision.partitions}"
            )
        return None

    def report(self, run: PlannedRun, results: list[Outcome]) -> None:
        self.ended.add(run.number)
        self.not_written.update((o.asset, o.partition) for o in results if not o.ok)
        for outcome in results:
            self.outcomes.append(outcome)
            self.on_outcome(outcome)

    def still_fresh(self, run: PlannedRun) -> bool:
        """Whether a new plan (by the same session: only what the earlier runs committed is
        judged again) finds none of the run's partitions stale."""
        result = self.session.plan(select=run.assets, dynamic_partitions_store=self.instance)
        stale = {(i.asset, i.partition) for i in result.plan.items}
        return not any((i.asset, i.partition) in stale for i in run.items)


def _unchanged(
    run: PlannedRun, why: str = "not run: its inputs came out unchanged"
) -> list[Outcome]:
    return [
        Outcome("unchanged", i.asset, i.partition, i.reason, None, None, None, why)
        for i in run.items
    ]


def _skipped(run: PlannedRun, lost: Collection[tuple[str, Key]]) -> list[Outcome]:
    """Outcomes of a run not started because partitions it reads (`lost`) were not written:
    each names those it reads itself, else the run's (`upstream checked 2024-07-03 failed`)."""
    outcomes = []
    for item in run.items:
        causes = _reads_from(item, lost) or sorted(lost, key=str)
        shown = [f"{asset} {key or '-'}" for asset, key in causes]
        because = f"upstream {', '.join(shown[:3])}{' ...' if len(shown) > 3 else ''} failed"
        outcomes.append(
            Outcome("skipped", item.asset, item.partition, item.reason, None, None, None, because)
        )
    return outcomes


def _reads_from(
    item: StalePartition, written: Collection[tuple[str, Key]]
) -> list[tuple[str, Key]]:
    """The partitions the failed runs were to write that `item` names as its cause."""
    found = []
    for cause in item.because:
        asset, _, rest = cause.partition("[")
        key: Key = rest[:-1] if rest else None
        if (asset, key) in written:
            found.append((asset, key))
    return found


def _start_shared_session(graph: LakeGraph) -> bool:
    resources = (graph.defs.resources if graph.defs else None) or {}
    spark = next((r for r in resources.values() if isinstance(r, SparkResource)), None)
    if spark is None or running_session() is not None:
        return False
    spark.spark_session  # noqa: B018 - creates the session on first access
    return True


def _launch(
    job: JobDefinition, instance: DagsterInstance, graph: LakeGraph, run: PlannedRun, run_id: str
) -> tuple[dict[str, str], bool]:
    """Run the job in this process; each failed step's error (by step key) and whether the run
    failed as a whole (it could not start, or failed outside its steps)."""
    kwargs: dict[str, Any] = {}
    if run.partition_key is not None:
        kwargs["partition_key"] = run.partition_key
    errors: dict[str, str] = {}  # step key -> its error
    try:
        result = job.execute_in_process(
            instance=instance,
            asset_selection=[graph.assets[a].key for a in run.assets],
            # This process's host, pid and start: a later `partlake run` recognises the run as
            # dead by them if this process dies before finishing it.
            tags={**run.run_tags(), **this_process().tags()},
            raise_on_error=False,
            run_id=run_id,
            **kwargs,
        )
    except DagsterError as exc:  # a run that could not even start: report, go on with the rest
        errors[""] = f"{type(exc).__name__}: {exc}"[:300]
        return errors, True
    for failure in result.get_step_failure_events():
        errors[failure.step_key or ""] = _root_cause(failure.step_failure_data.error)
    return errors, not result.success and not errors


def _execute(
    job: JobDefinition, instance: DagsterInstance, graph: LakeGraph, run: PlannedRun, run_id: str
) -> list[Outcome]:
    """Execute one planned run in this process, as the Dagster run `run_id`; one outcome per
    stale asset partition it covers: ok, failed (its step failed, with the error), or skipped
    (its step never ran because an upstream step of the same run failed)."""
    versions = {name: _latest_version(graph, name) for name in run.assets}
    started = time.perf_counter()
    errors, whole_run_failed = _launch(job, instance, graph, run, run_id)
    known = instance.get_run_by_id(run_id) is not None
    elapsed_ms = int((time.perf_counter() - started) * 1000)
    steps = _steps(instance, job, graph, run, run_id) if known else {}
    done = [a for a in run.assets if steps.get(a, (None, None))[0] == "SUCCESS"]
    rows, metrics, already = _written(graph, run, run_id, versions, done)
    notes = _notes(instance, run_id, run) if done else {}
    failed = {
        (i.asset, i.partition)
        for i in run.items
        if whole_run_failed or steps.get(i.asset, (None, None))[0] == "FAILURE"
    }
    outcomes = []
    for item in run.items:
        status, ms = steps.get(item.asset, (None, None))
        base = Outcome(
            "ok",
            item.asset,
            item.partition,
            item.reason,
            None,
            ms or elapsed_ms,
            run_id if known else None,
        )
        if item.asset in already:
            outcomes.append(
                replace(
                    base,
                    status="unchanged",
                    error=f"already written by run {already[item.asset][:8]} from the same "
                    "upstream versions",
                )
            )
        elif item.asset in done:
            outcomes.append(
                replace(
                    base,
                    rows=rows.get((item.asset, item.partition)),
                    metrics=metrics.get((item.asset, item.partition)),
                    notes=notes.get((item.asset, item.partition), ()),
                )
            )
        elif (item.asset, item.partition) in failed:
            error = errors.get(_step_key(job, graph, item.asset)) or next(
                iter(errors.values()), "failed"
            )
            outcomes.append(replace(base, status="failed", error=error))
        else:
            causes = _reads_from(item, failed) or sorted(failed, key=str)
            shown = ", ".join(f"{a} {k or '-'}" for a, k in causes[:3])
            outcomes.append(
                replace(base, status="skipped", ms=None, error=f"upstream {shown} failed")
            )
    return outcomes


def _notes(
    instance: DagsterInstance, run_id: str, run: PlannedRun
) -> dict[tuple[str, Key], tuple[str, ...]]:
    """Per asset partition of the run, what its write did besides writing, from the run's
    events (one query): the quality gates of severity warn that failed (their asset check
    evaluations) and the run condition that skipped the write (its materialization's
    `partlake/skipped`)."""
    from dagster import AssetCheckEvaluation, DagsterEventType

    found: dict[tuple[str, Key], list[str]] = {}
    kinds = {DagsterEventType.ASSET_CHECK_EVALUATION, DagsterEventType.ASSET_MATERIALIZATION}
    for record in instance.get_records_for_run(run_id, of_type=kinds).records:
        event = record.event_log_entry.dagster_event
        if event is None:
            continue
        data = event.event_specific_data
        if isinstance(data, AssetCheckEvaluation):
            if data.passed or data.severity != AssetCheckSeverity.WARN:
                continue
            failing = plain(data.metadata.get(FAILING_PARTITIONS_KEY))
            failing = failing if isinstance(failing, list) else []
            keys = [k for k in run.keys if k in failing] or list(run.keys)
            summary = (data.description or data.check_name).split("; first ")[0]
            for key in keys:
                found.setdefault((data.asset_key.to_user_string(), key), []).append(
                    f"warn: {summary}"
                )
            continue
        materialization = getattr(data, "materialization", None)
        skipped = plain(materialization.metadata.get(SKIPPED_KEY)) if materialization else None
        if materialization is not None and skipped:
            where = (materialization.asset_key.to_user_string(), materialization.partition)
            found.setdefault(where, []).append(f"skipped: '{skipped}' does not hold")
    return {key: tuple(notes) for key, notes in found.items()}


def _root_cause(error: SerializableErrorInfo | None) -> str:
    # Dagster wraps the user's exception ("Error occurred while handling output ..."): show the
    # innermost cause, which names the actual problem, unless a partlake error on the way says
    # it in words (a `StorageError` names the table and endpoint of the `OSError` it wraps).
    ours = None
    while error is not None and getattr(error, "cause", None) is not None:
        if (getattr(error, "message", "") or "").startswith("dagster_partlake."):
            ours = error
        error = error.cause
    if ours is not None and not (getattr(error, "message", "") or "").startswith(
        "dagster_partlake."
    ):
        error = ours
    message = (getattr(error, "message", "") or "failed").strip().splitlines()[0]
    # "dagster_partlake.gates.spec.GateFailedError: quality gate failed ...": partlake's own
    # errors say what went wrong in their message; the class path is noise.
    head, _, rest = message.partition(": ")
    if head.startswith("dagster_partlake.") and rest:
        message = rest
    return message[:400]


def _step_key(job: JobDefinition, graph: LakeGraph, asset: str) -> str:
    """The key of the step that writes `asset` (its node handle, as text)."""
    return str(job.asset_layer.get_op_output_handle(graph.assets[asset].key).node_handle)


def _steps(
    instance: DagsterInstance, job: JobDefinition, graph: LakeGraph, run: PlannedRun, run_id: str
) -> dict[str, tuple[str | None, int | None]]:
    """Per asset of the run, its step's status (SUCCESS, FAILURE, SKIPPED; None: never
    started) and time (Dagster keys step stats by step key, not asset name)."""
    by_step: dict[str, tuple[str | None, int | None]] = {}
    for stat in instance.get_run_step_stats(run_id):
        ms = None
        if stat.start_time and stat.end_time:
            ms = int((stat.end_time - stat.start_time) * 1000)
        by_step[stat.step_key] = (stat.status.value if stat.status else None, ms)
    return {name: by_step.get(_step_key(job, graph, name), (None, None)) for name in run.assets}


def _latest_version(graph: LakeGraph, name: str) -> int:
    versions = log_versions(graph.assets[name].location)
    return versions[-1] if versions else -1


def _written(
    graph: LakeGraph,
    run: PlannedRun,
    run_id: str,
    before: dict[str, int],
    assets: Sequence[str],
) -> tuple[dict[tuple[str, Key], int], dict[tuple[str, Key], Mapping[str, int]], dict[str, str]]:
    """Rows per asset partition the run wrote of `assets`, per asset partition the row counts of
    the commit that wrote it for kinds that report them (not `partition` / `table`: their rows
    say it all), and the assets the run committed nothing to because another run had, from the
    same inputs (-> that run's id)."""
    rows: dict[tuple[str, Key], int] = {}
    metrics: dict[tuple[str, Key], Mapping[str, int]] = {}
    already: dict[str, str] = {}
    for name in assets:
        path = graph.assets[name].location
        if graph.assets[name].stream is not None:
            rows[(name, None)] = _stream_rows(path, before[name] + 1, run_id)
            continue
        # One commit, or one per partition of an in-order kind's run (`kinds.units`).
        records = run_records(path, run_id, since=before[name] + 1)
        if not records:
            keys = [k if k is not None else WHOLE_TABLE_ID for k in run.keys]
            other = latest_records(path, keys[:1]).get(keys[0]) if keys else None
            if other is not None and other.run_id not in (None, run_id):
                already[name] = other.run_id
            continue
        for record in records:
            for key, n in (record.rows_by_partition or {}).items():
                rows[(name, None if key == WHOLE_TABLE_ID else key)] = n
            if record.metrics and record.kind not in (None, "partition", "table"):
                for key in record.partition_ids:
                    metrics[(name, None if key == WHOLE_TABLE_ID else key)] = record.metrics
    return rows, metrics, already


def _stream_rows(root: str | TableLocation, since: int, run_id: str) -> int:
    """Rows the micro-batches of a streaming run committed (one commit per batch)."""
    total = 0
    for version in log_versions(root):
        if version >= since:
            record = read_record(root, version)
            if record is not None and record.run_id == run_id and record.stream_batch is not None:
                total += sum((record.rows_by_partition or {}).values())
    return total


def _by() -> str:
    """Who marks runs failed and frees slots, in messages."""
    return f"partlake run (pid {os.getpid()})"


class _PoolWatch:
    """Says what a run waiting for a pool slot waits for: which pool, and which runs hold its
    slots (on the terminal through `on_notice`, and in the waiting run's own log, which the UI
    shows); holders whose process is gone are marked failed, which frees their slots."""

    INTERVAL_SECONDS = 5.0
    NOTICE_AFTER_SECONDS = 10.0  # a step is waiting, not just claiming its slot
    REPEAT_SECONDS = 60.0

    def __init__(
        self, instance: DagsterInstance, pools: set[str], on_notice: Callable[[str], None]
    ) -> None:
        self.instance = instance
        self.pools = pools
        self.on_notice = on_notice
        self._runs: dict[str, int] = {}  # run id -> planned run number
        self._said: dict[tuple[str, str], tuple[tuple[str, ...], float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="partlake-pool-watch", daemon=True)

    def add(self, run: PlannedRun, run_id: str) -> None:
        """Watch `run`, executed as `run_id`, until `discard`."""
        with self._lock:
            self._runs[run_id] = run.number

    def run_ids(self) -> list[str]:
        """The ids of the runs watched now (started, not yet ended)."""
        with self._lock:
            return list(self._runs)

    def discard(self, run: PlannedRun) -> None:
        with self._lock:
            for run_id in [r for r, n in self._runs.items() if n == run.number]:
                del self._runs[run_id]

    def __enter__(self) -> _PoolWatch:
        if self.pools:
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.INTERVAL_SECONDS):
            try:
                self.check()
            except Exception as error:  # noqa: BLE001 - a watcher must not end the runs
                self.on_notice(f"[WARN] could not check the pool slots: {error}")

    def check(self) -> None:
        """Look at the pools once; say what each run waiting long enough waits for."""
        with self._lock:
            watched = dict(self._runs)
        now = time.time()
        waits = [
            w
            for w in pool_waits(self.instance, self.pools, watched.keys())
            if now - w.since >= self.NOTICE_AFTER_SECONDS
        ]
        if not waits:
            return
        for run_id in sorted({h for w in waits for h in w.holders}):
            self._fail_if_dead(run_id)
        # Dead holders just marked failed, and runs that ended without freeing their slots.
        freed = free_slots_of_ended_runs(self.instance, {w.pool for w in waits}, by=_by())
        for slots in freed:
            self.on_notice(f"[FREED] {slots.message}")
        if freed:
            return  # the waiting steps can take those slots now; look again next time
        for waiting in waits:
            said = self._said.get((waiting.run_id, waiting.pool))
            if (
                said is not None
                and said[0] == waiting.holders
                and now - said[1] < self.REPEAT_SECONDS
            ):
                continue
            self._said[(waiting.run_id, waiting.pool)] = (waiting.holders, now)
            text = _wait_text(self.instance, waiting, watched[waiting.run_id], now)
            self.on_notice(text)
            run = self.instance.get_run_by_id(waiting.run_id)
            if run is not None:
                self.instance.report_engine_event(text, run)

    def _fail_if_dead(self, run_id: str) -> None:
        run = self.instance.get_run_by_id(run_id)
        if run is None or run.status not in UNFINISHED:
            return
        worker = worker_of_run(self.instance, run)
        if worker is not None and alive(worker) is False:
            dead = mark_dead(self.instance, run, worker, by=_by())
            self.on_notice(f"[FAILED] {dead.message}")


def _wait_text(instance: DagsterInstance, step: PoolWait, number: int, now: float) -> str:
    """'[WAITING] run 3 (1a2b3c4d) has waited 40 s for a slot of Dagster pool partlake (limit
    2); the slots are held by runs ...'."""
    holders = describe_runs(instance, step.holders) or ["nobody: the slot is being assigned"]
    limit = "no limit set" if step.limit is None else f"limit {step.limit}"
    return (
        f"[WAITING] run {number} ({step.run_id[:8]}) has waited {now - step.since:,.0f} s for a "
        f"slot of Dagster pool {step.pool} ({limit}); its slots are held by run(s) "
        f"{'; '.join(holders)}. It starts when one of them finishes; "
        f"`dagster instance concurrency set {step.pool} N` changes the limit."
    )
