"""Table maintenance across a code location: compaction, vacuum and checkpoints.

`operations` runs one operation over the managed tables (shared by `partlake maintain` and the
job); `job` is the Dagster job a schedule runs. The per-table work is the storage adapter's
(`delta.maintenance`). May import the planning core (for `LakeGraph`) and everything below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.maintenance.job import MaintenanceConfig, build_maintenance_job
    from dagster_partlake.maintenance.operations import (
        MaintainOptions,
        TableOutcome,
        maintain_tables,
        managed_tables,
    )

__all__ = [
    "MaintainOptions",
    "MaintenanceConfig",
    "TableOutcome",
    "build_maintenance_job",
    "maintain_tables",
    "managed_tables",
]

_LAZY = {
    "MaintainOptions": "dagster_partlake.maintenance.operations",
    "TableOutcome": "dagster_partlake.maintenance.operations",
    "maintain_tables": "dagster_partlake.maintenance.operations",
    "managed_tables": "dagster_partlake.maintenance.operations",
    "MaintenanceConfig": "dagster_partlake.maintenance.job",
    "build_maintenance_job": "dagster_partlake.maintenance.job",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
