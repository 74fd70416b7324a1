"""Every use of Dagster's internals, in one place.

Dagster's private modules (`dagster._...`) and private attributes move between minor versions
without notice. partlake needs a few of them, listed here with what each is for; no other module
imports `dagster._...` or touches a private attribute of a Dagster object. `tests/test_compat.py`
exercises each use against the installed Dagster, so an upgrade that moves one fails there,
naming it, rather than somewhere deep in a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

# The type of `Definitions.resolve_asset_graph()` and `RepositoryDefinition.asset_graph`: the
# asset graph of a code location loaded in this process (not a remote one).
from dagster._core.definitions.assets.graph.asset_graph import AssetGraph

# What `create_run_for_job` raises for a run id that exists: two runs of a refresh requesting
# the same next run at once (`orchestration.chain`).
from dagster._core.errors import DagsterRunAlreadyExists

# What a run launcher tells run monitoring about a run's worker process, and what it is given to
# launch a run (`MonitoredRunLauncher`).
from dagster._core.launcher.base import CheckRunHealthResult, LaunchRunContext, WorkerStatus

# The status of an asset check's latest result for one partition (`get_asset_check_partition_info`).
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

# Run tags Dagster reads to know a run's partition or partition range, and the tag in which the
# DefaultRunLauncher records the code server that started a run's worker; the run key and the
# sensor a sensor's run carries (no public constants).
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    GRPC_INFO_TAG,
    PARTITION_NAME_TAG,
    RUN_KEY_TAG,
    SENSOR_NAME_TAG,
)

CHECK_FAILED = AssetCheckExecutionRecordStatus.FAILED
CHECK_PASSED = AssetCheckExecutionRecordStatus.SUCCEEDED
CHECK_PLANNED = AssetCheckExecutionRecordStatus.PLANNED

if TYPE_CHECKING:
    from dagster import (
        AssetCheckEvaluation,
        AssetCheckExecutionContext,
        AssetCheckKey,
        AssetKey,
        AssetSelection,
        DagsterInstance,
        DagsterRun,
        Definitions,
        Output,
        RunRequest,
    )

    # What a Declarative Automation condition's `evaluate` receives, and its view of the asset
    # graph for one evaluation (annotations only).
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView as AssetGraphView
    from dagster._core.definitions.declarative_automation.automation_context import (
        AutomationContext as AutomationContext,
    )
    from dagster._core.definitions.partitions.context import PartitionLoadingContext
    from dagster._core.definitions.repository_definition import RepositoryDefinition
    from dagster._core.execution.context.system import StepExecutionContext

    # Where a run's job is loaded from in a Python process: what a run records as its
    # `job_code_origin` (annotations only).
    from dagster._core.origin import JobPythonOrigin as JobPythonOrigin

    # What `event_log_storage.get_asset_check_execution_history` returns (annotations only).
    from dagster._core.storage.asset_check_execution_record import (
        AssetCheckExecutionRecord as AssetCheckExecutionRecord,
    )

    # What `event_log_storage.get_concurrency_info` returns (annotations only).
    from dagster._utils.concurrency import ConcurrencyKeyInfo as ConcurrencyKeyInfo

__all__ = [
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "AssetGraph",
    "CHECK_FAILED",
    "CHECK_PASSED",
    "CHECK_PLANNED",
    "GRPC_INFO_TAG",
    "PARTITION_NAME_TAG",
    "RUN_KEY_TAG",
    "SENSOR_NAME_TAG",
    "CheckRunHealthResult",
    "DagsterRunAlreadyExists",
    "LaunchRunContext",
    "WorkerStatus",
    "all_assets_checked_at_load",
    "backfill_request",
    "definitions_of_function",
    "execute_run",
    "job_origin",
    "job_repository",
    "backfills_in_progress",
    "log_check_evaluation",
    "partition_loading_context",
    "record_check_evaluations",
    "serialize_value",
    "step_context_of",
    "targeting_latest_materializations",
    "threadsafe_in_process_runs",
]


def partition_loading_context(
    store: DagsterInstance | None,
) -> AbstractContextManager[PartitionLoadingContext]:
    """The context in which a partitions definition resolves dynamic partition keys from
    `store` (a Dagster instance): how Dagster itself resolves them, without a live instance per
    key."""
    from dagster._core.definitions.partitions.context import (
        partition_loading_context as loading,
    )

    return loading(dynamic_partitions_store=store)


def serialize_value(value: Any) -> str:
    """Dagster's serdes text of `value` (e.g. a partition mapping): describes it exactly enough
    for the plan cache's graph signature. Raises for a value serdes cannot describe."""
    from dagster_shared.serdes import serialize_value as serialize

    return serialize(value)


def step_context_of(context: AssetCheckExecutionContext) -> StepExecutionContext:
    """The step context of an asset check's execution context, to log evaluations into (a
    result per partition of a range run, which `AssetCheckResult` cannot say)."""
    return context.op_execution_context._step_execution_context  # noqa: SLF001


