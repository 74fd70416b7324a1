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

Bringing partitions back to an earlier version is maintenance's (`maintenance.restore`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from dagster_partlake.delta.record import (
    MAINTENANCE_KEY,
    RECORD_KEY,
    CommitRecord,
    DeleteRecord,
    commit_metadata,
)
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.table import (
    commit_actions,
    commit_info,
    delta_table,
    load_table,
    log_versions,
    table_exists,
)
from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.layout import LOG_DIR, commit_name
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    from deltalake import DeltaTable

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


def table_history(
    root: str | TableLocation,
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
    root = as_location(root)
    name = table_name or root.name
    require_table(root, name)
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
    root: str | TableLocation,
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
    root = as_location(root)
    name = table_name or root.name
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


def load_version(
    root: str | TableLocation, version: int, *, table_name: str | None = None
) -> DeltaTable:
    """The table at `root` as of `version`.

    Raises:
        PartlakeError: the version does not exist or its log entries were removed.
        TableUnreadableError: the log cannot be read.
    """
    root = as_location(root)
    name = table_name or root.name
    _check_version(root, version, name)
    try:
        return delta_table(root, version=version)
    except PartlakeError as error:
        versions = log_versions(root)
        kept = f"{versions[0]} to {versions[-1]}" if versions else "none"
        raise PartlakeError(
            f"version {version} of table {name} can no longer be loaded ({error}); the log keeps "
            f"the commits of versions {kept} (older ones were removed by checkpointing); choose "
            "one of those."
        ) from error


def require_table(root: str | TableLocation, name: str) -> None:
    """Raise the clear error when there is no table at `root`."""
    if not table_exists(root):
        raise PartlakeConfigError(
            f"there is no Delta table for {name} at {as_location(root)}; materialize it first."
        )


def _check_version(root: TableLocation, version: int, name: str) -> None:
    require_table(root, name)
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


def _timestamp_ms(root: str | TableLocation, version: int, info: Mapping[str, Any]) -> int:
    if isinstance(info.get("timestamp"), int):
        return int(info["timestamp"])
    # A commit without commitInfo: its file's modification time, as Delta readers do.
    entry = as_location(root).store.head(f"{LOG_DIR}/{commit_name(version)}")
    return entry.mtime_ms if entry is not None else 0


def _operation(info: Mapping[str, Any]) -> Operation:
    info = commit_metadata(info)
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
