"""Spark writes a table's new Parquet files where they will live; the job returns their facts.

One Spark job (`write_files`) sorts each task's rows by partition and hands them to Python workers
(`mapInArrow`, `delta.file_writer`), which write each table partition's rows into the table's
`col=value/` folder under a new unique name (never a shared `_temporary`, never renamed
afterwards) and return one fact per file: path, size, rows, partition values, the statistics the
log keeps, and whatever the caller asked to count on the way (per-row flags, sums, content
hashes, over the whole task the rows whose key another of its rows has). So the commit, the
quality gates and `tracked`'s early cutoff need no second read of the rows, and the driver never
lists a folder or opens a footer. The rows never pass through the driver.

Nothing is visible until a commit adds the files. A write that stops before its commit deletes
the files it knows of and the folders it made for them (`discarded_on_failure`); files of a
process killed outright stay unreferenced, invisible to every reader, and `vacuum` removes them
after its retention period.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta import file_writer
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.storage.errors import cause_of, storage_error
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

# Names of the helper columns a write adds to the rows it hands the workers.
_FOLDER = "__partlake_folder_{}"
_FLAG = "__partlake_flag_{}"
_SUM = "__partlake_sum_{}"
_HASH = "__partlake_hash_{}"
_REPEAT = "__partlake_repeat_{}"


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet file a write put under the table, not committed yet."""

    relative_path: str  # relative to the table root, '/'-separated, not URL-encoded
    size: int
    num_records: int
    partition_values: dict[str, str | None]
    # Delta file statistics of the `stats_columns` asked for.
    min_values: dict[str, Any] = field(default_factory=dict)
    max_values: dict[str, Any] = field(default_factory=dict)
    null_count: dict[str, int] = field(default_factory=dict)
    # What the write counted on the way: rows flagged, (sum, non-null count) per summed value,
    # the wrapping (mod 2**64) sum of each per-row hash.
    flags: dict[str, int] = field(default_factory=dict)
    sums: dict[str, tuple[float, int]] = field(default_factory=dict)
    hashes: dict[str, int] = field(default_factory=dict)
    # The Spark task that wrote the file, and over all of that task's rows, per `Extras.repeats`
    # key, the rows whose key hash another of them has, keys with a null column left out (None:
    # not counted).
    task: str = ""
    repeats: dict[str, int | None] = field(default_factory=dict)
    # The folders its writer made for it (relative to the table root, '' the root itself).
    folders_made: tuple[str, ...] = ()

    def stats_json(self) -> str:
        stats: dict[str, Any] = {"numRecords": self.num_records}
        if self.min_values:
            stats["minValues"] = self.min_values
            stats["maxValues"] = self.max_values
        if self.null_count:
            stats["nullCount"] = self.null_count
        return json.dumps(stats, default=str)

    @classmethod
    def from_fact(cls, fact: str) -> WrittenFile:
        data = json.loads(fact)
        return cls(
            relative_path=data["path"],
            size=int(data["size"]),
            num_records=int(data["rows"]),
            partition_values=dict(data["values"]),
            min_values=dict(data["min"]),
            max_values=dict(data["max"]),
            null_count={k: int(v) for k, v in data["nulls"].items()},
            flags={k: int(v) for k, v in data["flags"].items()},
            sums={k: (float(s), int(n)) for k, (s, n) in data["sums"].items()},
            hashes={k: int(v) for k, v in data["hashes"].items()},
            task=data.get("task", ""),
            repeats={k: None if v is None else int(v) for k, v in data.get("repeats", {}).items()},
            folders_made=tuple(data["folders"]),
        )


