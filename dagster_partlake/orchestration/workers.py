"""Which process runs a Dagster run, whether it is still alive, and what to do when it is not.

A run whose process died (out of memory, a lost machine, `kill -9`) stays STARTED in the Dagster
instance until someone marks it failed, and keeps the pool slots its steps claimed: with the
pool full of dead runs, every later run waits forever. partlake recognises such runs:

- `partlake run` executes its runs in its own process and tags each with it (`partlake/host`,
  `partlake/pid`, `partlake/process_start`); its next start marks the runs of processes that are
  gone FAILURE and frees their slots (`reap_dead_runs`).
- a run launched by the daemon (the sensor's, the UI's) runs in a worker process that tags the
  run with itself when it starts (`DeltaPartitionIOManager`'s set-up, `processes.record_worker`);
  for a run of a job without it, the worker's pid is the `pid` field Dagster stores with the
  run's RUN_START event, which the worker itself emits (never a log message's text).
  `MonitoredRunLauncher` lets Dagster's run monitoring ask whether it is alive (`worker_of_run`,
  `alive`), and the daemon marks a dead one failed.

A process is judged only on the host that runs it. A live pid that started after the run's
process did is another process that reused the pid: the run's process is gone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from dagster import DagsterEventType, DagsterRunStatus, RunsFilter

from dagster_partlake.compat import GRPC_INFO_TAG
from dagster_partlake.layout import RUN_REGISTRY_DIR
from dagster_partlake.processes import (
    HOST_TAG,
    PID_TAG,
    PROCESS_START_TAG,
    process_start_time,
    this_host,
)

if TYPE_CHECKING:
    from dagster import DagsterInstance, DagsterRun

# Statuses of a run that a live process still has to finish.
UNFINISHED = [
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
# Process start times read from /proc are exact to a clock tick; allow for rounding.
_SLACK_SECONDS = 2.0


@dataclass(frozen=True)
class Worker:
    """The process that executes a run."""

    host: str
    pid: int
    started: float | None = None  # the process's start time (epoch seconds), where recorded
    not_after: float | None = None  # it was running at this time (a logged event), if known

    def tags(self) -> dict[str, str]:
        """The run tags that name this process (`partlake run`'s runs carry them)."""
        tags = {HOST_TAG: self.host, PID_TAG: str(self.pid)}
        if self.started is not None:
            tags[PROCESS_START_TAG] = f"{self.started:.3f}"
        return tags

    @classmethod
    def from_tags(cls, tags: dict[str, str]) -> Worker | None:
        """The process a run's tags name (None: not a `partlake run` run)."""
        try:
            started = tags.get(PROCESS_START_TAG)
            return cls(tags[HOST_TAG], int(tags[PID_TAG]), float(started) if started else None)
        except (KeyError, ValueError):
            return None

    def describe(self) -> str:
        """'process 1234 on host etl-1 (started 2024-07-03 10:00:01 UTC)'."""
        when = ""
        if self.started is not None:
            stamp = dt.datetime.fromtimestamp(self.started, dt.UTC)
            when = f" (started {stamp:%Y-%m-%d %H:%M:%S} UTC)"
        return f"process {self.pid} on host {self.host}{when}"


@cache
def this_process() -> Worker:
    """This process, as the tags of the runs it executes name it."""
    return Worker(this_host(), os.getpid(), process_start_time(os.getpid()))


def alive(worker: Worker) -> bool | None:
    """Whether the worker's process still runs; None when this host cannot tell (another
    host's process)."""
    if worker.host != this_host():
        return None
    try:
        os.kill(worker.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        with open(f"/proc/{worker.pid}/stat") as stat:
            if stat.read().rsplit(") ", 1)[1][:1] == "Z":
                return False  # exited, not reaped yet
    except OSError:
        return True  # no /proc: the pid exists, which is all this host can say
    started = process_start_time(worker.pid)
    if started is None:
        return True
    if worker.started is not None and abs(started - worker.started) > _SLACK_SECONDS:
        return False  # another process reused the pid
    if worker.not_after is not None and started > worker.not_after + _SLACK_SECONDS:
        return False
    return True


def worker_of_run(instance: DagsterInstance, run: DagsterRun) -> Worker | None:
    """The process executing `run`. A run a run launcher started through this machine's code
    server: the process that emitted its RUN_START event (Dagster stores the emitting pid with
    each event), with the start time the worker tagged the run with (`processes.record_worker`)
    when the tags name the same process (a re-execution may carry its parent's tags). Any other
    run: the process its tags name (`partlake run`). None: not known (yet)."""
    tagged = Worker.from_tags(dict(run.tags))
    host = _code_server_host(run)
    if host is None:
        return tagged
    records = instance.get_records_for_run(
        run.run_id, of_type=DagsterEventType.RUN_START, limit=1
    ).records
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None or event.pid is None:
            continue
        if tagged is not None and (tagged.host, tagged.pid) == (host, event.pid):
            return tagged
        return Worker(host, event.pid, not_after=record.event_log_entry.timestamp)
    return None


def _code_server_host(run: DagsterRun) -> str | None:
    """The host of the code server that started the run's worker (the DefaultRunLauncher's
    workers are its subprocesses): this host when it listened on loopback or a socket."""
    raw = run.tags.get(GRPC_INFO_TAG)
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return None
    host = info.get("host")
    if info.get("socket") or host in _LOCAL_HOSTS or host == this_host():
        return this_host()
    return str(host) if host else None


@dataclass(frozen=True)
class DeadRun:
    """A run marked failed because its process is gone."""

    run_id: str
    worker: Worker
    message: str


def mark_dead(instance: DagsterInstance, run: DagsterRun, worker: Worker, by: str) -> DeadRun:
    """Mark `run` FAILURE because `worker` is gone, and free the pool slots its steps hold, so
    the runs waiting for them go on.

    Args:
        by: who noticed, for the message (`partlake run (pid 77)`, `run monitoring`).
    """
    message = (
        f"Run {run.run_id} was still {run.status.value} but its {worker.describe()} is gone "
        "(killed, out of memory, or its machine restarted); marked failed by "
        f"{by}. Its partitions stay stale: the next plan, the sensor's retry or `partlake run` "
        "runs them again."
    )
    instance.report_run_failed(run, message)
    free_slots(instance, run.run_id)
    return DeadRun(run.run_id, worker, message)


def free_slots(instance: DagsterInstance, run_id: str) -> None:
    """Free the concurrency pool slots held (and pending) for `run_id`'s steps."""
    storage = instance.event_log_storage
    if storage.supports_global_concurrency_limits:
        storage.free_concurrency_slots_for_run(run_id)


# A run that ended frees its slots itself, unless it ended without its worker (marked failed by the
# UI, the code server or run monitoring): Dagster frees those only from its daemon's run
# monitoring, `free_slots_after_run_end_seconds` later, and never where no daemon runs. A run that
# ended moments ago may still be freeing them: leave it this long.
ENDED_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class FreedSlots:
    """Pool slots held by a run that had ended, freed."""

    run_id: str
    pools: tuple[str, ...]
    message: str


def free_slots_of_ended_runs(
    instance: DagsterInstance,
    pools: Iterable[str] | None,
    by: str,
    grace_seconds: float = ENDED_GRACE_SECONDS,
) -> list[FreedSlots]:
    """Free the slots of `pools` (None: every pool) still claimed by runs that ended (success,
    failure or cancellation) more than `grace_seconds` ago.

    Args:
        by: who frees them, for the message (`partlake run (pid 77)`).
    """
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    names = sorted(set(pools)) if pools is not None else sorted(storage.get_concurrency_keys())
    held: dict[str, set[str]] = {}
    for pool in names:
        for slot in storage.get_concurrency_info(pool).claimed_slots:
            held.setdefault(slot.run_id, set()).add(pool)
    if not held:
        return []
    now = time.time()
    freed = []
    for record in instance.get_run_records(filters=RunsFilter(run_ids=sorted(held))):
        run = record.dagster_run
        ended = record.end_time or record.update_timestamp.timestamp()
        if not run.is_finished or now - ended < grace_seconds:
            continue
        free_slots(instance, run.run_id)
        stamp = dt.datetime.fromtimestamp(ended, dt.UTC)
        pools_held = tuple(sorted(held[run.run_id]))
        message = (
            f"Run {run.run_id} ended {run.status.value} at {stamp:%Y-%m-%d %H:%M:%S} UTC but its "
            f"steps still held slots of Dagster pool {', '.join(pools_held)} (Dagster frees "
            f"those only from its daemon's run monitoring); freed by {by}, so the runs waiting "
            "for them go on."
        )
        freed.append(FreedSlots(run.run_id, pools_held, message))
    return freed


def reap_dead_runs(instance: DagsterInstance) -> list[DeadRun]:
    """Mark failed every unfinished run of a `partlake run` process on this host that is gone
    (and free its slots): what `partlake run` does when it starts."""
    me = this_process()
    gone = dead_registered(instance_dir(instance))
    dead = []
    for run in _unfinished(instance, {HOST_TAG: me.host}):
        worker = Worker.from_tags(dict(run.tags))
        if worker is not None and alive(worker) is False:
            dead.append(mark_dead(instance, run, worker, by=f"partlake run (pid {me.pid})"))
    forget(gone)
    return dead


def instance_dir(instance: DagsterInstance) -> str | None:
    """The instance's own folder (its DAGSTER_HOME), where `partlake run` processes register."""
    try:
        return instance.root_directory
    except Exception:  # noqa: BLE001 - an instance without a local folder: nothing to register
        return None


def _unfinished(instance: DagsterInstance, tags: dict[str, str]) -> Iterator[DagsterRun]:
    yield from instance.get_runs(filters=RunsFilter(tags=tags, statuses=UNFINISHED))


def describe_runs(instance: DagsterInstance, run_ids: Sequence[str]) -> list[str]:
    """'abc12345 (STARTED, partlake run process 77 on host etl-1)' for each run id."""
    shown = []
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        if run is None:
            shown.append(f"{run_id[:8]} (not in this instance)")
            continue
        worker = worker_of_run(instance, run)
        where = f", {worker.describe()}" if worker is not None else ""
        state = "" if worker is None or alive(worker) is not False else ", process gone"
        shown.append(f"{run_id[:8]} ({run.status.value}{where}{state})")
    return shown


# --- `partlake run`'s processes, registered on disk ----------------------------------------------
# A no-op `partlake run` must not open the Dagster instance (a second of imports); a file per
# running `partlake run` process under the instance's directory tells it, with one `listdir`,
# whether a previous one died with runs unfinished.

_REGISTRY_DIR = RUN_REGISTRY_DIR


def _registry(dagster_home: str) -> str:
    return os.path.join(dagster_home, _REGISTRY_DIR)


@contextmanager
def registered(dagster_home: str | None) -> Iterator[None]:
    """Record this process as executing runs of the instance at `dagster_home` for the block
    (the file stays if the process dies inside it)."""
    if not dagster_home:
        yield
        return
    me = this_process()
    path = os.path.join(_registry(dagster_home), f"{me.pid}-{uuid.uuid4().hex[:8]}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as marker:
        marker.write(json.dumps(me.tags()))
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def dead_registered(dagster_home: str | None) -> list[str]:
    """Registry files of `partlake run` processes on this host that are gone (their runs may
    be unfinished in the instance)."""
    if not dagster_home:
        return []
    folder = _registry(dagster_home)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    dead = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path) as marker:
                worker = Worker.from_tags(json.loads(marker.read()))
        except (OSError, ValueError):
            continue  # being written or removed right now
        if worker is not None and alive(worker) is False:
            dead.append(path)
    return dead


def forget(paths: Sequence[str]) -> None:
    """Remove registry files whose runs were dealt with."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