def asset_graph_of_step(context: AssetCheckExecutionContext) -> AssetGraph:
    """The code location's asset graph in a check step; in a job executed outside a code
    location (`execute_in_process` of a resolved job), which has no repository, the job's."""
    repository = step_context_of(context)._execution_data.repository_def  # noqa: SLF001
    if repository is not None:
        return repository.asset_graph
    return context.op_execution_context.job_def.asset_layer.asset_graph


def record_check_evaluations(
    instance: DagsterInstance, evaluations: Iterable[AssetCheckEvaluation], report_id: str
) -> None:
    """Record asset check results made outside a run, all under `report_id`.

    Dagster 1.13 records a result made outside a run (`report_runless_asset_event`, a sensor's
    `asset_events`) with run id "", and a unique index over (asset, check, run id, partition)
    then refuses a second result for the same partition: a partition could be reported once,
    ever. Each of partlake's reports gets an id of its own instead, under Dagster's job name for
    such results.
    """
    from dagster._core.events import DagsterEvent, DagsterEventType
    from dagster._core.instance.utils import RUNLESS_JOB_NAME

    for evaluation in evaluations:
        instance.report_dagster_event(
            DagsterEvent(
                event_type_value=DagsterEventType.ASSET_CHECK_EVALUATION.value,
                event_specific_data=evaluation,
                job_name=RUNLESS_JOB_NAME,
            ),
            run_id=report_id,
        )


def targeting_latest_materializations(
    instance: DagsterInstance, evaluations: Sequence[AssetCheckEvaluation]
) -> list[AssetCheckEvaluation]:
    """`evaluations`, each targeting the latest materialization of its partition.

    Dagster counts a partition's check result in the check's partition statuses (the UI's
    Partitions tab, passed/failed per partition) only while it targets the partition's latest
    materialization; a result without a target counts only for a partition never materialized.
    Two queries per asset, for the partitions reported.
    """
    from dagster import AssetRecordsFilter, DagsterEventType
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData as Target,
    )
    from dagster_shared.record import copy

    partitions: dict[AssetKey, set[str]] = {}
    for evaluation in evaluations:
        if evaluation.partition is not None:
            partitions.setdefault(evaluation.asset_key, set()).add(evaluation.partition)
    targets: dict[tuple[AssetKey, str], Target] = {}
    for key, wanted in partitions.items():
        ids = instance.get_latest_storage_id_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION, wanted
        )
        if not ids:
            continue
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=key, storage_ids=list(ids.values())), limit=len(ids)
        ).records
        by_id = {r.storage_id: r for r in records}
        for partition, storage_id in ids.items():
            if (record := by_id.get(storage_id)) is not None:
                targets[key, partition] = Target(
                    storage_id=storage_id, run_id=record.run_id, timestamp=record.timestamp
                )
    return [
        copy(e, target_materialization_data=targets[e.asset_key, e.partition])
        if e.partition is not None and (e.asset_key, e.partition) in targets
        else e
        for e in evaluations
    ]


def log_check_evaluation(
    step_context: StepExecutionContext, evaluation: AssetCheckEvaluation
) -> None:
    """Log an asset check evaluation into the running step: a gate's result reaches the UI from
    the IO manager's write, before the commit, where no public API can yield one."""
    from dagster._core.events import DagsterEvent

    DagsterEvent.asset_check_evaluation(step_context, evaluation)


def check_outputs(
    context: AssetCheckExecutionContext, keys: Iterable[AssetCheckKey]
) -> Iterator[Output]:
    """The step's output of each check of `keys`, without a result: for checks whose results
    were logged as evaluations (`log_check_evaluation`) or are not evaluated in this step.

    Dagster expects an output per selected check of a check step; a step that yields none logs
    "op '...' did not yield or return expected outputs", which reads as an error. An output is
    what Dagster makes of an `AssetCheckResult` besides its evaluation; its name is Dagster's,
    known only to the check's `AssetsDefinition` (not a public method).
    """
    from dagster import Output

    assets_def = context.op_execution_context.assets_def
    for key in keys:
        yield Output(None, output_name=assets_def.get_output_name_for_asset_check_key(key))


@contextmanager
def threadsafe_in_process_runs(instance: DagsterInstance, workers: int) -> Iterator[None]:
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


def all_assets_checked_at_load(check: Callable[[AssetGraph], object]) -> AssetSelection:
    """`AssetSelection.all()` that calls `check` with the code location's asset graph when
    Dagster snapshots the code location.

    Dagster turns a sensor's asset selection into a serializable one with
    `to_serializable_asset_selection(asset_graph)` while it builds the code location's snapshot
    (`RepositorySnap.from_def`: `dagster dev`'s code server at load, `dagster definitions
    validate`): the one point at which the whole asset graph of a loading code location reaches
    an integration's object. An error raised by `check` is then the code location's load error.
    The snapshot holds a plain `AllSelection`, as for `AssetSelection.all()`.
    """
    from dagster._core.definitions.asset_selection import AllSelection

    class _CheckedAtLoad(AllSelection):
        def to_serializable_asset_selection(self, asset_graph: Any) -> AssetSelection:
            check(asset_graph)
            return AllSelection(include_sources=self.include_sources)

    return _CheckedAtLoad(include_sources=False)  # as AssetSelection.all()


