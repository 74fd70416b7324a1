"""The storage adapter: Delta tables written by Spark + delta-rs. Knows nothing about Dagster."""

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
