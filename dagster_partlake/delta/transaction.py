"""The one way partlake commits to a Delta table: `commit`.

Every write, merge, scd2 apply, append, streaming micro-batch, row delete, restore and compaction
commits here, so conflicts are handled once:

- The caller gives the snapshot its work is based on and a function from a snapshot to the
  actions to commit (`Actions`: files to add, live files to remove). On a conflict, the snapshot
  follows only the commits made since (`Snapshot.refresh`) and the function is asked again; it
  raises (`InputsMovedError`) when those commits changed what the work read, and the caller
  starts over. One retry loop, with jitter, up to `max_attempts`.
- Each commit names its partitions in Delta application transactions (`txn`, app id
  `partlake:<partition id>`): two commits of the same partition conflict, the loser retries on
  the newer snapshot, so the last writer wins a whole partition. A commit that removes files of a
  table partition also names it (`files_txn_id`): delta-rs does not compare a commit's removes with
  a concurrent `dataChange=false` remove (a compaction). An idempotent write (a streaming batch)
  names its own `(app id, version)` and commits nothing when the table already holds it.
- The commit's custom metadata is the caller's opaque payload (the commit record), plus this
  commit's id (`COMMIT_ID_KEY`), by which the version it landed at is found among the commits
  after the snapshot: delta-rs does not return it.

The first commit to a table creates it empty (version 0), then commits like any other: creating
it together with data let two first writers of one partition both land (delta-rs retried the
loser's create as version 1). Columns a write adds go in first, by a metadata-only commit.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.payload import commit_metadata, with_actions
from dagster_partlake.delta.snapshot import Snapshot, open_snapshot, partition_txn_id
from dagster_partlake.delta.table import LiveFile, note_read, read_commit_lines, unreadable
from dagster_partlake.errors import CommitConflictError, PartlakeError
from dagster_partlake.faults import fault_point
from dagster_partlake.layout import LOG_DIR, commit_version
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    from dagster_partlake.delta.files import WrittenFile

# The commit's own id in its custom metadata: how its version is found once it landed.
COMMIT_ID_KEY = "partlake_commit"
# A commit with more actions than this may push the JSON commits since the newest checkpoint
# past `CHECKPOINT_LOG_BYTES` (delta-rs checkpoints every 100 commits: below this size per
# commit, 100 of them stay under it), so after it the log's size is checked.
_LARGE_COMMIT_ACTIONS = 3_000
# What a cold read of the log costs is the size of the JSON commits after the newest
# checkpoint, not their number: one commit that rewrote a million partitions is 300 MB of JSON.
CHECKPOINT_LOG_BYTES = 64 * 2**20


class InputsMovedError(CommitConflictError):
    """Files the work read were removed by a concurrent commit: it must be done again."""


class TransactionDoneError(PartlakeError):
    """The table already holds the application transaction an idempotent write carries: an
    earlier attempt of the same write landed; nothing was committed."""

    def __init__(self, app_id: str, version: int) -> None:
        super().__init__(
            f"the table already holds transaction {app_id} at version {version} or later"
        )
        self.app_id = app_id
        self.version = version


@dataclass(frozen=True)
class Readd:
    """A file of an earlier version made live again as it is (a restore, a merge's roll back),
    with the statistics JSON the log held for it (None: those of `file`)."""

    file: LiveFile
    stats: str | None = None


@dataclass(frozen=True)
class Actions:
    """What one commit does: files added (new ones, or earlier ones made live again) and live
    files removed. `modification_times`: per added file the time to give it (ms; default:
    the commit's time, which is what moves a partition's lastUpdated)."""

    adds: Sequence[WrittenFile | Readd] = ()
    removes: Sequence[LiveFile] = ()
    data_change: bool = True
    modification_times: Mapping[str, int] = field(default_factory=dict)
    # Partitions this attempt writes, beyond those the commit was given (a merge's roll back, a
    # restore's changed partitions): named like them (`partition_txn_id`).
    partition_ids: Sequence[str] = ()

    @property
    def count(self) -> int:
        return len(self.adds) + len(self.removes)


@dataclass(frozen=True)
class Committed:
    """A commit that landed."""

    version: int
    attempts: int
    commit_time_ms: int
    actions: Actions
    commit_id: str
    seconds: float = 0.0


Payload = Callable[[str, int], Mapping[str, Any]]  # (commit id, commit time ms) -> metadata


def commit(
    location: TableLocation,
    snapshot: Snapshot | None,
    actions: Callable[[Snapshot], Actions],
    *,
    payload: Payload,
    name: str,
    schema: pa.Schema | None = None,
    partition_by: Sequence[str] = (),
    partition_ids: Sequence[str] = (),
    app_transaction: tuple[str, int] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    commit_id: str | None = None,
) -> Committed:
    """Commit `actions(snapshot)` to the table at `location`, retrying on conflicts.

    Args:
        snapshot: what the caller's work read (None: there is no table yet; it is created with
            `schema` and `partition_by`).
        actions: the commit's actions on a snapshot; asked again on the newer snapshot after a
            conflict. May raise `InputsMovedError` (the work must be redone).
        payload: the commit's custom metadata for a commit id and commit time (ms).
        schema: the write's schema (columns it adds are added first); None: the table's.
        partition_ids: the partitions the commit writes (their `txn` ids).
        app_transaction: (app id, version) of an idempotent write.
        commit_id: the commit's id (default: a new one); the payload should record it.

    Raises:
        InputsMovedError: `actions` found its inputs changed.
        TransactionDoneError: the table already holds `app_transaction`.
        CommitConflictError: concurrent writers kept conflicting for `max_attempts` attempts.
        TableUnreadableError: the log is damaged.
        TableFeatureError: the table needs a protocol feature partlake cannot write.
    """
    from deltalake.exceptions import CommitFailedError, DeltaError

    started = time.perf_counter()
    commit_id = commit_id or uuid.uuid4().hex
    snapshot = _writable(location, snapshot, name, schema, partition_by, max_attempts)
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        if attempt > 1:
            snapshot.refresh()
        _check_not_done(snapshot, app_transaction)
        todo = actions(snapshot)
        if attempt == 1:
            # The work is done (files written), nothing committed yet: where fault drills kill.
            fault_point("before_commit", name)
        now_ms = int(time.time() * 1000)
        metadata = _metadata(payload, commit_id, now_ms, todo)
        before = snapshot.version
        try:
            _commit_once(
                snapshot.table, todo, metadata, now_ms, schema, partition_ids, app_transaction
            )
        except (CommitFailedError, DeltaError) as error:
            if not _is_conflict(error):
                raise unreadable(location, error, table_name=name) from error
            last_error = error
            # Jitter spreads the retries of writers that collided at the same moment.
            time.sleep(random.uniform(0.01, 0.05) * min(attempt, 10))
            continue
        version = landed_version(location, before, commit_id, name)
        fault_point("after_commit", name)
        if todo.count > _LARGE_COMMIT_ACTIONS:
            checkpoint_when_due(location)
        return Committed(
            version, attempt, now_ms, todo, commit_id, seconds=time.perf_counter() - started
        )
    raise CommitConflictError(
        f"could not commit to table {name} after {max_attempts} attempts because concurrent "
        f"writers kept changing it (last error: {last_error}); lower the number of parallel "
        "writers of this table or raise the IO manager's max_commit_attempts. Nothing was "
        "committed."
    )


def _metadata(payload: Payload, commit_id: str, now_ms: int, todo: Actions) -> dict[str, Any]:
    """The commit's custom metadata: the caller's payload, saying what this attempt's actions
    are (`with_actions`), and the commit's id."""
    counts = {"adds": len(todo.adds), "removes": len(todo.removes)}
    metadata = with_actions(payload(commit_id, now_ms), **counts, data_change=todo.data_change)
    return {**metadata, COMMIT_ID_KEY: commit_id}


