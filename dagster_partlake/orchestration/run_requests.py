"""What a refresh requests next: the one answer the sensor's tick and the chain both use.

`next_requests` takes a plan and the runs that hold partitions back (in flight, failed, backing
off after failures, in an asset backfill) and returns the runs the refresh requests now as
Dagster `RunRequest`s, with their tags and run keys. The invalidation sensor
(`orchestration.sensor`) calls it on every tick that plans; a run of a refresh
(`orchestration.chain`) calls it after its commits, as the sensor's next tick would, so both
request the same runs under the same run keys.

Here too: the sensor's settings (`RefreshSettings`) and the registry of the sensors of this
process's code location by name (`SENSORS`), the tags the runs carry, the run statuses that
count as in flight (`in_flight_runs`), and the (asset, partition) pairs a Dagster run targets
(`run_partitions`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from dagster import DagsterRun, DagsterRunStatus, PartitionKeyRange, RunRequest, RunsFilter

from dagster_partlake.compat import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
    backfill_request,
)
from dagster_partlake.metadata import PARTITIONS_TAG, REASONS_TAG, REFRESH_TAG
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.planner import Key
from dagster_partlake.planning.runs import PlannedRun, RunPlan

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from dagster_partlake.compat import AssetGraph
    from dagster_partlake.planning.session import PlanningSession, PlanResult

SENSOR_TAG = "partlake/sensor"
ATTEMPT_TAG = "partlake/attempt"  # on retries: 2 for the first retry of a failed partition
IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
Refresh = Literal["runs", "backfill"]
REFRESH_MODES: tuple[Refresh, ...] = ("runs", "backfill")


@dataclass(frozen=True)
class RefreshSettings:
    """A sensor's parameters (see `build_invalidation_sensor`)."""

    name: str
    root: str | None
    retry_base_seconds: int
    retry_max_seconds: int
    max_runs_in_flight: int = 20
    io_manager_key: str = "io_manager"
    refresh: Refresh = "runs"

    def __post_init__(self) -> None:
        if self.max_runs_in_flight < 1:
            raise ValueError(
                f"max_runs_in_flight must be at least 1, got {self.max_runs_in_flight}"
            )
        if self.refresh not in REFRESH_MODES:
            raise ValueError(
                f"refresh must be one of {', '.join(map(repr, REFRESH_MODES))}, got "
                f"{self.refresh!r}"
            )


# The sensors of this process's code location, by name (`build_invalidation_sensor` records
# them): a run of a refresh finds its sensor's settings here by its `partlake/sensor` tag.
SENSORS: dict[str, RefreshSettings] = {}

Blocked = dict[str, set[Key]]  # asset -> the partitions held back


@dataclass(frozen=True)
class NextRequests:
    """What a refresh requests next, and what held the rest back."""

    runs: RunPlan  # the plan's runs, the blocked partitions left out
    requests: list[RunRequest]  # the run requests of `chosen`, upstream first
    chosen: tuple[PlannedRun, ...]  # the runs requested now
    deferred: tuple[PlannedRun, ...]  # runs chosen, then left for later by `before_requesting`
    running: Blocked  # the partitions of the runs in flight and of the asset backfills
    backing_off: Blocked  # failed partitions whose next retry is not due yet


def next_requests(
    session: PlanningSession,
    result: PlanResult,
    asset_graph: AssetGraph,
    settings: RefreshSettings,
    *,
    refresh_id: str,
    in_flight: Sequence[DagsterRun],
    failed: Sequence[DagsterRun] = (),
    failures: Mapping[str, list[float]] | None = None,
    now: float = 0.0,
    backfills: Sequence[tuple[str, Sequence[tuple[str, Key]]]] = (),
    before_requesting: Callable[[tuple[PlannedRun, ...]], tuple[PlannedRun, ...]] | None = None,
) -> NextRequests:
    """The runs of `result`'s plan that the refresh requests now, as run requests.

    A partition is held back while a run in flight, a failed run in `failed` or an asset
    backfill targets it, or while its retry after failures is not due; a run that reads a held
    partition waits. Of the runs that wait for nothing, at most `max_runs_in_flight` minus the
    runs in flight are requested (with `refresh="backfill"`: one asset backfill of every run it
    can take).

    Args:
        session: the planning session `result` was planned by.
        result: the plan.
        asset_graph: the code location's asset graph.
        settings: the sensor's settings.
        refresh_id: the `partlake/refresh` tag of the runs.
        in_flight: the sensor's runs queued or running.
        failed: failed runs whose partitions are held back (the chain: those of its refresh).
        failures: `failure_key(asset, partition)` -> [failures so far, time of the next retry];
            a retry's run key and `partlake/attempt` tag count the failures.
        now: the time the retries are due against.
        backfills: the sensor's asset backfills in progress: (id, its (asset, partition) pairs).
        before_requesting: called with the chosen runs before they become requests; returns
            those to request now (the sensor records their partitions' partlake_fresh results
            first), the others are `deferred`.

    Returns:
        The requests, the runs they are for, and what held the rest back.
    """
    failures = failures or {}
    graph = session.graph
    running = _running(graph, in_flight)
    for _, pairs in backfills:
        for asset, key in pairs:
            running.setdefault(asset, set()).add(key)
    backing_off = _backing_off(failures, now)
    runs = session.runs(result, blocked=_union(running, _running(graph, failed), backing_off))
    if settings.refresh == "backfill":
        chosen = _backfillable(runs)
    else:
        chosen = runs.ready[: max(0, settings.max_runs_in_flight - len(in_flight))]
    deferred: tuple[PlannedRun, ...] = ()
    if before_requesting is not None:
        now_runs = before_requesting(chosen)
        chosen, deferred = now_runs, tuple(r for r in chosen if r not in now_runs)
    requests = _requests(
        graph, asset_graph, chosen, settings, result.versions, failures, refresh_id
    )
    return NextRequests(runs, requests, chosen, deferred, running, backing_off)


