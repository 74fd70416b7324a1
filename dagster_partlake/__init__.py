"""dagster_partlake: partition-aware incremental lakehouse assets on Dagster, Spark and Delta Lake."""

from dagster_partlake.errors import (
    CommitConflictError,
    PartitionMismatchError,
    PartlakeConfigError,
    PartlakeError,
    SchemaMismatchError,
)
from dagster_partlake.io_manager import DeltaPartitionIOManager, table_path
from dagster_partlake.resource import SparkResource

__all__ = [
    "CommitConflictError",
    "DeltaPartitionIOManager",
    "PartitionMismatchError",
    "PartlakeConfigError",
    "PartlakeError",
    "SchemaMismatchError",
    "SparkResource",
    "table_path",
]