@dataclass(frozen=True)
class Extras:
    """Per-row values a write computes on the way, by name: `flags` (booleans, counted where
    true), `sums` (numbers, summed with their non-null count), `hashes` (64-bit integers,
    summed modulo 2**64), `repeats` (key columns: the rows whose key another row has, counted
    by a 64-bit hash of the key, `WrittenFiles.repeated`; a key with a null column is never
    counted, as SQL's UNIQUE)."""

    flags: Mapping[str, Column] = field(default_factory=dict)
    sums: Mapping[str, Column] = field(default_factory=dict)
    hashes: Mapping[str, Column] = field(default_factory=dict)
    repeats: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class WrittenFiles:
    """What one write put under a table: its files and their facts."""

    location: TableLocation
    files: tuple[WrittenFile, ...]
    schema: pa.Schema  # the table's schema for this write (data columns, then partition ones)
    partition_by: tuple[str, ...]
    seconds: float = 0.0  # Spark computing the rows and writing the files
    facts_seconds: float = 0.0  # turning the job's facts into the files' list
    # The folders it made (relative to the root, '' the root itself), kept when files are
    # dropped: a write that is not committed removes those it left empty.
    folders_made: tuple[str, ...] = ()

    @property
    def num_records(self) -> int:
        return sum(f.num_records for f in self.files)

    def without(self, dropped: Sequence[WrittenFile]) -> WrittenFiles:
        """The same write without `dropped`, whose files are deleted."""
        gone = {f.relative_path for f in dropped}
        self.location.store.delete(sorted(gone))
        return replace(self, files=tuple(f for f in self.files if f.relative_path not in gone))

    def discard(self) -> None:
        """Delete every file of the write (it will not be committed), then the folders it made
        that are left empty: no folder stays where no table, or no partition, is."""
        self.location.store.delete(f.relative_path for f in self.files)
        self.location.store.remove_empty_folders(self.folders_made)

    def flagged(self, name: str) -> int:
        return sum(f.flags.get(name, 0) for f in self.files)

    def repeated(self, name: str) -> int | None:
        """The written rows whose `Extras.repeats` key's hash another written row has, when one
        Spark task wrote every file (it saw every row); None when several did or the key was
        not counted. 0 means no key repeats; more may be hash collisions."""
        tasks = {f.task for f in self.files}
        if not tasks:
            return 0
        if len(tasks) > 1 or "" in tasks:
            return None
        return self.files[0].repeats.get(name)


def write_files(
    df: DataFrame,
    location: TableLocation,
    *,
    partition_by: Sequence[str],
    schema: pa.Schema,
    stats_columns: Sequence[str] = (),
    extras: Extras | None = None,
) -> WrittenFiles:
    """Spark writes the rows of `df` as Parquet files under the table at `location`, one file
    per table partition per task, and returns their facts (see the module docstring).

    Args:
        partition_by: the table's partition columns (folders, not stored in the files).
        schema: the table's schema for this write: its data columns are the files' columns.
        stats_columns: columns whose min, max and null count go into the log.
        extras: per-row values to count, sum or hash while writing.
    """
    from pyspark.sql import functions as F

    started = time.perf_counter()
    extras = extras or Extras()
    data_columns = [c for c in schema.names if c not in partition_by]
    folders = [_FOLDER.format(i) for i in range(len(partition_by))]
    named = {
        **{_FLAG.format(n): c for n, c in extras.flags.items()},
        **{_SUM.format(n): c.cast("double") for n, c in extras.sums.items()},
        **{_HASH.format(n): c.cast("long") for n, c in extras.hashes.items()},
        **{
            _REPEAT.format(n): _key_hash(columns)
            for n, columns in extras.repeats.items()
            if _hash_exact(df, columns)
        },
    }
    rows = df.select(
        *(F.col(f"`{c}`") for c in data_columns),
        *(
            F.col(f"`{c}`").cast("string").alias(f)
            for c, f in zip(partition_by, folders, strict=True)
        ),
        *(column.alias(name) for name, column in named.items()),
    )
    if folders:
        rows = rows.sortWithinPartitions(*folders)
    fs_kind, fs_arguments, root = location.arrow_spec()
    writer = _writer(
        fs_kind=fs_kind,
        fs_arguments=fs_arguments,
        root=root,
        data_columns=data_columns,
        partition_by=list(partition_by),
        folder_columns=folders,
        flag_columns=[_FLAG.format(n) for n in extras.flags],
        sum_columns=[_SUM.format(n) for n in extras.sums],
        hash_columns=[_HASH.format(n) for n in extras.hashes],
        repeat_columns=[c for c in named if c.startswith(_REPEAT.format(""))],
        # A partition column lives in the folder names, not in the files: no statistics.
        stats_columns=[c for c in stats_columns if c in data_columns],
        write_id=uuid.uuid4().hex,
    )
    facts = _collect(_map_in_arrow(rows, writer), location)
    written = time.perf_counter()
    files = tuple(_renamed(WrittenFile.from_fact(row["fact"]), extras) for row in facts)
    return WrittenFiles(
        location=location,
        files=files,
        schema=schema,
        partition_by=tuple(partition_by),
        seconds=written - started,
        facts_seconds=time.perf_counter() - written,
        folders_made=_folders_made(files),
    )


