"""A Spark streaming source over the new commits of a Delta table, without the Delta JARs.

Spark's Python data source API (pyspark 4) with partlake's log-based reads
(`dagster_partlake.delta.increments`): an offset is a table version; a micro-batch from version
`a` to `b` reads the files added in the commits after `a` up to `b` that are still live at `b`
(the first micro-batch reads every file live at its version). A commit in between that removed or
rewrote rows (a replace, a delete; not a compaction) makes the batch fail: its rows cannot be
told apart from those already read. Spark keeps the offsets in the query's checkpoint, so a
restarted query goes on from the last batch it completed.

The reader runs in Spark's Python workers (`PYSPARK_PYTHON`, which `SparkResource` sets to its
own interpreter): it reads the log's JSON commits and Parquet files with pyarrow, and hands
Spark Arrow record batches. Register it once per session with `register(spark)`, then
`spark.readStream.format(NAME).schema(...).option("path", root).load()`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from dagster_partlake.errors import PartlakeError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import ReadLimit
    from pyspark.sql.types import StructType

NAME = "partlake_delta"
START = -1  # the offset before the first version: the first batch reads the whole table


class StreamSourceError(PartlakeError):
    """A streamed table removed or rewrote rows, or lost the commits a batch needs."""


class _File(InputPartition):
    """One Parquet file of a micro-batch, with its partition values."""

    def __init__(self, path: str, partition_values: dict[str, str | None]) -> None:
        self.path = path
        self.partition_values = partition_values


class DeltaCommitsSource(DataSource):
    """`spark.readStream.format("partlake_delta").schema(s).option("path", root).load()`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        raise StreamSourceError(
            "the partlake_delta stream source needs the table's schema: pass it with "
            ".schema(...) (the IO manager does)."
        )

    def streamReader(self, schema: StructType) -> DeltaCommitsReader:
        path = self.options.get("path")
        if not path:
            raise StreamSourceError("the partlake_delta stream source needs option 'path'.")
        return DeltaCommitsReader(str(path), schema)


class DeltaCommitsReader(DataSourceStreamReader):
    """Offsets `{"version": v}` over the table at `root`."""

    def __init__(self, root: str, schema: StructType) -> None:
        self.root = os.path.abspath(root)
        self.schema = schema

    def initialOffset(self) -> dict[str, int]:
        return {"version": START}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        from dagster_partlake.delta.table import log_versions

        versions = log_versions(self.root)
        return {"version": versions[-1] if versions else start["version"]}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        since, until = int(start["version"]), int(end["version"])
        if until <= since:
            return []
        return [_File(path, values) for path, values in batch_files(self.root, since, until)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _File)
        yield from read_file(partition.path, partition.partition_values, self.schema)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the table's files stay, Spark's checkpoint holds the offset."""


def batch_files(root: str, since: int, until: int) -> list[tuple[str, dict[str, str | None]]]:
    """The files of the micro-batch (since, until]: (absolute path, partition values).

    Raises:
        StreamSourceError: rows were removed or rewritten in between, or commits are gone.
    """
    from urllib.parse import unquote

    from dagster_partlake.delta.increments import files_added

    if since == START:
        from deltalake import DeltaTable

        from dagster_partlake.delta.selection import PartitionSelection
        from dagster_partlake.delta.table import live_files

        files = live_files(DeltaTable(root, version=until), PartitionSelection.everything())
    else:
        increment = files_added(root, since=since, until=until)
        if not increment.append_only:
            shown = ", ".join(map(str, (increment.rewritten or increment.missing)[:5]))
            what = "removed or rewrote rows" if increment.rewritten else "no longer holds"
            raise StreamSourceError(
                f"the streamed table at {root} {what} in version(s) {shown} after version "
                f"{since}; a stream reads appended rows only. Read it from the start again by "
                "removing the streaming query's checkpoint (its _partlake_stream folder)."
            )
        files = list(increment.files)
    return [(os.path.join(root, unquote(f.path)), dict(f.partition_values)) for f in files]


def read_file(
    path: str, partition_values: dict[str, str | None], schema: StructType
) -> Iterator[pa.RecordBatch]:
    """The rows of one Parquet file in `schema` (partition columns from their values)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagster_partlake.delta.schema import spark_to_arrow

    target = spark_to_arrow(schema)
    table = pq.read_table(path)
    columns = []
    for field in target:
        if field.name in partition_values:
            value = partition_values[field.name]
            raw = pa.array([value] * table.num_rows, pa.string())
            columns.append(raw.cast(field.type))
        else:
            columns.append(table.column(field.name).cast(field.type))
    yield from pa.Table.from_arrays(columns, schema=target).to_batches()


def register(spark: SparkSession) -> None:
    """Make `format("partlake_delta")` known to the session (idempotent)."""
    spark.dataSource.register(DeltaCommitsSource)
