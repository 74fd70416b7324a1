"""dagster_partlake: partition-aware incremental lakehouse assets on Dagster, Spark, Delta.

The public names are those in `__all__`; `dagster_partlake.delta` is the Dagster-free storage
adapter (its own `__all__`). Every other module is internal: its names may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.delta.record import CommitRecord
    from dagster_partlake.errors import (
        CommitConflictError,
        InvalidPredicateError,
        PartitionMismatchError,
        PartlakeConfigError,
        PartlakeError,
        SchemaMismatchError,
        SparkUnavailableError,
        SqlModelError,
        TableFeatureError,
        TableUnreadableError,
        UnreadableTableFeatureError,
    )
    from dagster_partlake.freshness.automation import partlake_stale
    from dagster_partlake.freshness.check import partlake_asset_checks
    from dagster_partlake.gates.spec import GateFailedError
    from dagster_partlake.io_manager.manager import DeltaPartitionIOManager
    from dagster_partlake.kinds.spec import ModelKind, model_kind_metadata
    from dagster_partlake.maintenance.job import MaintenanceConfig, build_maintenance_job
    from dagster_partlake.orchestration.launcher import MonitoredRunLauncher
    from dagster_partlake.orchestration.pools import POOL
    from dagster_partlake.orchestration.sensor import build_invalidation_sensor
    from dagster_partlake.orchestration.sources import partlake_source
    from dagster_partlake.partitions.dimensions import partlake_mapping, partlake_partitions
    from dagster_partlake.planning.planner import Plan, StalePartition, plan
    from dagster_partlake.planning.runs import PlannedRun, RunPlan, plan_runs
    from dagster_partlake.spark.resource import SparkResource
    from dagster_partlake.sql.component import SqlModels
    from dagster_partlake.sql.definition import sql_assets
    from dagster_partlake.storage.location import table_path

__all__ = [
    "POOL",
    "CommitConflictError",
    "CommitRecord",
    "DeltaPartitionIOManager",
    "GateFailedError",
    "MaintenanceConfig",
    "ModelKind",
    "MonitoredRunLauncher",
    "PartitionMismatchError",
    "PartlakeConfigError",
    "PartlakeError",
    "Plan",
    "PlannedRun",
    "RunPlan",
    "SchemaMismatchError",
    "SparkResource",
    "SparkUnavailableError",
    "SqlModelError",
    "SqlModels",
    "StalePartition",
    "InvalidPredicateError",
    "TableFeatureError",
    "TableUnreadableError",
    "UnreadableTableFeatureError",
    "build_invalidation_sensor",
    "build_maintenance_job",
    "model_kind_metadata",
    "partlake_asset_checks",
    "partlake_mapping",
    "partlake_partitions",
    "partlake_source",
    "partlake_stale",
    "plan",
    "plan_runs",
    "sql_assets",
    "table_path",
]

# Public name -> the module defining it, imported on first use: a process (a no-op
# `partlake run`) imports only the modules its path needs.
_LAZY = {
    "partlake_asset_checks": "dagster_partlake.freshness.check",
    "partlake_stale": "dagster_partlake.freshness.automation",
    "CommitRecord": "dagster_partlake.delta.record",
    "CommitConflictError": "dagster_partlake.errors",
    "PartitionMismatchError": "dagster_partlake.errors",
    "PartlakeConfigError": "dagster_partlake.errors",
    "PartlakeError": "dagster_partlake.errors",
    "SchemaMismatchError": "dagster_partlake.errors",
    "TableFeatureError": "dagster_partlake.errors",
    "TableUnreadableError": "dagster_partlake.errors",
    "UnreadableTableFeatureError": "dagster_partlake.errors",
    "SparkUnavailableError": "dagster_partlake.errors",
    "SqlModelError": "dagster_partlake.errors",
    "SqlModels": "dagster_partlake.sql.component",
    "sql_assets": "dagster_partlake.sql.definition",
    "InvalidPredicateError": "dagster_partlake.errors",
    "partlake_mapping": "dagster_partlake.partitions.dimensions",
    "partlake_partitions": "dagster_partlake.partitions.dimensions",
    "GateFailedError": "dagster_partlake.gates.spec",
    "DeltaPartitionIOManager": "dagster_partlake.io_manager.manager",
    "ModelKind": "dagster_partlake.kinds.spec",
    "model_kind_metadata": "dagster_partlake.kinds.spec",
    "table_path": "dagster_partlake.storage.location",
    "MaintenanceConfig": "dagster_partlake.maintenance.job",
    "build_maintenance_job": "dagster_partlake.maintenance.job",
    "POOL": "dagster_partlake.orchestration.pools",
    "MonitoredRunLauncher": "dagster_partlake.orchestration.launcher",
    "Plan": "dagster_partlake.planning.planner",
    "StalePartition": "dagster_partlake.planning.planner",
    "plan": "dagster_partlake.planning.planner",
    "SparkResource": "dagster_partlake.spark.resource",
    "PlannedRun": "dagster_partlake.planning.runs",
    "RunPlan": "dagster_partlake.planning.runs",
    "plan_runs": "dagster_partlake.planning.runs",
    "build_invalidation_sensor": "dagster_partlake.orchestration.sensor",
    "partlake_source": "dagster_partlake.orchestration.sources",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
