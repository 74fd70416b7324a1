"""dagster_partlake: partition-aware incremental lakehouse assets on Dagster, Spark, Delta."""

from dagster_partlake.errors import (
    CommitConflictError,
    PartitionMismatchError,
    PartlakeConfigError,
    PartlakeError,
    SchemaMismatchError,
    TableUnreadableError,
)
from dagster_partlake.io_manager import DeltaPartitionIOManager, table_path
from dagster_partlake.parallel import POOL
from dagster_partlake.planner import Plan, StalePartition, plan
from dagster_partlake.resource import SparkResource
from dagster_partlake.sensor import build_invalidation_sensor
from dagster_partlake.sources import partlake_source

__all__ = [
    "POOL",
    "CommitConflictError",
    "DeltaPartitionIOManager",
    "PartitionMismatchError",
    "PartlakeConfigError",
    "PartlakeError",
    "Plan",
    "SchemaMismatchError",
    "SparkResource",
    "StalePartition",
    "TableUnreadableError",
    "build_invalidation_sensor",
    "partlake_source",
    "plan",
    "table_path",
]
