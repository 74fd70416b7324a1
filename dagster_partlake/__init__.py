"""dagster_partlake: partition-aware incremental lakehouse assets on Dagster, Spark, Delta.

The public names are those in `__all__`; `dagster_partlake.delta` is the Dagster-free storage
adapter (its own `__all__`). Every other module is internal: its names may change.
"""

from dagster_partlake.checks import partlake_asset_checks
from dagster_partlake.delta.record import CommitRecord
from dagster_partlake.errors import (
    CommitConflictError,
    PartitionMismatchError,
    PartlakeConfigError,
    PartlakeError,
    SchemaMismatchError,
    TableUnreadableError,
)
from dagster_partlake.gates import GateFailedError
from dagster_partlake.io_manager import DeltaPartitionIOManager
from dagster_partlake.kinds import ModelKind, model_kind_metadata
from dagster_partlake.layout import table_path
from dagster_partlake.maintenance_job import MaintenanceConfig, build_maintenance_job
from dagster_partlake.parallel import POOL
from dagster_partlake.planner import Plan, StalePartition, plan
from dagster_partlake.resource import SparkResource
from dagster_partlake.runs import PlannedRun, RunPlan, plan_runs
from dagster_partlake.sensor import build_invalidation_sensor
from dagster_partlake.sources import partlake_source

__all__ = [
    "POOL",
    "CommitConflictError",
    "CommitRecord",
    "DeltaPartitionIOManager",
    "GateFailedError",
    "MaintenanceConfig",
    "ModelKind",
    "PartitionMismatchError",
    "PartlakeConfigError",
    "PartlakeError",
    "Plan",
    "PlannedRun",
    "RunPlan",
    "SchemaMismatchError",
    "SparkResource",
    "StalePartition",
    "TableUnreadableError",
    "build_invalidation_sensor",
    "build_maintenance_job",
    "model_kind_metadata",
    "partlake_asset_checks",
    "partlake_source",
    "plan",
    "plan_runs",
    "table_path",
]
