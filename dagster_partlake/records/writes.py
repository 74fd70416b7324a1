"""The storage adapter's own write with its commit record: `write_partitions` and
`commit_staged` (phase 2 of `write_partitions`, after `delta.writer.stage_partitions`), and what
they return.

One transaction (`delta.transaction.commit`) adds the staged files and removes every live file of
their partitions, naming each partition id in an application transaction so that two writers of
one partition conflict and the last one wins whole; the commit carries the record's payload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.files import discarded_on_failure
from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot
from dagster_partlake.delta.transaction import Actions, Committed, commit
from dagster_partlake.delta.writer import StagedWrite, StageSeconds, stage_partitions
from dagster_partlake.records.queries import same_inputs_commit
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


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
    commit_seconds: float = 0.0  # the transaction, retries included
    # Of which making the files part of the table before the commit: nothing since Spark writes
    # them where they live (kept at 0 for what reads it).
    publish_seconds: float = 0.0
    staged: StageSeconds = StageSeconds()  # the write's time before the commit

    @classmethod
    def of(
        cls,
        committed: Committed,
        record: CommitRecord,
        num_records: int,
        spark: float = 0.0,
        listing: float = 0.0,
    ) -> CommitResult:
        actions = committed.actions
        return cls(
            version=committed.version,
            num_records=num_records,
            files_added=len(actions.adds),
            files_removed=len(actions.removes),
            attempts=committed.attempts,
            commit_time_ms=committed.commit_time_ms,
            record=replace(record, table_version=committed.version),
            rows_removed=sum(f.num_records or 0 for f in actions.removes),
            commit_seconds=committed.seconds,
            staged=StageSeconds(spark=spark, listing=listing),
        )


class AlreadyWritten(Exception):  # noqa: N818 - an outcome, not a failure
    """Nothing was committed: another run already committed these partitions from the same
    inputs (`once_per_inputs`); `record` is its commit."""

    def __init__(self, record: CommitRecord) -> None:
        super().__init__(f"already written by run {record.run_id} from the same inputs")
        self.record = record


def write_partitions(
    df: DataFrame,
    root: str | TableLocation,
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
        root: the table's path or location (created on the first write).
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
            partitions from the same inputs; if there is one, delete the staged files and raise
            `AlreadyWritten` instead of committing them a second time.
        app_transaction: (app id, version) of a Delta application transaction (`txn`) the
            commit carries, Delta's idempotent-write contract: when the table already holds that
            app id at this version or later, nothing is committed.

    Raises:
        AlreadyWritten: with `once_per_inputs`, another run committed the same.
        TransactionDoneError: the table already holds `app_transaction`; the files are deleted.
        CommitConflictError: concurrent writers kept conflicting for `max_attempts` attempts.
        TableUnreadableError: the table's log is damaged.
    """
    record = record or _default_record(staged)

    def actions(snapshot: Snapshot) -> Actions:
        if once_per_inputs and (prior := same_inputs_commit(snapshot, record)) is not None:
            raise AlreadyWritten(prior)
        removes = snapshot.live_files(staged.selection) if staged.removal == "selection" else []
        return Actions(adds=staged.files, removes=removes)

    with discarded_on_failure(staged.written):
        committed, landed = commit_record(
            staged.location,
            staged.snapshot,
            actions,
            record,
            name=staged.table_name,
            schema=staged.schema,
            partition_by=staged.partition_by,
            partition_ids=staged.partition_ids,
            app_transaction=app_transaction,
            max_attempts=max_attempts,
        )
    return CommitResult.of(
        committed,
        landed,
        staged.num_records,
        staged.written.seconds,
        staged.written.facts_seconds,
    )


def commit_record(
    location: TableLocation,
    snapshot: Snapshot | None,
    actions: Callable[[Snapshot], Actions],
    record: CommitRecord,
    *,
    name: str,
    schema: pa.Schema | None,
    partition_by: Sequence[str],
    partition_ids: Sequence[str],
    app_transaction: tuple[str, int] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    finish: Callable[[CommitRecord], CommitRecord] | None = None,
) -> tuple[Committed, CommitRecord]:
    """Commit `actions` through the one transaction (`delta.transaction.commit`) with `record`
    as the commit's payload (`finish` completes it once an attempt's actions are known); returns
    the commit and the record as committed (its write id, time and version)."""
    landed: dict[str, CommitRecord] = {}

    def payload(commit_id: str, now_ms: int) -> Mapping[str, Any]:
        complete = finish(record) if finish is not None else record
        landed["record"] = complete.committed(write_id=commit_id, commit_time_ms=now_ms)
        return landed["record"].to_commit_info()

    done = commit(
        location,
        snapshot,
        actions,
        payload=payload,
        name=name,
        schema=schema,
        partition_by=partition_by,
        partition_ids=partition_ids,
        app_transaction=app_transaction,
        max_attempts=max_attempts,
    )
    return done, replace(landed["record"], table_version=done.version)


def _default_record(staged: StagedWrite) -> CommitRecord:
    keys = () if staged.partition_ids == (WHOLE_TABLE_ID,) else staged.partition_ids
    return CommitRecord(
        asset_key=staged.table_name, partition_keys=keys, code_version=None, run_id=None
    )
