"""A Spark streaming source over the new commits of a Delta table, without the Delta JARs.

Spark's Python data source API (pyspark 4) with partlake's log-based reads
(`dagster_partlake.delta.increments`): an offset is a table version; a micro-batch from version
`a` to `b` reads the files added in the commits after `a` up to `b` that are still live at `b`
(the first micro-batch reads every file live at its version). A commit in between that removed or
rewrote rows (a replace, a delete; not a compaction) makes the batch fail: its rows cannot be
told apart from those already read. Spark keeps the offsets in the query's checkpoint, so a
restarted query goes on from the last batch it completed.

The reader runs in Spark's Python workers (`PYSPARK_PYTHON`, which `SparkResource` sets to its
own interpreter): it reads the log's JSON commits and Parquet files with pyarrow (through the
table's location: on disk or an object store), and hands Spark Arrow record batches. Register
it once per session with `register(spark)`, then
`spark.readStream.format(NAME).schema(...).options(**source_options(location)).load()`.

The workers find an object store's credentials where the driver found them: the environment
they inherit, and the location's explicit storage options, passed as one option whose name
Spark's redaction matches (`spark.redaction.regex`: "secret"), so plans and the UI show it
redacted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from dagster_partlake.errors import PartlakeError
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import ReadLimit
    from pyspark.sql.types import StructType

NAME = "partlake_delta"
START = -1  # the offset before the first version: the first batch reads the whole table
# The option holding a location's explicit storage options (JSON); "secret" in its name makes
# Spark redact its value wherever it shows options.
OPTIONS_OPTION = "secret_storage_options"


def source_options(location: str | TableLocation) -> dict[str, str]:
    """The Spark options that give the source its table: `path`, and the explicit storage
    options of an object store's location."""
    location = as_location(location)
    found = {"path": location.uri}
    if location.storage_options:
        found[OPTIONS_OPTION] = json.dumps(dict(location.storage_options))
    return found


class StreamSourceError(PartlakeError):
    """A streamed table removed or rewrote rows, or lost the commits a batch needs."""


class _File(InputPartition):
    """One Parquet file of a micro-batch (relative to the table), with its partition values."""

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
        explicit = self.options.get(OPTIONS_OPTION)
        options = json.loads(explicit) if explicit else None
        return DeltaCommitsReader(as_location(str(path), options), schema)


class DeltaCommitsReader(DataSourceStreamReader):
    """Offsets `{"version": v}` over the table at `root`."""

    def __init__(self, root: str | TableLocation, schema: StructType) -> None:
        self.location = as_location(root)
        self.root = self.location.uri
        self.schema = schema

    def initialOffset(self) -> dict[str, int]:
        return {"version": START}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        from dagster_partlake.delta.table import log_versions

        versions = log_versions(self.location)
        return {"version": versions[-1] if versions else start["version"]}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        since, until = int(start["version"]), int(end["version"])
        if until <= since:
            return []
        files = batch_files(self.location, since, until, relative=True)
        return [_File(path, values) for path, values in files]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _File)
        yield from read_file(
            partition.path, partition.partition_values, self.schema, location=self.location
        )

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the table's files stay, Spark's checkpoint holds the offset."""


def batch_files(
    root: str | TableLocation, since: int, until: int, *, relative: bool = False
) -> list[tuple[str, dict[str, str | None]]]:
    """The files of the micro-batch (since, until]: (path or URI, or with `relative` the path
    below the table, and partition values).

    Raises:
        StreamSourceError: rows were removed or rewritten in between, or commits are gone.
    """
    from dagster_partlake.delta.increments import files_added

    location = as_location(root)
    if since == START:
        from dagster_partlake.delta.selection import PartitionSelection
        from dagster_partlake.delta.table import delta_table, live_files

        table = delta_table(location, version=until)
        files = live_files(table, PartitionSelection.everything())
    else:
        increment = files_added(location, since=since, until=until)
        if not increment.append_only:
            shown = ", ".join(map(str, (increment.rewritten or increment.missing)[:5]))
            what = "removed or rewrote rows" if increment.rewritten else "no longer holds"
            raise StreamSourceError(
                f"the streamed table at {location} {what} in version(s) {shown} after version "
                f"{since}; a stream reads appended rows only. Read it from the start again by "
                "removing the streaming query's checkpoint (its _partlake_stream folder)."
            )
        files = list(increment.files)
    if relative:
        return [(f.relative_path, dict(f.partition_values)) for f in files]
    return [(f.absolute_path(location), dict(f.partition_values)) for f in files]


def read_file(
    path: str,
    partition_values: dict[str, str | None],
    schema: StructType,
    *,
    location: TableLocation | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of one Parquet file in `schema` (partition columns from their values); `path`
    is below `location` when it is given."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagster_partlake.delta.schema import spark_to_arrow

    target = spark_to_arrow(schema)
    if location is None or location.is_local:
        table = pq.read_table(path if location is None else location.join(path).uri)
    else:
        with location.store.open(path) as source:
            table = pq.read_table(source)
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
