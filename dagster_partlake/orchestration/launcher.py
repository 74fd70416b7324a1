"""`MonitoredRunLauncher`: Dagster's DefaultRunLauncher, with run workers run monitoring can check.

Dagster's run monitoring (`run_monitoring:` in dagster.yaml, a daemon) marks a STARTED run failed
when its run launcher reports the run's worker dead; the DefaultRunLauncher cannot tell, so with
it a worker killed by the OOM killer or `kill -9` leaves its run STARTED forever, holding its
partitions (the sensor counts it as in flight) and its pool slots. This launcher launches runs
exactly as the DefaultRunLauncher does (a worker process per run, started by the code server)
and answers the health check from the worker's pid on this machine
(`dagster_partlake.orchestration.workers`). A worker found dead also frees its pool slots at once,
so the runs waiting for them go on.

    # dagster.yaml
    run_launcher:
      module: dagster_partlake
      class: MonitoredRunLauncher
    run_monitoring:
      enabled: true
      poll_interval_seconds: 15
      max_resume_run_attempts: 0  # the DefaultRunLauncher cannot resume a run
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Any

from dagster import DagsterRun, DefaultRunLauncher, Field, serialize_value

from dagster_partlake.compat import CheckRunHealthResult, LaunchRunContext, WorkerStatus
from dagster_partlake.orchestration.warm import WARM_TAG, WORKER_TAG, WarmPool, start_worker
from dagster_partlake.orchestration.workers import alive, free_slots, worker_of_run


class MonitoredRunLauncher(DefaultRunLauncher):
    """Launches runs as the DefaultRunLauncher does, and tells run monitoring whether a run's
    worker process is still alive. Configured in dagster.yaml (see the module docstring); not a
    resource of the code location.

    With `warm_workers: N` (config), it keeps up to N warm workers per code location
    (`orchestration.warm`): processes that have imported Dagster and the code location and
    started its local Spark; a run is handed to a ready one, whose replacement starts at once,
    and otherwise launched as before.
    """

    def __init__(self, inst_data: Any = None, warm_workers: int = 0) -> None:
        super().__init__(inst_data=inst_data)
        self._pool = WarmPool(warm_workers) if warm_workers > 0 else None

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {
            "warm_workers": Field(
                int,
                is_required=False,
                default_value=0,
                description=(
                    "Warm run workers kept per code location (0: a new process per run, as "
                    "Dagster's DefaultRunLauncher)."
                ),
            )
        }

    @classmethod
    def from_config_value(
        cls, inst_data: Any, config_value: Mapping[str, Any]
    ) -> MonitoredRunLauncher:
        return cls(inst_data=inst_data, warm_workers=int(config_value.get("warm_workers", 0)))

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        origin = run.job_code_origin
        if origin is None:
            super().launch_run(context)
            return
        # Every run goes to a partlake worker, a warm one if ready, else one started for it:
        # before anything else, it decides whether the run computes (`orchestration.claims`).
        worker = self._pool.take(origin) if self._pool is not None else None
        warm = worker is not None
        if worker is None:
            worker = start_worker(origin, for_run=True)
        tags = {WORKER_TAG: str(worker.pid), **({WARM_TAG: str(worker.pid)} if warm else {})}
        self._instance.add_run_tags(run.run_id, tags)
        worker.hand(run.run_id, serialize_value(self._instance.get_ref()))
        if self._pool is not None:
            self._pool.fill(origin)  # the next run's worker warms up now

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or WORKER_TAG not in run.tags:
            return super().terminate(run_id)
        if run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        # The worker executes the run as `dagster api execute_run` does: an interrupt ends it.
        try:
            os.kill(int(run.tags[WORKER_TAG]), signal.SIGINT)
        except ProcessLookupError:
            return False
        return True

    def dispose(self) -> None:
        if self._pool is not None:
            self._pool.stop()
        super().dispose()

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        worker = worker_of_run(self._instance, run)
        if worker is None:
            # Not started yet, or on another machine: run monitoring's timeouts still apply.
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no worker process known here")
        if alive(worker) is False:
            free_slots(self._instance, run.run_id)
            return CheckRunHealthResult(
                WorkerStatus.FAILED,
                f"the run's worker {worker.describe()} is gone (killed, out of memory, or its "
                "machine restarted); its pool slots were freed",
            )
        return CheckRunHealthResult(WorkerStatus.RUNNING)
