"""Replace exactly some partitions of a Delta table: Spark writes the files, delta-rs commits.

The storage adapter's own write, for callers outside Dagster (tests, benchmarks, scripts); the
IO manager writes through the model kinds (`dagster_partlake.kinds`), over the same parts:

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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.files import (
    Extras,
    WrittenFile,
    WrittenFiles,
    discarded_on_failure,
    write_files,
)
from dagster_partlake.delta.record import WHOLE_TABLE_ID, CommitRecord
from dagster_partlake.delta.schema import merge_for_write, spark_to_arrow
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot, open_snapshot
from dagster_partlake.delta.table import same_inputs_commit
from dagster_partlake.delta.transaction import (
    Actions,
    Committed,
    InputsMovedError,
    TransactionDoneError,
    commit,
)
from dagster_partlake.errors import PartitionMismatchError, SchemaMismatchError
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = [
    "AlreadyWritten",
    "CommitResult",
    "InputsMovedError",
    "StageSeconds",
    "StagedWrite",
    "TransactionDoneError",
    "commit_staged",
    "stage_partitions",
    "write_partitions",
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


@dataclass(frozen=True)
class CommitResult:
    version: int
    num_records: int
    files_added: int
    files_removed: int
    attempts: int
    commit_time_ms: int
    record: CommitRecord
    rows_removed: int = 0  # rows of the files the commit removed
    commit_seconds: float = 0.0  # the transaction, retries included
    # Of which making the files part of the table before the commit: nothing since Spark writes
    # them where they live (kept at 0 for what reads it).
    publish_seconds: float = 0.0
    staged: StageSeconds = StageSeconds()  # the write's time before the commit

    @classmethod
    def of(
        cls,
        committed: Committed,
        record: CommitRecord,
        num_records: int,
        spark: float = 0.0,
        listing: float = 0.0,
    ) -> CommitResult:
        actions = committed.actions
        return cls(
            version=committed.version,
            num_records=num_records,
            files_added=len(actions.adds),
            files_removed=len(actions.removes),
            attempts=committed.attempts,
            commit_time_ms=committed.commit_time_ms,
            record=replace(record, table_version=committed.version),
            rows_removed=sum(f.num_records or 0 for f in actions.removes),
            commit_seconds=committed.seconds,
            staged=StageSeconds(spark=spark, listing=listing),
        )


class AlreadyWritten(Exception):  # noqa: N818 - an outcome, not a failure
    """Nothing was committed: another run already committed these partitions from the same
    inputs (`once_per_inputs`); `record` is its commit."""

    def __init__(self, record: CommitRecord) -> None:
        super().__init__(f"already written by run {record.run_id} from the same inputs")
        self.record = record


def write_partitions(
    df: DataFrame,
    root: str | TableLocation,
    *,
    partition_by: Sequence[str],
    selection: PartitionSelection,
    partition_ids: Sequence[str],
    record: CommitRecord | None = None,
    allow_new_columns: bool = False,
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> CommitResult:
    """Replace the partitions in `selection` of the Delta table at `root` with the rows of `df`.

    Args:
        df: the rows to write; every row must lie inside `selection`.
        root: the table's path or location (created on the first write).
        partition_by: partition columns of the table, in folder order.
        selection: the partitions being replaced; live files inside it are removed.
        partition_ids: one stable id per replaced partition (e.g. the Dagster partition key);
            concurrent writers of the same id conflict and the last commit wins.
        record: what the write records in its commit (default: a record naming the table and
            the partition ids, with no code version, run or inputs).
        allow_new_columns: accept columns the table does not have yet.
        table_name: name used in error messages (default: the folder name).
        max_attempts: commit attempts before giving up on conflicts.

    Returns:
        The committed version and what it changed.

    Raises:
        SchemaMismatchError, PartitionMismatchError, CommitConflictError; in each case nothing
        was committed.
    """
    staged = stage_partitions(
        df,
        root,
        partition_by=partition_by,
        selection=selection,
        partition_ids=partition_ids,
        allow_new_columns=allow_new_columns,
        table_name=table_name,
    )
    return commit_staged(staged, record=record, max_attempts=max_attempts)


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


def commit_staged(
    staged: StagedWrite,
    *,
    record: CommitRecord | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    once_per_inputs: bool = False,
    app_transaction: tuple[str, int] | None = None,
) -> CommitResult:
    """Phase 2 of `write_partitions`: make the staged files the content of their partitions.

    Args:
        once_per_inputs: before each attempt, look for a commit of another run that wrote these
            partitions from the same inputs; if there is one, delete the staged files and raise
            `AlreadyWritten` instead of committing them a second time.
        app_transaction: (app id, version) of a Delta application transaction (`txn`) the
            commit carries, Delta's idempotent-write contract: when the table already holds that
            app id at this version or later, nothing is committed.

    Raises:
        AlreadyWritten: with `once_per_inputs`, another run committed the same.
        TransactionDoneError: the table already holds `app_transaction`; the files are deleted.
        CommitConflictError: concurrent writers kept conflicting for `max_attempts` attempts.
        TableUnreadableError: the table's log is damaged.
    """
    record = record or _default_record(staged)
    landed: dict[str, CommitRecord] = {}

    def actions(snapshot: Snapshot) -> Actions:
        if once_per_inputs and (prior := same_inputs_commit(snapshot, record)) is not None:
            raise AlreadyWritten(prior)
        removes = snapshot.live_files(staged.selection) if staged.removal == "selection" else []
        return Actions(adds=staged.files, removes=removes)

    def payload(commit_id: str, now_ms: int) -> Mapping[str, Any]:
        landed["record"] = record.committed(write_id=commit_id, commit_time_ms=now_ms)
        return landed["record"].to_commit_info()

    with discarded_on_failure(staged.written):
        committed = commit(
            staged.location,
            staged.snapshot,
            actions,
            payload=payload,
            name=staged.table_name,
            schema=staged.schema,
            partition_by=staged.partition_by,
            partition_ids=staged.partition_ids,
            app_transaction=app_transaction,
            max_attempts=max_attempts,
        )
    return CommitResult.of(
        committed,
        landed["record"],
        staged.num_records,
        staged.written.seconds,
        staged.written.facts_seconds,
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


def _default_record(staged: StagedWrite) -> CommitRecord:
    keys = () if staged.partition_ids == (WHOLE_TABLE_ID,) else staged.partition_ids
    return CommitRecord(
        asset_key=staged.table_name, partition_keys=keys, code_version=None, run_id=None
    )


def _show_values(values: Mapping[str, str | None]) -> str:
    return "|".join(f"{k}={'null' if v is None else v}" for k, v in values.items())
