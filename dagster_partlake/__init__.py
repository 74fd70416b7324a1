"""dagster_partlake: partition-aware incremental lakehouse assets on Dagster, Spark, Delta.

The public names are those in `__all__`; `dagster_partlake.delta` is the Dagster-free storage
adapter (its own `__all__`). Every other module is internal: its names may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
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

# Public name -> the module defining it, imported on first use: a process (a no-op
# `partlake run`) imports only the modules its path needs.
_LAZY = {
    "partlake_asset_checks": "dagster_partlake.checks",
    "CommitRecord": "dagster_partlake.delta.record",
    "CommitConflictError": "dagster_partlake.errors",
    "PartitionMismatchError": "dagster_partlake.errors",
    "PartlakeConfigError": "dagster_partlake.errors",
    "PartlakeError": "dagster_partlake.errors",
    "SchemaMismatchError": "dagster_partlake.errors",
    "TableUnreadableError": "dagster_partlake.errors",
    "GateFailedError": "dagster_partlake.gates",
    "DeltaPartitionIOManager": "dagster_partlake.io_manager",
    "ModelKind": "dagster_partlake.kinds",
    "model_kind_metadata": "dagster_partlake.kinds",
    "table_path": "dagster_partlake.layout",
    "MaintenanceConfig": "dagster_partlake.maintenance_job",
    "build_maintenance_job": "dagster_partlake.maintenance_job",
    "POOL": "dagster_partlake.parallel",
    "Plan": "dagster_partlake.planner",
    "StalePartition": "dagster_partlake.planner",
    "plan": "dagster_partlake.planner",
    "SparkResource": "dagster_partlake.resource",
    "PlannedRun": "dagster_partlake.runs",
    "RunPlan": "dagster_partlake.runs",
    "plan_runs": "dagster_partlake.runs",
    "build_invalidation_sensor": "dagster_partlake.sensor",
    "partlake_source": "dagster_partlake.sources",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
