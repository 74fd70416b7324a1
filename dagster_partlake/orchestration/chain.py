"""The next level of a refresh, requested by the run that made it ready.

The invalidation sensor requests a refresh level by level: a level's runs at the first tick
after what they read is committed. The daemon evaluates sensors at most every 5 s, so each level
waited for the next pass. Now a run of a refresh requests, as soon as every asset it writes has
committed (its IO manager, after the last commit, before the run's check steps), the runs whose
inputs are all committed now: the runs of the sensor's plan that wait for no other run, exactly
as the sensor's next tick would request them (both ask `orchestration.run_requests`'s
`next_requests`), with the same tags and the same run keys, created for the same code location
and job and submitted to Dagster's run queue, which launches them at its next dequeue (every
second in the example's `dagster.yaml`). No run starts before what it reads is committed, and no
run waits for another.

The sensor stays the safety net: it finds what a run did not request (a run that failed, a
change that came meanwhile). Each request carries the run key the sensor would give it, so the
sensor's daemon skips a run the refresh already made, and a run id derived from that key, so two
runs ending at once make it once; a run the sensor made first is found by its key and not made
again. A duplicate in a race would only cost work: a planned run writes nothing another run
already wrote from the same inputs.

Only for runs of a sensor whose refresh is `"runs"`, on an instance whose run coordinator is
queued (a run is never launched from inside another); anything that goes wrong is logged and
left to the sensor.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dagster import DagsterRunStatus, RunsFilter

from dagster_partlake.metadata import REFRESH_TAG
from dagster_partlake.orchestration.run_requests import (
    SENSOR_TAG,
    SENSORS,
    RefreshSettings,
    in_flight_runs,
    next_requests,
)

if TYPE_CHECKING:
    from dagster import DagsterInstance, DagsterRun, RunRequest

_NAMESPACE = uuid.UUID("2f1d3c8e-6a4b-4f7e-9d2a-5c0b7e1f3a90")


def run_id_of(sensor: str, run_key: str) -> str:
    """The run id a refresh gives the run of `run_key`: the same for every run that asks."""
    return str(uuid.uuid5(_NAMESPACE, f"{sensor}\n{run_key}"))


def request_next_level(run: DagsterRun, instance: DagsterInstance, log: Any = None) -> list[str]:
    """Create and queue the runs of the refresh of `run` that wait for nothing now; their ids.

    Does nothing (an empty list) for a run the invalidation sensor did not request, a sensor
    whose refresh is a backfill, or an instance without a queued run coordinator.
    """
    from dagster import QueuedRunCoordinator

    name = run.tags.get(SENSOR_TAG)
    refresh = run.tags.get(REFRESH_TAG)
    settings = SENSORS.get(name or "")
    if (
        settings is None
        or not refresh
        or settings.refresh != "runs"
        or run.job_code_origin is None
        or run.remote_job_origin is None
        or not isinstance(instance.run_coordinator, QueuedRunCoordinator)
    ):
        return []
    requests, job_def = _next_level(run, instance, settings, refresh)
    created = []
    for request in requests:
        made = _submit(run, instance, job_def, request, settings.name)
        if made is not None:
            created.append(made)
    if created and log is not None:
        log.info(
            f"refresh {refresh}: requested {len(created)} run(s) of its next level now that "
            f"this run committed ({', '.join(r[:8] for r in created)})"
        )
    return created


def _next_level(
    run: DagsterRun, instance: DagsterInstance, settings: RefreshSettings, refresh: str
) -> tuple[list[RunRequest], Any]:
    """What the sensor's next tick would request, this run counted as ended."""
    from dagster_partlake import compat
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession

    assert run.job_code_origin is not None
    repository = compat.job_repository(run.job_code_origin)
    asset_graph = repository.asset_graph
    graph = LakeGraph(
        asset_graph=asset_graph, root=settings.root, io_manager_key=settings.io_manager_key
    )
    session = PlanningSession(graph, StateCache())
    result = session.plan(dynamic_partitions_store=instance)
    # This run among them: what it has not committed yet is its own to write.
    in_flight = in_flight_runs(instance, settings.name)
    # What failed in this refresh is the sensor's to retry, after its back-off.
    failed = instance.get_runs(
        filters=RunsFilter(tags={REFRESH_TAG: refresh}, statuses=[DagsterRunStatus.FAILURE])
    )
    level = next_requests(
        session,
        result,
        asset_graph,
        settings,
        refresh_id=refresh,
        in_flight=in_flight,
        failed=failed,
    )
    return level.requests, repository.get_implicit_global_asset_job_def()


def _submit(
    run: DagsterRun, instance: DagsterInstance, job_def: Any, request: RunRequest, sensor: str
) -> str | None:
    """Create `request`'s run (unless it exists) for the code location of `run`, and queue it."""
    from dagster_partlake.compat import (
        PARTITION_NAME_TAG,
        RUN_KEY_TAG,
        SENSOR_NAME_TAG,
        DagsterRunAlreadyExists,
    )

    assert request.run_key is not None
    if instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: request.run_key}), limit=1):
        return None  # the sensor, or another run of the refresh, made it
    tags: Mapping[str, str] = {
        **request.tags,
        RUN_KEY_TAG: request.run_key,
        SENSOR_NAME_TAG: sensor,
        **({PARTITION_NAME_TAG: request.partition_key} if request.partition_key else {}),
    }
    selection = frozenset(request.asset_selection or ())
    try:
        created = instance.create_run_for_job(
            job_def=job_def.get_subset(asset_selection=selection),
            run_id=run_id_of(sensor, request.run_key),
            tags=tags,
            asset_selection=selection,
            status=DagsterRunStatus.NOT_STARTED,
            remote_job_origin=run.remote_job_origin,
            job_code_origin=run.job_code_origin,
        )
    except DagsterRunAlreadyExists:
        return None
    # The queued coordinator only enqueues (the daemon launches it with its own workspace).
    instance.submit_run(created.run_id, workspace=None)  # type: ignore[arg-type]
    return created.run_id
