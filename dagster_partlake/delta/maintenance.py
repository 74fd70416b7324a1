"""Table maintenance: compact small files, vacuum unreferenced files, checkpoint and trim the log.

None of these may make a partition look changed, since the planner would then recompute
everything downstream of it. lastUpdated of a partition is the time of the newest commit that
changed its live files with `dataChange: true` actions (`delta.change_rule`), and out_of_band
detection compares it with the commit records. So:

- `compact_table` marks all its actions `dataChange=false` (no partition changes), gives every
  new file the newest `modification_time` of the files it replaces (a partition whose changing
  commit the log no longer holds takes its files' newest time, which stays the same), and puts
  no `partlake` record in its commit (only `partlake_maintenance` custom metadata, which
  `CommitRecord.from_commit_info` ignores). It names each compacted table partition in an
  application transaction (`writer.files_txn_id`), as every partlake write that removes files of
  that partition does: delta-rs does not check a commit's removes against a concurrent commit's
  `dataChange=false` removes, so without it a writer could land on top of a compaction and keep
  the compacted copy of the rows it replaced. The compaction itself commits only while every file
  it replaces is still live (checked on a fresh snapshot, then guarded by delta-rs's conflict
  check), so it never brings back replaced data.
- `vacuum_table` deletes only files no live version references; delta-rs records the vacuum as
  two commits (`VACUUM START`/`VACUUM END`) without add actions.
- `checkpoint_table` writes a checkpoint and deletes old JSON commits, except those holding the
  newest partlake record of a partition and the commit that changed each partition last (which
  gives it its lastUpdated): the planner's records and those times live only in the JSON
  commits.
"""

from __future__ import annotations

import math
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltalake import DeltaTable
from deltalake.transaction import AddAction, CommitProperties, Transaction

from dagster_partlake.delta.defaults import (
    DEFAULT_KEEP_LOG_HOURS,
    DEFAULT_RETENTION_HOURS,
    DEFAULT_TARGET_FILE_BYTES,
)
from dagster_partlake.delta.history import MAINTENANCE_KEY, maintenance_version
from dagster_partlake.delta.protocol import check_table_writable
from dagster_partlake.delta.reader import open_table, read_files
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.staging import (
    StagedFile,
    StagedWrite,
    discard_published,
    discarded_on_failure,
    new_staging_folder,
    publish_staged,
    staged_files,
    write_parquet_files,
)
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import (
    LiveFile,
    live_files,
    load_table,
    log_versions,
)
from dagster_partlake.delta.writer import (
    POST_COMMIT,
    commit_or_conflict,
    files_txn_id,
    remove_action,
)
from dagster_partlake.errors import CommitConflictError, PartlakeConfigError, PartlakeError
from dagster_partlake.layout import commit_version, log_dir, staging_dir

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


@dataclass(frozen=True)
class VacuumResult:
    """What `vacuum_table` removed (or, with `dry_run`, would remove) from one table."""

    root: str
    retention_hours: int
    dry_run: bool
    files: tuple[str, ...]  # data files, relative to the table root
    staging_dirs: tuple[str, ...]  # abandoned `_partlake_staging/<uuid>` folders
    bytes: int  # of all of them

    @property
    def num_files(self) -> int:
        return len(self.files)


@dataclass(frozen=True)
class CheckpointResult:
    """The checkpoint `checkpoint_table` wrote and the log files it removed."""

    root: str
    version: int  # of the checkpoint
    json_removed: tuple[int, ...]  # versions whose JSON commit was deleted
    checkpoints_removed: tuple[str, ...]  # older checkpoint files deleted (names in the log)
    json_kept_for_records: tuple[int, ...]  # old enough, kept for the partlake records they hold
    json_remaining: int  # JSON commits in the log afterwards


