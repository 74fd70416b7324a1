"""The storage adapter: Delta tables written by Spark + delta-rs. Knows nothing about Dagster.

It keeps the log (`table`, `snapshot`, `state`), the one transaction (`transaction`) and the
Delta-level operations (`files`, `reader`, `writer`, `history`). The table maintenance it used
to export (compaction, vacuum, checkpoints, restore) lives in `dagster_partlake.maintenance`;
its names are still exported here, unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.delta.history import (
        MAINTENANCE_KEY,
        HistoryEntry,
        load_version,
        resolve_version,
        table_history,
    )
    from dagster_partlake.delta.reader import (
        ReadResult,
        TableSnapshot,
        open_table,
        read_partitions,
        read_snapshot,
    )
    from dagster_partlake.delta.record import WHOLE_TABLE_ID, CommitRecord
    from dagster_partlake.delta.selection import Box, DateRanges, PartitionSelection
    from dagster_partlake.delta.state import StateCache, TableState, folder_state
    from dagster_partlake.delta.writer import (
        CommitResult,
        StagedWrite,
        commit_staged,
        stage_partitions,
        write_partitions,
    )

__all__ = [
    "MAINTENANCE_KEY",
    "WHOLE_TABLE_ID",
    "Box",
    "CheckpointResult",
    "CommitRecord",
    "CommitResult",
    "CompactResult",
    "CompactedPartition",
    "DateRanges",
    "HistoryEntry",
    "PartitionSelection",
    "ReadResult",
    "RestoreResult",
    "StagedWrite",
    "StateCache",
    "TableSnapshot",
    "TableState",
    "VacuumResult",
    "checkpoint_table",
    "commit_staged",
    "compact_table",
    "folder_state",
    "load_version",
    "open_table",
    "read_partitions",
    "read_snapshot",
    "resolve_version",
    "restore_partitions",
    "stage_partitions",
    "table_history",
    "vacuum_table",
    "write_partitions",
]

# Public name -> the module defining it, imported on first use: a process (a no-op `partlake run`)
# imports only the modules its path needs. The maintenance names resolve to
# `dagster_partlake.maintenance` (a higher layer, hence not imported for type checkers above):
# they kept their place in this package's public names when maintenance moved there.
_LAZY = {
    "MAINTENANCE_KEY": "dagster_partlake.delta.history",
    "HistoryEntry": "dagster_partlake.delta.history",
    "RestoreResult": "dagster_partlake.maintenance.restore",
    "load_version": "dagster_partlake.delta.history",
    "resolve_version": "dagster_partlake.delta.history",
    "restore_partitions": "dagster_partlake.maintenance.restore",
    "table_history": "dagster_partlake.delta.history",
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
    "WHOLE_TABLE_ID": "dagster_partlake.delta.record",
    "CommitRecord": "dagster_partlake.delta.record",
    "Box": "dagster_partlake.delta.selection",
    "DateRanges": "dagster_partlake.delta.selection",
    "PartitionSelection": "dagster_partlake.delta.selection",
    "StateCache": "dagster_partlake.delta.state",
    "TableState": "dagster_partlake.delta.state",
    "folder_state": "dagster_partlake.delta.state",
    "CommitResult": "dagster_partlake.delta.writer",
    "StagedWrite": "dagster_partlake.delta.writer",
    "commit_staged": "dagster_partlake.delta.writer",
    "stage_partitions": "dagster_partlake.delta.writer",
    "write_partitions": "dagster_partlake.delta.writer",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
