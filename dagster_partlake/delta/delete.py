"""Delete the rows of a Delta table that match a predicate, in one commit (Flare's "delete from
dataset"; Delta's DELETE): Spark finds and rewrites, delta-rs commits.

1. Spark checks the predicate against the table's schema: one that does not parse, is not a
   condition, or names a column the table lacks raises `InvalidPredicateError`; nothing is read.
2. The files that can hold a matching row are found from the log alone
   (`dagster_partlake.delta.skipping`: partition values and the min/max statistics merge and scd2
   write for their unique key), within the partitions asked for.
3. One Spark job counts the matching rows of each of those files; a file without any is left
   alone. A dry run stops here and lists the files and counts.
4. One Spark job rewrites the files that hold matching rows without them (a row whose predicate
   is null stays, as in SQL), into the same partition folders, keeping the statistics columns the
   old files had. One commit removes those files and adds the rewritten ones, with the
   rewritten files' modification time set to the commit time: the touched partitions' lastUpdated
   moves, and since the commit carries no `CommitRecord` (its `DeleteRecord` goes under
   `partlake_maintenance`), the planner sees them changed outside partlake's writer
   (`out_of_band`) and their downstream closure `upstream_changed`.

Like every writer it names one Delta application transaction per touched partition, so a
concurrent writer of the same partition conflicts; if a file it rewrote was replaced meanwhile,
steps 2-4 run again on the new files. The delete is thus one atomic commit or nothing.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import unquote

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.history import maintenance_version
from dagster_partlake.delta.record import WHOLE_TABLE_ID, DeleteRecord
from dagster_partlake.delta.schema import arrow_to_spark, delta_types
from dagster_partlake.delta.selection import HIVE_NULL, PartitionSelection
from dagster_partlake.delta.skipping import Bounds, ColumnBounds, file_test
from dagster_partlake.delta.staging import (
    StagedWrite,
    discard_published,
    discarded_on_failure,
    new_staging_folder,
    publish_staged,
    staged_files,
    write_parquet_files,
)
from dagster_partlake.delta.table import (
    LiveFile,
    arrow_schema,
    live_files,
    load_table,
    table_exists,
    unreadable,
)
from dagster_partlake.delta.writer import (
    _txn_app_id,
    commit_or_conflict,
    files_transactions,
    remove_action,
)
from dagster_partlake.errors import (
    CommitConflictError,
    InvalidPredicateError,
    PartlakeConfigError,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import Column, DataFrame, SparkSession

    from dagster_partlake.delta.schema import DeltaType

PartitionValues = Mapping[str, str | None]


@dataclass(frozen=True)
class AffectedFile:
    """A live file that holds rows matching the predicate."""

    path: str  # relative to the table root, as a reader sees it (not URL-encoded)
    partition_id: str  # its partition (a Dagster partition key where known)
    rows: int  # rows in the file
    rows_matching: int  # rows the delete removes from it

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "partition": self.partition_id,
            "rows": self.rows,
            "rows_matching": self.rows_matching,
        }


@dataclass(frozen=True)
class DeleteResult:
    """What a delete removed (or, as a dry run, would remove)."""

    predicate: str
    dry_run: bool
    version: int | None  # the delete's commit; None for a dry run or when nothing matched
    files: tuple[AffectedFile, ...]  # the files holding matching rows
    files_scanned: int  # files Spark read to count (the others were skipped by the log)
    files_skipped: int  # files of the partitions asked for that statistics ruled out
    files_added: int = 0  # the rewritten files (a file whose every row matched has none)
    attempts: int = 1

    @property
    def rows_deleted(self) -> int:
        return sum(f.rows_matching for f in self.files)

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(sorted({f.partition_id for f in self.files}))

    def to_json(self) -> dict[str, object]:
        return {
            "predicate": self.predicate,
            "dry_run": self.dry_run,
            "version": self.version,
            "rows_deleted": self.rows_deleted,
            "partitions": list(self.partitions),
            "files": [f.to_json() for f in self.files],
            "files_added": self.files_added,
            "files_scanned": self.files_scanned,
            "files_skipped": self.files_skipped,
        }


class _FilesMoved(Exception):
    """A file the delete rewrote was removed by a concurrent commit: find the files again."""


@dataclass(frozen=True)
class _Delete:
    """One delete: the table, the predicate and where it applies."""

    spark: SparkSession
    root: str
    name: str
    predicate: str
    selection: PartitionSelection
    partition_id: Callable[[PartitionValues], str]
    partition: str | None
    delete_id: str


def delete_rows(
    spark: SparkSession,
    root: str,
    predicate: str,
    *,
    selection: PartitionSelection | None = None,
    partition_id: Callable[[PartitionValues], str] | None = None,
    partition: str | None = None,
    dry_run: bool = False,
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> DeleteResult:
    """Delete the rows of the Delta table at `root` for which `predicate` is true, in one commit.

    Args:
        spark: the session that evaluates the predicate and rewrites the files.
        root: path of the Delta table.
        predicate: a Spark SQL condition over the table's columns, e.g. "user_id = 42".
        selection: the partitions to delete from (default: the whole table).
        partition_id: a partition's id given its values (a Dagster partition key): its Delta
            application transaction, so a concurrent writer of it conflicts, and what the
            result and the commit's `DeleteRecord` name. Default: `col=value/...`.
        partition: the partition key `selection` stands for, recorded in the commit.
        dry_run: only find the files and count their matching rows; commit nothing.
        table_name: name used in messages (default: the folder name).
        max_attempts: attempts when concurrent writers keep replacing the files.

    Raises:
        InvalidPredicateError: the predicate does not parse, is not a condition, or names a
            column the table lacks. Nothing was read or changed.
        PartlakeConfigError: there is no Delta table at `root`.
        CommitConflictError: concurrent writers kept changing the files; nothing was committed.
    """
    root = os.path.abspath(root)
    name = table_name or os.path.basename(root)
    if not table_exists(root):
        raise PartlakeConfigError(
            f"there is no Delta table for {name} at {root}; there are no rows to delete."
        )
    table = load_table(root, table_name=name)
    check_predicate(spark, arrow_schema(table), predicate, table_name=name)
    delete = _Delete(
        spark=spark,
        root=root,
        name=name,
        predicate=predicate,
        selection=selection or PartitionSelection.everything(),
        partition_id=partition_id or _default_partition_id,
        partition=partition,
        delete_id=uuid.uuid4().hex,
    )
    for attempt in range(1, max_attempts + 1):
        try:
            return replace(_delete_once(delete, dry_run=dry_run), attempts=attempt)
        except _FilesMoved:
            continue
    raise CommitConflictError(
        f"could not delete from table {name}: concurrent writers kept replacing the files that "
        f"hold matching rows for {max_attempts} attempts. Nothing was deleted; run it again when "
        "they are done."
    )


def check_predicate(
    spark: SparkSession, schema: pa.Schema, predicate: str, *, table_name: str
) -> None:
    """Spark parses and resolves `predicate` against `schema` (no data is read).

    Raises:
        InvalidPredicateError: it does not parse, is not a boolean condition, or names a column
            the table lacks; the message names the fix.
    """
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.sql import functions as F

    columns = ", ".join(schema.names)
    if not predicate.strip():
        raise InvalidPredicateError(
            f"the predicate of the delete from {table_name} is empty; give a condition over its "
            f'columns ({columns}), e.g. --where "user_id = 42". Nothing was deleted.'
        )
    empty = spark.createDataFrame([], arrow_to_spark(schema))
    try:
        with _quiet_query_errors():
            kind = empty.select(F.expr(predicate).alias("_matches")).schema["_matches"].dataType
            if kind.typeName() == "boolean":
                # `.schema` forces the analysis (lazy under Spark Connect): an aggregate fails.
                empty.where(F.expr(predicate)).schema  # noqa: B018
    except ParseException as error:
        raise InvalidPredicateError(
            f"the predicate {predicate!r} of the delete from {table_name} does not parse as a "
            f'Spark SQL condition ({_first_line(error)}); write it like "user_id = 42" or '
            "\"region = 'eu' AND user_id IN (1, 2)\". Nothing was deleted."
        ) from error
    except AnalysisException as error:
        missing = _unresolved_column(error)
        if missing is not None:
            raise InvalidPredicateError(
                f"the predicate {predicate!r} of the delete from {table_name} names column "
                f"{missing}, which the table does not have (columns: {columns}); fix the "
                "column name. Nothing was deleted."
            ) from error
        raise InvalidPredicateError(
            f"the predicate {predicate!r} cannot be evaluated on the rows of {table_name} "
            f"({_first_line(error)}); use a condition over single rows of its columns "
            f"({columns}). Nothing was deleted."
        ) from error
    if kind.typeName() != "boolean":
        raise InvalidPredicateError(
            f"the predicate {predicate!r} of the delete from {table_name} is a "
            f"{kind.simpleString()}, not a condition; compare it with something, e.g. "
            '"user_id = 42". Nothing was deleted.'
        )


@contextmanager
def _quiet_query_errors() -> Iterator[None]:
    """PySpark logs each analysis error with its JVM stack trace before raising it; the error
    raised here says what is wrong, so that log is kept off the user's terminal."""
    from pyspark.logger import PySparkLogger

    loggers = [PySparkLogger.getLogger(n) for n in _QUERY_LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, was in zip(loggers, before, strict=True):
            logger.disabled = was


_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _unresolved_column(error: Exception) -> str | None:
    condition = getattr(error, "getCondition", lambda: None)() or ""
    if not condition.startswith("UNRESOLVED_COLUMN"):
        return None
    parameters = getattr(error, "getMessageParameters", lambda: None)() or {}
    return str(parameters.get("objectName") or "?")


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _delete_once(delete: _Delete, *, dry_run: bool) -> DeleteResult:
    """Steps 2-4 of the module docstring, on the table as it is now."""
    table = load_table(delete.root, table_name=delete.name)
    schema = arrow_schema(table)
    candidates, skipped = _candidates(table, schema, delete)
    counts = _matching_rows(delete, schema, candidates)
    matched = [f for f in candidates if counts.get(_normal(f.absolute_path(delete.root)), 0)]
    affected = tuple(
        AffectedFile(
            path=unquote(f.path),
            partition_id=delete.partition_id(f.partition_values),
            rows=f.num_records or 0,
            rows_matching=counts[_normal(f.absolute_path(delete.root))],
        )
        for f in matched
    )
    result = DeleteResult(
        predicate=delete.predicate,
        dry_run=dry_run,
        version=None,
        files=affected,
        files_scanned=len(candidates),
        files_skipped=skipped,
    )
    if dry_run or not matched:
        return result
    staged = _rewrite(delete, table, schema, matched)
    publish_staged(staged)
    with discarded_on_failure(staged):
        version = _commit(delete, staged, matched, result)
    return replace(result, version=version, files_added=len(staged.files))


def _candidates(
    table: DeltaTable, schema: pa.Schema, delete: _Delete
) -> tuple[list[LiveFile], int]:
    """The live files in the selection that may hold a matching row, and how many the log
    ruled out."""
    partition_by = list(table.metadata().partition_columns)
    test = file_test(delete.predicate, schema.names)
    stats = [c for c in test[1] if c not in partition_by] if test is not None else []
    files = [f for f in live_files(table, delete.selection, stats) if f.num_records != 0]
    if test is None:
        return files, 0
    types = delta_types(schema)
    kept = [f for f in files if test[0](_bounds(f, partition_by, types))]
    return kept, len(files) - len(kept)


def _bounds(f: LiveFile, partition_by: Sequence[str], types: Mapping[str, DeltaType]) -> Bounds:
    """What the log says of a file's values: its partition values, its statistics."""
    bounds: dict[str, ColumnBounds] = {}
    for column in partition_by:
        value = _typed(f.partition_values.get(column), types.get(column))
        bounds[column] = ColumnBounds(value, value, value is None, value is not None)
    for column, low in f.min_values.items():
        high = f.max_values.get(column)
        nulls = f.null_count.get(column)
        everything_null = nulls is not None and f.num_records is not None
        bounds[column] = ColumnBounds(
            low,
            high,
            may_be_null=nulls is None or nulls > 0,
            may_be_set=not (everything_null and nulls == f.num_records),
        )
    for column, nulls in f.null_count.items():
        if column not in bounds and f.num_records is not None:
            # Statistics without min/max: only nulls (or no nulls) are known.
            bounds[column] = ColumnBounds(
                None, None, may_be_null=nulls > 0, may_be_set=nulls < f.num_records
            )
    return bounds


def _typed(value: str | None, delta_type: DeltaType | None) -> int | str | None:
    """A partition value as the type its column has, where it compares exactly."""
    if value is None:
        return None
    if delta_type in ("integer", "long", "short", "byte"):
        try:
            return int(value)
        except ValueError:
            return None
    if delta_type == "string" or delta_type == "date":
        return value
    return None


def _read(delete: _Delete, schema: pa.Schema, files: Sequence[LiveFile]) -> DataFrame:
    """Spark reads `files` with the table's schema, partition columns from their folders."""
    uris = ["file://" + f.absolute_path(delete.root) for f in files]
    return (
        delete.spark.read.schema(arrow_to_spark(schema))
        .option("basePath", "file://" + delete.root)
        .parquet(*uris)
    )


def _matches(predicate: str) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.expr(predicate), F.lit(False))