def compact_table(
    spark: SparkSession,
    root: str,
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
        root: local path of the Delta table.
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
    root, name, table = snapshot.root, snapshot.name, snapshot.table
    # Spark rewrites the files as plain Parquet: deleted rows of a deletion vector would come
    # back, and column-mapped columns would get their logical names.
    check_table_writable(table, table_name=name, root=root)
    partition_by = tuple(table.metadata().partition_columns)
    data_columns = [c for c in snapshot.schema.names if c not in partition_by]
    files = live_files(table, selection or PartitionSelection.everything(), data_columns)
    groups = _small_file_groups(files, partition_by, target_file_bytes)
    if not groups:
        return CompactResult(root, None, ())
    old = [f for group in groups.values() for f in group]
    stats_columns = sorted({c for f in old for c in (*f.min_values, *f.null_count)})
    counts = {
        key: math.ceil(sum(f.size for f in g) / target_file_bytes) for key, g in groups.items()
    }

    stage = new_staging_folder(root)
    df = _bucketed(spark, read_files(spark, snapshot, old).df, partition_by, counts)
    write_parquet_files(df, stage, partition_by)
    with discarded_on_failure(stage):
        new = staged_files(stage, partition_by, stats_columns)
        partitions = _check_same_rows(root, name, groups, new, partition_by)
    staged = StagedWrite(
        root=root,
        table_name=name,
        staging_dir=stage,
        files=tuple(new),
        schema=snapshot.schema,
        partition_by=partition_by,
        selection=PartitionSelection.everything(),
        partition_ids=(),
    )
    publish_staged(staged)
    with discarded_on_failure(staged):
        return _commit_compaction(staged, old, partitions, max_attempts)


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
    root: str,
    name: str,
    groups: dict[Values, list[LiveFile]],
    new: Sequence[StagedFile],
    partition_by: Sequence[str],
) -> list[CompactedPartition]:
    written: dict[Values, list[StagedFile]] = {}
    for f in new:
        written.setdefault(tuple(f.partition_values[c] for c in partition_by), []).append(f)
    partitions = []
    for key, group in groups.items():
        rows_before = sum(_rows(root, f) for f in group)
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


def _rows(root: str, f: LiveFile) -> int:
    if f.num_records is not None:
        return int(f.num_records)
    import pyarrow.parquet as pq

    return pq.read_metadata(f.absolute_path(root)).num_rows


def _commit_compaction(
    staged: StagedWrite,
    old: Sequence[LiveFile],
    partitions: Sequence[CompactedPartition],
    max_attempts: int,
) -> CompactResult:
    root, partition_by = staged.root, staged.partition_by
    times = {tuple(p.partition_values[c] for c in partition_by): p for p in partitions}
    commit_id = uuid.uuid4().hex
    adds = [
        AddAction(
            path=f.relative_path,
            size=f.size,
            partition_values=f.partition_values,
            # Each partition keeps its lastUpdated: the newest time of the files replaced.
            modification_time=times[
                tuple(f.partition_values[c] for c in partition_by)
            ].modification_time,
            data_change=False,
            stats=f.stats_json(),
        )
        for f in staged.files
    ]
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        table = load_table(root, table_name=staged.table_name)
        live = {f.path for f in live_files(table, PartitionSelection.everything())}
        gone = [f.path for f in old if f.path not in live]
        if gone:
            discard_published(staged)
            return CompactResult(
                root,
                None,
                tuple(partitions),
                skipped=(
                    f"a concurrent commit replaced or removed {len(gone)} of the files being "
                    f"compacted (e.g. {gone[0]}); run the compaction again"
                ),
                attempts=attempt,
            )
        now_ms = int(time.time() * 1000)
        removes = [remove_action(f, now_ms, data_change=False) for f in old]
        metadata = {
            "operation": "compact",
            "id": commit_id,
            "files_removed": len(removes),
            "files_added": len(adds),
            "partitions": len(partitions),
        }
        properties = CommitProperties(
            custom_metadata={MAINTENANCE_KEY: metadata},
            app_transactions=[
                Transaction(files_txn_id(p.partition_values), now_ms) for p in partitions
            ],
        )
        before = table.version()
        conflict = commit_or_conflict(
            table,
            [*adds, *removes],
            partition_by=partition_by,
            properties=properties,
            attempt=attempt,
        )
        if conflict is not None:
            last_error = conflict
            continue
        version = maintenance_version(root, since=before + 1, commit_id=commit_id)
        return CompactResult(root, version, tuple(partitions), attempts=attempt)
    raise CommitConflictError(
        f"could not commit the compaction of table {staged.table_name} after {max_attempts} "
        f"attempts because concurrent writers kept changing it (last error: {last_error}); run "
        "it when fewer writers are active. Nothing was committed."
    )


