"""Maintenance over a code location's tables, shared by `partlake maintain` and the Dagster job.

`managed_tables(graph, select)` picks the Delta tables of the managed (materializable, non-folder)
assets; `maintain_tables(tables, operation, options, spark)` runs one operation
(`maintenance.compact`, `vacuum`, `checkpoint`) on each and says per table what it did. A table
that fails is reported and the others still run; a table not written yet is skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from dagster_partlake.delta.defaults import (
    DEFAULT_KEEP_LOG_HOURS,
    DEFAULT_RETENTION_HOURS,
    DEFAULT_TARGET_FILE_BYTES,
)
from dagster_partlake.delta.table import table_exists
from dagster_partlake.errors import PartlakeConfigError, PartlakeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dagster_partlake.catalog.config import LakeCatalog
    from dagster_partlake.maintenance.checkpoint import CheckpointResult
    from dagster_partlake.maintenance.compact import CompactResult
    from dagster_partlake.maintenance.vacuum import VacuumResult
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.storage.location import TableLocation

Operation = Literal["compact", "vacuum", "checkpoint", "retention"]
OPERATIONS: tuple[Operation, ...] = ("compact", "vacuum", "checkpoint")
Status = Literal["ok", "skipped", "no_table", "failed"]


@dataclass(frozen=True)
class MaintainOptions:
    """The knobs of the operations (each reads only its own)."""

    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES  # compact
    retention_hours: int = DEFAULT_RETENTION_HOURS  # vacuum
    force: bool = False  # vacuum: allow a retention below 1 hour
    dry_run: bool = False  # vacuum
    keep_log_hours: float = DEFAULT_KEEP_LOG_HOURS  # checkpoint

    def check(self, operation: str) -> Operation:
        """Refuse options that would harm a table, before any table is touched; returns the
        operation, known to be one of `OPERATIONS`.

        Raises:
            PartlakeConfigError: an unknown operation, or a vacuum retention below 1 hour
                without force.
        """
        if operation not in OPERATIONS:
            raise PartlakeConfigError(
                f"unknown maintenance operation {operation!r}; use one of {', '.join(OPERATIONS)}."
            )
        if operation == "vacuum" and self.retention_hours < 1 and not self.force:
            raise PartlakeConfigError(
                f"a vacuum retention of {self.retention_hours} hours would delete files that a "
                "writer has written but not committed yet; use at least 1 hour, or force it "
                "(--force) when no writer is running."
            )
        return cast(Operation, operation)


@dataclass(frozen=True)
class TableOutcome:
    """What one operation did to one asset's table."""

    asset: str
    operation: Operation
    status: Status
    summary: str
    details: dict[str, object] = dataclasses.field(default_factory=dict)

    @property
    def text(self) -> str:
        return f"{self.asset}: {self.summary}"

    def to_json(self) -> dict[str, object]:
        return {"asset": self.asset, "status": self.status, **self.details}


def managed_tables(
    graph: LakeGraph, select: Sequence[str] | None = None
) -> list[tuple[str, TableLocation]]:
    """(asset name, table location) of the managed Delta tables, or of those `select` names.

    Raises:
        PartlakeConfigError: `select` names an asset that is not a managed one.
    """
    managed = sorted(n for n, a in graph.assets.items() if not a.is_source and not a.is_folder)
    if select:
        unknown = sorted(set(select) - set(managed))
        if unknown:
            raise PartlakeConfigError(
                f"cannot maintain {', '.join(unknown)}: not a managed asset; the managed assets "
                f"are {', '.join(managed)}."
            )
        managed = [n for n in managed if n in select]
    return [(name, graph.assets[name].location) for name in managed]


