"""Table maintenance as a Dagster job, so a schedule runs it and the UI shows it.

`build_maintenance_job()` makes a job of one op that runs the retention rules
(`maintenance.retention`: the retired partitions removed, after their archive copy, and the
archive compaction) and `maintenance.operations`'s operations (compact, vacuum, checkpoint), in
that order, on the Delta tables of the code location's managed assets, with the IO manager's
lake root and Spark session. It logs one line per table and operation, and one
`AssetObservation` per existing table saying what was done. Maintenance never invalidates
anything (compaction commits `dataChange: false` and keeps every partition's lastUpdated;
vacuum and checkpoint add no data; a retired partition is never judged by the planner, and what
reads it keeps its verdict unless it cascades), so the sensor plans nothing after it.

    maintenance = build_maintenance_job()
    defs = Definitions(
        assets=assets,
        jobs=[maintenance],
        schedules=[ScheduleDefinition(job=maintenance, cron_schedule="0 3 * * *")],
        resources={"io_manager": DeltaPartitionIOManager(spark=spark), ...},
    )
"""

# No `from __future__ import annotations`: Dagster reads the op's config annotation as a class.

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dagster import (
    AssetKey,
    AssetObservation,
    Config,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    job,
    op,
)
from pydantic import Field

from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.maintenance.operations import (
    OPERATIONS,
    MaintainOptions,
    Operation,
    TableOutcome,
    catalog_tables,
    maintain_tables,
    managed_tables,
)

if TYPE_CHECKING:
    from dagster_partlake.catalog.config import LakeCatalog
    from dagster_partlake.planning.graph import LakeGraph

DEFAULT_JOB_NAME = "partlake_maintenance"
RETENTION: Operation = "retention"


class MaintenanceConfig(Config):
    """What one maintenance run does."""

    operations: list[str] = Field(
        default=[RETENTION, *OPERATIONS],
        description=f"Operations to run, in this order; any of {RETENTION}, "
        f"{', '.join(OPERATIONS)} ({RETENTION}: what the partlake/retention rules retire is "
        "removed, after its archive copy).",
    )
    retention_dry_run: bool = Field(
        default=False,
        description="retention: only log the partitions and rows it would remove.",
    )
    assets: list[str] | None = Field(
        default=None,
        description="Asset names whose tables to maintain (default: every managed asset).",
    )
    target_file_mb: float = Field(
        default=128.0,
        description="compact: files smaller than this are rewritten into files of this size.",
    )
    retention_hours: int = Field(
        default=168,
        description="vacuum: keep unreferenced files removed or written within this many hours "
        "(at least 1).",
    )
    keep_log_hours: float = Field(
        default=720.0,
        description="checkpoint: keep log files modified within this many hours.",
    )


def build_maintenance_job(name: str = DEFAULT_JOB_NAME) -> JobDefinition:
    """A job that maintains the Delta tables of its code location's managed assets; it needs
    the `io_manager` resource to be a `DeltaPartitionIOManager`."""

    @op(
        name=f"{name}_tables",
        required_resource_keys={"io_manager"},
        description="Retire what the retention rules retire, compact, vacuum and checkpoint the "
        "Delta tables of the managed assets; nothing becomes stale.",
    )
    def maintain(context: OpExecutionContext, config: MaintenanceConfig) -> None:
        from dagster_partlake.planning.graph import LakeGraph

        io_manager = context.resources.io_manager
        located = getattr(io_manager, "lake_location", None)
        lake = located() if callable(located) and io_manager.root is not None else io_manager.root
        graph = LakeGraph(asset_graph=context.repository_def.asset_graph, root=lake)
        tables = managed_tables(graph, config.assets)
        options = MaintainOptions(
            target_file_bytes=int(config.target_file_mb * 1024 * 1024),
            retention_hours=config.retention_hours,
            keep_log_hours=config.keep_log_hours,
        )
        # Every operation is checked before the first table is touched.
        operations: list[Operation] = [
            RETENTION if operation == RETENTION else options.check(operation)
            for operation in config.operations
        ]
        if operations.count(RETENTION) > 1:
            raise PartlakeConfigError(f"operation {RETENTION} is listed twice; list it once.")
        done: dict[str, list[TableOutcome]] = {}
        for operation in operations:
            if operation == RETENTION:
                from dagster_partlake.maintenance.retention import retain_tables

                outcomes = retain_tables(
                    graph,
                    config.assets,
                    dry_run=config.retention_dry_run,
                    spark=lambda: io_manager.spark.spark_session,
                )
                from dagster_partlake.maintenance.retention import record_retired

                record_retired(context.instance, graph, outcomes)
            else:
                outcomes = maintain_tables(
                    tables, operation, options, lambda: io_manager.spark.spark_session
                )
            for outcome in outcomes:
                (context.log.error if outcome.status == "failed" else context.log.info)(
                    f"{operation} {outcome.text}"
                )
                done.setdefault(outcome.asset, []).append(outcome)
        for asset, outcomes in done.items():
            if any(o.status != "no_table" for o in outcomes):
                context.log_event(_observation(graph.assets[asset].key, outcomes))
        catalog = getattr(io_manager, "catalog", None)
        if catalog is not None:
            _register(context, catalog, graph, config.assets, done)
        failed = [o for outcomes in done.values() for o in outcomes if o.status == "failed"]
        if failed:
            raise PartlakeError(
                f"maintenance failed on {len(failed)} table operation(s): "
                + "; ".join(f"{o.operation} {o.text}" for o in failed)
            )

    @job(name=name, description="partlake table maintenance: never invalidates a partition.")
    def maintenance_job() -> None:
        maintain()

    return maintenance_job


def _register(
    context: OpExecutionContext,
    catalog: "LakeCatalog",
    graph: "LakeGraph",
    select: Sequence[str] | None,
    done: Mapping[str, list[TableOutcome]],
) -> None:
    """Each maintained table registered (a table whose registration failed at its commit,
    the metastore down then, gets its name now); a warning, never a failure, when it cannot."""
    from dagster_partlake.catalog.register import after_commit

    for asset, name, location in catalog_tables(graph, catalog, select):
        if all(o.status == "no_table" for o in done.get(asset, [])):
            continue
        registered = after_commit(catalog, name, location, context.log.warning, context.log.info)
        if registered is not None:
            context.log.info(f"catalog: {registered.describe()}")


def _observation(key: AssetKey, outcomes: list[TableOutcome]) -> AssetObservation:
    return AssetObservation(
        asset_key=key,
        description="; ".join(f"{o.operation}: {o.summary}" for o in outcomes),
        metadata={
            f"partlake/maintenance/{o.operation}": MetadataValue.text(o.summary) for o in outcomes
        },
    )