def rewrite_without_keys(
    spark: SparkSession,
    location: TableLocation,
    files: Sequence[tuple[str, Mapping[str, str | None]]],
    *,
    schema: pa.Schema,
    partition_by: Sequence[str],
    key_column: str,
    key_files: Sequence[str],
    stats_columns: Sequence[str] = (),
) -> WrittenFiles:
    """Python workers rewrite each of the table's `files` (relative path, partition values)
    without its rows whose `key_column` value is in one of `key_files`, as new files in the same
    partitions (`file_writer.rewrite_batches`): one Spark job over the files' names, whose rows
    never pass through the JVM (handing 10M rows to the workers cost more than the rewrite
    itself). `key_column` must be a data column, not a partition one."""
    import pyarrow as pa

    started = time.perf_counter()
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])
    fs_kind, fs_arguments, root = location.arrow_spec()
    function = _function(
        file_writer.rewrite_batches,
        fs_kind=fs_kind,
        fs_arguments=fs_arguments,
        root=root,
        data_schema=data_schema,
        partition_by=list(partition_by),
        files=[(path, dict(values)) for path, values in files],
        key_column=key_column,
        key_files=list(key_files),
        stats_columns=[c for c in stats_columns if c in data_schema.names],
        write_id=uuid.uuid4().hex,
    )
    # The job's rows are the files' positions (`spark.range`: nothing sent from Python).
    tasks = max(1, min(len(files), _parallelism(spark)))
    job = _map_in_arrow(spark.range(0, len(files), 1, tasks), function)
    facts = _collect(job, location)
    written = time.perf_counter()
    rewritten = tuple(WrittenFile.from_fact(row["fact"]) for row in facts)
    return WrittenFiles(
        location=location,
        files=rewritten,
        schema=schema,
        partition_by=tuple(partition_by),
        seconds=written - started,
        facts_seconds=time.perf_counter() - written,
        folders_made=_folders_made(rewritten),
    )


def _folders_made(files: Sequence[WrittenFile]) -> tuple[str, ...]:
    return tuple(sorted({folder for f in files for folder in f.folders_made}))


def _map_in_arrow(rows: DataFrame, function: Any) -> DataFrame:
    """`rows.mapInArrow(function)` into one `fact` column, run by Python workers that have
    this interpreter's packages.

    Spark picks its workers' Python when a session starts (`PYSPARK_PYTHON`, else the first
    `python3` on the PATH), and fixes it on each Python function as the function is made. A
    session an asset built itself (`SparkSession.builder.getOrCreate()`) in a process started
    without its virtualenv on the PATH would hand the writer to an interpreter without
    pyarrow. So on local Spark, whose workers run on this machine, partlake's own functions
    are made for this interpreter, which pickled them; a cluster keeps its workers' Python.
    """
    context = getattr(rows.sparkSession, "_sc", None)  # None on Spark Connect
    own = sys.executable
    if context is None or not str(context.master).startswith("local") or not own:
        return rows.mapInArrow(function, "fact string")
    with _PYTHON_EXEC:
        chosen = context.pythonExec
        context.pythonExec = own
        try:
            return rows.mapInArrow(function, "fact string")
        finally:
            context.pythonExec = chosen


