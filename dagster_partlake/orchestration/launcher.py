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

from dagster import DagsterRun, DefaultRunLauncher

from dagster_partlake.compat import CheckRunHealthResult, WorkerStatus
from dagster_partlake.orchestration.workers import alive, free_slots, worker_of_run


class MonitoredRunLauncher(DefaultRunLauncher):
    """Launches runs as the DefaultRunLauncher does, and tells run monitoring whether a run's
    worker process is still alive. Configured in dagster.yaml (see the module docstring); not a
    resource of the code location."""

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
