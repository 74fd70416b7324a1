"""Compaction: rewrite a table's small files into fewer, without changing a partition's rows or
its lastUpdated.

No maintenance may make a partition look changed, since the planner would then recompute
everything downstream of it. lastUpdated of a partition is the time of the newest commit that
changed its live files with `dataChange: true` actions (`delta.change_rule`). So `compact_table`
marks all its actions `dataChange=false` (no partition changes), gives every new file the newest
`modification_time` of the files it replaces (a partition whose changing commit the log no
longer holds takes its files' newest time, which stays the same), and puts no `partlake` record
in its commit (only `partlake_maintenance` custom metadata, which `CommitRecord.from_commit_info`
ignores). Its
commit names each compacted table partition in an application transaction (the transaction's
`files_txn_id`), as every partlake write that removes files of that partition does: delta-rs
does not check a commit's removes against a concurrent commit's `dataChange=false` removes, so
without it a writer could land on top of a compaction and keep the compacted copy of the rows it
replaced. The compaction commits only while every file it replaces is still live (checked on
each attempt's snapshot, then guarded by delta-rs's conflict check), so it never brings back
replaced data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.defaults import DEFAULT_TARGET_FILE_BYTES
from dagster_partlake.delta.files import (
    WrittenFile,
    WrittenFiles,
    discarded_on_failure,
    write_files,
)
from dagster_partlake.delta.payload import MAINTENANCE_KEY
from dagster_partlake.delta.reader import open_table, read_files
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot
from dagster_partlake.delta.table import LiveFile
from dagster_partlake.delta.transaction import Actions, InputsMovedError, commit
from dagster_partlake.errors import PartlakeError
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_MAX_ATTEMPTS = 10
_HELPER = "__partlake_"

Values = tuple[str | None, ...]


@dataclass(frozen=True)
class CompactedPartition:
    """One table partition whose small files a compaction replaced."""

    partition_values: dict[str, str | None]
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    rows: int
    modification_time: int  # of every new file: the newest of the files replaced


@dataclass(frozen=True)
class CompactResult:
    """What `compact_table` did to one table."""

    root: str
    version: int | None  # the compaction commit; None when nothing was committed
    partitions: tuple[CompactedPartition, ...]  # compacted (or, if skipped, meant to be)
    skipped: str | None = None  # why nothing was committed although partitions qualified
    attempts: int = 0

    @property
    def files_removed(self) -> int:
        return sum(p.files_before for p in self.partitions) if self.version is not None else 0

    @property
    def files_added(self) -> int:
        return sum(p.files_after for p in self.partitions) if self.version is not None else 0


def compact_table(
    spark: SparkSession,
    root: str | TableLocation,
    *,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    selection: PartitionSelection | None = None,
    table_name: str | None = None,
    max_attempts: int = _MAX_ATTEMPTS,
) -> CompactResult:
    """Rewrite the small files of each partition into fewer files, without changing its rows or
    its lastUpdated.

    A partition qualifies when it has 2 or more files smaller than `target_file_bytes` and they
    fit in fewer files; those are rewritten by one Spark job into
    ceil(total size / target_file_bytes) files and swapped in by one commit.

    Args:
        spark: the session that reads and writes the files.
        root: path or location of the Delta table.
        target_file_bytes: files this size or larger are left alone.
        selection: only partitions inside it (default: all).
        table_name: name used in messages (default: the folder name).
        max_attempts: commit attempts while concurrent commits conflict.

    Returns:
        The commit and the partitions compacted. `skipped` says why nothing was committed when a
        concurrent commit replaced or removed a file being compacted.

    Raises:
        PartlakeConfigError: there is no table at `root`.
        TableFeatureError: the table uses a protocol feature partlake's rewrite does not honour
            (deletion vectors, column mapping, ...: `delta.protocol`); nothing was committed.
        CommitConflictError: concurrent commits kept conflicting; nothing was committed.
        PartlakeError: the rewritten files do not hold the same rows; nothing was committed.
    """
    if target_file_bytes < 1:
        raise ValueError(f"target_file_bytes must be positive, got {target_file_bytes}")
    snapshot = open_table(root, table_name=table_name)
    # Spark rewrites the files as plain Parquet: deleted rows of a deletion vector would come
    # back, and column-mapped columns would get their logical names.
    snapshot.check_writable()
    partition_by = snapshot.partition_by
    data_columns = [c for c in snapshot.schema.names if c not in partition_by]
    files = snapshot.live_files(selection or PartitionSelection.everything(), data_columns)
    groups = _small_file_groups(files, partition_by, target_file_bytes)
    if not groups:
        return CompactResult(snapshot.root, None, ())
    old = [f for group in groups.values() for f in group]
    stats_columns = sorted({c for f in old for c in (*f.min_values, *f.null_count)})
    counts = {
        key: math.ceil(sum(f.size for f in g) / target_file_bytes) for key, g in groups.items()
    }

    df = _bucketed(spark, read_files(spark, snapshot, old).df, partition_by, counts)
    new = write_files(
        df,
        snapshot.location,
        partition_by=partition_by,
        schema=snapshot.schema,
        stats_columns=stats_columns,
    )
    with discarded_on_failure(new):
        partitions = _check_same_rows(snapshot, groups, new.files, partition_by)
        return _commit_compaction(snapshot, new, old, partitions, max_attempts)


def _small_file_groups(
    files: Sequence[LiveFile], partition_by: Sequence[str], target: int
) -> dict[Values, list[LiveFile]]:
    groups: dict[Values, list[LiveFile]] = {}
    for f in files:
        if f.size < target:
            groups.setdefault(tuple(f.partition_values[c] for c in partition_by), []).append(f)
    return {
        key: sorted(group, key=lambda f: f.path)
        for key, group in sorted(groups.items(), key=lambda item: repr(item[0]))
        if len(group) >= 2 and math.ceil(sum(f.size for f in group) / target) < len(group)
    }


def _bucketed(
    spark: SparkSession, df: DataFrame, partition_by: Sequence[str], counts: dict[Values, int]
) -> DataFrame:
    """`df` spread over exactly one Spark task per output file: rows of a partition go to one of
    its `counts[partition]` buckets by a hash of their values, and each (partition, bucket) to
    its own task (`repartition` by a key chosen to hash to that task's number)."""
    from pyspark.sql import functions as F

    total = sum(counts.values())
    keys = _keys_for_tasks(spark, total)
    rows, slot = [], 0
    for values, count in counts.items():
        rows.append((*values, count, keys[slot : slot + count]))
        slot += count
    names = [f"{_HELPER}p{i}" for i in range(len(partition_by))]
    types = {field.name: field.dataType for field in df.schema.fields}
    mapping = spark.createDataFrame(
        rows,
        ", ".join(
            [*(f"{n} string" for n in names), f"{_HELPER}n int", f"{_HELPER}keys array<bigint>"]
        ),
    ).select(
        # Partition values are strings in the log; cast to the column types to join on them.
        *(F.col(n).cast(types[c]).alias(n) for n, c in zip(names, partition_by, strict=True)),
        f"{_HELPER}n",
        f"{_HELPER}keys",
    )
    if partition_by:
        condition = None
        for n, c in zip(names, partition_by, strict=True):
            clause = df[c].eqNullSafe(mapping[n])
            condition = clause if condition is None else condition & clause
        joined = df.join(F.broadcast(mapping), on=condition, how="inner")
    else:
        joined = df.crossJoin(F.broadcast(mapping))
    hashable = [
        F.col(f"`{field.name}`")
        for field in df.schema.fields
        if field.name not in partition_by and "map<" not in field.dataType.simpleString()
    ]
    row_hash = F.xxhash64(*hashable) if hashable else F.monotonically_increasing_id()
    bucket = F.pmod(row_hash, F.col(f"{_HELPER}n")) + 1
    keyed = joined.withColumn(
        f"{_HELPER}key", F.element_at(F.col(f"{_HELPER}keys"), bucket.cast("int"))
    )
    return keyed.repartition(total, F.col(f"{_HELPER}key")).select(*df.columns)


def _keys_for_tasks(spark: SparkSession, tasks: int) -> list[int]:
    """For each task number 0..tasks-1 a bigint that `repartition(tasks, col)` sends to it
    (Spark's hash partitioning is `pmod(hash(col), tasks)`, `hash` being its SQL function)."""
    from pyspark.sql import functions as F

    span = max(64, 32 * tasks)
    while True:
        found = (
            spark.range(0, span)
            .select("id", F.expr(f"pmod(hash(id), {tasks})").alias("task"))
            .groupBy("task")
            .agg(F.min("id").alias("id"))
            .collect()
        )
        by_task = {int(row["task"]): int(row["id"]) for row in found}
        if len(by_task) == tasks:
            return [by_task[t] for t in range(tasks)]
        span *= 4


def _check_same_rows(
    snapshot: Snapshot,
    groups: dict[Values, list[LiveFile]],
    new: Sequence[WrittenFile],
    partition_by: Sequence[str],
) -> list[CompactedPartition]:
    root, name = snapshot.root, snapshot.name
    written: dict[Values, list[WrittenFile]] = {}
    for f in new:
        written.setdefault(tuple(f.partition_values[c] for c in partition_by), []).append(f)
    partitions = []
    for key, group in groups.items():
        rows_before = sum(_rows(snapshot, f) for f in group)
        got = written.pop(key, [])
        rows_after = sum(f.num_records for f in got)
        if rows_after != rows_before:
            raise PartlakeError(
                f"compacting table {name} at {root} rewrote partition "
                f"{dict(zip(partition_by, key, strict=True))} with {rows_after} rows instead of "
                f"{rows_before}; nothing was committed. Report this as a bug with the table's "
                "schema."
            )
        partitions.append(
            CompactedPartition(
                partition_values=dict(zip(partition_by, key, strict=True)),
                files_before=len(group),
                files_after=len(got),
                bytes_before=sum(f.size for f in group),
                bytes_after=sum(f.size for f in got),
                rows=rows_before,
                modification_time=max(f.modification_time for f in group),
            )
        )
    if written:
        raise PartlakeError(
            f"compacting table {name} at {root} wrote files for partitions it did not read "
            f"({sorted(written, key=repr)[:3]}); nothing was committed. Report this as a bug."
        )
    return partitions


def _rows(snapshot: Snapshot, f: LiveFile) -> int:
    if f.num_records is not None:
        return int(f.num_records)
    import pyarrow.parquet as pq

    with snapshot.location.store.open(f.relative_path) as data:
        return int(pq.read_metadata(data).num_rows)


def _commit_compaction(
    snapshot: Snapshot,
    new: WrittenFiles,
    old: Sequence[LiveFile],
    partitions: Sequence[CompactedPartition],
    max_attempts: int,
) -> CompactResult:
    """One commit swapping the compacted files in (`dataChange: false`, each new file with the
    newest modification time of the files it replaces), while every replaced file is live."""
    partition_by = snapshot.partition_by
    times = {tuple(p.partition_values[c] for c in partition_by): p for p in partitions}
    olds = {f.path for f in old}

    def actions(current: Snapshot) -> Actions:
        live = {f.path for f in current.live_files(PartitionSelection.everything())}
        gone = sorted(olds - live)
        if gone:
            raise InputsMovedError(
                f"a concurrent commit replaced or removed {len(gone)} of the files being "
                f"compacted (e.g. {gone[0]}); run the compaction again"
            )
        return Actions(
            adds=new.files,
            removes=old,
            data_change=False,
            modification_times={
                # Each partition keeps its lastUpdated: the newest time of the files replaced.
                f.relative_path: times[
                    tuple(f.partition_values[c] for c in partition_by)
                ].modification_time
                for f in new.files
            },
        )

    def payload(commit_id: str, now_ms: int) -> dict[str, Any]:
        return {
            MAINTENANCE_KEY: {
                "operation": "compact",
                "id": commit_id,
                "files_removed": len(old),
                "files_added": len(new.files),
                "partitions": len(partitions),
            }
        }

    try:
        committed = commit(
            snapshot.location,
            snapshot,
            actions,
            payload=payload,
            name=snapshot.name,
            max_attempts=max_attempts,
        )
    except InputsMovedError as moved:
        new.discard()
        return CompactResult(snapshot.root, None, tuple(partitions), skipped=str(moved), attempts=1)
    return CompactResult(
        snapshot.root, committed.version, tuple(partitions), attempts=committed.attempts
    )
