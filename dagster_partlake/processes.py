"""Which process this is, as the run tags of the runs it executes name it (a base module).

A run's worker (the process that executes it) records itself on the run when it starts: `partlake
run` when it creates its runs, a daemon-launched worker when `DeltaPartitionIOManager` is set up
(`record_worker`). Run monitoring's health check (`MonitoredRunLauncher`) and `partlake run`'s
start-up then read these tags to judge whether the worker is alive
(`dagster_partlake.orchestration.workers`). A pid alone is ambiguous once the process is gone
(pids are reused), so the tags also say when the process started, from /proc.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster import DagsterInstance, DagsterRun

HOST_TAG = "partlake/host"
PID_TAG = "partlake/pid"
PROCESS_START_TAG = "partlake/process_start"


@contextmanager
def file_lock(
    path: Path, waiting_for: str, say: Callable[[str], object] | None = None
) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created with its folder), shared by every
    process of the machine; when another holds it, `say` is told first that this one is
    waiting for `waiting_for`. The kernel releases it when the holder dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is not None:
                say(f"waiting for {waiting_for} ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def this_host() -> str:
    return socket.gethostname()


def process_start_time(pid: int) -> float | None:
    """When process `pid` started (epoch seconds), from /proc; None where /proc has no answer."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(") ", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime: clock ticks after boot
        return _boot_time() + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


@cache
def _boot_time() -> float:
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def process_tags(pid: int | None = None) -> dict[str, str]:
    """The run tags naming process `pid` (default: this one) on this host."""
    pid = os.getpid() if pid is None else pid
    tags = {HOST_TAG: this_host(), PID_TAG: str(pid)}
    started = process_start_time(pid)
    if started is not None:
        tags[PROCESS_START_TAG] = f"{started:.3f}"
    return tags


def record_worker(instance: DagsterInstance, run: DagsterRun) -> bool:
    """Tag `run` with this process, its worker, unless its tags name this process already
    (`partlake run` tags its runs when it creates them; a re-execution may carry its parent's
    tags, which name another process). Whether the tags were written."""
    tags = run.tags or {}
    if (tags.get(HOST_TAG), tags.get(PID_TAG)) == (this_host(), str(os.getpid())):
        return False
    instance.add_run_tags(run.run_id, process_tags())
    return True


# Called when an output of a run has committed (`DeltaPartitionIOManager`, after the commit),
# with the run, the instance and a logger: what the layers above want done then (the next level
# of a refresh, `orchestration.chain`), registered by them here, a base module every layer sees.
# The hooks run in a thread of their own, one pass at a time per run (a commit during a pass asks
# for one more), so the run's next steps do not wait for them; the run's end waits.
RunHook = Callable[["DagsterRun", "DagsterInstance", Any], object]
_RUN_HOOKS: list[RunHook] = []
_PASSES: dict[str, tuple[threading.Thread, list[bool]]] = {}  # run id -> its pass, asked again
_PASSES_LOCK = threading.Lock()
HOOKS_WAIT_SECONDS = 60.0


def on_run_committed(hook: RunHook) -> None:
    """Call `hook` when an output of a run has committed in this process (registered once)."""
    if hook not in _RUN_HOOKS:
        _RUN_HOOKS.append(hook)


def run_committed(run: DagsterRun, instance: DagsterInstance, log: Any) -> None:
    """Start a pass of the hooks for `run` (or ask the one running for another)."""
    if not _RUN_HOOKS:
        return
    with _PASSES_LOCK:
        running = _PASSES.get(run.run_id)
        if running is not None and running[0].is_alive():
            running[1][0] = True
            return
        again = [False]
        thread = threading.Thread(
            target=_passes, args=(run, instance, log, again), name="partlake-run-hooks"
        )
        _PASSES[run.run_id] = (thread, again)
        thread.start()


def _passes(run: DagsterRun, instance: DagsterInstance, log: Any, again: list[bool]) -> None:
    while True:
        for hook in list(_RUN_HOOKS):
            try:
                hook(run, instance, log)
            except Exception as error:  # noqa: BLE001 - the sensor remains the safety net
                if log is not None:
                    log.warning(f"after a commit of this run, {hook.__name__} failed: {error}")
        with _PASSES_LOCK:
            if not again[0]:
                return
            again[0] = False


def run_hooks_done(run_id: str) -> None:
    """Wait (a bounded time) for the hooks of the run's commits; forget them."""
    with _PASSES_LOCK:
        running = _PASSES.pop(run_id, None)
    if running is not None:
        running[0].join(HOOKS_WAIT_SECONDS)
