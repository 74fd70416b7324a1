"""The `partition`, `table` and `tracked` kinds: the run's partitions replaced whole.

Spark writes the new files (one job, `WriteSession.write`), the quality gates judge them from the
counts that job took (`kinds.check`), and one commit adds them and removes every live file of the
run's partitions. `tracked` (early cutoff) has the job also sum each row's content hash
(`kinds.tracked`): a partition whose new content equals what its last write recorded, and that
nobody rewrote since, keeps its files and lastUpdated, so nothing downstream goes stale.

A guarded run that writes nothing (`record_only`) commits its record without files: the run's
partitions keep their data and lastUpdated, and the record says what was consumed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dagster_partlake.delta.files import Extras, WrittenFiles, discarded_on_failure
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.transaction import Actions
from dagster_partlake.kinds.check import check_written, extras_of
from dagster_partlake.kinds.outcome import KindWrite, unless_written
from dagster_partlake.kinds.session import WriteSession
from dagster_partlake.kinds.tracked import content_hashes, hash_extras, unchanged
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import CommitResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_partlake.delta.snapshot import Snapshot


def write_replace(df: DataFrame, session: WriteSession, record: CommitRecord) -> KindWrite:
    """Replace the run's partitions (the whole table for `table`) with `df`'s rows."""
    target = session.target
    tracked = target.kind.kind == "tracked"
    extras = extras_of(df, target.check)
    if tracked:
        extras = replace(extras, hashes={**extras.hashes, **hash_extras(df, target.partition_by)})
    written = session.write(df, selection=session.replaced, extras=extras)
    with discarded_on_failure(written):
        rows = session.rows_by_key(written)
        gates = check_written(df.sparkSession, session, written, extras)
        record = replace(record, rows_by_partition=rows)
        kept: dict[str, int] = {}
        removal = session.replaced
        if tracked:
            hashes = content_hashes(session, written)
            kept = unchanged(session, hashes)
            record = replace(record, content_hashes=hashes, kept=kept)
            if kept:
                dropped = [f for f in written.files if target.key_of(f.partition_values) in kept]
                written = written.without(dropped)
                changed = [k for k in target.keys if k not in kept]
                removal = target.selection(changed) if changed else PartitionSelection.nothing()
        result = _commit(session, written, record, removal)
    metrics = {
        "rows_inserted": written.num_records,
        "rows_updated": 0,
        "rows_deleted": result.rows_removed,
        "rows_unchanged": sum(rows.get(k, 0) for k in kept),
    }
    return KindWrite(result, result.record, metrics, tuple(sorted(kept)), gates_seconds=gates)


def record_only(df: DataFrame, session: WriteSession, record: CommitRecord) -> KindWrite:
    """A commit without files (a run guard said skip)."""
    metrics = {"rows_inserted": 0, "rows_updated": 0, "rows_deleted": 0, "rows_unchanged": 0}
    target = session.target
    fields: dict[str, object] = {"rows_by_partition": None}
    if not target.decoupled:
        # Not written: each partition keeps the lastUpdated it has.
        fields = {
            "rows_by_partition": dict.fromkeys(target.partition_ids, 0),
            "kept": session.last_updated(target.partition_ids),
        }
    record = replace(record, metrics=metrics, **fields)  # type: ignore[arg-type]
    empty = WrittenFiles(session.location, (), session.schema_of(df), target.partition_by)
    result = _commit(session, empty, record, PartitionSelection.nothing())
    return KindWrite(result, result.record, metrics)


def _commit(
    session: WriteSession,
    written: WrittenFiles,
    record: CommitRecord,
    removal: PartitionSelection,
) -> CommitResult:
    """One commit: the written files added, the live files of `removal` removed."""
    once = session.target.once_per_inputs

    def actions(snapshot: Snapshot) -> Actions:
        unless_written(snapshot, record, once)
        return Actions(adds=written.files, removes=snapshot.live_files(removal))

    committed, landed = session.commit(
        actions,
        record,
        schema=written.schema,
        partition_ids=session.target.partition_ids,
    )
    return CommitResult.of(
        committed, landed, written.num_records, written.seconds, written.facts_seconds
    )


__all__ = ["Extras", "record_only", "write_replace"]
