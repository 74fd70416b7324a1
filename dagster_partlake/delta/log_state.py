"""A table's partition state replayed from its Delta log in Python, without delta-rs.

delta-rs keeps every live file of a loaded snapshot in memory (about 500 bytes per file, kept by
its allocator after the table is dropped), and Arrow's JSON reader holds on to a similar amount,
while partition state needs two numbers per partition. So a first read replays the log itself:
the newest classic checkpoint (one Parquet file, as delta-rs writes them; its `add` column) and
the JSON commits after it, line by line, skipping the commitInfo lines (a partlake record of a
large commit is most of its bytes). A file is live when the last action naming it is an add;
only files that some remove names are followed one by one, the rest are counted into their
partition's newest modification time and file count at once.

Returns None where this reader would have to know more of the protocol than it does, and the
caller then asks delta-rs: multi-part or V2 checkpoints, column mapping, deletion vectors, a
partition column whose JSON text is not the Arrow text delta-rs gives (timestamps, decimals), a
log with gaps, or anything it cannot parse.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from dagster_partlake.columnar.interner import VALUES
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.layout import commit_version, log_dir

# Delta partition types whose JSON commit value is the text Arrow casts them to.
TEXT_TYPES = frozenset({"string", "date", "byte", "short", "integer", "long"})
# Reader features this replay handles (neither changes which files are live or when).
_READER_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})


@dataclass(frozen=True)
class LogState:
    """Per partition of the latest version: the newest modification time and the live files."""

    version: int
    partition_by: tuple[str, ...]
    column_types: dict[str, Any]
    newest: IntMap[tuple[str | None, ...]]  # over `compact.VALUES`
    counts: IntMap[tuple[str | None, ...]]


def read_log_state(root: str) -> LogState | None:
    """The partition state of the table at `root` from its log, or None (see the module
    docstring)."""
    try:
        return _read(root)
    except Exception:  # noqa: BLE001 - any failure here only means "ask delta-rs"
        return None  # delta-rs reads it, and raises the error worth showing if it is damaged


def _read(root: str) -> LogState | None:
    log = log_dir(root)
    names = os.listdir(log)
    versions = sorted(v for v in map(commit_version, names) if v is not None)
    checkpoint = _newest_checkpoint(log, names)
    if checkpoint is False:
        return None
    start = 0 if checkpoint is None else checkpoint[0] + 1
    wanted = [v for v in versions if v >= start]
    if wanted != list(range(start, start + len(wanted))) or (checkpoint is None and not wanted):
        return None  # a gap in the log
    paths = [os.path.join(log, f"{version:020d}.json") for version in wanted]
    # Every action but the adds is parsed once here: removes, metadata, protocol, ...; the adds
    # are read again, one at a time, below (a million of them would not fit in memory at once).
    others = {
        i: json.loads(line) for i, line in enumerate(_actions(paths)) if not line.startswith(_ADD)
    }
    rows = None
    if checkpoint is not None:
        import pyarrow.parquet as pq

        rows = pq.read_table(checkpoint[1], columns=["add", "metaData", "protocol"])
    metadata = _last_action(others, rows, "metaData")
    protocol = _last_action(others, rows, "protocol")
    if metadata is None or protocol is None or not _supported(metadata, protocol):
        return None
    partition_by = tuple(metadata["partitionColumns"])
    fields = json.loads(metadata["schemaString"])["fields"]
    column_types = {f["name"]: f["type"] for f in fields}
    if any(column_types.get(c) not in TEXT_TYPES for c in partition_by):
        return None
    words: dict[str, str] = {}  # one string object per distinct partition value

    def values_of(stored: dict[str, str | None]) -> tuple[str | None, ...]:
        return tuple(words.setdefault(v, v) if (v := stored.get(c)) else None for c in partition_by)

    # A file is live when the last action naming it is an add. Only files that some remove
    # names are followed one by one; the rest go straight into the per-partition totals.
    removed = {unquote(a["remove"]["path"]) for a in others.values() if "remove" in a}
    # Per live file, its partition's values id and modification time: two int64 arrays, not
    # dicts of a million entries.
    ids, times = array("q"), array("q")
    followed: dict[str, tuple[tuple[str | None, ...], int] | None] = {}

    def added(add: dict[str, Any]) -> None:
        values = values_of(dict(add["partitionValues"] or ()))
        path = unquote(add["path"])
        if path in removed:
            followed[path] = (values, int(add["modificationTime"]))
        else:
            count(values, int(add["modificationTime"]))

    def count(values: tuple[str | None, ...], modified: int) -> None:
        ids.append(VALUES.id(values))
        times.append(modified)

    if rows is not None:
        for add in rows.column("add").to_pylist():
            if add is not None:
                added(add)
        del rows
    for i, line in enumerate(_actions(paths)):
        action = others.get(i)
        if action is None:
            added(json.loads(line)["add"])
        elif "add" in action:
            added(action["add"])
        elif "remove" in action:
            followed[unquote(action["remove"]["path"])] = None
    for live in followed.values():
        if live is not None:
            count(*live)
    return LogState(
        version=wanted[-1] if wanted else start - 1,
        partition_by=partition_by,
        column_types=column_types,
        newest=IntMap.newest(VALUES, ids, times),
        counts=IntMap.newest(VALUES, ids, array("q", [1]) * len(ids), add=True),
    )


_ADD = b'{"add"'


def _actions(paths: list[str]) -> Iterator[bytes]:
    """The action lines of these JSON commits in order, but the commitInfo lines, which are
    skipped in pieces (a partlake record of a large commit is most of its bytes)."""
    for path in paths:
        with open(path, "rb") as commit:
            while head := commit.readline(_PIECE):
                line = head
                skip = head.startswith(b'{"commitInfo"')
                while not line.endswith(b"\n") and (more := commit.readline(_PIECE)):
                    line = more if skip else line + more
                if not skip and line.strip():
                    yield line


_PIECE = 1 << 16


def _newest_checkpoint(log: str, names: list[str]) -> tuple[int, str] | None | Literal[False]:
    """(version, file) of the newest checkpoint; None if there is none; False if it is of a
    kind this reader does not read (multi-part, V2)."""
    found: dict[int, list[str]] = {}
    for name in names:
        head, _, rest = name.partition(".checkpoint")
        if rest and len(head) == 20 and head.isdigit():
            found.setdefault(int(head), []).append(rest)
    if not found:
        return None
    version = max(found)
    if found[version] != [".parquet"]:
        return False
    return version, os.path.join(log, f"{version:020d}.checkpoint.parquet")


def _last_action(others: dict[int, dict[str, Any]], checkpoint: Any, kind: str) -> Any:
    """The last `metaData` / `protocol` action: in the JSON commits, else in the checkpoint."""
    for i in sorted(others, reverse=True):
        if kind in others[i]:
            return others[i][kind]
    if checkpoint is None:
        return None
    for row in checkpoint.column(kind).to_pylist():
        if row is not None:
            if kind == "metaData":
                row["configuration"] = dict(row.get("configuration") or [])
            return row
    return None


def _supported(metadata: dict[str, Any], protocol: dict[str, Any]) -> bool:
    configuration = metadata.get("configuration") or {}
    if configuration.get("delta.columnMapping.mode", "none") != "none":
        return False  # partition values are keyed by physical column names
    features = set(protocol.get("readerFeatures") or ())
    return int(protocol.get("minReaderVersion", 1)) < 3 or features <= _READER_FEATURES
