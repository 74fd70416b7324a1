"""What a Delta table gained since a version, read from its log without opening old files.

A log-based incremental input (`dagster_partlake.incremental.spec`) reads only the files added since
the version its asset last consumed. Those are the `add` actions of the JSON commits after that
version that are still live at the version read. Any `remove` with `dataChange: true` in between
means the table is not append-only there (rows were rewritten or deleted), and so does a
compaction that folded a new file into a bigger one: neither can be read as "new rows only".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.table import LiveFile, commit_actions, log_versions
from dagster_partlake.storage.location import TableLocation


@dataclass(frozen=True)
class Increment:
    """The files a table gained in the versions (since, until]."""

    since: int
    until: int
    files: tuple[LiveFile, ...]
    # Versions in the range that removed or rewrote data in the selection (not append-only).
    rewritten: tuple[int, ...] = ()
    # Versions in the range the log no longer holds (a checkpoint cleaned them up).
    missing: tuple[int, ...] = ()

    @property
    def append_only(self) -> bool:
        return not self.rewritten and not self.missing

    @property
    def num_records(self) -> int:
        return sum(f.num_records or 0 for f in self.files)


def files_added(
    root: str | TableLocation,
    *,
    since: int,
    until: int,
    selection: PartitionSelection | None = None,
) -> Increment:
    """The files added to the table at `root` after version `since` up to `until` that are still
    live at `until`, in `selection` (default: everywhere).

    Raises:
        TableUnreadableError: a commit file in the range is damaged.
    """
    selection = selection or PartitionSelection.everything()
    present = set(log_versions(root))
    added: dict[str, LiveFile] = {}
    rewritten: list[int] = []
    missing: list[int] = []
    for version in range(since + 1, until + 1):
        if version not in present:
            missing.append(version)
            continue
        _, adds, removes = commit_actions(root, version)
        for remove in removes:
            if not _in(selection, remove):
                continue
            path = unquote(remove["path"])
            if remove.get("dataChange", True) or path in added:
                # A rewrite or delete, or a compaction that folded a new file into another.
                rewritten.append(version)
                added.pop(path, None)
        for add in adds:
            if add.get("dataChange", True) and _in(selection, add):
                added[unquote(add["path"])] = _live(add)
    return Increment(
        since=since,
        until=until,
        files=tuple(added.values()),
        rewritten=tuple(sorted(set(rewritten))),
        missing=tuple(missing),
    )


def _in(selection: PartitionSelection, action: Mapping[str, Any]) -> bool:
    values = action.get("partitionValues") or {}
    return selection.contains({k: None if v == "" else v for k, v in values.items()})


def _live(add: Mapping[str, Any]) -> LiveFile:
    import json

    stats = add.get("stats")
    records = None
    if isinstance(stats, str) and stats:
        records = json.loads(stats).get("numRecords")
    return LiveFile(
        path=add["path"],
        size=int(add.get("size") or 0),
        partition_values={
            k: None if v == "" else v for k, v in (add.get("partitionValues") or {}).items()
        },
        num_records=None if records is None else int(records),
        modification_time=int(add.get("modificationTime") or 0),
    )
