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

Like every writer it commits through the one transaction (`delta.transaction`), naming one Delta
application transaction per touched partition, so a concurrent writer of the same partition
conflicts; if a file it rewrote was replaced meanwhile, steps 2-4 run again on the newer snapshot,
within the transaction's attempts. The delete is thus one atomic commit or nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.files import WrittenFiles, write_files
from dagster_partlake.delta.payload import DeleteRecord
from dagster_partlake.delta.schema import arrow_to_spark, delta_types
from dagster_partlake.delta.selection import PartitionSelection, table_partition_id
from dagster_partlake.delta.skipping import Bounds, ColumnBounds, file_test
from dagster_partlake.delta.snapshot import Snapshot, open_snapshot
from dagster_partlake.delta.table import LiveFile
from dagster_partlake.delta.transaction import Actions, commit
from dagster_partlake.errors import InvalidPredicateError, PartlakeConfigError
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    import pyarrow as pa
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


@dataclass(frozen=True)
class _Delete:
    """One delete: the table, the predicate and where it applies."""

    spark: SparkSession
    location: TableLocation
    name: str
    predicate: str
    selection: PartitionSelection
    partition_id: Callable[[PartitionValues], str]
    partition: str | None
    delete_id: str


def delete_rows(
    spark: SparkSession,
    root: str | TableLocation,
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
        root: path or location of the Delta table.
        predicate: a Spark SQL condition over the table's columns, e.g. "user_id = 42".
        selection: the partitions to delete from (default: the whole table).
        partition_id: a partition's id given its values (a Dagster partition key): its Delta
            application transaction, so a concurrent writer of it conflicts, and what the
            result and the commit's `DeleteRecord` name. Default: `col=value/...`.
        partition: the partition key `selection` stands for, recorded in the commit.
        dry_run: only find the files and count their matching rows; commit nothing.
        table_name: name used in messages (default: the folder name).
        max_attempts: commit attempts while concurrent writers keep changing the table (each
            attempt on a newer snapshot finds the files again if a matched one was replaced).

    Raises:
        InvalidPredicateError: the predicate does not parse, is not a condition, or names a
            column the table lacks. Nothing was read or changed.
        PartlakeConfigError: there is no Delta table at `root`.
        CommitConflictError: concurrent writers kept changing the files; nothing was committed.
    """
    location = as_location(root)
    name = table_name or location.name
    snapshot = open_snapshot(location, table_name=name, must_exist=False)
    if snapshot is None:
        raise PartlakeConfigError(
            f"there is no Delta table for {name} at {location}; there are no rows to delete."
        )
    check_predicate(spark, snapshot.schema, predicate, table_name=name)
    delete = _Delete(
        spark=spark,
        location=location,
        name=name,
        predicate=predicate,
        selection=selection or PartitionSelection.everything(),
        partition_id=partition_id or table_partition_id,
        partition=partition,
        delete_id=uuid.uuid4().hex,
    )
    work = _Work(delete)
    found = work.find(snapshot)
    if dry_run or not found.matched:
        return replace(found.result, dry_run=dry_run)
    try:
        committed = commit(
            location,
            snapshot,
            work.actions,
            payload=work.payload,
            name=name,
            max_attempts=max_attempts,
        )
    except _NothingLeft:
        return work.found.result if work.found else found.result
    except BaseException:
        work.discard()
        raise
    done = work.found
    assert done is not None and done.rewritten is not None
    return replace(
        done.result,
        version=committed.version,
        files_added=len(done.rewritten.files),
        attempts=committed.attempts,
    )


class _NothingLeft(Exception):  # noqa: N818 - an outcome
    """On a newer snapshot, no file holds a matching row any more: nothing to commit."""


@dataclass(frozen=True)
class _Found:
    """The files holding matching rows on one snapshot, and their rewrite (once made)."""

    paths: frozenset[str]  # their log paths
    matched: tuple[LiveFile, ...]
    result: DeleteResult
    rewritten: WrittenFiles | None = None


class _Work:
    """The delete as the transaction asks for it: its files found and rewritten on the
    transaction's snapshot, and again on a newer one when a matched file was replaced."""

    def __init__(self, delete: _Delete) -> None:
        self.delete = delete
        self.found: _Found | None = None

    def find(self, snapshot: Snapshot) -> _Found:
        """Steps 2-3 of the module docstring on `snapshot` (no rewrite)."""
        self.found = _find(self.delete, snapshot)
        return self.found

    def actions(self, snapshot: Snapshot) -> Actions:
        found = self.found
        live = {f.path for f in snapshot.live_files(self.delete.selection)}
        if found is None or not found.paths <= live:
            self.discard()
            found = self.find(snapshot)
            if not found.matched:
                raise _NothingLeft
        if found.rewritten is None:
            found = self.found = replace(found, rewritten=_rewrite(self.delete, snapshot, found))
        assert found.rewritten is not None
        return Actions(
            adds=found.rewritten.files,
            removes=found.matched,
            partition_ids=found.result.partitions,
        )

    def payload(self, commit_id: str, now_ms: int) -> Mapping[str, object]:
        found = self.found
        assert found is not None and found.rewritten is not None
        record = DeleteRecord(
            predicate=self.delete.predicate,
            rows_deleted=found.result.rows_deleted,
            files_removed=len(found.matched),
            files_added=len(found.rewritten.files),
            partitions=found.result.partitions,
            delete_id=self.delete.delete_id,
            partition=self.delete.partition,
        )
        return record.to_commit_info()

    def discard(self) -> None:
        if self.found is not None and self.found.rewritten is not None:
            self.found.rewritten.discard()


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


def _find(delete: _Delete, snapshot: Snapshot) -> _Found:
    """The files that hold matching rows, with their counts (steps 2-3)."""
    schema = snapshot.schema
    candidates, skipped = _candidates(snapshot, schema, delete)
    counts = _matching_rows(delete, schema, candidates)
    matched = tuple(f for f in candidates if counts.get(f.relative_path, 0))
    affected = tuple(
        AffectedFile(
            path=f.relative_path,
            partition_id=delete.partition_id(f.partition_values),
            rows=f.num_records or 0,
            rows_matching=counts[f.relative_path],
        )
        for f in matched
    )
    result = DeleteResult(
        predicate=delete.predicate,
        dry_run=False,
        version=None,
        files=affected,
        files_scanned=len(candidates),
        files_skipped=skipped,
    )
    return _Found(frozenset(f.path for f in matched), matched, result)


def _candidates(
    snapshot: Snapshot, schema: pa.Schema, delete: _Delete
) -> tuple[list[LiveFile], int]:
    """The live files in the selection that may hold a matching row, and how many the log
    ruled out."""
    partition_by = list(snapshot.partition_by)
    test = file_test(delete.predicate, schema.names)
    stats = [c for c in test[1] if c not in partition_by] if test is not None else []
    files = [f for f in snapshot.live_files(delete.selection, stats) if f.num_records != 0]
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
    location = delete.location
    return (
        delete.spark.read.schema(arrow_to_spark(schema))
        .option("basePath", location.spark_uri())
        .parquet(*location.spark_uris([f.relative_path for f in files]))
    )


def _matches(predicate: str) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.expr(predicate), F.lit(False))


