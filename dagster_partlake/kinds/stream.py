"""Streaming micro-batches into a Delta table, exactly once: one `append` commit per batch.

Spark Structured Streaming calls `foreachBatch` with a batch id, and replays a batch it did not
record as done: after a crash between the batch's commit and Spark's own bookkeeping, the same
batch id comes again. Delta's idempotent-write contract covers exactly this: each batch commit
carries an application transaction (`txn`) with the query's app id and the batch id as its
version, and a batch whose id the table already holds for that app id commits nothing
(`delta.transaction.commit(..., app_transaction=...)` checks it on the snapshot it commits on).
A crash before the commit leaves only unreferenced files, which no reader sees and vacuum
removes: the replayed batch writes its rows anew. Every input row lands once.

`write_batch` writes the batch like any write (one Spark job, which returns the files' facts),
finds the table partitions it touched, and commits them as an `append` whose `CommitRecord` names
the touched partitions, their rows, and the query and batch. `commit_progress` closes a run with a
record-only commit (no files): what the run consumed of its source, for the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.files import WrittenFiles, discarded_on_failure, write_files
from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.delta.snapshot import Snapshot, open_snapshot
from dagster_partlake.delta.transaction import Actions, TransactionDoneError, commit
from dagster_partlake.delta.writer import table_schema
from dagster_partlake.errors import PartitionMismatchError
from dagster_partlake.faults import fault_point
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PartitionValues = Mapping[str, str | None]


@dataclass(frozen=True)
class BatchCommit:
    """What one micro-batch committed (`version` None: an earlier attempt already had)."""

    batch_id: int
    version: int | None
    rows: int
    rows_by_partition: Mapping[str, int]  # partition id -> rows added
    commit_time_ms: int | None
    attempts: int = 1

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(sorted(self.rows_by_partition))


def committed_batch(root: str | TableLocation, app_id: str) -> int | None:
    """The newest batch id the table holds for the streaming query `app_id` (None: none)."""
    snapshot = open_snapshot(root, must_exist=False)
    return snapshot.transaction_version(app_id) if snapshot is not None else None


def write_batch(
    df: DataFrame,
    root: str | TableLocation,
    *,
    app_id: str,
    batch_id: int,
    partition_by: tuple[str, ...],
    partition_id: Callable[[PartitionValues], str | None],
    record: CommitRecord,
    allow_new_columns: bool = False,
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    before_commit: Callable[[WrittenFiles], None] | None = None,
) -> BatchCommit:
    """Append micro-batch `batch_id` of the streaming query `app_id` to the table at `root`,
    unless the table holds it already.

    Args:
        partition_by: the table's partition columns (columns of `df`).
        partition_id: a table partition's id given its values (a Dagster partition key), None
            for values outside the asset's partitions.
        record: the commit's record; the touched partitions, their rows and the batch are
            filled in here.
        before_commit: called with the written batch just before its commit (raising stops the
            batch with nothing committed).

    Raises:
        PartitionMismatchError: rows fall outside the asset's partitions; nothing is committed.
        SchemaMismatchError, CommitConflictError: as for any write; nothing is committed.
    """
    location = as_location(root)
    name = table_name or location.name
    snapshot = open_snapshot(location, table_name=name, must_exist=False)
    done = snapshot.transaction_version(app_id) if snapshot is not None else None
    if done is not None and done >= batch_id:
        return BatchCommit(batch_id, None, 0, {}, None)
    schema = table_schema(df, snapshot, partition_by, name, allow_new_columns=allow_new_columns)
    written = write_files(df, location, partition_by=partition_by, schema=schema)
    with discarded_on_failure(written):
        rows = _rows_by_partition(written, partition_id, name)
        if before_commit is not None:
            before_commit(written)
        keys = tuple(k for k in sorted(rows) if k != WHOLE_TABLE_ID)
        batch_record = replace(
            record,
            kind="append",
            partition_keys=keys,
            rows_by_partition=rows,
            stream_query=app_id,
            stream_batch=batch_id,
            metrics={"rows_inserted": written.num_records},
        )
        fault_point("stream_batch")
        try:
            committed = commit(
                location,
                snapshot,
                lambda _snapshot: Actions(adds=written.files),
                payload=_payload(batch_record),
                name=name,
                schema=schema,
                partition_by=partition_by,
                partition_ids=sorted(rows) or [WHOLE_TABLE_ID],
                app_transaction=(app_id, batch_id),
                max_attempts=max_attempts,
            )
        except TransactionDoneError:
            written.discard()
            return BatchCommit(batch_id, None, 0, {}, None)
    return BatchCommit(
        batch_id,
        committed.version,
        written.num_records,
        rows,
        committed.commit_time_ms,
        committed.attempts,
    )


def _payload(record: CommitRecord) -> Callable[[str, int], Mapping[str, Any]]:
    def payload(commit_id: str, now_ms: int) -> Mapping[str, Any]:
        return record.committed(write_id=commit_id, commit_time_ms=now_ms).to_commit_info()

    return payload


def _rows_by_partition(
    written: WrittenFiles, partition_id: Callable[[PartitionValues], str | None], name: str
) -> dict[str, int]:
    rows: dict[str, int] = {}
    outside = []
    for f in written.files:
        key = partition_id(f.partition_values) if written.partition_by else WHOLE_TABLE_ID
        if key is None:
            outside.append(f.partition_values)
            continue
        rows[key] = rows.get(key, 0) + f.num_records
    if outside:
        shown = sorted({"/".join(f"{c}={v}" for c, v in values.items()) for values in outside})
        raise PartitionMismatchError(
            f"a micro-batch for table {name} has rows outside the asset's partitions: "
            f"{', '.join(shown[:5])}{' ...' if len(shown) > 5 else ''}; filter them out in the "
            "asset (or widen its partitions definition). Nothing of the batch was committed."
        )
    return rows


def commit_progress(
    root: str | TableLocation, record: CommitRecord, *, table_name: str | None = None
) -> int | None:
    """A record-only commit (no files) closing a streaming run: the planner reads what the run
    consumed from it. Returns its version (None: no table yet, nothing to close)."""
    location = as_location(root)
    name = table_name or location.name
    snapshot: Snapshot | None = open_snapshot(location, table_name=name, must_exist=False)
    if snapshot is None:
        return None
    closing = replace(record, kind="append", partition_keys=(), rows_by_partition={})
    committed = commit(
        location,
        snapshot,
        lambda _snapshot: Actions(),
        payload=_payload(closing),
        name=name,
        partition_ids=[WHOLE_TABLE_ID],
    )
    return committed.version