def backfill_request(
    asset_graph: AssetGraph,
    partitions: Iterable[tuple[AssetKey, str | None]],
    tags: dict[str, str],
) -> RunRequest:
    """A sensor's request for one asset backfill of `partitions` ((asset key, partition key or
    None) pairs): the sensor daemon creates the backfill, and the backfill daemon runs it level
    by level. `RunRequest.for_asset_graph_subset` takes an `AssetGraphSubset`, which Dagster
    keeps private."""
    from dagster import RunRequest
    from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
    from dagster._core.definitions.events import AssetKeyPartitionKey

    subset = AssetGraphSubset.from_asset_partition_set(
        {AssetKeyPartitionKey(key, partition) for key, partition in partitions}, asset_graph
    )
    return RunRequest.for_asset_graph_subset(subset, tags=tags)


def backfills_in_progress(
    instance: DagsterInstance, tags: dict[str, str], asset_graph: AssetGraph
) -> list[tuple[str, list[tuple[AssetKey, str | None]]]]:
    """The asset backfills with `tags` that have not ended, each with the (asset key, partition
    key) pairs it targets. `BulkActionsFilter` and `BulkActionStatus` are not exported."""
    from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus

    statuses = [BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING, BulkActionStatus.FAILING]
    found = []
    for backfill in instance.get_backfills(filters=BulkActionsFilter(statuses=statuses, tags=tags)):
        if not backfill.is_asset_backfill:
            continue
        target = backfill.get_asset_backfill_data(asset_graph).target_subset
        pairs = [(p.asset_key, p.partition_key) for p in target.iterate_asset_partitions()]
        found.append((backfill.backfill_id, pairs))
    return found


def definitions_of_function(value: object) -> Definitions | None:
    """What a `@dg.definitions` function at module level returns, loaded as Dagster loads a
    module (`dagster ... -m MODULE` calls it without arguments); None when `value` is no such
    function. Its type is private (`dagster.components.definitions.LazyDefinitions`)."""
    from dagster import Definitions as PublicDefinitions
    from dagster.components.definitions import LazyDefinitions

    if not isinstance(value, LazyDefinitions):
        return None
    loaded = value()
    return loaded if isinstance(loaded, PublicDefinitions) else None


def job_origin(text: str) -> JobPythonOrigin:
    """A run's `job_code_origin` from its serialized text (`dagster.serialize_value`)."""
    from dagster import deserialize_value
    from dagster._core.origin import JobPythonOrigin

    return deserialize_value(text, JobPythonOrigin)


def job_repository(origin: JobPythonOrigin) -> RepositoryDefinition:
    """The repository of a run's job, loaded in this process from the run's `job_code_origin`
    as the run's own process loads it (importing the code location)."""
    from dagster._utils.hosted_user_process import recon_job_from_origin

    return recon_job_from_origin(origin).repository.get_definition()


def execute_run(run_id: str, instance_ref: str) -> int:
    """Execute the run `run_id` of the instance whose serialized `InstanceRef` is
    `instance_ref` in this process, exactly as `dagster api execute_run` does (the same events,
    `RUN_START` with this pid, SIGINT read as the run's cancellation); the exit code it gives."""
    from dagster import DagsterInstance, deserialize_value
    from dagster._cli.api import _execute_run_command_body
    from dagster._core.instance.ref import InstanceRef
    from dagster._utils.interrupts import capture_interrupts

    with capture_interrupts():
        ref = deserialize_value(instance_ref, InstanceRef)
        with DagsterInstance.from_ref(ref) as instance:
            return _execute_run_command_body(
                run_id, instance, lambda _event: None, set_exit_code_on_failure=False
            )


def instance_of_ref(instance_ref: str) -> DagsterInstance:
    """The Dagster instance whose serialized `InstanceRef` is `instance_ref` (a run worker's)."""
    from dagster import DagsterInstance, deserialize_value
    from dagster._core.instance.ref import InstanceRef

    return DagsterInstance.from_ref(deserialize_value(instance_ref, InstanceRef))


def end_run_at_once(instance: DagsterInstance, run: DagsterRun, reason: str) -> None:
    """Mark a launched run succeeded without executing it: `reason` as its log's engine event,
    then its success (a step-less run: Dagster's own `report_run_failed`, for success)."""
    import logging

    from dagster._core.events import DagsterEvent, DagsterEventType

    instance.report_engine_event(f"partlake: {reason}", run)
    event = DagsterEvent(
        event_type_value=DagsterEventType.PIPELINE_SUCCESS.value,
        job_name=run.job_name,
        message=f"Finished without executing a step: {reason}",
    )
    instance.report_dagster_event(event, run_id=run.run_id, log_level=logging.INFO)
