"""The `append` kind: the run's rows added to the table, nothing removed.

A retried step whose append already landed (the newest record of its partitions is this run's)
adds nothing again and reports that commit. For an append on the dimension columns, a run
partition that got no rows keeps its lastUpdated and is recorded as `kept`, so it does not look
written by someone else.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.files import WrittenFiles, discarded_on_failure
from dagster_partlake.delta.transaction import Actions
from dagster_partlake.kinds.check import check_written, extras_of
from dagster_partlake.kinds.outcome import KindWrite, unless_written
from dagster_partlake.kinds.session import WriteSession
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import CommitResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_partlake.delta.snapshot import Snapshot


def write_append(df: DataFrame, session: WriteSession, record: CommitRecord) -> KindWrite:
    """Add `df`'s rows to the table in one commit."""
    previous = _same_run_commit(session, record)
    if previous is not None:
        return KindWrite(None, previous, dict(previous.metrics))
    extras = extras_of(df, session.target.check)
    written = session.write(df, selection=session.replaced, extras=extras)
    with discarded_on_failure(written):
        gates = check_written(df.sparkSession, session, written, extras)
        metrics = {
            "rows_inserted": written.num_records,
            "rows_updated": 0,
            "rows_deleted": 0,
            "rows_unchanged": 0,
        }
        record = replace(record, metrics=metrics, **unit_fields(session, written))
        once = session.target.once_per_inputs

        def actions(snapshot: Snapshot) -> Actions:
            unless_written(snapshot, record, once)
            return Actions(adds=written.files)

        committed, landed = session.commit(
            actions, record, schema=written.schema, partition_ids=session.target.partition_ids
        )
    result = CommitResult.of(
        committed, landed, written.num_records, written.seconds, written.facts_seconds
    )
    return KindWrite(result, result.record, metrics, gates_seconds=gates)


def unit_fields(session: WriteSession, written: WrittenFiles) -> dict[str, Any]:
    """rows_by_partition and kept of an append or merge: per run partition on the dimension
    columns; unknown (None: every run partition counts as written) when decoupled."""
    if session.target.decoupled:
        return {"rows_by_partition": None}
    rows = session.rows_by_key(written)
    return {
        "rows_by_partition": rows,
        "kept": session.last_updated([k for k, n in rows.items() if n == 0]),
    }


def _same_run_commit(session: WriteSession, record: CommitRecord) -> CommitRecord | None:
    """This run's earlier commit of the same partitions, if it landed (a retried step)."""
    if record.run_id is None:
        return None
    first = record.partition_ids[0]
    found = session.records([first]).get(first)
    if (
        found is not None
        and found.kind == "append"
        and found.run_id == record.run_id
        and found.partition_ids == record.partition_ids
    ):
        return found
    return None
