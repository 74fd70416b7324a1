"""Streaming micro-batches into a Delta table, exactly once: one `append` commit per batch.

Spark Structured Streaming calls `foreachBatch` with a batch id, and replays a batch it did not
record as done: after a crash between the batch's commit and Spark's own bookkeeping, the same
batch id comes again. Delta's idempotent-write contract covers exactly this: each batch commit
carries an application transaction (`txn`) with the query's app id and the batch id as its
version, and a batch whose id the table already holds for that app id commits nothing
(`writer.commit_staged(..., app_transaction=...)` checks it on the snapshot it commits on).
A crash before the commit leaves only unreferenced files (staging, removed later; or published,
removed by vacuum): the replayed batch writes its rows anew. Every input row lands once.

`write_batch` stages the batch like any write (Spark writes Parquet, the driver lists it), finds
the table partitions it touched, and commits them as an `append` whose `CommitRecord` names the
touched partitions, their rows, and the query and batch. `commit_progress` closes a run with a
record-only commit (no files): what the run consumed of its source, for the planner.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.record import WHOLE_TABLE_ID, CommitRecord
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.staging import StagedWrite, discarded_on_failure, new_staging_folder
from dagster_partlake.delta.table import arrow_schema, load_table, table_exists
from dagster_partlake.delta.writer import (
    TransactionDoneError,
    commit_staged,
    stage_partitions,
)
from dagster_partlake.errors import PartitionMismatchError
from dagster_partlake.faults import fault_point

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


def committed_batch(root: str, app_id: str) -> int | None:
    """The newest batch id the table holds for the streaming query `app_id` (None: none)."""
    if not table_exists(root):
        return None
    return load_table(root).transaction_version(app_id)


def write_batch(
    df: DataFrame,
    root: str,
    *,
    app_id: str,
    batch_id: int,
    partition_by: tuple[str, ...],
    partition_id: Callable[[PartitionValues], str | None],
    record: CommitRecord,
    allow_new_columns: bool = False,
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    before_commit: Callable[[StagedWrite], None] | None = None,
) -> BatchCommit:
    """Append micro-batch `batch_id` of the streaming query `app_id` to the table at `root`,
    unless the table holds it already.

    Args:
        partition_by: the table's partition columns (columns of `df`).
        partition_id: a table partition's id given its values (a Dagster partition key), None
            for values outside the asset's partitions.
        record: the commit's record; the touched partitions, their rows and the batch are
            filled in here.
        before_commit: called with the staged batch just before its commit (the asset's quality
            gates; raising stops the batch with nothing committed).

    Raises:
        PartitionMismatchError: rows fall outside the asset's partitions; nothing is committed.
        SchemaMismatchError, CommitConflictError: as for any write; nothing is committed.
    """
    name = table_name or os.path.basename(os.path.abspath(root))
    done = committed_batch(root, app_id)
    if done is not None and done >= batch_id:
        return BatchCommit(batch_id, None, 0, {}, None)
    staged = stage_partitions(
        df,
        root,
        partition_by=partition_by,
        selection=PartitionSelection.everything(),
        partition_ids=[WHOLE_TABLE_ID],
        allow_new_columns=allow_new_columns,
        table_name=name,
        removal="none",
    )
    with discarded_on_failure(staged.staging_dir):
        rows = _rows_by_partition(staged, partition_id, name)
        if before_commit is not None:
            before_commit(staged)
    staged = replace(staged, partition_ids=tuple(sorted(rows)) or (WHOLE_TABLE_ID,))
    keys = tuple(k for k in sorted(rows) if k != WHOLE_TABLE_ID)
    batch_record = replace(
        record,
        kind="append",
        partition_keys=keys,
        rows_by_partition=rows,
        stream_query=app_id,
        stream_batch=batch_id,
        metrics={"rows_inserted": staged.num_records},
    )
    fault_point("stream_batch")
    try:
        result = commit_staged(
            staged,
            record=batch_record,
            max_attempts=max_attempts,
            app_transaction=(app_id, batch_id),
        )
    except TransactionDoneError:
        return BatchCommit(batch_id, None, 0, {}, None)
    return BatchCommit(
        batch_id, result.version, staged.num_records, rows, result.commit_time_ms, result.attempts
    )


def _rows_by_partition(
    staged: StagedWrite, partition_id: Callable[[PartitionValues], str | None], name: str
) -> dict[str, int]:
    rows: dict[str, int] = {}
    outside = []
    for f in staged.files:
        key = partition_id(f.partition_values) if staged.partition_by else WHOLE_TABLE_ID
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
    root: str, record: CommitRecord, *, table_name: str | None = None
) -> int | None:
    """A record-only commit (no files) closing a streaming run: the planner reads what the run
    consumed from it. Returns its version (None: no table yet, nothing to close)."""
    if not table_exists(root):
        return None
    table = load_table(root, table_name=table_name)
    staged = StagedWrite(
        root=os.path.abspath(root),
        table_name=table_name or os.path.basename(os.path.abspath(root)),
        staging_dir=new_staging_folder(root),  # never created: the commit adds no file
        files=(),
        schema=arrow_schema(table),
        partition_by=tuple(table.metadata().partition_columns),
        selection=PartitionSelection.everything(),
        partition_ids=(WHOLE_TABLE_ID,),
        removal="none",
    )
    result = commit_staged(
        staged, record=replace(record, kind="append", partition_keys=(), rows_by_partition={})
    )
    return result.version
