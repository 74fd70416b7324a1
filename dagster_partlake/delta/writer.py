"""Replace exactly some partitions of a Delta table: Spark writes the files, delta-rs commits.

The storage adapter's own write, for callers outside Dagster (tests, benchmarks, scripts; its
record-carrying half, `commit_staged` and `write_partitions`, is `dagster_partlake.records.writes`);
the IO manager writes through the model kinds (`dagster_partlake.kinds`), over the same parts:

1. `stage_partitions`: the table's log is read once (`delta.snapshot`), the schema checked, and
   Spark writes the Parquet files straight into the table's `col=value/` folders under unique
   names (`delta.files`), returning their facts; every file must lie inside the partitions being
   replaced. Nothing is visible yet.
2. `commit_staged`: one transaction (`delta.transaction.commit`) adds them and removes every
   live file of those partitions, naming each partition id in an application transaction so
   that two writers of one partition conflict and the last one wins whole.

A writer killed between the two leaves only unreferenced files, which no reader sees and
`vacuum` removes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dagster_partlake.delta.files import (
    Extras,
    WrittenFile,
    WrittenFiles,
    discarded_on_failure,
    write_files,
)
from dagster_partlake.delta.schema import merge_for_write, spark_to_arrow
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot, open_snapshot
from dagster_partlake.delta.transaction import (
    InputsMovedError,
    TransactionDoneError,
)
from dagster_partlake.errors import PartitionMismatchError, SchemaMismatchError
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = [
    "InputsMovedError",
    "StageSeconds",
    "StagedWrite",
    "TransactionDoneError",
    "stage_partitions",
]

# Which live files a commit removes: those of the staged selection (a replace) or none (an
# append).
Removal = Literal["selection", "none"]


@dataclass(frozen=True)
class StageSeconds:
    """Where a write's time went before its commit (reported in materialization metadata;
    nothing depends on it)."""

    spark: float = 0.0  # Spark computing the rows and writing the Parquet files
    listing: float = 0.0  # turning the write job's facts into the list of files it wrote


@dataclass(frozen=True)
class StagedWrite:
    """Parquet files written under the table and checked, not yet visible to any reader."""

    location: TableLocation
    table_name: str
    written: WrittenFiles
    snapshot: Snapshot | None  # the table as the write read it (None: no table yet)
    selection: PartitionSelection
    partition_ids: tuple[str, ...]
    removal: Removal = "selection"

    @property
    def root(self) -> str:
        return self.location.uri

    @property
    def files(self) -> tuple[WrittenFile, ...]:
        return self.written.files

    @property
    def schema(self) -> pa.Schema:
        return self.written.schema

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.written.partition_by

    @property
    def num_records(self) -> int:
        return self.written.num_records

    @property
    def seconds(self) -> StageSeconds:
        return StageSeconds(spark=self.written.seconds, listing=self.written.facts_seconds)


def stage_partitions(
    df: DataFrame,
    root: str | TableLocation,
    *,
    partition_by: Sequence[str],
    selection: PartitionSelection,
    partition_ids: Sequence[str],
    allow_new_columns: bool = False,
    table_name: str | None = None,
    removal: Removal = "selection",
    stats_columns: Sequence[str] = (),
) -> StagedWrite:
    """Phase 1 of `write_partitions`: write and check the Parquet files; commit nothing.

    `removal` says which live files the commit will remove; `stats_columns` get min/max/null
    count statistics in the Delta log, so later merges can skip files."""
    location = as_location(root)
    name = table_name or location.name
    snapshot = open_snapshot(location, table_name=name, must_exist=False)
    if snapshot is not None:
        snapshot.check_writable()  # before any Spark work (the commit checks it again)
    written = write_inside(
        df,
        location,
        snapshot,
        name=name,
        partition_by=partition_by,
        selection=selection,
        allow_new_columns=allow_new_columns,
        stats_columns=stats_columns,
    )
    return StagedWrite(
        location=location,
        table_name=name,
        written=written,
        snapshot=snapshot,
        selection=selection,
        partition_ids=tuple(partition_ids),
        removal=removal,
    )


def table_schema(
    df: DataFrame,
    snapshot: Snapshot | None,
    partition_by: Sequence[str],
    name: str,
    *,
    allow_new_columns: bool,
) -> pa.Schema:
    """The table's schema after writing `df`: its data columns, then the partition columns.

    Raises:
        SchemaMismatchError: a partition column is missing, the table is partitioned otherwise,
            or the columns do not fit the table's.
    """
    import pyarrow as pa

    incoming = spark_to_arrow(df.schema)
    missing = [c for c in partition_by if c not in incoming.names]
    if missing:
        raise SchemaMismatchError(
            f"data for table {name} has no partition column(s) {', '.join(missing)} "
            f"(columns: {', '.join(incoming.names)}); add them to the returned DataFrame or map "
            "the partition dimension to an existing column with metadata 'partition_expr'."
        )
    schema = pa.schema(
        [incoming.field(c) for c in incoming.names if c not in partition_by]
        + [incoming.field(c) for c in partition_by]
    )
    if snapshot is None:
        return schema
    existing = snapshot.partition_by
    if existing != tuple(partition_by):
        raise SchemaMismatchError(
            f"table {name} is partitioned by ({', '.join(existing) or 'nothing'}) but the write "
            f"is partitioned by ({', '.join(partition_by) or 'nothing'}); keep the asset's "
            "partitioning and partition_expr unchanged, or write to a new table."
        )
    return merge_for_write(
        snapshot.schema, incoming, table_name=name, allow_new_columns=allow_new_columns
    )


def write_inside(
    df: DataFrame,
    location: TableLocation,
    snapshot: Snapshot | None,
    *,
    name: str,
    partition_by: Sequence[str],
    selection: PartitionSelection,
    allow_new_columns: bool = False,
    stats_columns: Sequence[str] = (),
    extras: Extras | None = None,
) -> WrittenFiles:
    """Spark writes `df`'s rows as new files of the table (not visible yet): the schema checked
    against `snapshot` (`table_schema`), every file inside `selection` (`check_inside`; its files
    are deleted otherwise)."""
    schema = table_schema(df, snapshot, partition_by, name, allow_new_columns=allow_new_columns)
    written = write_files(
        df,
        location,
        partition_by=partition_by,
        schema=schema,
        stats_columns=stats_columns,
        extras=extras,
    )
    with discarded_on_failure(written):
        check_inside(written, selection, name)
    return written


def check_inside(written: WrittenFiles, selection: PartitionSelection, name: str) -> None:
    """Every written file lies inside `selection`.

    Raises:
        PartitionMismatchError: naming up to five partitions outside it.
    """
    outside = [f for f in written.files if not selection.contains(f.partition_values)]
    if outside:
        shown = sorted({_show_values(f.partition_values) for f in outside})
        raise PartitionMismatchError(
            f"rows for table {name} fall outside the partitions being written: "
            f"{', '.join(shown[:5])}{' ...' if len(shown) > 5 else ''}; this write may only "
            f"contain {selection.describe()}. Filter the DataFrame to the run's partitions "
            "(context.partition_key / partition_keys) before returning it."
        )


def _show_values(values: Mapping[str, str | None]) -> str:
    return "|".join(f"{k}={'null' if v is None else v}" for k, v in values.items())
