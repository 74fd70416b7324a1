"""dagster_partlake: partition-aware incremental lakehouse assets on Dagster, Spark, Delta.

The public names are those in `__all__`; `dagster_partlake.delta` is the Dagster-free storage
adapter (its own `__all__`). Every other module is internal: its names may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:  # what type checkers see: each public name, re-exported (`X as X`)
    from dagster_partlake.catalog.config import LakeCatalog as LakeCatalog
    from dagster_partlake.errors import CatalogError as CatalogError
    from dagster_partlake.errors import CommitConflictError as CommitConflictError
    from dagster_partlake.errors import InvalidPredicateError as InvalidPredicateError
    from dagster_partlake.errors import PartitionMismatchError as PartitionMismatchError
    from dagster_partlake.errors import PartlakeConfigError as PartlakeConfigError
    from dagster_partlake.errors import PartlakeError as PartlakeError
    from dagster_partlake.errors import SchemaMismatchError as SchemaMismatchError
    from dagster_partlake.errors import SparkUnavailableError as SparkUnavailableError
    from dagster_partlake.errors import SqlModelError as SqlModelError
    from dagster_partlake.errors import TableFeatureError as TableFeatureError
    from dagster_partlake.errors import TableUnreadableError as TableUnreadableError
    from dagster_partlake.errors import UnreadableTableFeatureError as UnreadableTableFeatureError
    from dagster_partlake.freshness.automation import partlake_stale as partlake_stale
    from dagster_partlake.freshness.check import partlake_asset_checks as partlake_asset_checks
    from dagster_partlake.gates.spec import GateFailedError as GateFailedError
    from dagster_partlake.io_manager.manager import (
        DeltaPartitionIOManager as DeltaPartitionIOManager,
    )
    from dagster_partlake.kinds.spec import ModelKind as ModelKind
    from dagster_partlake.kinds.spec import model_kind_metadata as model_kind_metadata
    from dagster_partlake.maintenance.job import MaintenanceConfig as MaintenanceConfig
    from dagster_partlake.maintenance.job import build_maintenance_job as build_maintenance_job
    from dagster_partlake.orchestration.launcher import MonitoredRunLauncher as MonitoredRunLauncher
    from dagster_partlake.orchestration.pools import POOL as POOL
    from dagster_partlake.orchestration.sensor import (
        build_invalidation_sensor as build_invalidation_sensor,
    )
    from dagster_partlake.orchestration.sources import partlake_source as partlake_source
    from dagster_partlake.partitions.dimensions import partlake_mapping as partlake_mapping
    from dagster_partlake.partitions.dimensions import partlake_partitions as partlake_partitions
    from dagster_partlake.planning.api import plan as plan
    from dagster_partlake.planning.api import plan_runs as plan_runs
    from dagster_partlake.planning.definition import Plan as Plan
    from dagster_partlake.planning.definition import PlanInput as PlanInput
    from dagster_partlake.planning.definition import StalePartition as StalePartition
    from dagster_partlake.planning.runs import PlannedRun as PlannedRun
    from dagster_partlake.planning.runs import RunPlan as RunPlan
    from dagster_partlake.records.record import CommitRecord as CommitRecord
    from dagster_partlake.sources.kafka import KafkaTopic as KafkaTopic
    from dagster_partlake.sources.postgres import PostgresTable as PostgresTable
    from dagster_partlake.spark.resource import SparkResource as SparkResource
    from dagster_partlake.sql.component import SqlModels as SqlModels
    from dagster_partlake.sql.definition import sql_assets as sql_assets
    from dagster_partlake.storage.location import table_path as table_path

# The public names: name -> the module defining it, imported on first use (a process such as a
# no-op `partlake run` imports only the modules its path needs). `__all__` is its keys; a test
# ties it to the TYPE_CHECKING imports above and to the API reference page.
_LAZY = {
    "CommitRecord": "dagster_partlake.records.record",
    "CatalogError": "dagster_partlake.errors",
    "CommitConflictError": "dagster_partlake.errors",
    "LakeCatalog": "dagster_partlake.catalog.config",
    "InvalidPredicateError": "dagster_partlake.errors",
    "PartitionMismatchError": "dagster_partlake.errors",
    "PartlakeConfigError": "dagster_partlake.errors",
    "PartlakeError": "dagster_partlake.errors",
    "SchemaMismatchError": "dagster_partlake.errors",
    "SparkUnavailableError": "dagster_partlake.errors",
    "SqlModelError": "dagster_partlake.errors",
    "TableFeatureError": "dagster_partlake.errors",
    "TableUnreadableError": "dagster_partlake.errors",
    "UnreadableTableFeatureError": "dagster_partlake.errors",
    "partlake_stale": "dagster_partlake.freshness.automation",
    "partlake_asset_checks": "dagster_partlake.freshness.check",
    "GateFailedError": "dagster_partlake.gates.spec",
    "DeltaPartitionIOManager": "dagster_partlake.io_manager.manager",
    "ModelKind": "dagster_partlake.kinds.spec",
    "model_kind_metadata": "dagster_partlake.kinds.spec",
    "table_path": "dagster_partlake.storage.location",
    "MaintenanceConfig": "dagster_partlake.maintenance.job",
    "build_maintenance_job": "dagster_partlake.maintenance.job",
    "MonitoredRunLauncher": "dagster_partlake.orchestration.launcher",
    "POOL": "dagster_partlake.orchestration.pools",
    "build_invalidation_sensor": "dagster_partlake.orchestration.sensor",
    "partlake_source": "dagster_partlake.orchestration.sources",
    "partlake_mapping": "dagster_partlake.partitions.dimensions",
    "partlake_partitions": "dagster_partlake.partitions.dimensions",
    "Plan": "dagster_partlake.planning.definition",
    "PlanInput": "dagster_partlake.planning.definition",
    "StalePartition": "dagster_partlake.planning.definition",
    "plan": "dagster_partlake.planning.api",
    "PlannedRun": "dagster_partlake.planning.runs",
    "RunPlan": "dagster_partlake.planning.runs",
    "plan_runs": "dagster_partlake.planning.api",
    "KafkaTopic": "dagster_partlake.sources.kafka",
    "PostgresTable": "dagster_partlake.sources.postgres",
    "SparkResource": "dagster_partlake.spark.resource",
    "SqlModels": "dagster_partlake.sql.component",
    "sql_assets": "dagster_partlake.sql.definition",
}
__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