# Held while a function is made for this interpreter: no other thread's function is made then.
_PYTHON_EXEC = threading.Lock()


def _parallelism(spark: SparkSession) -> int:
    """The tasks Spark runs at once (Spark Connect does not say: 8)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return 8


def _collect(job: DataFrame, location: TableLocation) -> list[Any]:
    """Run the write job; a worker without pyarrow, or a store that refuses a write, as one
    clear error."""
    from pyspark.errors import PySparkException

    try:
        return job.collect()
    except PySparkException as error:
        text = str(error)
        if "No module named 'pyarrow'" in text:
            raise PartlakeConfigError(
                "Spark's Python workers have no pyarrow, which writes the table's files: start "
                "Spark with PYSPARK_PYTHON (or spark.pyspark.python) set to an interpreter that "
                "has pyarrow (SparkResource sets it to its own), or install pyarrow on the "
                "workers."
            ) from error
        cause = cause_of(error)
        if cause is not None and not location.is_local:
            raise storage_error(location, "", error) from error
        raise


def _renamed(written: WrittenFile, extras: Extras) -> WrittenFile:
    """The file's counted values under the caller's names."""
    return replace(
        written,
        flags={n: written.flags.get(_FLAG.format(n), 0) for n in extras.flags},
        sums={n: written.sums.get(_SUM.format(n), (0.0, 0)) for n in extras.sums},
        hashes={n: written.hashes.get(_HASH.format(n), 0) for n in extras.hashes},
        repeats={n: written.repeats.get(_REPEAT.format(n)) for n in extras.repeats},
    )


def _key_hash(columns: Sequence[str]) -> Column:
    """The `xxhash64` of a key, null where a column of the key is null: as SQL's UNIQUE (and
    `gates.evaluate`'s grouping), such a row equals no other and is not counted."""
    from pyspark.sql import functions as F

    full = F.lit(True)
    for c in columns:
        full = full & F.col(f"`{c}`").isNotNull()
    return F.when(full, F.xxhash64(*(F.col(f"`{c}`") for c in columns)))


def _hash_exact(df: DataFrame, columns: Sequence[str]) -> bool:
    """Whether Spark's `xxhash64` of these columns is equal wherever the values are equal as
    Spark groups them: integers, booleans, dates, timestamps, decimals, binary and strings of
    the binary collation. Not floating point (Spark groups -0.0 with 0.0 and every NaN
    together), other collations or nested types; nor a column the rows lack."""
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    exact = (
        T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType, T.DateType,
        T.TimestampType, T.TimestampNTZType, T.DecimalType, T.BinaryType,
    )  # fmt: skip
    for column in columns:
        kind = fields.get(column)
        if isinstance(kind, T.StringType):
            if getattr(kind, "collation", "UTF8_BINARY") != "UTF8_BINARY":
                return False
        elif not isinstance(kind, exact):
            return False
    return bool(columns)


def _writer(**arguments: Any) -> Any:
    """The function mapInArrow calls to write a DataFrame's rows (`file_writer.write_batches`)."""
    return _function(file_writer.write_batches, **arguments)


def _function(run: Any, **arguments: Any) -> Any:
    """The function mapInArrow calls: `run` (of `delta.file_writer`) with `arguments`, the
    module shipped by value (so Spark's workers need pyarrow, not this package)."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(file_writer)

    def call(batches: Iterator[Any]) -> Iterator[Any]:
        return run(batches, **arguments)

    return call


@contextlib.contextmanager
def discarded_on_failure(written: WrittenFiles) -> Iterator[None]:
    """Delete the write's files, and the folders it made for them, if the block raises
    (anything, an interrupt too), then re-raise: they will never be committed."""
    try:
        yield
    except BaseException:
        written.discard()
        raise