def _writable(
    location: TableLocation,
    snapshot: Snapshot | None,
    name: str,
    schema: pa.Schema | None,
    partition_by: Sequence[str],
    max_attempts: int,
) -> Snapshot:
    """The snapshot to commit on: the table created when there is none, checked writable, with
    the columns `schema` adds."""
    if snapshot is None:
        snapshot = created(location, name, schema, partition_by)
    snapshot.check_writable()
    if schema is not None:
        _add_new_columns(snapshot, schema, name, max_attempts)
    return snapshot


def _check_not_done(snapshot: Snapshot, app_transaction: tuple[str, int] | None) -> None:
    """Raise `TransactionDoneError` when the table already holds `app_transaction`."""
    if app_transaction is None:
        return
    done = snapshot.transaction_version(app_transaction[0])
    if done is not None and done >= app_transaction[1]:
        raise TransactionDoneError(app_transaction[0], done)


def _commit_once(
    table: DeltaTable,
    todo: Actions,
    metadata: Mapping[str, Any],
    now_ms: int,
    schema: pa.Schema | None,
    partition_ids: Sequence[str],
    app_transaction: tuple[str, int] | None,
) -> None:
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import CommitProperties, Transaction

    transactions = [
        *(
            Transaction(partition_txn_id(pid), now_ms)
            for pid in sorted({*partition_ids, *todo.partition_ids})
        ),
        *(Transaction(txn, now_ms) for txn in files_txn_ids(todo.removes)),
        *([Transaction(*app_transaction)] if app_transaction is not None else []),
    ]
    table.create_write_transaction(
        [
            *_add_actions(todo, now_ms),
            *(remove_action(f, now_ms, todo.data_change) for f in todo.removes),
        ],
        mode="append",
        schema=DeltaSchema.from_arrow(schema) if schema is not None else table.schema(),
        partition_by=list(table.metadata().partition_columns) or None,
        commit_properties=CommitProperties(
            custom_metadata=dict(metadata), app_transactions=transactions
        ),
        post_commithook_properties=post_commit(),
    )


