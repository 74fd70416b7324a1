"""Fault drills: named points where a partlake process can be made to stop, to be killed there.

A fault drill (the fault tests, an operator rehearsing an outage) needs a process to be at an
exact place when it is killed: between a run's Parquet write and its Delta commit, right after
the commit, inside a sensor tick. `fault_point(name)` is such a place. It does nothing unless
`PARTLAKE_FAULT_DIR` is set (one `os.environ` lookup) and that folder's file `points` names it,
e.g. `before_commit:2,after_commit:1`: pause at the first two passes through `before_commit`,
across all processes of the drill, and at the first through `after_commit`. A point may name
what it is for: `before_commit@clean_events:2` pauses only the commits to clean_events' table (a
run writing several assets passes the point once per table). The drill writes
`points` while its servers run, so it arms a point when it is ready. A paused process writes
`<PARTLAKE_FAULT_DIR>/<name>.<n>.paused` (its pid) and says on stderr what it waits for: that
file's `.release` sibling, which the drill creates to let it go on, unless it kills the process
first. Passes are counted with files created exclusively, so concurrent processes never take
the same pass; removing the `.paused` files starts the count again.

Points: `before_commit` (a write's files are in the table's folder, not yet in its log),
`after_commit` (the commit is in the log, the run has not recorded it), `before_write` (a run is
about to have Spark compute and write its partitions), `sensor_tick` (a sensor tick is about to
plan), `stream_batch` (a streaming micro-batch is staged, not yet committed: the batch in flight),
`retention_archived` (a retention run committed its archive copy, not yet the removal:
`maintenance.retention`; its subject is the table).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from dagster_partlake.errors import PartlakeConfigError

DIR_ENV = "PARTLAKE_FAULT_DIR"
POINTS_FILE = "points"
POINTS = (
    "before_commit",
    "after_commit",
    "before_write",
    "sensor_tick",
    "stream_batch",
    "retention_archived",
)


def fault_point(name: str, subject: str | None = None) -> None:
    """Pause here when the drill asks for `name` (for `subject`, e.g. a table, when it names
    one: see the module docstring); else return."""
    drill = os.environ.get(DIR_ENV)
    if not drill:
        return
    folder = Path(drill)
    try:
        wanted = (folder / POINTS_FILE).read_text()
    except FileNotFoundError:
        return
    passes, target = _passes(wanted).get(name, (0, None))
    if not passes or (target is not None and target != subject):
        return
    for number in range(1, passes + 1):
        paused = folder / f"{name}.{number}.paused"
        try:
            fd = os.open(paused, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue  # an earlier pass (of any process) took this one
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        release = paused.with_suffix(".release")
        sys.stderr.write(
            f"partlake fault drill: paused at {name} (pass {number}, pid {os.getpid()}) until "
            f"{release} exists\n"
        )
        sys.stderr.flush()
        while not release.exists():
            time.sleep(0.1)
        return


def _passes(spec: str) -> dict[str, tuple[int, str | None]]:
    """`before_commit@clean_events:2,after_commit` -> {"before_commit": (2, "clean_events"),
    "after_commit": (1, None)}."""
    passes = {}
    for item in spec.replace("\n", ",").split(","):
        if not item.strip():
            continue
        point, _, count = item.strip().partition(":")
        name, _, subject = point.partition("@")
        if name not in POINTS:
            raise PartlakeConfigError(
                f"{DIR_ENV}/{POINTS_FILE} names an unknown fault point {name!r}; the points are "
                f"{', '.join(POINTS)}"
            )
        passes[name] = (int(count or 1), subject or None)
    return passes
