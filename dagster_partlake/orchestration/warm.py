"""Warm run workers: processes that have imported Dagster and the code location, and started its
local Spark, before a run is handed to them.

A run launched by Dagster's DefaultRunLauncher starts a new process that imports Dagster and the
code location and, with local Spark, starts a JVM: seconds before its first step, paid by every
run. `MonitoredRunLauncher(warm_workers=N)` keeps up to N workers per code location ready
instead (`WarmPool`), each a process running this module's `main`:

1. it loads the code location the way a run's process does (`recon_job_from_origin`), and
   starts its Spark session when the code location's `SparkResource` is local (a Spark Connect
   or cluster session costs nothing to start);
2. it says it is ready on stdout: its pid and every file of the code location it imported
   (with size and modification time), so the launcher can tell when that code changed on disk;
3. it waits for one line on stdin: the run to execute (its id and the Dagster instance's
   reference), executes it exactly as `dagster api execute_run` does (the same events, the
   same `RUN_START` with its pid, the same interrupt handling for cancellation), and exits.

A worker runs one run, never two. Its stdin is the launcher's: when the launcher's process ends,
the worker reads end-of-file and exits without running anything. A worker whose code changed on
disk is stopped, never handed a run (`WarmWorker.stale`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster import RepositoryDefinition

    from dagster_partlake.compat import JobPythonOrigin

READY = "partlake-warm-worker-ready"
FOR_RUN_ENV = "PARTLAKE_WORKER_FOR_RUN"


def code_files() -> dict[str, tuple[int, int]]:
    """The files of the imported modules that are not installed packages or the standard
    library (the code location's own code, wherever its folder is: under the working directory
    or on `PYTHONPATH`), each with its size and modification time (ns)."""
    installed = {
        os.path.realpath(p) + os.sep
        for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    }
    found: dict[str, tuple[int, int]] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        real = os.path.realpath(path)
        if any(real.startswith(prefix) for prefix in installed) or any(
            f"{os.sep}{folder}{os.sep}" in real for folder in ("site-packages", "dist-packages")
        ):
            continue
        try:
            stat = os.stat(real)
        except OSError:
            continue
        found[real] = (stat.st_size, stat.st_mtime_ns)
    return found


def _warm_spark(repository: RepositoryDefinition) -> bool:
    """Start the code location's local Spark session now; whether one was started."""
    from dagster_partlake.spark.resource import SparkResource

    for definition in repository.get_top_level_resources().values():
        resource_cls = getattr(definition, "configurable_resource_cls", None)
        if not (isinstance(resource_cls, type) and issubclass(resource_cls, SparkResource)):
            continue
        field = definition.config_schema.as_field()
        config = field.default_value if field.default_provided else {}
        resource = resource_cls(**config)
        if resource.remote is not None or not resource.master.startswith("local"):
            return False
        from dagster_partlake.spark.resource import take_session_starts

        resource.spark_session  # noqa: B018 - starts the JVM; the run's resource reuses it
        take_session_starts()  # not the run's start-up: its metadata must not show it
        return True
    return False


