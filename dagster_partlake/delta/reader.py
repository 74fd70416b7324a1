"""Read exactly some partitions of a Delta table into Spark, without the Delta JARs.

delta-rs resolves the live files of the selected partitions from the log; Spark reads those
files in parallel with the table's schema and takes the partition columns from the `col=value`
folders (the layout our writer and Spark's own Delta writer use). The driver sees file names only.

Two table features make a table's Parquet files say something else than the table: deletion
vectors (a file still holds the rows deleted since, which its vector lists) and column mapping
(a file's columns have physical names, and its folder is no `col=value/`). Such a table is read
through Spark's own Delta (`format("delta")` at the snapshot's version, filtered to the
selection or to the files asked for) when Delta is on the session, and refused otherwise with
`TableFeatureError` naming the feature. Other tables keep the plain Parquet read, which needs no
Delta and plans no Delta snapshot (measured: `docs/guides/delta-spark.md`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from dagster_partlake.delta.native import DELTA_EXTENSION, delta_on_session, replace_where
from dagster_partlake.delta.partition_text import normalized
from dagster_partlake.delta.schema import arrow_to_spark
from dagster_partlake.delta.selection import HIVE_NULL, PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot, open_snapshot
from dagster_partlake.delta.table import LiveFile
from dagster_partlake.errors import PartlakeConfigError, TableFeatureError
from dagster_partlake.storage.errors import spark_read_error
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dagster_partlake.delta.schema import DeltaType

# One loaded version of a table (the name this module's readers have always used).
TableSnapshot = Snapshot


@dataclass(frozen=True)
class ReadResult:
    df: DataFrame
    version: int
    files: tuple[LiveFile, ...]

    @property
    def num_files(self) -> int:
        return len(self.files)


def open_table(
    root: str | TableLocation,
    *,
    table_name: str | None = None,
    version: int | None = None,
    timestamp: dt.datetime | str | None = None,
) -> Snapshot:
    """Load the Delta table at `root`: its latest version, or the one asked for.

    Args:
        root: path or location of the table.
        table_name: name used in error messages (default: the folder name).
        version: load this version (time travel).
        timestamp: load the newest version committed at or before this time (ISO 8601 string
            or datetime; without a time zone: UTC).

    Raises:
        ValueError: both `version` and `timestamp` are given.
        PartlakeConfigError: there is no Delta table at `root`.
        PartlakeError: the version or timestamp is not available in the table's log.
        TableUnreadableError: its log cannot be read.
    """
    snapshot = open_snapshot(root, table_name=table_name, version=version, timestamp=timestamp)
    assert snapshot is not None
    return snapshot


def read_partitions(
    spark: SparkSession,
    root: str | TableLocation,
    selection: PartitionSelection,
    *,
    table_name: str | None = None,
    version: int | None = None,
    timestamp: dt.datetime | str | None = None,
) -> ReadResult:
    """Spark DataFrame of the rows in `selection` of the Delta table at `root`: at its latest
    version, or at `version` / `timestamp` (see `open_table`)."""
    snapshot = open_table(root, table_name=table_name, version=version, timestamp=timestamp)
    return read_snapshot(spark, snapshot, selection)


def read_snapshot(
    spark: SparkSession, snapshot: Snapshot, selection: PartitionSelection
) -> ReadResult:
    """Spark DataFrame of the rows in `selection` of a loaded table version.

    Raises:
        PartlakeConfigError: the selected files are not laid out in `col=value/` folders.
    """
    return read_files(spark, snapshot, snapshot.live_files(selection), selection=selection)


def read_files(
    spark: SparkSession,
    snapshot: Snapshot,
    files: Sequence[LiveFile],
    *,
    selection: PartitionSelection | None = None,
) -> ReadResult:
    """Spark DataFrame of exactly `files` of a loaded table version (e.g. those added since a
    version, `dagster_partlake.delta.increments`); `selection`: they are all the live files of
    that selection (a Delta read then filters by partition, not by file).

    Raises:
        PartlakeConfigError: a file is not laid out in `col=value/` folders.
        TableFeatureError: the table needs Spark's Delta to be read and the session lacks it.
        StorageError: Spark could not reach the table's object store (naming the table).
    """
    schema = arrow_to_spark(snapshot.schema)
    columns = [field.name for field in schema.fields]
    if not files:
        return ReadResult(spark.createDataFrame([], schema), snapshot.version, ())
    features = delta_read_features(snapshot)
    if features:
        df = _delta_read(spark, snapshot, files, selection, features)
        return ReadResult(df.select(*columns), snapshot.version, tuple(files))
    types = snapshot.column_types
    for f in files:
        expected = [
            f"{col}={HIVE_NULL if val is None else val}" for col, val in f.partition_values.items()
        ]
        if not _same_folders(_folders(f.path), expected, types):
            raise PartlakeConfigError(
                f"file {f.path} of table {snapshot.name} is not in the folder "
                f"'{'/'.join(expected)}/' under the table root, so Spark cannot restore its "
                "partition values from the path; rewrite the table with dagster_partlake or Spark."
            )
    location = snapshot.location
    try:
        df = (
            spark.read.schema(schema)
            .option("basePath", location.spark_uri())
            .parquet(*location.spark_uris([f.relative_path for f in files]))
        )
    except Exception as error:
        unreachable = spark_read_error(location, snapshot.name, error)
        if unreachable is None:
            raise
        raise unreachable from error
    return ReadResult(df.select(*columns), snapshot.version, tuple(files))


def _folders(log_path: str) -> list[str]:
    """The folders of a file's path as stored in the log (URL-encoded there, and partition
    values Hive-escaped by the writer): 'region=eu%2F2/f.parquet' -> ['region=eu/2']."""
    return [unquote(unquote(segment)) for segment in log_path.split("/")[:-1]]


def _same_folders(found: list[str], expected: list[str], types: Mapping[str, DeltaType]) -> bool:
    """Whether a file's folders name its partition values: the same to the letter, or the same
    value as partlake keys it (`partition_text.normalized`: Spark's Delta writes a timestamp's
    folder as `at=2024-01-01 01:30:00` where the log says `2024-01-01 01:30:00.000000`, and
    Spark reads the folder back as that value)."""
    if found == expected:
        return True
    if len(found) != len(expected):
        return False
    for folder, wanted in zip(found, expected, strict=True):
        col, _, value = folder.partition("=")
        wanted_col, _, wanted_value = wanted.partition("=")
        if col != wanted_col or col not in types:
            return False
        if folder != wanted and normalized([value], types[col]) != [wanted_value]:
            return False
    return True


def delta_read_features(snapshot: Snapshot) -> list[str]:
    """The features of the table that make its Parquet files differ from its rows, each with
    what says so (empty: plain Parquet reads it)."""
    found = []
    configuration = dict(snapshot.table.metadata().configuration)
    mode = str(configuration.get("delta.columnMapping.mode") or "none").lower()
    if mode != "none":
        found.append(f"column mapping (delta.columnMapping.mode={mode})")
    readers = snapshot.table.protocol().reader_features or []
    if "deletionVectors" in readers:
        found.append("deletion vectors (reader feature deletionVectors)")
    return found


def _delta_read(
    spark: SparkSession,
    snapshot: Snapshot,
    files: Sequence[LiveFile],
    selection: PartitionSelection | None,
    features: Sequence[str],
) -> DataFrame:
    """`files` of the snapshot read by Spark's Delta at the snapshot's version.

    Raises:
        TableFeatureError: Spark's Delta is not on the session.
    """
    from pyspark.sql import functions as F

    if not delta_on_session(spark):
        raise TableFeatureError(
            f"table {snapshot.name} at {snapshot.location.uri} uses {' and '.join(features)}: "
            "its Parquet files are not its rows (deleted rows still in them, or columns under "
            "physical names), so partlake reads it through Spark's Delta, which this Spark "
            f"session lacks (its extension {DELTA_EXTENSION}). Run `make install` (it fetches "
            "the Delta JARs SparkResource loads), or rewrite the table without those features "
            "(REORG TABLE ... APPLY (PURGE) and delta.enableDeletionVectors=false)."
        )
    df = (
        spark.read.format("delta")
        .option("versionAsOf", snapshot.version)
        .load(snapshot.location.spark_uri())
    )
    if selection is not None:
        predicate = (
            replace_where(selection, snapshot.column_types) if selection.boxes != () else "false"
        )
        return df if predicate is None else df.where(predicate)
    # By file name: Delta's and partlake's writers name every file uniquely, and a name has
    # none of the characters a path's URI encodes (partition values, a user's folders).
    names = sorted({f.relative_path.rsplit("/", 1)[-1] for f in files})
    return df.where(F.col("_metadata.file_name").isin(names))