def post_commit() -> Any:
    """Checkpoints as delta-rs makes them (every `delta.checkpointInterval` commits, 100 by
    default), but never its expired-log cleanup: that deletes JSON commits older than
    delta.logRetentionDuration whatever partlake records they hold (`checkpoint_table` trims the
    log keeping those)."""
    from deltalake.transaction import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)


def _add_actions(todo: Actions, now_ms: int) -> list[AddAction]:
    from deltalake.transaction import AddAction

    from dagster_partlake.delta.files import WrittenFile

    adds = []
    for item in todo.adds:
        if isinstance(item, WrittenFile):
            adds.append(
                AddAction(
                    # delta-rs URL-encodes the path itself when writing the log.
                    path=item.relative_path,
                    size=item.size,
                    partition_values=item.partition_values,
                    modification_time=todo.modification_times.get(item.relative_path, now_ms),
                    data_change=todo.data_change,
                    stats=item.stats_json(),
                )
            )
        else:
            live = item.file
            adds.append(
                AddAction(
                    path=unquote(live.path),
                    size=live.size,
                    partition_values=live.partition_values,
                    modification_time=todo.modification_times.get(live.path, now_ms),
                    data_change=todo.data_change,
                    stats=item.stats or stats_json(live),
                )
            )
    return adds


def remove_action(live: LiveFile, now_ms: int, data_change: bool = True) -> RemoveAction:
    """The Delta remove action of a live file at `now_ms` (a compaction's is no data change)."""
    from deltalake.transaction import RemoveAction

    return RemoveAction(
        # The log's path is URL-encoded and delta-rs encodes again: a value such as 'a b:c%'
        # would otherwise match no file and the old file would stay live.
        path=unquote(live.path),
        data_change=data_change,
        deletion_timestamp=now_ms,
        size=live.size,
        partition_values=live.partition_values,
    )


def files_txn_id(partition_values: Mapping[str, str | None]) -> str:
    """The application transaction id of one table partition's files: a commit that removes
    files of that partition names it, so two such commits conflict (delta-rs does not compare a
    commit's removes with a concurrent commit's `dataChange=false` removes)."""
    return "partlake-files:" + json.dumps(sorted(partition_values.items()))


def files_txn_ids(files: Iterable[LiveFile]) -> list[str]:
    return sorted({files_txn_id(f.partition_values) for f in files})


def created(
    location: TableLocation, name: str, schema: pa.Schema | None, partition_by: Sequence[str]
) -> Snapshot:
    """The table's snapshot, creating it empty first (version 0) if there is none."""
    from deltalake import DeltaTable
    from deltalake import Schema as DeltaSchema
    from deltalake.exceptions import DeltaError

    if schema is None:
        raise PartlakeError(f"there is no Delta table for {name} at {location} to commit to.")
    try:
        DeltaTable.create(
            location.delta_uri,
            DeltaSchema.from_arrow(schema),
            mode="ignore",
            partition_by=list(partition_by) or None,
            name=name,
            storage_options=location.delta_options,
        )
    except DeltaError:
        pass  # another writer created it meanwhile: open theirs
    snapshot = open_snapshot(location, table_name=name)
    assert snapshot is not None
    return snapshot


def _add_new_columns(snapshot: Snapshot, schema: pa.Schema, name: str, max_attempts: int) -> None:
    # An append commit does not change the table schema, so columns the write adds (allowed by
    # `merge_for_write`) go in first as a metadata-only commit. Should the data commit then fail,
    # the table keeps nullable columns that no file has yet, which every reader treats as nulls.
    # Writers of other partitions may add the same columns at the same moment (their data has
    # them too): the loser follows the log and finds them there.
    from deltalake import Field as DeltaField
    from deltalake.exceptions import CommitFailedError

    last_error: Exception | None = None
    wanted = [f for f in schema if f.name not in snapshot.schema.names]
    for attempt in range(1, max_attempts + 1):
        table_schema = snapshot.schema
        new = [f for f in wanted if f.name not in table_schema.names]
        if last_error is not None:
            _check_added_alike(wanted, table_schema, name)
        if not new:
            return
        try:
            snapshot.table.alter.add_columns(
                [DeltaField.from_arrow(f) for f in new], post_commithook_properties=post_commit()
            )
        except CommitFailedError as error:
            last_error = error
            time.sleep(random.uniform(0.01, 0.05) * min(attempt, 10))
        snapshot.refresh()
        if last_error is None:
            return
    raise CommitConflictError(
        f"could not add the new columns of table {name} after {max_attempts} attempts because "
        f"concurrent writers kept changing its metadata (last error: {last_error}). Nothing "
        "was committed."
    )


