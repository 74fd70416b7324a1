"""A table's history: the commits that changed its partitions, with what their records say.

`table_history` is Delta's DESCRIBE HISTORY per partition: it reads every JSON commit the log
still has and keeps those whose add or remove actions with `dataChange: true` lie in the
partitions asked for, newest first, with what partlake's `CommitRecord` says about each (run,
code version, rows, upstream versions read). Checkpointing may delete old JSON commits, so the
history is what the log still has, not necessarily every commit ever made.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dagster_partlake.delta.history import commit_timestamp_ms, require_table
from dagster_partlake.delta.payload import (
    MAINTENANCE_KEY,
    RECORD_KEY,
    DeleteRecord,
    commit_metadata,
)
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.table import commit_actions, log_versions
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.storage.location import TableLocation, as_location

Operation = Literal["write", "compact", "restore", "delete", "other"]


_DELTA_WRITES = {
    "WRITE",
    "STREAMING UPDATE",
    "CREATE TABLE AS SELECT",
    "REPLACE TABLE AS SELECT",
    "CREATE OR REPLACE TABLE AS SELECT",
}


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
                timestamp_ms=commit_timestamp_ms(root, version, info),
                operation=_operation(info),
                run_id=record.run_id if record else None,
                code_version=record.code_version if record else None,
                rows=_rows(record, adds, selection, partition_id),
                upstream_versions=dict(record.upstream_versions) if record else {},
                delete=DeleteRecord.from_commit_info(info),
            )
        )
    return entries


def _in(selection: PartitionSelection, action: Mapping[str, Any]) -> bool:
    values = action.get("partitionValues") or {}
    return selection.contains({k: None if v == "" else v for k, v in values.items()})


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