def main() -> int:
    """A warm worker (see the module docstring); `$PARTLAKE_WARM_ORIGIN` is the serialized
    `JobPythonOrigin` of the code location's job; `$PARTLAKE_WORKER_FOR_RUN` set: started for
    a run waiting on its stdin (its Spark starts with the run, if the run computes)."""
    from dagster_partlake import compat

    origin = compat.job_origin(os.environ["PARTLAKE_WARM_ORIGIN"])
    repository = compat.job_repository(origin)  # imports the code location
    # Stat the code as it was imported, not after Spark's warm-up: a file changed during the
    # warm-up would otherwise look unchanged and the worker would run the old code.
    files = code_files()
    spark = False if os.environ.get(FOR_RUN_ENV) else _warm_spark(repository)
    ready = {"pid": os.getpid(), "spark": spark, "files": files}
    sys.stdout.write(f"{READY} {json.dumps(ready)}\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the launcher is gone: nothing to run
    order: dict[str, Any] = json.loads(line)
    if _ended_at_once(repository, order["run_id"], order["instance_ref"]):
        return 0
    return compat.execute_run(order["run_id"], order["instance_ref"])


def _ended_at_once(repository: RepositoryDefinition, run_id: str, instance_ref: str) -> bool:
    """Whether the run computes nothing (`orchestration.claims`): then it is ended here, its
    reason in its log, without a step or Spark."""
    from dagster_partlake import compat
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.layout import default_persist_dir
    from dagster_partlake.metadata import REASONS_TAG
    from dagster_partlake.orchestration.claims import Claims, already_written, decide
    from dagster_partlake.orchestration.run_requests import run_partitions
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession

    with compat.instance_of_ref(instance_ref) as instance:
        run = instance.get_run_by_id(run_id)
        if run is None:
            return False
        # Each asset's table as its IO manager's definition places it, as the sensor sees it.
        graph = LakeGraph(asset_graph=repository.asset_graph)
        targets = run_partitions(graph, run)
        session = PlanningSession(graph, StateCache(default_persist_dir()))
        claims = Claims(instance)
        with claims.locked(lambda text: instance.report_engine_event(f"partlake: {text}", run)):
            decision = decide(
                claims,
                run_id,
                targets,
                # Only a run partlake planned ends when what it would write is written.
                written=(lambda: already_written(session, targets, instance))
                if REASONS_TAG in run.tags
                else None,
            )
        if decision.compute:
            return False
        compat.end_run_at_once(instance, run, decision.reason)
        return True


# -- the launcher's side --------------------------------------------------------------------------

WARM_TAG = "partlake/warm_worker"  # on a run handed to a warm worker: the worker's pid
WORKER_TAG = "partlake/worker"  # on every run handed to a partlake worker: the worker's pid


class WarmWorker:
    """One worker process started by the pool, and what it said when it became ready."""

    def __init__(self, proc: subprocess.Popen[str], key: str) -> None:
        self.proc = proc
        self.key = key
        self.started = time.monotonic()
        self.ready: dict[str, Any] | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._read, name="partlake-warm-worker", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        """Wait for the ready line, then pass the worker's output on (the run's stdout)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if self.ready is None and line.startswith(READY + " "):
                self.ready = json.loads(line[len(READY) + 1 :])
                self._ready.set()
                continue
            sys.stdout.write(line)
        self._ready.set()  # ended: never ready
        self.proc.wait()  # reaped: no zombie left behind in the launcher's process

    def is_ready(self) -> bool:
        return self.ready is not None and self.proc.poll() is None

    def stale(self) -> bool:
        """Whether a file of the code location it imported changed since (or is gone)."""
        assert self.ready is not None
        for path, (size, mtime) in self.ready["files"].items():
            try:
                stat = os.stat(path)
            except OSError:
                return True
            if (stat.st_size, stat.st_mtime_ns) != (size, mtime):
                return True
        return False

    def hand(self, run_id: str, instance_ref: str) -> None:
        """Give it the run; it executes it and exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"run_id": run_id, "instance_ref": instance_ref}) + "\n")
        self.proc.stdin.close()

    def stop(self) -> None:
        """End a worker that will not run anything (end-of-file on its stdin, then a kill)."""
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class WarmPool:
    """Up to `size` warm workers per code location (its job's Python origin), started in the
    background, each handed at most one run."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._workers: dict[str, list[WarmWorker]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(origin: JobPythonOrigin) -> str:
        """Workers are shared by the runs of one code location (any job of it)."""
        from dagster import serialize_value

        return serialize_value(origin.repository_origin)

    def take(self, origin: JobPythonOrigin) -> WarmWorker | None:
        """A ready worker of the code location whose code is as it was loaded, else None (a
        worker whose code changed is stopped; one still warming up is left to warm up)."""
        key = self.key(origin)
        with self._lock:
            workers = self._workers.setdefault(key, [])
            for worker in list(workers):
                if worker.proc.poll() is not None:
                    workers.remove(worker)
                elif worker.is_ready() and worker.stale():
                    workers.remove(worker)
                    worker.stop()
                elif worker.is_ready():
                    workers.remove(worker)
                    return worker
        return None

    def fill(self, origin: JobPythonOrigin) -> None:
        """Start workers until the code location has `size` (in the background)."""
        key = self.key(origin)
        with self._lock:
            workers = self._workers.setdefault(key, [])
            workers[:] = [w for w in workers if w.proc.poll() is None]
            for _ in range(self.size - len(workers)):
                workers.append(start_worker(origin, key))

    def stop(self) -> None:
        with self._lock:
            workers = [w for ws in self._workers.values() for w in ws]
            self._workers.clear()
        for worker in workers:
            worker.stop()


def start_worker(origin: JobPythonOrigin, key: str = "", *, for_run: bool = False) -> WarmWorker:
    """A worker process of the code location of `origin`, started in its working directory
    with its Python; `for_run`: to be handed a run at once (it starts no Spark beforehand)."""
    from dagster import serialize_value

    pointer = origin.repository_origin.code_pointer
    cwd = getattr(pointer, "working_directory", None) or os.getcwd()
    env = {**os.environ, "PARTLAKE_WARM_ORIGIN": serialize_value(origin)}
    if for_run:
        env[FOR_RUN_ENV] = "1"
    proc = subprocess.Popen(
        [origin.executable_path, "-m", "dagster_partlake.orchestration.warm"],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return WarmWorker(proc, key)


if __name__ == "__main__":
    sys.exit(main())
