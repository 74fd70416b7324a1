"""`partlake run`: execute a plan as Dagster runs on the configured instance.

Each batch (`dagster_partlake.batches`) is one run of the code location's asset job, executed in
this process so every run shares one Spark session; runs are recorded in the Dagster instance
and show up in the UI. After each round the state is synced and the plan recomputed, so
deferred downstream partitions run once their upstream partitions are written. Up to
`max_parallel` runs of a round execute at once, each in its own thread (by default as many as the
assets' Dagster pool allows, see `dagster_partlake.parallel`); every step still claims a pool slot
from the instance, so runs launched elsewhere (the sensor's, the UI's) share the same limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dagster import DagsterInstance

from dagster_partlake.batches import Batch, make_batches
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import commit_info, log_versions
from dagster_partlake.graph import LakeGraph
from dagster_partlake.io_manager import WHOLE_TABLE_ID
from dagster_partlake.lake import make_plan
from dagster_partlake.parallel import parallelism
from dagster_partlake.planner import Key
from dagster_partlake.resource import SparkResource, running_session


@dataclass(frozen=True)
class Outcome:
    ok: bool
    asset: str
    partition: Key
    reason: str
    rows: int | None
    ms: int | None
    run_id: str | None
    error: str | None = None


def run_plan(
    graph: LakeGraph,
    instance: DagsterInstance,
    *,
    select: Sequence[str] | None = None,
    max_parallel: int | None = None,
    on_outcome: Callable[[Outcome], None] = lambda _o: None,
    max_rounds: int = 50,
    cache: StateCache | None = None,
) -> list[Outcome]:
    """Run every stale partition of the selected assets (and nothing fresh).

    Args:
        max_parallel: runs executed at once; None for the limit of the assets' Dagster pool.
    """
    cache = cache or StateCache()
    workers = parallelism(instance, selected_pools(graph, select), max_parallel).runs
    outcomes: list[Outcome] = []
    failed: dict[str, set[Key]] = {}
    assert graph.defs is not None, "partlake run needs the code location's Definitions"
    job = graph.defs.resolve_implicit_global_asset_job_def()
    partitions_defs = {name: a.partitions_def for name, a in graph.assets.items()}
    policies = {
        name: graph.asset_graph.get(a.key).backfill_policy for name, a in graph.assets.items()
    }
    session_started = False
    try:
        for _ in range(max_rounds):
            result = make_plan(graph, cache, select=select, dynamic_partitions_store=instance)
            batches = make_batches(
                result.plan, result.inputs.assets, partitions_defs, policies, blocked=failed
            ).ready
            if not batches:
                break
            if not session_started:
                # One session for every run of this process; the runs' resources reuse it.
                session_started = _start_shared_session(graph)
            with _safe_for_threads(instance, workers), ThreadPoolExecutor(workers) as pool:
                for batch_outcomes in pool.map(
                    lambda b: _execute(job, instance, graph, b), batches
                ):
                    for outcome in batch_outcomes:
                        outcomes.append(outcome)
                        on_outcome(outcome)
                        if not outcome.ok:
                            failed.setdefault(outcome.asset, set()).add(outcome.partition)
    finally:
        if session_started:
            session = running_session()
            if session is not None:
                session.stop()
    return outcomes


def selected_pools(graph: LakeGraph, select: Sequence[str] | None = None) -> set[str]:
    """Dagster pools of the selected assets (all assets when `select` is None)."""
    names = select or list(graph.assets)
    return {pool for name in names for pool in graph.assets[name].pools}


@contextmanager
def _safe_for_threads(instance: DagsterInstance, workers: int) -> Iterator[None]:
    """Make the instance safe for runs executing in threads of this process.

    Two things Dagster does at the start of every run assume one run per process:
    - it resolves the instance's `python_logs` handlers with `logging.config.dictConfig`, which
      closes every logging handler of the process under logging's module lock; two runs starting
      in threads deadlocked (one in dictConfig waiting for the event-log handler of a running run,
      whose thread held it while waiting for the module lock). Every run gets the handlers
      resolved once, up front.
    - its compute log manager captures stdout/stderr by pointing the process's file descriptors 1
      and 2 at the run's log files; with runs in threads one run restored another's redirection
      and the command's own output went into a log file. Runs in threads capture no raw
      stdout/stderr (their Dagster events and logs are recorded as usual).
    """
    if workers <= 1:
        yield
        return
    from dagster._core.storage.noop_compute_log_manager import NoOpComputeLogManager

    handlers = instance.get_yaml_python_handlers()
    setattr(instance, "get_yaml_python_handlers", lambda: handlers)  # noqa: B010 - per instance
    capture = instance._compute_log_manager  # noqa: SLF001 - no public setter
    instance._compute_log_manager = NoOpComputeLogManager()  # noqa: SLF001
    try:
        yield
    finally:
        vars(instance).pop("get_yaml_python_handlers", None)
        instance._compute_log_manager = capture  # noqa: SLF001


def _start_shared_session(graph: LakeGraph) -> bool:
    resources = (graph.defs.resources if graph.defs else None) or {}
    spark = next((r for r in resources.values() if isinstance(r, SparkResource)), None)
    if spark is None or running_session() is not None:
        return False
    spark.spark_session  # noqa: B018 - creates the session on first access
    return True


def _execute(job: Any, instance: DagsterInstance, graph: LakeGraph, batch: Batch) -> list[Outcome]:
    kwargs: dict[str, Any] = {}
    if batch.partition_key is not None:
        kwargs["partition_key"] = batch.partition_key
    started = time.perf_counter()
    error: str | None = None
    try:
        result = job.execute_in_process(
            instance=instance,
            asset_selection=[graph.assets[a].key for a in batch.assets],
            tags=batch.run_tags(),
            raise_on_error=False,
            **kwargs,
        )
        run_id: str | None = result.run_id
        ok = result.success
        if not ok:
            failures = result.get_step_failure_events()
            error = _root_cause(failures[0].step_failure_data.error) if failures else "failed"
    except Exception as exc:  # a run that could not even start: report, go on with the rest
        run_id, ok, error = None, False, f"{type(exc).__name__}: {exc}"[:300]
    elapsed_ms = int((time.perf_counter() - started) * 1000)
    step_ms = _step_ms(instance, run_id) if run_id else {}
    rows = _rows_by_partition(graph, batch, run_id) if ok and run_id else {}
    return [
        Outcome(
            ok=ok,
            asset=item.asset,
            partition=item.partition,
            reason=item.reason,
            rows=rows.get((item.asset, item.partition)),
            ms=step_ms.get(item.asset, elapsed_ms),
            run_id=run_id,
            error=error,
        )
        for item in batch.items
    ]


def _root_cause(error: Any) -> str:
    # Dagster wraps the user's exception ("Error occurred while handling output ..."): show the
    # innermost cause, which names the actual problem.
    while error is not None and getattr(error, "cause", None) is not None:
        error = error.cause
    message = (getattr(error, "message", "") or "failed").strip()
    return message.splitlines()[0][:400]


def _step_ms(instance: DagsterInstance, run_id: str) -> dict[str, int]:
    result = {}
    for stat in instance.get_run_step_stats(run_id):
        if stat.start_time and stat.end_time:
            result[stat.step_key] = int((stat.end_time - stat.start_time) * 1000)
    return result


def _rows_by_partition(graph: LakeGraph, batch: Batch, run_id: str) -> dict[tuple[str, Key], int]:
    rows: dict[tuple[str, Key], int] = {}
    for name in batch.assets:
        # The run's commit is among the newest ones: concurrent runs add a few at most.
        path = graph.assets[name].path
        for version in reversed(log_versions(path)[-64:]):
            commit = commit_info(path, version).get("partlake") or {}
            if commit.get("run_id") == run_id:
                for key, n in (commit.get("rows_by_partition") or {}).items():
                    rows[(name, None if key == WHOLE_TABLE_ID else key)] = int(n)
                break
    return rows
