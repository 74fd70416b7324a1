"""The storage adapter: Delta tables written by Spark + delta-rs. Knows nothing about Dagster.

It keeps the log (`table`, `snapshot`, `state`), the one transaction (`transaction`) and the
Delta-level operations (`files`, `reader`, `writer`, `history`); a commit's partlake record is an
opaque, versioned payload here (`payload`). The table maintenance it used to export (compaction,
vacuum, checkpoints, restore) lives in `dagster_partlake.maintenance`, and the commit record, its
queries, its history and the record-carrying write (`CommitRecord`, `table_history`,
`write_partitions`, `commit_staged`, `CommitResult`) in `dagster_partlake.records`; their names
are still exported here, unchanged (imported for type checkers only: both are higher layers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:  # what type checkers see: each public name, re-exported (`X as X`)
    from dagster_partlake.delta.history import load_version as load_version
    from dagster_partlake.delta.history import resolve_version as resolve_version
    from dagster_partlake.delta.payload import MAINTENANCE_KEY as MAINTENANCE_KEY
    from dagster_partlake.delta.payload import WHOLE_TABLE_ID as WHOLE_TABLE_ID
    from dagster_partlake.delta.reader import ReadResult as ReadResult
    from dagster_partlake.delta.reader import TableSnapshot as TableSnapshot
    from dagster_partlake.delta.reader import open_table as open_table
    from dagster_partlake.delta.reader import read_partitions as read_partitions
    from dagster_partlake.delta.reader import read_snapshot as read_snapshot
    from dagster_partlake.delta.selection import Box as Box
    from dagster_partlake.delta.selection import DateRanges as DateRanges
    from dagster_partlake.delta.selection import PartitionSelection as PartitionSelection
    from dagster_partlake.delta.state import StateCache as StateCache
    from dagster_partlake.delta.state import TableState as TableState
    from dagster_partlake.delta.state import folder_state as folder_state
    from dagster_partlake.delta.writer import StagedWrite as StagedWrite
    from dagster_partlake.delta.writer import stage_partitions as stage_partitions
    from dagster_partlake.maintenance.checkpoint import CheckpointResult as CheckpointResult
    from dagster_partlake.maintenance.checkpoint import checkpoint_table as checkpoint_table
    from dagster_partlake.maintenance.compact import CompactedPartition as CompactedPartition
    from dagster_partlake.maintenance.compact import CompactResult as CompactResult
    from dagster_partlake.maintenance.compact import compact_table as compact_table
    from dagster_partlake.maintenance.restore import RestoreResult as RestoreResult
    from dagster_partlake.maintenance.restore import restore_partitions as restore_partitions
    from dagster_partlake.maintenance.vacuum import VacuumResult as VacuumResult
    from dagster_partlake.maintenance.vacuum import vacuum_table as vacuum_table
    from dagster_partlake.records.history import HistoryEntry as HistoryEntry
    from dagster_partlake.records.history import table_history as table_history
    from dagster_partlake.records.record import CommitRecord as CommitRecord
    from dagster_partlake.records.writes import CommitResult as CommitResult
    from dagster_partlake.records.writes import commit_staged as commit_staged
    from dagster_partlake.records.writes import write_partitions as write_partitions

# The public names: name -> the module defining it, imported on first use (a process such as a
# no-op `partlake run` imports only the modules its path needs). `__all__` is its keys; a test
# ties it to the TYPE_CHECKING imports above and to the API reference page.
_LAZY = {
    "MAINTENANCE_KEY": "dagster_partlake.delta.payload",
    "HistoryEntry": "dagster_partlake.records.history",
    "RestoreResult": "dagster_partlake.maintenance.restore",
    "load_version": "dagster_partlake.delta.history",
    "resolve_version": "dagster_partlake.delta.history",
    "restore_partitions": "dagster_partlake.maintenance.restore",
    "table_history": "dagster_partlake.records.history",
    "CheckpointResult": "dagster_partlake.maintenance.checkpoint",
    "CompactedPartition": "dagster_partlake.maintenance.compact",
    "CompactResult": "dagster_partlake.maintenance.compact",
    "VacuumResult": "dagster_partlake.maintenance.vacuum",
    "checkpoint_table": "dagster_partlake.maintenance.checkpoint",
    "compact_table": "dagster_partlake.maintenance.compact",
    "vacuum_table": "dagster_partlake.maintenance.vacuum",
    "ReadResult": "dagster_partlake.delta.reader",
    "TableSnapshot": "dagster_partlake.delta.reader",
    "open_table": "dagster_partlake.delta.reader",
    "read_partitions": "dagster_partlake.delta.reader",
    "read_snapshot": "dagster_partlake.delta.reader",
    "WHOLE_TABLE_ID": "dagster_partlake.delta.payload",
    "CommitRecord": "dagster_partlake.records.record",
    "Box": "dagster_partlake.delta.selection",
    "DateRanges": "dagster_partlake.delta.selection",
    "PartitionSelection": "dagster_partlake.delta.selection",
    "StateCache": "dagster_partlake.delta.state",
    "TableState": "dagster_partlake.delta.state",
    "folder_state": "dagster_partlake.delta.state",
    "CommitResult": "dagster_partlake.records.writes",
    "StagedWrite": "dagster_partlake.delta.writer",
    "commit_staged": "dagster_partlake.records.writes",
    "stage_partitions": "dagster_partlake.delta.writer",
    "write_partitions": "dagster_partlake.records.writes",
}
__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