def vacuum_table(
    root: str,
    *,
    retention_hours: int = DEFAULT_RETENTION_HOURS,
    force: bool = False,
    dry_run: bool = False,
    table_name: str | None = None,
) -> VacuumResult:
    """Delete the files of the table that no live version references and that are older than
    the retention: files removed by a commit more than `retention_hours` ago, files never
    committed (written or moved into the table but not in the log), and abandoned
    `_partlake_staging/<uuid>/` folders.

    Args:
        root: local path of the Delta table.
        retention_hours: keep anything removed or written within this many hours, so readers of
            recent versions and writers between writing and committing keep their files.
        force: allow a retention below 1 hour (a writer still committing may lose its files).
        dry_run: only report what would be deleted.
        table_name: name used in messages (default: the folder name).

    Raises:
        PartlakeConfigError: retention below 1 hour without `force`, or no table at `root`.
    """
    if retention_hours < 0:
        raise ValueError(f"retention_hours must not be negative, got {retention_hours}")
    name = table_name or os.path.basename(os.path.abspath(root))
    if retention_hours < 1 and not force:
        raise PartlakeConfigError(
            f"a vacuum retention of {retention_hours} hours for table {name} would delete files "
            "that a writer has written but not committed yet; use at least 1 hour (default "
            f"{DEFAULT_RETENTION_HOURS}), or pass force=True (`partlake maintain vacuum --force`) "
            "when no writer is running."
        )
    root = open_table(root, table_name=name).root
    table = DeltaTable(root)
    # delta-rs's `full` mode also finds files that were never committed (by file time); without
    # it only removed files are found. It skips `_` and `.` folders, so staging is ours.
    kwargs: dict[str, Any] = dict(
        retention_hours=int(retention_hours), enforce_retention_duration=False, full=True
    )
    # delta-rs also lists tombstoned files an earlier vacuum already deleted (as absolute
    # paths): only files still on disk count.
    sizes = {
        path: _size(os.path.join(root, path))
        for path in map(lambda p: _relative(root, p), table.vacuum(dry_run=True, **kwargs))
        if os.path.isfile(os.path.join(root, path))
    }
    if dry_run or not sizes:
        files = sorted(sizes)
    else:
        metadata = {"operation": "vacuum", "retention_hours": int(retention_hours)}
        deleted = table.vacuum(
            dry_run=False,
            commit_properties=CommitProperties(custom_metadata={MAINTENANCE_KEY: metadata}),
            post_commithook_properties=POST_COMMIT,
            **kwargs,
        )
        files = sorted(
            path
            for path in map(lambda p: _relative(root, p), deleted)
            if path in sizes and not os.path.exists(os.path.join(root, path))
        )
    staging = _old_staging(root, time.time() - retention_hours * 3600)
    if not dry_run:
        for path, _ in staging:
            shutil.rmtree(path, ignore_errors=True)
    return VacuumResult(
        root=root,
        retention_hours=int(retention_hours),
        dry_run=dry_run,
        files=tuple(files),
        staging_dirs=tuple(os.path.relpath(path, root) for path, _ in staging),
        bytes=sum(sizes.get(path, 0) for path in files) + sum(size for _, size in staging),
    )


def _relative(root: str, path: str) -> str:
    path = path.removeprefix("file://")
    return os.path.relpath(path, root) if os.path.isabs(path) else path


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _old_staging(root: str, cutoff: float) -> list[tuple[str, int]]:
    """Staging folders with nothing modified since `cutoff`, with their size in bytes."""
    base = staging_dir(root)
    if not os.path.isdir(base):
        return []
    found = []
    for entry in sorted(os.scandir(base), key=lambda e: e.name):
        if not entry.is_dir(follow_symlinks=False):
            continue
        newest, size = entry.stat().st_mtime, 0
        for directory, _, names in os.walk(entry.path):
            newest = max(newest, os.stat(directory).st_mtime)
            for file_name in names:
                stat = os.stat(os.path.join(directory, file_name))
                newest, size = max(newest, stat.st_mtime), size + stat.st_size
        if newest < cutoff:
            found.append((entry.path, size))
    return found


