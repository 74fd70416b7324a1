"""Which process this is, as the run tags of the runs it executes name it (a base module).

A run's worker (the process that executes it) records itself on the run when it starts: `partlake
run` when it creates its runs, a daemon-launched worker when `DeltaPartitionIOManager` is set up
(`record_worker`). Run monitoring's health check (`MonitoredRunLauncher`) and `partlake run`'s
start-up then read these tags to judge whether the worker is alive
(`dagster_partlake.orchestration.workers`). A pid alone is ambiguous once the process is gone
(pids are reused), so the tags also say when the process started, from /proc.
"""

from __future__ import annotations

import os
import socket
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster import DagsterInstance, DagsterRun

HOST_TAG = "partlake/host"
PID_TAG = "partlake/pid"
PROCESS_START_TAG = "partlake/process_start"


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
