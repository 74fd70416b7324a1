"""Read exactly some partitions of a Delta table into Spark, without the Delta JARs.

delta-rs resolves the live files of the selected partitions from the log; Spark reads those
files in parallel with the table's schema and takes the partition columns from the `col=value`
folders (the layout our writer and Spark's own Delta writer use). The driver sees file names only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from deltalake import DeltaTable

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
    def column_types(self) -> dict[str, Any]:
        return delta_types(self.schema)


def open_table(root: str, *, table_name: str | None = None) -> TableSnapshot:
    """Load the latest version of the Delta table at `root`.

    Raises:
        PartlakeConfigError: there is no Delta table at `root`.
        TableUnreadableError: its log cannot be read.
    """
    root = os.path.abspath(root)
    name = table_name or os.path.basename(root)
    if not table_exists(root):
        raise PartlakeConfigError(
            f"there is no Delta table for {name} at {root}; materialize it first (or, for a "
            "source, run the system that writes it)."
        )
    table = load_table(root, table_name=name)
    return TableSnapshot(root, name, table, arrow_schema(table))


def read_partitions(
    spark: SparkSession,
    root: str,
    selection: PartitionSelection,
    *,
    table_name: str | None = None,
) -> ReadResult:
    """Spark DataFrame of the rows in `selection` of the Delta table at `root`."""
    return read_snapshot(spark, open_table(root, table_name=table_name), selection)


def read_snapshot(
    spark: SparkSession, snapshot: TableSnapshot, selection: PartitionSelection
) -> ReadResult:
    """Spark DataFrame of the rows in `selection` of a loaded table version.

    Raises:
        PartlakeConfigError: the selected files are not laid out in `col=value/` folders.
    """
    table = snapshot.table
    files = live_files(table, selection)
    return ReadResult(files_frame(spark, snapshot, files), table.version(), tuple(files))


def files_frame(
    spark: SparkSession, snapshot: TableSnapshot, files: Sequence[LiveFile]
) -> DataFrame:
    """Spark DataFrame of the rows of some live files of a loaded table version.

    Raises:
        PartlakeConfigError: a file is not laid out in its `col=value/` folders.
    """
    root, name = snapshot.root, snapshot.name
    schema = arrow_to_spark(snapshot.schema)
    columns = [field.name for field in schema.fields]
    if not files:
        return spark.createDataFrame([], schema)
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
    return df.select(*columns)


def _folders(log_path: str) -> list[str]:
    """The folders of a file's path as stored in the log (URL-encoded there, and partition
    values Hive-escaped by the writer): 'region=eu%2F2/f.parquet' -> ['region=eu/2']."""
    return [unquote(unquote(segment)) for segment in log_path.split("/")[:-1]]
