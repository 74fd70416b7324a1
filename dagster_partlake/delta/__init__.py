"""The storage adapter: Delta tables written by Spark + delta-rs. Knows nothing about Dagster."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.delta.history import (
        MAINTENANCE_KEY,
        HistoryEntry,
        RestoreResult,
        load_version,
        resolve_version,
        restore_partitions,
        table_history,
    )
    from dagster_partlake.delta.maintenance import (
        CheckpointResult,
        CompactedPartition,
        CompactResult,
        VacuumResult,
        checkpoint_table,
        compact_table,
        vacuum_table,
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
    from dagster_partlake.delta.staging import StagedWrite
    from dagster_partlake.delta.state import StateCache, TableState, folder_state
    from dagster_partlake.delta.writer import (
        CommitResult,
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

# Public name -> the module defining it, imported on first use: a process (a no-op
# `partlake run`) imports only the modules its path needs.
_LAZY = {
    "MAINTENANCE_KEY": "dagster_partlake.delta.history",
    "HistoryEntry": "dagster_partlake.delta.history",
    "RestoreResult": "dagster_partlake.delta.history",
    "load_version": "dagster_partlake.delta.history",
    "resolve_version": "dagster_partlake.delta.history",
    "restore_partitions": "dagster_partlake.delta.history",
    "table_history": "dagster_partlake.delta.history",
    "CheckpointResult": "dagster_partlake.delta.maintenance",
    "CompactedPartition": "dagster_partlake.delta.maintenance",
    "CompactResult": "dagster_partlake.delta.maintenance",
    "VacuumResult": "dagster_partlake.delta.maintenance",
    "checkpoint_table": "dagster_partlake.delta.maintenance",
    "compact_table": "dagster_partlake.delta.maintenance",
    "vacuum_table": "dagster_partlake.delta.maintenance",
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
    "StagedWrite": "dagster_partlake.delta.staging",
    "commit_staged": "dagster_partlake.delta.writer",
    "stage_partitions": "dagster_partlake.delta.writer",
    "write_partitions": "dagster_partlake.delta.writer",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
