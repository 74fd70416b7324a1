"""Read exactly some partitions of a Delta table into Spark, without the Delta JARs.

delta-rs resolves the live files of the selected partitions from the log; Spark reads those
files in parallel with the table's schema and takes the partition columns from the `col=value`
folders (the layout our writer and Spark's own Delta writer use). The driver sees file names only.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from deltalake import DeltaTable

from dagster_partlake.delta.history import load_version, resolve_version
from dagster_partlake.delta.schema import arrow_to_spark, delta_types
from dagster_partlake.delta.selection import HIVE_NULL, PartitionSelection
from dagster_partlake.delta.table import (
    LiveFile,
    arrow_schema,
    live_files,
    load_table,
    table_exists,
)
from dagster_partlake.errors import PartlakeConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from dagster_partlake.delta.schema import DeltaType


@dataclass(frozen=True)
class ReadResult:
    df: DataFrame
    version: int
    files: tuple[LiveFile, ...]

    @property
    def num_files(self) -> int:
        return len(self.files)


@dataclass(frozen=True)
class TableSnapshot:
    """One loaded version of a table: what a reader needs before choosing partitions."""

    root: str
    name: str
    table: DeltaTable
    schema: pa.Schema

    @property
    def column_types(self) -> dict[str, DeltaType]:
        return delta_types(self.schema)


def open_table(
    root: str,
    *,
    table_name: str | None = None,
    version: int | None = None,
    timestamp: dt.datetime | str | None = None,
) -> TableSnapshot:
    """Load the Delta table at `root`: its latest version, or the one asked for.

    Args:
        root: path of the table.
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
    root = os.path.abspath(root)
    name = table_name or os.path.basename(root)
    if not table_exists(root):
        raise PartlakeConfigError(
            f"there is no Delta table for {name} at {root}; materialize it first (or, for a "
            "source, run the system that writes it)."
        )
    wanted = resolve_version(root, version=version, timestamp=timestamp, table_name=name)
    if wanted is None:
        table = load_table(root, table_name=name)
    else:
        table = load_version(root, wanted, table_name=name)
    return TableSnapshot(root, name, table, arrow_schema(table))


def read_partitions(
    spark: SparkSession,
    root: str,
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
    spark: SparkSession, snapshot: TableSnapshot, selection: PartitionSelection
) -> ReadResult:
    """Spark DataFrame of the rows in `selection` of a loaded table version.

    Raises:
        PartlakeConfigError: the selected files are not laid out in `col=value/` folders.
    """
    return read_files(spark, snapshot, live_files(snapshot.table, selection))


def read_files(
    spark: SparkSession, snapshot: TableSnapshot, files: Sequence[LiveFile]
) -> ReadResult:
    """Spark DataFrame of exactly `files` of a loaded table version (e.g. those added since a
    version, `dagster_partlake.delta.increments`).

    Raises:
        PartlakeConfigError: a file is not laid out in `col=value/` folders.
    """
    root, name, table = snapshot.root, snapshot.name, snapshot.table
    schema = arrow_to_spark(snapshot.schema)
    columns = [field.name for field in schema.fields]
    if not files:
        return ReadResult(spark.createDataFrame([], schema), table.version(), ())
    paths = []
    for f in files:
        expected = [
            f"{col}={HIVE_NULL if val is None else val}" for col, val in f.partition_values.items()
        ]
        if _folders(f.path) != expected:
            raise PartlakeConfigError(
                f"file {f.path} of table {name} is not in the folder '{'/'.join(expected)}/' "
                "under the table root, so Spark cannot restore its partition values from the "
                "path; rewrite the table with dagster_partlake or Spark."
            )
        paths.append("file://" + f.absolute_path(root))
    df = spark.read.schema(schema).option("basePath", "file://" + root).parquet(*paths)
    return ReadResult(df.select(*columns), table.version(), tuple(files))


def _folders(log_path: str) -> list[str]:
    """The folders of a file's path as stored in the log (URL-encoded there, and partition
    values Hive-escaped by the writer): 'region=eu%2F2/f.parquet' -> ['region=eu/2']."""
    return [unquote(unquote(segment)) for segment in log_path.split("/")[:-1]]