def in_flight_runs(instance: DagsterInstance, sensor: str) -> Sequence[DagsterRun]:
    """The runs of the sensor named `sensor` that are queued or running."""
    return instance.get_runs(filters=RunsFilter(tags={SENSOR_TAG: sensor}, statuses=IN_FLIGHT))


def run_partitions(graph: LakeGraph, run: DagsterRun) -> list[tuple[str, Key]]:
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


def failure_key(asset: str, key: Key) -> str:
    """The key of a partition in the failures map (a sensor cursor's JSON)."""
    return json.dumps([asset, key])


def failed_partition(value: str) -> tuple[str, Key]:
    """The (asset, partition) of a `failure_key`."""
    asset, key = json.loads(value)
    return asset, key


def _running(graph: LakeGraph, in_flight: Sequence[DagsterRun]) -> Blocked:
    """The partitions the sensor's runs in flight target."""
    blocked: Blocked = {}
    for run in in_flight:
        for asset, key in run_partitions(graph, run):
            blocked.setdefault(asset, set()).add(key)
    return blocked


def _backing_off(failures: Mapping[str, list[float]], now: float) -> Blocked:
    """The failed partitions whose next retry is not due yet."""
    blocked: Blocked = {}
    for fkey, (_, retry_at) in failures.items():
        if retry_at > now:
            asset, key = failed_partition(fkey)
            blocked.setdefault(asset, set()).add(key)
    return blocked


def _union(*maps: Mapping[str, set[Key]]) -> Blocked:
    joined: Blocked = {}
    for blocked in maps:
        for asset, keys in blocked.items():
            joined.setdefault(asset, set()).update(keys)
    return joined


def _backfillable(runs: RunPlan) -> tuple[PlannedRun, ...]:
    """The planned runs one asset backfill can take, upstream first: every run but those that
    read an early-cutoff output (whether they run is known only after it commits) or an earlier
    partition of one of their own assets (a merge's later days, which Dagster does not know to
    order), and the runs after those."""
    taken: dict[int, PlannedRun] = {}
    for run in runs.runs:
        awaited = [taken.get(n) for n in run.waits_for]
        if run.after_cutoff or any(a is None for a in awaited):
            continue
        if any(set(a.assets) & set(run.assets) for a in awaited if a is not None):
            continue
        taken[run.number] = run
    return tuple(taken.values())


def _attempt(run: PlannedRun, failures: Mapping[str, list[float]]) -> int:
    """How many times the run's partitions have failed so far (0 on a first request)."""
    counts = [failures.get(failure_key(i.asset, i.partition), [0, 0])[0] for i in run.items]
    return int(max(counts, default=0))


def _requests(
    graph: LakeGraph,
    asset_graph: AssetGraph,
    runs: Sequence[PlannedRun],
    settings: RefreshSettings,
    versions: Mapping[str, int],
    failures: Mapping[str, list[float]],
    refresh_id: str,
) -> list[RunRequest]:
    """The run requests of `runs` (runs that wait for no other run), upstream first; with
    `refresh="backfill"`, one request for an asset backfill of all of them."""
    if not runs:
        return []
    name = settings.name
    if settings.refresh == "backfill":
        items = [i for run in runs for i in run.items]
        shown = sorted({i.partition for i in items if i.partition is not None})
        more = len(shown) - 10
        tags = {
            SENSOR_TAG: name,
            REFRESH_TAG: refresh_id,
            REASONS_TAG: ", ".join(sorted({i.reason for i in items})),
            PARTITIONS_TAG: ", ".join(shown[:10]) + (f" (+{more})" if more > 0 else ""),
        }
        pairs = [(graph.assets[i.asset].key, i.partition) for i in items]
        return [backfill_request(asset_graph, pairs, tags)]
    requests = []
    for run in runs:
        attempt = _attempt(run, failures)
        tags = {SENSOR_TAG: name, REFRESH_TAG: refresh_id, **run.run_tags()}
        if attempt:
            tags[ATTEMPT_TAG] = str(attempt + 1)
        kwargs: dict[str, Any] = {}
        if run.partition_key is not None:
            kwargs["partition_key"] = run.partition_key
        requests.append(
            RunRequest(
                run_key=f"{name}:{_digest(run, versions, attempt)}",
                asset_selection=[graph.assets[a].key for a in run.assets],
                tags=tags,
                **kwargs,
            )
        )
    return requests


def _digest(run: PlannedRun, versions: Mapping[str, int], attempt: int) -> str:
    """Same run against the same table versions = same digest, so the same run key (Dagster
    skips a run key it has seen); new commits give a new key, and so does a retry after a
    failure, which Dagster would otherwise skip as already requested."""
    value: list[object] = [run.assets, run.keys, sorted(versions.items()), attempt]
    return hashlib.sha1(json.dumps(value, default=str).encode()).hexdigest()[:16]
