"""Restore: bring partitions of a table back to an earlier version, in one commit.

The files live at that version are added again (with the restore's time as modification time,
so lastUpdated moves), the other live files of those partitions are removed. The commit carries
no partlake record, only `{"partlake_maintenance": {"operation": "restore", ...}}`: to the planner
the restored partitions changed outside partlake's writer (`out_of_band`), and their downstream
closure is `upstream_changed`. Like the writer, it names one Delta application transaction per
partition (`delta.transaction`), so it conflicts with a concurrent writer of the same partition
and retries on the newer snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.history import load_version, require_table
from dagster_partlake.delta.payload import MAINTENANCE_KEY
from dagster_partlake.delta.selection import PartitionSelection, table_partition_id
from dagster_partlake.delta.snapshot import Snapshot, open_snapshot
from dagster_partlake.delta.table import LiveFile, commit_actions
from dagster_partlake.delta.transaction import Actions, Readd, commit
from dagster_partlake.errors import PartlakeError
from dagster_partlake.storage.location import TableLocation, as_location

PartitionValues = Mapping[str, str | None]
Values = tuple[str | None, ...]


@dataclass(frozen=True)
class RestoreResult:
    """What `restore_partitions` committed."""

    restored_version: int  # the version whose files are live again
    version: int | None  # the restore's commit; None when nothing differed (no commit)
    partition_ids: tuple[str, ...]  # partitions that differed and were restored
    files_added: int
    files_removed: int
    attempts: int


def restore_partitions(
    root: str | TableLocation,
    version: int,
    *,
    selection: PartitionSelection | None = None,
    partition_id: Callable[[PartitionValues], str] | None = None,
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> RestoreResult:
    """Bring the partitions in `selection` of the table at `root` back to `version`, in one
    commit; partitions whose live files are those of `version` are left alone.

    Args:
        root: path or location of the Delta table.
        version: the version to restore.
        selection: the partitions to restore (default: the whole table).
        partition_id: the partlake partition id of a partition's values (a Dagster partition
            key): its application transaction id, so a concurrent writer of the same partition
            conflicts. Default: `__all__` for an unpartitioned table, else `col=value/...`.
        table_name: name used in error messages (default: the folder name).
        max_attempts: commit attempts before giving up on conflicts.

    Returns:
        The commit made (`version` None if nothing differed).

    Raises:
        PartlakeError: the version does not exist, or a file it needs is no longer on disk; in
            both cases nothing was committed.
        CommitConflictError: concurrent writers kept conflicting; nothing was committed.
    """
    location = as_location(root)
    name = table_name or location.name
    require_table(location, name)
    selection = selection or PartitionSelection.everything()
    past = Snapshot(location, name, load_version(location, version, table_name=name))
    restore = _Restore(
        past=past,
        version=version,
        wanted=_by_partition(past.live_files(selection)),
        selection=selection,
        partition_id=partition_id or table_partition_id,
    )
    snapshot = open_snapshot(location, table_name=name)
    assert snapshot is not None  # `require_table` above
    if not restore.changed(snapshot):
        return RestoreResult(version, None, (), 0, 0, 1)
    committed = commit(
        location,
        snapshot,
        restore.actions,
        payload=lambda commit_id, _now: {
            MAINTENANCE_KEY: {
                "operation": "restore",
                "version": version,
                "partitions": list(restore.ids),
                "id": commit_id,
            }
        },
        name=name,
        max_attempts=max_attempts,
    )
    done = committed.actions
    return RestoreResult(
        restored_version=version,
        version=committed.version,
        partition_ids=tuple(restore.ids),
        files_added=len(done.adds),
        files_removed=len(done.removes),
        attempts=committed.attempts,
    )


class _Restore:
    """One restore: the table at `version`, and its live files then per partition."""

    def __init__(
        self,
        *,
        past: Snapshot,
        version: int,
        wanted: dict[Values, list[LiveFile]],
        selection: PartitionSelection,
        partition_id: Callable[[PartitionValues], str],
    ) -> None:
        self.past, self.version, self.wanted = past, version, wanted
        self.selection, self.partition_id = selection, partition_id
        # The restored partitions' ids (of the latest attempt): its conflict ids.
        self.ids: list[str] = []

    def changed(self, snapshot: Snapshot) -> list[Values]:
        """The partitions whose live files differ from those of the restored version."""
        partition_by = list(snapshot.partition_by)
        if partition_by != list(self.past.partition_by):
            was, now = ", ".join(self.past.partition_by), ", ".join(partition_by)
            raise PartlakeError(
                f"table {self.past.name} was partitioned by ({was or 'nothing'}) at version "
                f"{self.version} and is partitioned by ({now or 'nothing'}) now; a restore "
                "cannot change the partitioning."
            )
        current = _by_partition(snapshot.live_files(self.selection))
        changed = sorted(
            (
                values
                for values in set(self.wanted) | set(current)
                if {f.path for f in self.wanted.get(values, [])}
                != {f.path for f in current.get(values, [])}
            ),
            key=lambda values: [(v is None, v or "") for v in values],
        )
        self.ids[:] = sorted(
            {self.partition_id(dict(zip(partition_by, v, strict=True))) for v in changed}
        )
        return changed

    def actions(self, snapshot: Snapshot) -> Actions:
        changed = self.changed(snapshot)
        current = _by_partition(snapshot.live_files(self.selection))
        to_add = [f for values in changed for f in self.wanted.get(values, [])]
        _require_files(self.past, self.version, to_add)
        keep = {f.path for f in to_add}
        to_remove = [f for values in changed for f in current.get(values, []) if f.path not in keep]
        stats = _raw_stats(self.past, self.version, keep)
        return Actions(
            adds=[Readd(f, stats.get(f.path)) for f in to_add],
            removes=to_remove,
            partition_ids=list(self.ids),
        )


def _by_partition(files: Sequence[LiveFile]) -> dict[Values, list[LiveFile]]:
    grouped: dict[Values, list[LiveFile]] = {}
    for f in files:
        grouped.setdefault(tuple(f.partition_values.values()), []).append(f)
    return grouped


def _require_files(past: Snapshot, version: int, files: Sequence[LiveFile]) -> None:
    store = past.location.store
    missing = [f for f in files if store.head(f.relative_path) is None]
    if missing:
        shown = ", ".join(f.relative_path for f in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise PartlakeError(
            f"cannot restore table {past.name} to version {version}: its file(s) {shown}{more} no "
            f"longer exist under {past.location} (removed by vacuum); restore a newer version "
            "whose files are still there, or put the files back from a backup. The table is "
            "unchanged."
        )


def _raw_stats(past: Snapshot, version: int, paths: set[str]) -> dict[str, Any]:
    """The statistics JSON the log holds for `paths` (log paths), from the add actions of the
    commits up to `version`; paths whose add is only in a checkpoint are left out."""
    found: dict[str, str] = {}
    wanted = set(paths)
    for candidate in reversed(past.versions()):
        if not wanted:
            break
        if candidate > version:
            continue
        for add in commit_actions(past.location, candidate)[1]:
            path = add.get("path")
            if path in wanted and add.get("stats"):
                found[path] = add["stats"]
                wanted.discard(path)
    return found