def catalog_tables(
    graph: LakeGraph, catalog: LakeCatalog, select: Sequence[str] | None = None
) -> list[tuple[str, str, TableLocation]]:
    """(asset name, `schema.table`, table location) of the managed Delta tables (or of those
    `select` names): each one's catalog name, its own `dagster/table_name` first."""
    from dagster_partlake.catalog.naming import TABLE_NAME_KEY
    from dagster_partlake.metadata import plain

    found = []
    for name, location in managed_tables(graph, select):
        node = graph.asset_graph.get(graph.assets[name].key)
        explicit = plain(node.metadata.get(TABLE_NAME_KEY))
        table = catalog.table_name(
            graph.assets[name].key.path, explicit if isinstance(explicit, str) else None
        )
        found.append((name, table, location))
    return found


def maintain_tables(
    tables: Sequence[tuple[str, str | TableLocation]],
    operation: Operation,
    options: MaintainOptions,
    spark: Callable[[], SparkSession] | None = None,
) -> list[TableOutcome]:
    """Run `operation` on each (asset name, table root); `spark` gives the session compaction
    needs, called only when a table is compacted.

    Raises:
        PartlakeConfigError: the options are refused (`MaintainOptions.check`); no table was
            touched.
    """
    # Imported here: the maintenance job is part of every code location, run or not.
    from dagster_partlake.maintenance.compact import CompactResult

    options.check(operation)
    outcomes = []
    for name, root in tables:
        if not table_exists(root):
            outcomes.append(TableOutcome(name, operation, "no_table", "no table yet, skipped"))
            continue
        try:
            result = _run(operation, name, root, options, spark)
        except PartlakeError as error:
            outcomes.append(
                TableOutcome(name, operation, "failed", f"failed: {error}", {"error": str(error)})
            )
            continue
        skipped = isinstance(result, CompactResult) and bool(result.skipped)
        outcomes.append(
            TableOutcome(
                name,
                operation,
                "skipped" if skipped else "ok",
                describe(result),
                dataclasses.asdict(result),
            )
        )
    return outcomes


def _run(
    operation: Operation,
    name: str,
    root: str | TableLocation,
    options: MaintainOptions,
    spark: Callable[[], SparkSession] | None,
) -> CompactResult | VacuumResult | CheckpointResult:
    from dagster_partlake.maintenance.checkpoint import checkpoint_table
    from dagster_partlake.maintenance.compact import compact_table
    from dagster_partlake.maintenance.vacuum import vacuum_table

    if operation == "compact":
        if spark is None:
            raise PartlakeConfigError("compaction needs a Spark session; pass spark=.")
        return compact_table(
            spark(), root, target_file_bytes=options.target_file_bytes, table_name=name
        )
    if operation == "vacuum":
        return vacuum_table(
            root,
            retention_hours=options.retention_hours,
            force=options.force,
            dry_run=options.dry_run,
            table_name=name,
        )
    return checkpoint_table(root, keep_log_hours=options.keep_log_hours, table_name=name)


def describe(result: CompactResult | VacuumResult | CheckpointResult) -> str:
    """One line saying what a maintenance call did, for the CLI and logs."""
    from dagster_partlake.maintenance.compact import CompactResult
    from dagster_partlake.maintenance.vacuum import VacuumResult

    if isinstance(result, CompactResult):
        if result.skipped:
            return f"compaction skipped: {result.skipped}"
        if result.version is None:
            return "nothing to compact"
        before = sum(p.bytes_before for p in result.partitions)
        return (
            f"compacted {len(result.partitions)} partition(s): {result.files_removed} -> "
            f"{result.files_added} file(s), {_bytes(before)}, version {result.version}"
        )
    if isinstance(result, VacuumResult):
        verb = "would remove" if result.dry_run else "removed"
        return (
            f"{verb} {result.num_files} file(s) and {len(result.staging_dirs)} staging "
            f"folder(s), {_bytes(result.bytes)} (retention {result.retention_hours} h)"
        )
    return (
        f"checkpoint at version {result.version}; removed {len(result.json_removed)} JSON "
        f"commit(s) and {len(result.checkpoints_removed)} old checkpoint file(s), kept "
        f"{len(result.json_kept_for_records)} for partlake records; {result.json_remaining} "
        "JSON commit(s) left"
    )


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
