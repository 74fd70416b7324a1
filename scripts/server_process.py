"""What the servers' scripts share (scripts/s3_server.py, scripts/kafka_server.py): whether a
port answers, the server's pid and description in its state folder, and stopping its process
group by that pid. Standard library only: the scripts run before (and without) partlake."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

HOST = "127.0.0.1"


def listening(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def read_pid(state: Path) -> int | None:
    """The pid `state/server.pid` names, if any."""
    try:
        return int((state / "server.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"  # a zombie has stopped
    except OSError:
        return True


def read_info(state: Path) -> dict[str, object]:
    """What `state/server.json` says of the running server ({} when nothing)."""
    try:
        return json.loads((state / "server.json").read_text())
    except (OSError, ValueError):
        return {}


def stop_group(state: Path, grace: float) -> bool:
    """Stop the process group of the server `state` names: SIGTERM, then SIGKILL after `grace`
    seconds; True if one was running."""
    pid = read_pid(state)
    if pid is None:
        return False
    was_running = alive(pid)
    if was_running:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)
    (state / "server.pid").unlink(missing_ok=True)
    return was_running