def _check_added_alike(added: Sequence[pa.Field], table_schema: pa.Schema, name: str) -> None:
    """Refuse columns a concurrent writer added with other types than this write's (compared
    as Delta types: Arrow has several for one Delta type)."""
    from deltalake import Field as DeltaField

    from dagster_partlake.errors import SchemaMismatchError

    changed = [
        f"{f.name} ({table_schema.field(f.name).type}, this write: {f.type})"
        for f in added
        if f.name in table_schema.names
        and DeltaField.from_arrow(table_schema.field(f.name)).type != DeltaField.from_arrow(f).type
    ]
    if changed:
        raise SchemaMismatchError(
            f"a concurrent writer of table {name} added columns with other types: "
            f"{', '.join(changed)}. Nothing was committed; run again to write on its schema."
        )


def landed_version(location: TableLocation, before: int, commit_id: str, name: str) -> int:
    """The version our commit landed at: the first commit after `before` carrying its id
    (read forward from there, only the commits made since the snapshot)."""
    version = find_commit(location, before, commit_id)
    if version is None:
        raise PartlakeError(
            f"the commit to table {name} succeeded but its id {commit_id} is not in "
            f"{location}'s log after version {before}; the table was replaced meanwhile."
        )
    return version


def find_commit(location: TableLocation, before: int, commit_id: str) -> int | None:
    """The first commit after version `before` carrying `commit_id` (`COMMIT_ID_KEY`, in its
    commitInfo or its userMetadata), None if there is none."""
    version = before + 1
    while True:
        try:
            lines = read_commit_lines(location, version)
        except FileNotFoundError:
            return None
        for line in lines:
            if line.startswith('{"commitInfo"') and commit_id in line:
                info = commit_metadata(json.loads(line)["commitInfo"])
                if info.get(COMMIT_ID_KEY) == commit_id:
                    return version
        version += 1


def checkpoint_when_due(
    where: str | TableLocation, *, log_bytes: int = CHECKPOINT_LOG_BYTES
) -> bool:
    """Write a checkpoint when the JSON commits after the newest checkpoint hold more than
    `log_bytes` bytes; whether it wrote one. A failure only leaves the log as it was: the next
    large commit tries again."""
    from deltalake.exceptions import DeltaError

    from dagster_partlake.delta.table import delta_table

    location = as_location(where)
    note_read("list", location)
    entries = location.store.list_folder(LOG_DIR)
    checkpoints = [
        int(e.name[:20]) for e in entries if e.name[:20].isdigit() and ".checkpoint." in e.name
    ]
    newest = max(checkpoints, default=-1)
    size = sum(e.size for e in entries if (v := commit_version(e.name)) is not None and v > newest)
    if size <= log_bytes:
        return False
    try:
        delta_table(location).create_checkpoint()
    except DeltaError:
        return False  # another writer's commit or checkpoint raced it: nothing is lost
    return True


def stats_json(f: LiveFile) -> str:
    """The statistics a re-added file keeps: its rows, and the min/max and null counts of the
    columns it was read with whose values the log can hold as read (others are left out: a
    reader then assumes the file may hold anything)."""
    import datetime as dt

    def value(v: Any) -> Any:
        if isinstance(v, bool | int | float | str):
            return v
        if isinstance(v, dt.datetime):
            utc = v.astimezone(dt.UTC) if v.tzinfo else v
            return utc.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        if isinstance(v, dt.date):
            return v.isoformat()
        return None

    stats: dict[str, Any] = {"numRecords": f.num_records}
    columns = [
        c
        for c in f.min_values
        if c in f.max_values
        and value(f.min_values[c]) is not None
        and value(f.max_values[c]) is not None
    ]
    if columns:
        stats["minValues"] = {c: value(f.min_values[c]) for c in columns}
        stats["maxValues"] = {c: value(f.max_values[c]) for c in columns}
    if f.null_count:
        stats["nullCount"] = dict(f.null_count)
    return json.dumps(stats)


def _is_conflict(error: Exception) -> bool:
    from deltalake.exceptions import CommitFailedError

    if isinstance(error, CommitFailedError):
        return True
    # A writer racing another to create the table: retry as a normal commit.
    return "already exists" in str(error).lower() or "version already exists" in str(error).lower()
