"""Counting what a write reads of its table's Delta log, measured where the reads happen.

`counting_log_reads(table)` wraps (and calls through to) delta-rs' table loads and follows and
the process's directory listings and file opens, and counts those that touch `table`'s
`_delta_log`: "load" (delta-rs reads the whole log: checkpoint and commits), "follow"
(`update_incremental`: only the newer commits), "list" (a listing of the log folder), "commit"
(one JSON commit file opened), "checkpoint" (a checkpoint file opened). It measures any
dagster_partlake, this one or an older one (the benchmark compares both), since it looks at the
operations themselves, not at partlake's own counters.
"""

from __future__ import annotations

import builtins
import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def counting_log_reads(table: str | Path) -> Iterator[Counter[str]]:
    """Count the reads of `table`'s log made inside the block (see the module docstring)."""
    from deltalake import DeltaTable

    root = os.path.abspath(str(table))
    log = os.path.join(root, "_delta_log")
    counts: Counter[str] = Counter()
    originals: dict[str, Any] = {
        "init": DeltaTable.__init__,
        "update": DeltaTable.update_incremental,
        "open": builtins.open,
        "listdir": os.listdir,
        "scandir": os.scandir,
    }

    def init(self: Any, table_uri: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.abspath(str(table_uri).removeprefix("file://")) == root:
            counts["load"] += 1
        originals["init"](self, table_uri, *args, **kwargs)

    def update(self: Any) -> None:
        if os.path.abspath(str(self.table_uri).removeprefix("file://")) == root:
            counts["follow"] += 1
        originals["update"](self)

    def opened(file: Any, *args: Any, **kwargs: Any) -> Any:
        path = os.path.abspath(str(file)) if isinstance(file, str | Path) else ""
        if os.path.dirname(path) == log:
            name = os.path.basename(path)
            if name.endswith(".json") and name[:20].isdigit():
                counts["commit"] += 1
            elif ".checkpoint." in name or name == "_last_checkpoint":
                counts["checkpoint"] += 1
        return originals["open"](file, *args, **kwargs)

    def listed(path: Any = ".") -> Any:
        if os.path.abspath(str(path)) == log:
            counts["list"] += 1
        return originals["listdir"](path)

    def scanned(path: Any = ".") -> Any:
        if os.path.abspath(str(path)) == log:
            counts["list"] += 1
        return originals["scandir"](path)

    DeltaTable.__init__ = init  # type: ignore[method-assign]
    DeltaTable.update_incremental = update  # type: ignore[method-assign]
    builtins.open = opened
    os.listdir = listed  # type: ignore[assignment]
    os.scandir = scanned  # type: ignore[assignment]
    try:
        yield counts
    finally:
        DeltaTable.__init__ = originals["init"]  # type: ignore[method-assign]
        DeltaTable.update_incremental = originals["update"]  # type: ignore[method-assign]
        builtins.open = originals["open"]
        os.listdir = originals["listdir"]
        os.scandir = originals["scandir"]
