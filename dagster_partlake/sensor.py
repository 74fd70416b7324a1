"""`build_invalidation_sensor`: request runs for exactly the stale asset partitions.

Each tick: (1) a quick check, from the cursor, whether any table got a new commit (one `stat` per
Delta table), a folder source changed, a requested run is still pending, or a retry is due; if
none, SkipReason at once, without planning or reading the event log. (2) Otherwise sync the
partition state, plan, leave out partitions of runs already queued or running and partitions
backing off after failures, and request one run per batch (`dagster_partlake.batches`): upstream
before downstream, partitions of one asset batched as its backfill policy allows. Runs carry the
tags `partlake/sensor`, `partlake/reasons` and `partlake/partitions`, visible in the UI.

A partition whose run failed is retried after `retry_base_seconds * 2**(failures-1)` (capped at
`retry_max_seconds`), not every tick. At most `max_runs_in_flight` of its runs are queued or
running at once. A table whose Delta log cannot be read holds back itself and its downstream
closure (nothing is requested there); the tick logs the error, and fails with it when it has
nothing else to request, so the UI shows it until the log is repaired.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import (
    AssetSelection,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)

from dagster_partlake.batches import Batch, make_batches
from dagster_partlake.delta.state import StateCache, folder_state
from dagster_partlake.errors import TableUnreadableError
from dagster_partlake.graph import LakeGraph
from dagster_partlake.io_manager import default_root
from dagster_partlake.lake import make_plan
from dagster_partlake.planner import Key

SENSOR_TAG = "partlake/sensor"
ATTEMPT_TAG = "partlake/attempt"  # on retries: 2 for the first retry of a failed partition
IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]

# One state cache and graph per sensor per process: the code server keeps them across ticks, so
# a tick re-reads and re-converts only the tables whose version moved.
_caches: dict[str, StateCache] = {}
_graphs: dict[tuple[str, str], tuple[Any, LakeGraph]] = {}


def _graph(name: str, asset_graph: Any, root: str | None) -> LakeGraph:
    resolved = os.path.abspath(root or default_root())
    cached = _graphs.get((name, resolved))
    if cached is None or cached[0] is not asset_graph:
        cached = (asset_graph, LakeGraph(asset_graph=asset_graph, root=resolved, resources={}))
        _graphs[(name, resolved)] = cached
    return cached[1]


def build_invalidation_sensor(
    name: str = "partlake_invalidation",
    *,
    root: str | None = None,
    minimum_interval_seconds: int = 30,
    retry_base_seconds: int = 60,
    retry_max_seconds: int = 3600,
    max_runs_in_flight: int = 20,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
) -> SensorDefinition:
    """A sensor that keeps every partitioned Delta asset of the code location fresh.

    Args:
        name: sensor name (also the value of the `partlake/sensor` run tag).
        root: lakehouse root; default `$PARTLAKE_HOME`, else `.partlake` (as the IO manager).
        minimum_interval_seconds: time between ticks.
        retry_base_seconds: wait before retrying a failed partition; doubles per failure.
        retry_max_seconds: longest wait between retries.
        max_runs_in_flight: most runs of this sensor queued or running at once; further batches
            (e.g. the years of partitions of a new asset) are requested as those finish.
        default_status: whether the sensor starts running when the code location loads.

    Example:
        .. code-block:: python

            defs = Definitions(assets=[...], sensors=[build_invalidation_sensor()], ...)
    """
    if max_runs_in_flight < 1:
        raise ValueError(f"max_runs_in_flight must be at least 1, got {max_runs_in_flight}")

    # The daemon refuses run requests from a sensor without a target; an asset selection makes
    # Dagster run each request's assets in the code location's asset job.
    @sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        asset_selection=AssetSelection.all(),
        description="Requests runs for the asset partitions that are out of date (partlake).",
    )
    def _invalidation(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        return evaluate(
            context,
            name=name,
            root=root,
            retry_base_seconds=retry_base_seconds,
            retry_max_seconds=retry_max_seconds,
            max_runs_in_flight=max_runs_in_flight,
        )

    return _invalidation


def evaluate(
    context: SensorEvaluationContext,
    *,
    name: str,
    root: str | None,
    retry_base_seconds: int,
    retry_max_seconds: int,
    max_runs_in_flight: int = 20,
) -> SensorResult | SkipReason:
    """One tick of the sensor (see the module docstring).

    Raises:
        TableUnreadableError: a table cannot be read and nothing else can be requested, so the
            tick fails with its message (with requests, the message is logged on the tick).
    """
    now = time.time()
    cursor = json.loads(context.cursor) if context.cursor else {}
    graph = _graph(name, context.repository_def.asset_graph, root)
    instance = context.instance
    versions: dict[str, int] = cursor.get("versions", {})
    failures: dict[str, list[float]] = cursor.get("failures", {})
    pending = cursor.get("pending", False)
    horizon = graph.horizon(instance)
    retry_due = any(retry_at <= now for _, retry_at in failures.values())
    cache = _caches.setdefault(name, StateCache())
    if (
        versions
        and not pending
        and not retry_due
        and horizon == cursor.get("horizon", {})
        and not _moved(graph, cache, versions)
    ):
        return SkipReason("No new commits in any table since the last tick: nothing to plan.")

    in_flight = instance.get_runs(filters=RunsFilter(tags={SENSOR_TAG: name}, statuses=IN_FLIGHT))
    # Failed runs are counted once: those updated after the newest failure already counted.
    counted_until = float(cursor.get("failures_seen_until", cursor.get("checked_at", 0.0)))
    failed_records = instance.get_run_records(
        filters=RunsFilter(
            tags={SENSOR_TAG: name},
            statuses=[DagsterRunStatus.FAILURE],
            updated_after=_utc(counted_until) if counted_until else None,
        )
    )
    for record in failed_records:
        updated = record.update_timestamp.timestamp()
        if updated <= counted_until:
            continue
        for asset, key in _run_partitions(graph, record.dagster_run):
            count = int(failures.get(_fkey(asset, key), [0, 0])[0]) + 1
            wait = min(retry_max_seconds, retry_base_seconds * 2 ** (count - 1))
            failures[_fkey(asset, key)] = [count, now + wait]
    newest_failure = max(
        (r.update_timestamp.timestamp() for r in failed_records), default=counted_until
    )

    result = make_plan(graph, cache, dynamic_partitions_store=instance)
    stale = {_fkey(i.asset, i.partition) for i in result.plan.items}
    held = {a for u in result.plan.unreadable for a in u.held}
    # Fresh again: forget. Held behind an unreadable table: keep, it was neither judged nor run.
    failures = {k: v for k, v in failures.items() if k in stale or _unfkey(k)[0] in held}
    blocked: dict[str, set[Key]] = {}
    for run in in_flight:
        for asset, key in _run_partitions(graph, run):
            blocked.setdefault(asset, set()).add(key)
    for fkey, (_, retry_at) in failures.items():
        if retry_at > now:
            asset, key = _unfkey(fkey)
            blocked.setdefault(asset, set()).add(key)

    partitions_defs = {n: a.partitions_def for n, a in graph.assets.items()}
    policies = {n: graph.asset_graph.get(a.key).backfill_policy for n, a in graph.assets.items()}
    batches = make_batches(
        result.plan, result.inputs.assets, partitions_defs, policies, blocked=blocked
    )
    new_versions = {n: s.version for n, s in result.states.items() if s is not None}
    room = max(0, max_runs_in_flight - len(in_flight))
    requests = [
        _request(graph, batch, name, new_versions, _attempt(batch, failures))
        for batch in batches.ready[:room]
    ]
    new_cursor = json.dumps(
        {
            "versions": new_versions,
            "horizon": horizon,
            "failures": failures,
            "pending": bool(requests or in_flight or batches.deferred or batches.ready[room:]),
            "checked_at": now,
            "failures_seen_until": newest_failure,
        }
    )
    errors = [u.message for u in result.plan.unreadable]
    for message in errors:
        context.log.error(message)
    if not requests:
        if errors:
            raise TableUnreadableError(" ".join(errors))
        waiting = len(result.plan.items)
        reason = (
            f"{waiting} stale asset partition(s) wait for running or backing-off runs."
            if waiting
            else "Everything is fresh."
        )
        return SensorResult(skip_reason=SkipReason(reason), cursor=new_cursor)
    return SensorResult(run_requests=requests, cursor=new_cursor)


def _moved(graph: LakeGraph, cache: StateCache, versions: Mapping[str, int]) -> bool:
    for name, asset in graph.assets.items():
        if asset.is_folder:
            state = folder_state(asset.path, [c.column for c in asset.columns])
            if (state.version if state else None) != versions.get(name):
                return True
            continue
        version = versions.get(name)
        if version is None:
            if os.path.isdir(os.path.join(asset.path, "_delta_log")):
                return True
        elif cache.moved(asset.path, version):
            return True
    return False


def _attempt(batch: Batch, failures: Mapping[str, list[float]]) -> int:
    """How many times the batch's partitions have failed so far (0 on a first request)."""
    counts = [failures.get(_fkey(i.asset, i.partition), [0, 0])[0] for i in batch.items]
    return int(max(counts, default=0))


def _request(
    graph: LakeGraph, batch: Batch, name: str, versions: Mapping[str, int], attempt: int
) -> RunRequest:
    tags = {SENSOR_TAG: name, **batch.run_tags()}
    if attempt:
        tags[ATTEMPT_TAG] = str(attempt + 1)
    kwargs: dict[str, Any] = {}
    if batch.partition_key is not None:
        kwargs["partition_key"] = batch.partition_key
    # Same batch against the same table versions = same request (Dagster skips a run key it has
    # seen); new commits give a new key, and so does a retry after a failure, which Dagster
    # would otherwise skip as already requested.
    digest = hashlib.sha1(
        json.dumps(
            [batch.assets, batch.keys, sorted(versions.items()), attempt], default=str
        ).encode()
    ).hexdigest()[:16]
    return RunRequest(
        run_key=f"{name}:{digest}",
        asset_selection=[graph.assets[a].key for a in batch.assets],
        tags=tags,
        **kwargs,
    )


def _run_partitions(graph: LakeGraph, run: Any) -> list[tuple[str, Key]]:
    """(asset, partition key) pairs a run targets, from its asset selection and tags."""
    from dagster import PartitionKeyRange

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


def _utc(timestamp: float) -> Any:
    import datetime as dt

    return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC)