def _matching_rows(delete: _Delete, schema: pa.Schema, files: Sequence[LiveFile]) -> dict[str, int]:
    """Per file (its path relative to the table), its rows matching the predicate (one Spark
    job)."""
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
    from urllib.parse import unquote

    by_uri = {_one_slash(delete.location.spark_uri(f.relative_path)): f for f in files}
    return {
        by_uri[path].relative_path: int(row["n"])
        for row in rows
        # Spark's `_metadata.file_path` is URI-encoded; the names we gave Spark were not.
        if (path := _one_slash(unquote(row["path"]))) in by_uri
    }


def _one_slash(uri: str) -> str:
    """A URI with one slash after its scheme's colon (`file:///a` and `file:/a` alike)."""
    scheme, sep, rest = uri.partition(":")
    return scheme + sep + "/" + rest.lstrip("/") if sep else uri


def _rewrite(delete: _Delete, snapshot: Snapshot, found: _Found) -> WrittenFiles:
    """Spark: the rows of the matched files that do not match, written (not committed)."""
    schema, partition_by = snapshot.schema, snapshot.partition_by
    # The rewritten files keep the statistics the old ones had (a merge's key, scd2's valid_to).
    stats = _stats_columns(snapshot, found.matched, schema, partition_by)
    columns = [c for c in schema.names if c not in partition_by] + list(partition_by)
    remaining = _read(delete, schema, found.matched).where(~_matches(delete.predicate))
    return write_files(
        remaining.select(*columns),
        delete.location,
        partition_by=partition_by,
        schema=schema,
        stats_columns=stats,
    )


def _stats_columns(
    snapshot: Snapshot, files: Sequence[LiveFile], schema: pa.Schema, partition_by: Sequence[str]
) -> list[str]:
    """The columns whose statistics the log has for any of `files`."""
    wanted = {f.path for f in files}
    others = [c for c in schema.names if c not in partition_by]
    found: set[str] = set()
    for live in snapshot.live_files(PartitionSelection.everything(), others):
        if live.path in wanted:
            found.update(live.min_values, live.null_count)
    return sorted(found)