def checkpoint_table(
    root: str,
    *,
    keep_log_hours: float = DEFAULT_KEEP_LOG_HOURS,
    table_name: str | None = None,
) -> CheckpointResult:
    """Write a checkpoint at the latest version, then delete the JSON commits and checkpoints
    before it that are older than `keep_log_hours`, except JSON commits holding a partlake
    record the planner still reads (the newest of some partition, or the one that set a
    partition's lastUpdated). delta-rs loads the latest version from the checkpoint; versions
    before it can no longer be loaded (time travel) once their commits are gone.

    Args:
        root: local path of the Delta table.
        keep_log_hours: log files modified within this many hours stay (delta's
            `logRetentionDuration`; 0 deletes every one that is not needed).
        table_name: name used in messages (default: the folder name).

    Raises:
        PartlakeConfigError: there is no table at `root`.
        PartlakeError: delta-rs wrote no checkpoint file.
    """
    if keep_log_hours < 0:
        raise ValueError(f"keep_log_hours must not be negative, got {keep_log_hours}")
    snapshot = open_table(root, table_name=table_name)
    root, table = snapshot.root, snapshot.table
    version = table.version()
    table.create_checkpoint()
    log = log_dir(root)
    names = os.listdir(log)
    if not any(_checkpoint_version(n) == version for n in names):
        raise PartlakeError(
            f"delta-rs wrote no checkpoint for version {version} of table {snapshot.name} in "
            f"{log}; the log was left as it was."
        )
    needed = _record_versions(root)
    cutoff = time.time() - keep_log_hours * 3600
    removed, kept, checkpoints = [], [], []
    for file_name in sorted(names):
        path = os.path.join(log, file_name)
        json_version = commit_version(file_name)
        old_checkpoint = _checkpoint_version(file_name)
        if json_version is not None and json_version < version and _older(path, cutoff):
            if json_version in needed:
                kept.append(json_version)
            elif _remove(path):
                removed.append(json_version)
        elif old_checkpoint is not None and old_checkpoint < version and _older(path, cutoff):
            if _remove(path):
                checkpoints.append(file_name)
    return CheckpointResult(
        root=root,
        version=version,
        json_removed=tuple(removed),
        checkpoints_removed=tuple(checkpoints),
        json_kept_for_records=tuple(kept),
        json_remaining=len(log_versions(root)),
    )


def _record_versions(root: str) -> set[int]:
    """Versions whose JSON commit the planner and the writers still read: per partition id
    the newest record (and the newest with a commit time), the newest scd2 snapshot record, and
    the commits that set some partition's current lastUpdated (any writer's: its time is that
    commit's, `delta.change_rule`)."""
    state = StateCache().sync(root)
    if state is None:
        return set()
    needed = {v for v in state.touched_in.values() if v is not None}
    needed.update(v for v in (state.changed_in or {}).values() if v is not None)
    newest: set[str] = set()
    newest_timed: set[str] = set()
    snapshot_seen = False
    for record in reversed(state.commits):
        version = record.table_version
        if version is None:
            continue
        pids = set(record.partition_ids)
        if pids - newest:
            needed.add(version)
            newest |= pids
        if record.commit_time_ms is not None and pids - newest_timed:
            needed.add(version)
            newest_timed |= pids
        if record.snapshot_ms is not None and not snapshot_seen:
            needed.add(version)
            snapshot_seen = True
    return needed


def _checkpoint_version(name: str) -> int | None:
    """The version of a checkpoint file (single or multi-part), `.crc` file included."""
    head, _, rest = name.partition(".")
    if len(head) != 20 or not head.isdigit():
        return None
    if (rest.startswith("checkpoint") and rest.endswith(".parquet")) or rest == "crc":
        return int(head)
    return None


def _older(path: str, cutoff: float) -> bool:
    try:
        return os.stat(path).st_mtime < cutoff
    except FileNotFoundError:
        return False


def _remove(path: str) -> bool:
    try:
        os.remove(path)
    except FileNotFoundError:
        return False
    return True


def describe(result: CompactResult | VacuumResult | CheckpointResult) -> str:
    """One line saying what a maintenance call did, for the CLI and logs."""
    if isinstance(result, CompactResult):
        if result.skipped:
            return f"compaction skipped: {result.skipped}"
        if result.version is None:
            return "nothing to compact"
        before = sum(p.bytes_before for p in result.partitions)
        return (
            f"compacted {len(result.partitions)} partition(s): {result.files_removed} -> "
            f"{result.files_added} file(s), {_bytes(before)}, version {result.version}"
        )
    if isinstance(result, VacuumResult):
        verb = "would remove" if result.dry_run else "removed"
        return (
            f"{verb} {result.num_files} file(s) and {len(result.staging_dirs)} staging "
            f"folder(s), {_bytes(result.bytes)} (retention {result.retention_hours} h)"
        )
    return (
        f"checkpoint at version {result.version}; removed {len(result.json_removed)} JSON "
        f"commit(s) and {len(result.checkpoints_removed)} old checkpoint file(s), kept "
        f"{len(result.json_kept_for_records)} for partlake records; {result.json_remaining} "
        "JSON commit(s) left"
    )


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


__all__ = [
    "CheckpointResult",
    "CompactResult",
    "CompactedPartition",
    "VacuumResult",
    "checkpoint_table",
    "compact_table",
    "describe",
    "vacuum_table",
]