def _matching_rows(delete: _Delete, schema: pa.Schema, files: Sequence[LiveFile]) -> dict[str, int]:
    """Per file (normalized absolute path), its rows matching the predicate (one Spark job)."""
    from pyspark.sql import functions as F

    if not files:
        return {}
    rows = (
        _read(delete, schema, files)
        .where(_matches(delete.predicate))
        .groupBy(F.col("_metadata.file_path").alias("path"))
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    )
    return {_normal(row["path"]): int(row["n"]) for row in rows}


def _normal(path: str) -> str:
    """A file's absolute path from a URI or path, decoded, for comparing the two."""
    path = unquote(path.removeprefix("file:"))
    while path.startswith("//"):
        path = path[1:]
    return os.path.normpath(path)


def _rewrite(
    delete: _Delete, table: DeltaTable, schema: pa.Schema, files: Sequence[LiveFile]
) -> StagedWrite:
    """Spark: the rows of `files` that do not match, staged like any write (not committed)."""
    partition_by = tuple(table.metadata().partition_columns)
    # The rewritten files keep the statistics the old ones had (a merge's key, scd2's valid_to).
    stats = _stats_columns(table, files, schema, partition_by)
    columns = [c for c in schema.names if c not in partition_by] + list(partition_by)
    remaining = _read(delete, schema, files).where(~_matches(delete.predicate)).select(*columns)
    stage = new_staging_folder(delete.root)
    write_parquet_files(remaining, stage, partition_by)
    with discarded_on_failure(stage):
        written = [f for f in staged_files(stage, partition_by, stats) if f.num_records]
    return StagedWrite(
        root=delete.root,
        table_name=delete.name,
        staging_dir=stage,
        files=tuple(written),
        schema=schema,
        partition_by=partition_by,
        selection=delete.selection,
        partition_ids=(),
        removal="files",
        remove_files=tuple(files),
    )


