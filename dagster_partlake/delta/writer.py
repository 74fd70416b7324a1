"""Replace exactly some partitions of a Delta table: Spark writes Parquet, delta-rs commits it.

A write has two phases so that nothing is visible until the last step:

1. `stage_partitions`: check the schema, let Spark write the Parquet files in parallel into a
   private folder `<table>/_partlake_staging/<uuid>/` (never the shared `_temporary` of another
   writer), then check that every file lies inside the partitions being replaced. No data passes
   through the driver: the driver only lists the files and reads their footers (row counts).
2. `commit_staged`: move the files next to the table's other files (`col=value/` folders, so any
   Hive-aware reader finds partition values in the path) and commit one Delta transaction that
   adds them and removes every live file of those partitions.

Why explicit remove actions instead of delta-rs's overwrite with partition filters: filters are
conjunctive only, and an overwrite of an empty partition by two writers at once did not conflict
(both files stayed live, duplicating rows). Each commit therefore also carries one Delta
application transaction (`txn`) per partition id; two commits naming the same id conflict, the
loser reloads, recomputes its removes and commits again, so the last writer wins and a partition
is never a mix of two writes. Writers of different partitions share no id and land concurrently,
retried with jitter on delta-rs's conservative conflict checks.

A writer killed between the phases leaves only unreferenced files: staged folders are removed by
the next write after `STALE_STAGING_SECONDS` (delta-rs vacuum skips `_` folders), moved but
uncommitted files are removed by `vacuum`. New columns (when allowed) are added by a
metadata-only commit just before the data commit, since an append commit keeps the schema.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from deltalake import DeltaTable
from deltalake import Field as DeltaField
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
)

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.record import WHOLE_TABLE_ID, CommitRecord
from dagster_partlake.delta.schema import merge_for_write, spark_to_arrow
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.staging import (
    Removal,
    StagedWrite,
    StageSeconds,
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
    find_record,
    live_files,
    load_table,
    log_damage,
    same_inputs_commit,
    table_exists,
    unreadable,
)
from dagster_partlake.errors import (
    CommitConflictError,
    PartitionMismatchError,
    PartlakeError,
    SchemaMismatchError,
)
from dagster_partlake.faults import fault_point
from dagster_partlake.layout import commit_name, commit_version, log_dir

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

# Checkpoints as delta-rs makes them (every 100 commits), but never its expired-log cleanup: that
# deletes JSON commits older than delta.logRetentionDuration (30 days) whatever partlake records
# they hold; `dagster_partlake.delta.maintenance.checkpoint_table` trims the log keeping those.
POST_COMMIT = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
# That hook checkpoints every `delta.checkpointInterval` commits (100 unless the table says
# otherwise), as Delta writers do. What a cold read of the log costs is the size of the JSON
# commits after the newest checkpoint, not their number: one commit that rewrote a million
# partitions is 300 MB of JSON. So after a commit partlake also checkpoints when those commits
# hold more than this many bytes (`checkpoint_when_due`).
CHECKPOINT_LOG_BYTES = 64 * 2**20


class InputsMovedError(CommitConflictError):
    """Files a merge read were removed by a concurrent commit: the merge must be recomputed."""


class TransactionDoneError(PartlakeError):
    """The application transaction a write carries is already in the table (`commit_staged`'s
    `app_transaction`): an earlier attempt of the same write landed; nothing was committed."""

    def __init__(self, app_id: str, version: int) -> None:
        super().__init__(
            f"the table already holds transaction {app_id} at version {version} or later"
        )
        self.app_id = app_id
        self.version = version


@dataclass(frozen=True)
class CommitResult:
    version: int
    num_records: int
    files_added: int
    files_removed: int
    attempts: int
    commit_time_ms: int
    record: CommitRecord
    rows_removed: int = 0  # rows of the files the commit removed
    # From publishing the staged files to the landed commit, retries included.
    commit_seconds: float = 0.0
    # Of which moving the staged files into the table's partition folders.
    publish_seconds: float = 0.0
    staged: StageSeconds = StageSeconds()  # the write's time before the commit


def write_partitions(
    df: DataFrame,
    root: str,
    *,
    partition_by: Sequence[str],
    selection: PartitionSelection,
    partition_ids: Sequence[str],
    record: CommitRecord | None = None,
    allow_new_columns: bool = False,
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> CommitResult:
    """Replace the partitions in `selection` of the Delta table at `root` with the rows of `df`.

    Args:
        df: the rows to write; every row must lie inside `selection`.
        root: local path of the table (created on the first write).
        partition_by: partition columns of the table, in folder order.
        selection: the partitions being replaced; live files inside it are removed.
        partition_ids: one stable id per replaced partition (e.g. the Dagster partition key);
            concurrent writers of the same id conflict and the last commit wins.
        record: what the write records in its commit (default: a record naming the table and
            the partition ids, with no code version, run or inputs).
        allow_new_columns: accept columns the table does not have yet.
        table_name: name used in error messages (default: the folder name).
        max_attempts: commit attempts before giving up on conflicts.

    Returns:
        The committed version and what it changed.

    Raises:
        SchemaMismatchError, PartitionMismatchError, CommitConflictError; in each case nothing
        was committed.
    """
    staged = stage_partitions(
        df,
        root,
        partition_by=partition_by,
        selection=selection,
        partition_ids=partition_ids,
        allow_new_columns=allow_new_columns,
        table_name=table_name,
    )
    return commit_staged(staged, record=record, max_attempts=max_attempts)


def stage_partitions(
    df: DataFrame,
    root: str,
    *,
    partition_by: Sequence[str],
    selection: PartitionSelection,
    partition_ids: Sequence[str],
    allow_new_columns: bool = False,
    table_name: str | None = None,
    removal: Removal = "selection",
    stats_columns: Sequence[str] = (),
) -> StagedWrite:
    """Phase 1 of `write_partitions`: write and check the Parquet files; commit nothing.

    `removal` says which live files the commit will remove (see `Removal`); `stats_columns` get
    min/max/null-count statistics in the Delta log, so later merges can skip files."""
    root = os.path.abspath(root)
    name = table_name or os.path.basename(root)
    incoming = spark_to_arrow(df.schema)
    missing = [col for col in partition_by if col not in incoming.names]
    if missing:
        raise SchemaMismatchError(
            f"data for table {name} has no partition column(s) {', '.join(missing)} "
            f"(columns: {', '.join(incoming.names)}); add them to the returned DataFrame or map "
            "the partition dimension to an existing column with metadata 'partition_expr'."
        )
    import pyarrow as pa

    schema = pa.schema(
        [incoming.field(c) for c in incoming.names if c not in partition_by]
        + [incoming.field(c) for c in partition_by]
    )
    if table_exists(root):
        table = load_table(root, table_name=name)
        existing_partition_by = tuple(table.metadata().partition_columns)
        if existing_partition_by != tuple(partition_by):
            raise SchemaMismatchError(
                f"table {name} is partitioned by ({', '.join(existing_partition_by) or 'nothing'})"
                f" but the write is partitioned by ({', '.join(partition_by) or 'nothing'}); keep "
                "the asset's partitioning and partition_expr unchanged, or write to a new table."
            )
        schema = merge_for_write(
            arrow_schema(table), incoming, table_name=name, allow_new_columns=allow_new_columns
        )

    stage = new_staging_folder(root)
    started = time.perf_counter()
    write_parquet_files(df, stage, partition_by)
    written = time.perf_counter()
    with discarded_on_failure(stage):
        files = staged_files(stage, partition_by, stats_columns)
        listed = time.perf_counter()
        outside = [f for f in files if not selection.contains(f.partition_values)]
        if outside:
            shown = sorted({_show_values(f.partition_values) for f in outside})
            raise PartitionMismatchError(
                f"rows for table {name} fall outside the partitions being written: "
                f"{', '.join(shown[:5])}{' ...' if len(shown) > 5 else ''}; this write may only "
                f"contain {selection.describe()}. Filter the DataFrame to the run's partitions "
                "(context.partition_key / partition_keys) before returning it."
            )
    return StagedWrite(
        root=root,
        table_name=name,
        staging_dir=stage,
        files=tuple(files),
        schema=schema,
        partition_by=tuple(partition_by),
        selection=selection,
        partition_ids=tuple(partition_ids),
        removal=removal,
        seconds=StageSeconds(spark=written - started, listing=listed - written),
    )


class AlreadyWritten(Exception):  # noqa: N818 - an outcome, not a failure
    """Nothing was committed: another run already committed these partitions from the same
    inputs (`once_per_inputs`); `record` is its commit."""

    def __init__(self, record: CommitRecord) -> None:
        super().__init__(f"already written by run {record.run_id} from the same inputs")
        self.record = record


def commit_staged(
    staged: StagedWrite,
    *,
    record: CommitRecord | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    once_per_inputs: bool = False,
    app_transaction: tuple[str, int] | None = None,
) -> CommitResult:
    """Phase 2 of `write_partitions`: make the staged files the content of their partitions.

    Args:
        once_per_inputs: before each attempt, look for a commit of another run that wrote these
            partitions from the same inputs (`same_inputs_commit`); if there is one, remove the
            staged files and raise `AlreadyWritten` instead of committing them a second time.
        app_transaction: (app id, version) of a Delta application transaction (`txn`) the
            commit carries, Delta's idempotent-write contract: when the table already holds that
            app id at this version or later, nothing is committed (a streaming micro-batch
            replayed after a crash, `dagster_partlake.delta.stream_sink`).

    Raises:
        AlreadyWritten: with `once_per_inputs`, another run committed the same.
        TransactionDoneError: the table already holds `app_transaction`; the staged files are
            discarded.
        CommitConflictError: concurrent writers kept conflicting for `max_attempts` attempts.
        TableUnreadableError: the table's log is damaged.
    """
    started = time.perf_counter()
    publish_staged(staged)
    published = time.perf_counter() - started
    fault_point("before_commit", staged.table_name)
    record = record or _default_record(staged)
    write_id = uuid.uuid4().hex
    delta_schema = DeltaSchema.from_arrow(staged.schema)
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        if once_per_inputs and (prior := _same_inputs(staged.root, record)) is not None:
            discard_published(staged)
            raise AlreadyWritten(prior)
        now_ms = int(time.time() * 1000)
        written = record.committed(write_id=write_id, commit_time_ms=now_ms)
        try:
            before, old = _commit_once(staged, written, delta_schema, now_ms, app_transaction)
        except (CommitFailedError, DeltaError) as error:
            if not _is_conflict(error, staged.root):
                if log_damage(staged.root) is not None:
                    raise unreadable(staged.root, error, table_name=staged.table_name) from error
                raise
            last_error = error
            # Jitter spreads the retries of writers that collided at the same moment.
            time.sleep(random.uniform(0.01, 0.05) * min(attempt, 10))
            continue
        landed = _landed(staged, write_id, before, old, attempt=attempt, now_ms=now_ms)
        fault_point("after_commit", staged.table_name)
        checkpoint_when_due(staged.root)
        return replace(
            landed,
            commit_seconds=time.perf_counter() - started,
            publish_seconds=published,
            staged=staged.seconds,
        )
    raise CommitConflictError(
        f"could not commit to table {staged.table_name} after {max_attempts} attempts because "
        f"concurrent writers kept changing it (last error: {last_error}); lower the number of "
        "parallel writers of this table or raise max_attempts. Nothing was committed."
    )


def _same_inputs(root: str, record: CommitRecord) -> CommitRecord | None:
    return same_inputs_commit(root, record) if table_exists(root) else None


def checkpoint_when_due(root: str, *, log_bytes: int = CHECKPOINT_LOG_BYTES) -> bool:
    """Write a checkpoint of the table at `root` when the JSON commits after its newest
    checkpoint hold more than `log_bytes` bytes (see `CHECKPOINT_LOG_BYTES`); whether it wrote
    one. A failure only leaves the log as it was: the next commit tries again."""
    try:
        names = os.listdir(log_dir(root))
    except OSError:
        return False
    checkpoints = [int(n[:20]) for n in names if n[:20].isdigit() and ".checkpoint." in n]
    newest = max(checkpoints, default=-1)
    versions = [v for v in map(commit_version, names) if v is not None and v > newest]
    size = 0
    for version in versions:
        try:
            size += os.path.getsize(os.path.join(log_dir(root), commit_name(version)))
        except OSError:
            continue  # cleaned up meanwhile
    if size <= log_bytes:
        return False
    try:
        DeltaTable(root).create_checkpoint()
    except DeltaError:
        return False  # another writer's commit or checkpoint raced it: nothing is lost
    return True


def _commit_once(
    staged: StagedWrite,
    written: CommitRecord,
    delta_schema: DeltaSchema,
    now_ms: int,
    app_transaction: tuple[str, int] | None = None,
) -> tuple[int, list[LiveFile]]:
    """One commit attempt: the staged files added, the replaced files removed. Returns the
    table version it committed on and the files it removed.

    Raises:
        CommitFailedError, DeltaError: a conflict (retry) or another delta-rs failure.
        TransactionDoneError: the table already holds `app_transaction` (checked on the same
            snapshot the commit is made on, so a retry after a conflict checks again).
    """
    adds = [
        AddAction(
            # delta-rs URL-encodes the path itself when writing the log.
            path=f.relative_path,
            size=f.size,
            partition_values=f.partition_values,
            # lastUpdated of a partition is the newest modification time of its files, so our
            # files carry the commit time rather than the time Spark wrote them.
            modification_time=now_ms,
            data_change=True,
            stats=f.stats_json(),
        )
        for f in staged.files
    ]
    adds += [
        AddAction(
            path=unquote(f.path),
            size=f.size,
            partition_values=f.partition_values,
            modification_time=now_ms,
            data_change=True,
            stats=_stats_json(f),
        )
        for f in staged.readd_files
    ]
    _ensure_table(staged, delta_schema)
    table = load_table(staged.root, table_name=staged.table_name)
    _add_new_columns(table, staged.schema)
    before = table.version()
    if app_transaction is not None:
        done = table.transaction_version(app_transaction[0])
        if done is not None and done >= app_transaction[1]:
            discard_published(staged)
            raise TransactionDoneError(app_transaction[0], done)
    old = _files_to_remove(table, staged)
    properties = CommitProperties(
        custom_metadata=written.to_commit_info(),
        app_transactions=[
            *(Transaction(_txn_app_id(pid), now_ms) for pid in staged.partition_ids),
            # Conflicts with a compaction of the same table partitions, whose dataChange=false
            # removes delta-rs's conflict checks do not see.
            *files_transactions(old, now_ms),
            *([Transaction(*app_transaction)] if app_transaction is not None else []),
        ],
    )
    table.create_write_transaction(
        [*adds, *(remove_action(f, now_ms) for f in old)],
        mode="append",
        schema=delta_schema,
        partition_by=list(staged.partition_by),
        commit_properties=properties,
        post_commithook_properties=POST_COMMIT,
    )
    return before, old


def _landed(
    staged: StagedWrite,
    write_id: str,
    before: int,
    removed: Sequence[LiveFile],
    *,
    attempt: int,
    now_ms: int,
) -> CommitResult:
    """The result of the commit that landed; its version is known only from the log, searched
    from the version it was committed on."""
    landed = find_record(staged.root, since=before + 1, write_id=write_id)
    if landed is None or landed.table_version is None:
        raise PartlakeError(
            f"the commit to table {staged.table_name} succeeded but its record (write id "
            f"{write_id}) is not in {staged.root}'s log; the table was replaced meanwhile."
        )
    return CommitResult(
        version=landed.table_version,
        num_records=staged.num_records,
        files_added=len(staged.files),
        files_removed=len(removed),
        attempts=attempt,
        commit_time_ms=now_ms,
        record=landed,
        rows_removed=sum(f.num_records or 0 for f in removed),
    )


def commit_or_conflict(
    table: DeltaTable,
    actions: Sequence[AddAction | RemoveAction],
    *,
    partition_by: Sequence[str],
    properties: CommitProperties,
    attempt: int,
) -> CommitFailedError | None:
    """Commit `actions` to `table` in its own schema; on a concurrent commit, wait a moment
    (longer with each `attempt`) and return the conflict, so the caller retries on a fresh
    snapshot."""
    try:
        table.create_write_transaction(
            list(actions),
            mode="append",
            schema=table.schema(),
            partition_by=list(partition_by) or None,
            commit_properties=properties,
            post_commithook_properties=POST_COMMIT,
        )
    except CommitFailedError as error:
        time.sleep(random.uniform(0.01, 0.05) * min(attempt, 10))
        return error
    return None


def remove_action(live: LiveFile, now_ms: int, *, data_change: bool = True) -> RemoveAction:
    """The Delta remove action of a live file at `now_ms` (a compaction's is no data change)."""
    return RemoveAction(
        # The log's path is URL-encoded and delta-rs encodes again: a value such as 'a b:c%'
        # would otherwise match no file and the old file would stay live.
        path=unquote(live.path),
        data_change=data_change,
        deletion_timestamp=now_ms,
        size=live.size,
        partition_values=live.partition_values,
    )


def _files_to_remove(table: DeltaTable, staged: StagedWrite) -> list[LiveFile]:
    if staged.removal == "none":
        return []
    if staged.removal == "selection":
        return live_files(table, staged.selection)
    live = {f.path for f in live_files(table, staged.selection)}
    if live != staged.expected_live:
        raise InputsMovedError(
            f"a concurrent commit to table {staged.table_name} changed files this write read"
        )
    return list(staged.remove_files)


def _default_record(staged: StagedWrite) -> CommitRecord:
    keys = () if staged.partition_ids == (WHOLE_TABLE_ID,) else staged.partition_ids
    return CommitRecord(
        asset_key=staged.table_name, partition_keys=keys, code_version=None, run_id=None
    )


def _ensure_table(staged: StagedWrite, schema: DeltaSchema) -> None:
    # The first write creates the table empty, then commits like every other write. Creating it
    # with the data instead let two first writers of the same partition both land (delta-rs
    # retried the loser's create as version 1), leaving a mix of both writes.
    if table_exists(staged.root):
        return
    try:
        DeltaTable.create(
            staged.root,
            schema,
            mode="ignore",
            partition_by=list(staged.partition_by) or None,
            name=staged.table_name,
        )
    except DeltaError:
        if not table_exists(staged.root):
            raise


def _add_new_columns(table: DeltaTable, schema: pa.Schema) -> None:
    # An append commit does not change the table schema, so columns the write adds (allowed by
    # merge_for_write) go in first as a metadata-only commit. Should the data commit then fail,
    # the table keeps nullable columns that no file has yet, which every reader treats as nulls.
    existing = set(arrow_schema(table).names)
    new = [field for field in schema if field.name not in existing]
    if new:
        table.alter.add_columns(
            [DeltaField.from_arrow(field) for field in new], post_commithook_properties=POST_COMMIT
        )
        table.update_incremental()


def _stats_json(f: LiveFile) -> str:
    """The statistics a re-added file keeps: its rows, and the min/max and null counts of the
    columns it was read with whose values the log can hold as read (others are left out: a
    reader then assumes the file may hold anything)."""
    stats: dict[str, Any] = {"numRecords": f.num_records}
    columns = [
        c
        for c in f.min_values
        if c in f.max_values
        and _stat_value(f.min_values[c]) is not None
        and _stat_value(f.max_values[c]) is not None
    ]
    if columns:
        stats["minValues"] = {c: _stat_value(f.min_values[c]) for c in columns}
        stats["maxValues"] = {c: _stat_value(f.max_values[c]) for c in columns}
    if f.null_count:
        stats["nullCount"] = dict(f.null_count)
    return json.dumps(stats)


def _stat_value(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime):
        utc = value.astimezone(dt.UTC) if value.tzinfo else value
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    return None


def _txn_app_id(partition_id: str) -> str:
    return f"partlake:{partition_id}"


def files_txn_id(partition_values: Mapping[str, str | None]) -> str:
    """The application transaction id of one table partition's files: a commit that removes
    files of that partition names it, so two such commits conflict (delta-rs does not compare a
    commit's removes with a concurrent commit's `dataChange=false` removes)."""
    return "partlake-files:" + json.dumps(sorted(partition_values.items()))


def files_transactions(files: Iterable[LiveFile], now_ms: int) -> list[Transaction]:
    """One application transaction per table partition of `files` (`files_txn_id`), for a
    commit that removes them."""
    ids = sorted({files_txn_id(f.partition_values) for f in files})
    return [Transaction(txn_id, now_ms) for txn_id in ids]


def _is_conflict(error: Exception, root: str) -> bool:
    if isinstance(error, CommitFailedError):
        return True
    # A writer racing another to create the table: retry as a normal commit.
    return "already exists" in str(error).lower() and table_exists(root)


def _show_values(values: Mapping[str, str | None]) -> str:
    return "|".join(f"{k}={'null' if v is None else v}" for k, v in values.items())
