"""A table's past: the commits that changed its partitions, earlier versions, and restoring them.

`table_history` is Delta's DESCRIBE HISTORY per partition: it reads every JSON commit the log
still has and keeps those whose add or remove actions with `dataChange: true` lie in the
partitions asked for, newest first, with what partlake's `CommitRecord` says about each (run,
code version, rows, upstream versions read). Checkpointing may delete old JSON commits, so the
history is what the log still has, not necessarily every commit ever made.

`resolve_version` / `load_version` time-travel: a version number, or a timestamp resolved by the
commits' own `commitInfo.timestamp` (delta-rs `load_as_version` goes by the commit files'
modification times, which a copy of the table changes, and loads version 0 for a time before the
table existed).

`restore_partitions` brings partitions back to an earlier version in one commit: the files live
at that version are added again (with the restore's time as modification time, so lastUpdated
moves), the other live files of those partitions are removed. The commit carries no partlake
record, only `{"partlake_maintenance": {"operation": "restore", ...}}`: to the planner the
restored partitions changed outside partlake's writer (`out_of_band`), and their downstream
closure is `upstream_changed`. Like the writer, it names one Delta application transaction per
partition, so it conflicts with a concurrent writer of the same partition and retries.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from dagster_partlake.delta.record import (
    MAINTENANCE_KEY,
    RECORD_KEY,
    WHOLE_TABLE_ID,
    CommitRecord,
    DeleteRecord,
)
from dagster_partlake.delta.selection import HIVE_NULL, PartitionSelection
from dagster_partlake.delta.table import (
    LiveFile,
    commit_actions,
    commit_info,
    live_files,
    load_table,
    log_versions,
    table_exists,
    unreadable,
)
from dagster_partlake.delta.writer import (
    DEFAULT_MAX_ATTEMPTS,
    _txn_app_id,
    commit_or_conflict,
    files_transactions,
    remove_action,
)
from dagster_partlake.errors import (
    CommitConflictError,
    PartlakeConfigError,
    PartlakeError,
)
from dagster_partlake.layout import commit_file

Operation = Literal["write", "compact", "restore", "delete", "other"]
_DELTA_WRITES = {
    "WRITE",
    "STREAMING UPDATE",
    "CREATE TABLE AS SELECT",
    "REPLACE TABLE AS SELECT",
    "CREATE OR REPLACE TABLE AS SELECT",
}

PartitionValues = Mapping[str, str | None]


@dataclass(frozen=True)
class HistoryEntry:
    """One commit that changed data in the partitions asked for."""

    version: int
    timestamp_ms: int
    operation: Operation
    run_id: str | None
    code_version: str | None
    rows: int | None  # rows the commit left in those partitions' added files (None: unknown)
    upstream_versions: Mapping[str, int] = field(default_factory=dict)
    delete: DeleteRecord | None = None  # a row delete: its predicate and the rows it removed

    @property
    def timestamp(self) -> str:
        """The commit time, ISO 8601 in UTC with milliseconds ('2024-01-02T03:04:05.678Z')."""
        moment = dt.datetime.fromtimestamp(self.timestamp_ms / 1000, dt.UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def to_json(self) -> dict[str, object]:
        """The entry as `partlake history --json` prints it."""
        return {
            "version": self.version,
            "timestamp": self.timestamp,
            "operation": self.operation,
            "run_id": self.run_id,
            "code_version": self.code_version,
            "rows": self.rows,
            "upstream_versions": dict(self.upstream_versions),
            **(
                {"predicate": self.delete.predicate, "rows_deleted": self.delete.rows_deleted}
                if self.delete is not None
                else {}
            ),
        }


@dataclass(frozen=True)
class RestoreResult:
    """What `restore_partitions` committed."""

    restored_version: int  # the version whose files are live again
    version: int | None  # the restore's commit; None when nothing differed (no commit)
    partition_ids: tuple[str, ...]  # partitions that differed and were restored
    files_added: int
    files_removed: int
    attempts: int


def table_history(
    root: str,
    *,
    selection: PartitionSelection | None = None,
    partition_id: str | None = None,
    table_name: str | None = None,
) -> list[HistoryEntry]:
    """The commits that changed data in `selection` of the table at `root`, newest first.

    Only commits the log still has as JSON files are listed (checkpointing may remove older
    ones). A commit without a data change in `selection` (schema change, compaction with
    `dataChange: false`, a partlake write that kept the partition) is not listed.

    Args:
        root: path of the Delta table.
        selection: the partitions whose history is wanted (default: the whole table).
        partition_id: the partlake partition id of `selection` (a Dagster partition key), to take
            its rows from the partlake record's `rows_by_partition`.
        table_name: name used in error messages (default: the folder name).

    Raises:
        PartlakeConfigError: there is no table at `root`.
        TableUnreadableError: a commit file is damaged.
    """
    root = os.path.abspath(root)
    name = table_name or os.path.basename(root)
    _require_table(root, name)
    selection = selection or PartitionSelection.everything()
    entries = []
    for version in reversed(log_versions(root)):
        info, adds, removes = commit_actions(root, version)
        adds = [a for a in adds if a.get("dataChange", True) and _in(selection, a)]
        removes = [r for r in removes if r.get("dataChange", True) and _in(selection, r)]
        if not adds and not removes:
            continue
        record = CommitRecord.from_commit_info(info, table_version=version)
        entries.append(
            HistoryEntry(
                version=version,
                timestamp_ms=_timestamp_ms(root, version, info),
                operation=_operation(info),
                run_id=record.run_id if record else None,
                code_version=record.code_version if record else None,
                rows=_rows(record, adds, selection, partition_id),
                upstream_versions=dict(record.upstream_versions) if record else {},
                delete=DeleteRecord.from_commit_info(info),
            )
        )
    return entries


def resolve_version(
    root: str,
    *,
    version: int | None = None,
    timestamp: dt.datetime | str | None = None,
    table_name: str | None = None,
) -> int | None:
    """The table version a read asks for: `version` itself (checked to exist), the newest
    version committed at or before `timestamp`, or None (the latest) when neither is given.

    A timestamp without a time zone is UTC. A timestamp after the latest commit gives the latest
    version.

    Raises:
        ValueError: both `version` and `timestamp` are given, or the timestamp is not ISO 8601.
        PartlakeError: the version does not exist, or the timestamp is before the oldest commit
            the log still has.
    """
    if version is not None and timestamp is not None:
        raise ValueError("give a version or a timestamp to read, not both")
    root = os.path.abspath(root)
    name = table_name or os.path.basename(root)
    if version is not None:
        _check_version(root, version, name)
        return version
    if timestamp is None:
        return None
    moment = _as_utc(timestamp)
    wanted_ms = int(moment.timestamp() * 1000)
    versions = log_versions(root)
    found = None
    for candidate in versions:
        if _timestamp_ms(root, candidate, commit_info(root, candidate)) > wanted_ms:
            break
        found = candidate
    if found is None:
        oldest = (
            f"version {versions[0]}, committed "
            f"{_iso(_timestamp_ms(root, versions[0], commit_info(root, versions[0])))}"
            if versions
            else "no commit"
        )
        raise PartlakeError(
            f"table {name} has no version at {_iso(wanted_ms)}: the oldest commit its log still "
            f"has is {oldest}; read at that time or later, or without a timestamp."
        )
    return found


def load_version(root: str, version: int, *, table_name: str | None = None) -> DeltaTable:
    """The table at `root` as of `version`.

    Raises:
        PartlakeError: the version does not exist or its log entries were removed.
        TableUnreadableError: the log cannot be read.
    """
    root = os.path.abspath(root)
    name = table_name or os.path.basename(root)
    _check_version(root, version, name)
    try:
        return DeltaTable(root, version=version)
    except DeltaError as error:
        versions = log_versions(root)
        kept = f"{versions[0]} to {versions[-1]}" if versions else "none"
        raise PartlakeError(
            f"version {version} of table {name} can no longer be loaded ({error}); the log keeps "
            f"the commits of versions {kept} (older ones were removed by checkpointing); choose "
            "one of those."
        ) from error


def restore_partitions(
    root: str,
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
        root: path of the Delta table.
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
    root = os.path.abspath(root)
    name = table_name or os.path.basename(root)
    _require_table(root, name)
    selection = selection or PartitionSelection.everything()
    past = load_version(root, version, table_name=name)
    restore = _Restore(
        root=root,
        name=name,
        version=version,
        partition_by=list(past.metadata().partition_columns),
        wanted=_by_partition(live_files(past, selection)),
        selection=selection,
        partition_id=partition_id or _default_partition_id,
        restore_id=uuid.uuid4().hex,
    )
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        outcome = _restore_once(restore, attempt)
        if isinstance(outcome, RestoreResult):
            return outcome
        last_error = outcome
    raise CommitConflictError(
        f"could not restore table {name} to version {version} after {max_attempts} attempts "
        f"because concurrent writers kept changing it (last error: {last_error}); retry when "
        "the writers of those partitions are done. Nothing was committed."
    )


@dataclass(frozen=True)
class _Restore:
    """One restore: the table, the version, and the live files it had then per partition."""

    root: str
    name: str
    version: int
    partition_by: list[str]  # the table's partitioning at `version`
    wanted: dict[tuple[str | None, ...], list[LiveFile]]  # partition -> its files at `version`
    selection: PartitionSelection
    partition_id: Callable[[PartitionValues], str]
    restore_id: str  # finds the commit in the log once it landed


def _restore_once(restore: _Restore, attempt: int) -> RestoreResult | Exception:
    """One commit attempt of `restore`: its result, or the conflict that stopped it."""
    table = load_table(restore.root, table_name=restore.name)
    partition_by = list(table.metadata().partition_columns)
    if partition_by != restore.partition_by:
        was, now = ", ".join(restore.partition_by), ", ".join(partition_by)
        raise PartlakeError(
            f"table {restore.name} was partitioned by ({was or 'nothing'}) at version "
            f"{restore.version} and is partitioned by ({now or 'nothing'}) now; a restore "
            "cannot change the partitioning."
        )
    wanted, current = restore.wanted, _by_partition(live_files(table, restore.selection))
    changed = sorted(
        (
            values
            for values in set(wanted) | set(current)
            if {f.path for f in wanted.get(values, [])} != {f.path for f in current.get(values, [])}
        ),
        key=lambda values: [(v is None, v or "") for v in values],
    )
    if not changed:
        return RestoreResult(restore.version, None, (), 0, 0, attempt)
    to_add = [f for values in changed for f in wanted.get(values, [])]
    _require_files(restore.root, restore.name, restore.version, to_add)
    keep = {f.path for f in to_add}
    to_remove = [f for values in changed for f in current.get(values, []) if f.path not in keep]
    ids = sorted(
        {restore.partition_id(dict(zip(partition_by, values, strict=True))) for values in changed}
    )
    now_ms = int(time.time() * 1000)
    before = table.version()
    properties = CommitProperties(
        custom_metadata={
            MAINTENANCE_KEY: {
                "operation": "restore",
                "version": restore.version,
                "partitions": ids,
                "id": restore.restore_id,
            }
        },
        app_transactions=[
            *(Transaction(_txn_app_id(pid), now_ms) for pid in ids),
            # Conflicts with a concurrent compaction of the same table partitions.
            *files_transactions(to_remove, now_ms),
        ],
    )
    actions = _restore_actions(restore, to_add, to_remove, now_ms)
    try:
        conflict = commit_or_conflict(
            table, actions, partition_by=partition_by, properties=properties, attempt=attempt
        )
    except DeltaError as error:
        raise unreadable(restore.root, error, table_name=restore.name) from error
    if conflict is not None:
        return conflict
    return RestoreResult(
        restored_version=restore.version,
        version=maintenance_version(restore.root, since=before + 1, commit_id=restore.restore_id),
        partition_ids=tuple(ids),
        files_added=len(to_add),
        files_removed=len(to_remove),
        attempts=attempt,
    )


def _restore_actions(
    restore: _Restore, to_add: Sequence[LiveFile], to_remove: Sequence[LiveFile], now_ms: int
) -> list[AddAction | RemoveAction]:
    """Add the files of `restore.version` again (with their statistics), remove the others."""
    stats = _raw_stats(restore.root, restore.version, {f.path for f in to_add})
    actions: list[AddAction | RemoveAction] = [
        AddAction(
            # get_add_actions gives the path as the log stores it (URL-encoded) and delta-rs
            # encodes the path of an action again: decode it once, or the action names another
            # file.
            path=unquote(f.path),
            size=f.size,
            partition_values=f.partition_values,
            modification_time=now_ms,
            data_change=True,
            stats=stats.get(f.path) or json.dumps({"numRecords": f.num_records}),
        )
        for f in to_add
    ]
    return actions + [remove_action(f, now_ms) for f in to_remove]


def _require_table(root: str, name: str) -> None:
    if not table_exists(root):
        raise PartlakeConfigError(
            f"there is no Delta table for {name} at {root}; materialize it first."
        )


def _check_version(root: str, version: int, name: str) -> None:
    _require_table(root, name)
    latest = load_table(root, table_name=name).version()
    if not 0 <= version <= latest:
        raise PartlakeError(
            f"table {name} has no version {version}: its versions are 0 to {latest}."
        )


def _as_utc(timestamp: dt.datetime | str) -> dt.datetime:
    if isinstance(timestamp, str):
        try:
            timestamp = dt.datetime.fromisoformat(timestamp)
        except ValueError as error:
            raise ValueError(
                f"timestamp {timestamp!r} is not ISO 8601 (e.g. '2024-01-02T00:00:00Z')"
            ) from error
    if timestamp.tzinfo is None:
        return timestamp.replace(tzinfo=dt.UTC)
    return timestamp


def _iso(ms: int) -> str:
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _in(selection: PartitionSelection, action: Mapping[str, Any]) -> bool:
    values = action.get("partitionValues") or {}
    return selection.contains({k: None if v == "" else v for k, v in values.items()})


def _timestamp_ms(root: str, version: int, info: Mapping[str, Any]) -> int:
    if isinstance(info.get("timestamp"), int):
        return int(info["timestamp"])
    # A commit without commitInfo: its file's modification time, as Delta readers do.
    return os.stat(commit_file(root, version)).st_mtime_ns // 1_000_000


def _operation(info: Mapping[str, Any]) -> Operation:
    if isinstance(info.get(RECORD_KEY), Mapping):
        return "write"
    maintenance = info.get(MAINTENANCE_KEY)
    if isinstance(maintenance, Mapping):
        named = maintenance.get("operation")
        return named if named in ("compact", "restore", "delete") else "other"
    delta_operation = str(info.get("operation") or "").upper()
    if delta_operation == "DELETE":
        return "delete"
    if delta_operation == "OPTIMIZE":
        return "compact"
    if delta_operation == "RESTORE":
        return "restore"
    return "write" if delta_operation in _DELTA_WRITES else "other"


def _rows(
    record: CommitRecord | None,
    adds: Sequence[Mapping[str, Any]],
    selection: PartitionSelection,
    partition_id: str | None,
) -> int | None:
    recorded = record.rows_by_partition if record is not None else None
    if recorded is not None:
        if partition_id is not None and partition_id in recorded:
            return recorded[partition_id]
        if partition_id is None and selection.is_everything:
            return sum(recorded.values())
    counts = [_num_records(a) for a in adds]
    if any(c is None for c in counts):
        return None
    return sum(c for c in counts if c is not None)


def _num_records(add: Mapping[str, Any]) -> int | None:
    try:
        value = json.loads(add.get("stats") or "{}").get("numRecords")
    except ValueError:
        return None
    return int(value) if value is not None else None


def _by_partition(files: Sequence[LiveFile]) -> dict[tuple[str | None, ...], list[LiveFile]]:
    grouped: dict[tuple[str | None, ...], list[LiveFile]] = {}
    for f in files:
        grouped.setdefault(tuple(f.partition_values.values()), []).append(f)
    return grouped


def _default_partition_id(values: PartitionValues) -> str:
    if not values:
        return WHOLE_TABLE_ID
    return "/".join(f"{c}={HIVE_NULL if v is None else v}" for c, v in values.items())


def _require_files(root: str, name: str, version: int, files: Sequence[LiveFile]) -> None:
    missing = [f for f in files if not os.path.exists(f.absolute_path(root))]
    if missing:
        shown = ", ".join(unquote(f.path) for f in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise PartlakeError(
            f"cannot restore table {name} to version {version}: its file(s) {shown}{more} no "
            f"longer exist under {root} (removed by vacuum); restore a newer version whose files "
            "are still there, or put the files back from a backup. The table is unchanged."
        )


def _raw_stats(root: str, version: int, paths: set[str]) -> dict[str, str]:
    """The statistics JSON the log holds for `paths` (log paths), from the add actions of the
    commits up to `version`; paths whose add is only in a checkpoint are left out."""
    found: dict[str, str] = {}
    wanted = set(paths)
    for candidate in reversed(log_versions(root)):
        if not wanted:
            break
        if candidate > version:
            continue
        for add in commit_actions(root, candidate)[1]:
            path = add.get("path")
            if path in wanted and add.get("stats"):
                found[path] = add["stats"]
                wanted.discard(path)
    return found


def maintenance_version(root: str, *, since: int, commit_id: str) -> int | None:
    """The version of the maintenance commit (restore, compaction) with `commit_id`, at or after
    `since`: delta-rs does not return the version it committed."""
    for version in reversed(log_versions(root)):
        if version < since:
            break
        maintenance = commit_info(root, version).get(MAINTENANCE_KEY)
        if isinstance(maintenance, Mapping) and maintenance.get("id") == commit_id:
            return version
    return None
