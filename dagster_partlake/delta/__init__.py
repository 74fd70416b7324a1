"""The storage adapter: Delta tables written by Spark + delta-rs. Knows nothing about Dagster."""

from dagster_partlake.delta.reader import (
    ReadResult,
    TableSnapshot,
    open_table,
    read_partitions,
    read_snapshot,
)
from dagster_partlake.delta.selection import Box, DateRanges, PartitionSelection
from dagster_partlake.delta.writer import (
    CommitResult,
    StagedWrite,
    commit_staged,
    stage_partitions,
    write_partitions,
)

__all__ = [
    "Box",
    "CommitResult",
    "DateRanges",
    "PartitionSelection",
    "ReadResult",
    "StagedWrite",
    "TableSnapshot",
    "commit_staged",
    "open_table",
    "read_partitions",
    "read_snapshot",
    "stage_partitions",
    "write_partitions",
]
