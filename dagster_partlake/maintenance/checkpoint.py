"""Checkpoints: write one at the latest version, then trim the log, keeping partlake's records.

`checkpoint_table` writes a checkpoint and deletes old JSON commits, except those holding the
newest partlake record of a partition and the commit that changed each partition last (which
gives it its lastUpdated): the planner's records and those times live only in the JSON commits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dagster_partlake.delta.defaults import DEFAULT_KEEP_LOG_HOURS
from dagster_partlake.delta.reader import open_table
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import log_versions
from dagster_partlake.errors import PartlakeError
from dagster_partlake.layout import LOG_DIR, commit_version
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.storage.location import TableLocation


@dataclass(frozen=True)
class CheckpointResult:
    """The checkpoint `checkpoint_table` wrote and the log files it removed."""

    root: str
    version: int  # of the checkpoint
    json_removed: tuple[int, ...]  # versions whose JSON commit was deleted
    checkpoints_removed: tuple[str, ...]  # older checkpoint files deleted (names in the log)
    json_kept_for_records: tuple[int, ...]  # old enough, kept for the partlake records they hold
    json_remaining: int  # JSON commits in the log afterwards


def checkpoint_table(
    root: str | TableLocation,
    *,
    keep_log_hours: float = DEFAULT_KEEP_LOG_HOURS,
    table_name: str | None = None,
) -> CheckpointResult:
    """Write a checkpoint at the latest version, then delete the JSON commits and checkpoints
    before it that are older than `keep_log_hours`, except JSON commits holding a partlake
    record the planner still reads (the newest of some partition, or the one that set a
    partition's lastUpdated). delta-rs loads the latest version from the checkpoint; versions
    before it can no longer be loaded (time travel) once their commits are gone.

    Args:
        root: path or location of the Delta table.
        keep_log_hours: log files modified within this many hours stay (delta's
            `logRetentionDuration`; 0 deletes every one that is not needed).
        table_name: name used in messages (default: the folder name).

    Raises:
        PartlakeConfigError: there is no table at `root`.
        PartlakeError: delta-rs wrote no checkpoint file.
    """
    if keep_log_hours < 0:
        raise ValueError(f"keep_log_hours must not be negative, got {keep_log_hours}")
    snapshot = open_table(root, table_name=table_name)
    location, table = snapshot.location, snapshot.table
    version = table.version()
    table.create_checkpoint()
    store = location.store
    entries = store.list_folder(LOG_DIR)
    if not any(_checkpoint_version(e.name) == version for e in entries):
        raise PartlakeError(
            f"delta-rs wrote no checkpoint for version {version} of table {snapshot.name} in "
            f"{location}/{LOG_DIR}; the log was left as it was."
        )
    needed = _record_versions(location)
    cutoff_ms = (time.time() - keep_log_hours * 3600) * 1000
    removed, kept, checkpoints = [], [], []
    for entry in sorted(entries, key=lambda e: e.name):
        path = f"{LOG_DIR}/{entry.name}"
        json_version = commit_version(entry.name)
        old_checkpoint = _checkpoint_version(entry.name)
        old = entry.mtime_ms < cutoff_ms
        if json_version is not None and json_version < version and old:
            if json_version in needed:
                kept.append(json_version)
            elif store.delete([path]):
                removed.append(json_version)
        elif old_checkpoint is not None and old_checkpoint < version and old:
            if store.delete([path]):
                checkpoints.append(entry.name)
    return CheckpointResult(
        root=location.uri,
        version=version,
        json_removed=tuple(removed),
        checkpoints_removed=tuple(checkpoints),
        json_kept_for_records=tuple(kept),
        json_remaining=len(log_versions(location)),
    )


def _record_versions(root: str | TableLocation) -> set[int]:
    """Versions whose JSON commit the planner and the writers still read: per partition id
    the newest record (and the newest with a commit time), the newest scd2 snapshot record, and
    the commits that set some partition's current lastUpdated (any writer's: its time is that
    commit's, `delta.change_rule`)."""
    state = StateCache().sync(root)
    if state is None:
        return set()
    needed = {v for v in state.touched_in.values() if v is not None}
    needed.update(v for v in (state.changed_in or {}).values() if v is not None)
    newest: set[str] = set()
    newest_timed: set[str] = set()
    snapshot_seen = False
    for record in reversed(state.commits):
        version = record.table_version
        if version is None:
            continue
        pids = set(record.partition_ids)
        if pids - newest:
            needed.add(version)
            newest |= pids
        if record.commit_time_ms is not None and pids - newest_timed:
            needed.add(version)
            newest_timed |= pids
        if not snapshot_seen and CommitRecord.from_payload(record).snapshot_ms is not None:
            needed.add(version)
            snapshot_seen = True
    return needed


def _checkpoint_version(name: str) -> int | None:
    """The version of a checkpoint file (single or multi-part), `.crc` file included."""
    head, _, rest = name.partition(".")
    if len(head) != 20 or not head.isdigit():
        return None
    if (rest.startswith("checkpoint") and rest.endswith(".parquet")) or rest == "crc":
        return int(head)
    return None