def _stats_columns(
    table: DeltaTable, files: Sequence[LiveFile], schema: pa.Schema, partition_by: Sequence[str]
) -> list[str]:
    """The columns whose statistics the log has for any of `files`."""
    wanted = {f.path for f in files}
    others = [c for c in schema.names if c not in partition_by]
    found: set[str] = set()
    for live in live_files(table, PartitionSelection.everything(), others):
        if live.path in wanted:
            found.update(live.min_values, live.null_count)
    return sorted(found)


def _commit(
    delete: _Delete, staged: StagedWrite, removed: Sequence[LiveFile], result: DeleteResult
) -> int | None:
    """One commit removing `removed` and adding the staged files; retried on conflicts while
    every removed file is still live.

    Raises:
        _FilesMoved: a removed file is no longer live (the caller starts over).
    """
    from deltalake.exceptions import DeltaError
    from deltalake.transaction import AddAction, CommitProperties, Transaction

    record = DeleteRecord(
        predicate=delete.predicate,
        rows_deleted=result.rows_deleted,
        files_removed=len(removed),
        files_added=len(staged.files),
        partitions=result.partitions,
        delete_id=delete.delete_id,
        partition=delete.partition,
    )
    wanted = {f.path for f in removed}
    for attempt in range(1, DEFAULT_MAX_ATTEMPTS + 1):
        table = load_table(delete.root, table_name=delete.name)
        if not wanted <= {f.path for f in live_files(table, delete.selection)}:
            discard_published(staged)
            raise _FilesMoved
        now_ms = int(time.time() * 1000)
        adds = [
            AddAction(
                path=f.relative_path,
                size=f.size,
                partition_values=f.partition_values,
                # lastUpdated moves: the planner sees the partitions changed (out_of_band).
                modification_time=now_ms,
                data_change=True,
                stats=f.stats_json(),
            )
            for f in staged.files
        ]
        properties = CommitProperties(
            custom_metadata=record.to_commit_info(),
            app_transactions=[
                *(Transaction(_txn_app_id(pid), now_ms) for pid in result.partitions),
                *files_transactions(removed, now_ms),
            ],
        )
        before = table.version()
        try:
            conflict = commit_or_conflict(
                table,
                [*adds, *(remove_action(f, now_ms) for f in removed)],
                partition_by=staged.partition_by,
                properties=properties,
                attempt=attempt,
            )
        except DeltaError as error:
            raise unreadable(delete.root, error, table_name=delete.name) from error
        if conflict is None:
            return maintenance_version(delete.root, since=before + 1, commit_id=delete.delete_id)
    discard_published(staged)
    raise _FilesMoved


def _default_partition_id(values: PartitionValues) -> str:
    if not values:
        return WHOLE_TABLE_ID
    return "/".join(f"{c}={HIVE_NULL if v is None else v}" for c, v in values.items())
