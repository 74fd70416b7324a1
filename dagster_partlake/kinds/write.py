"""One run's output written as its model kind says (`dagster_partlake.kinds.spec`).

The IO manager gives the DataFrame, the run's partition keys and the record of what the run read;
this module chooses the Delta operation and fills in what the kind adds to the commit record:

- `partition` / `table`: replace the run's partitions (the whole table).
- `tracked`: replace them too, except partitions whose content hash equals the one recorded by
  their last write (and that nobody rewrote since): their staged files are dropped, their live
  files and lastUpdated stay, and the record lists them as `kept` (early cutoff).
- `append`: add the rows; if the log already holds this run's commit for the same partitions
  (a retried step), add nothing and report that commit.
- `merge`: upsert on the unique key (`dagster_partlake.delta.merge`). A merge of a time
  partition applies after the earlier ones of its series (the same values of the other
  dimensions): merging one again first undoes the merges of it and of later ones, unless an input
  is incremental (the run then reads only what is new, not the unit's whole input).
- `scd2`: apply the returned snapshot to the history (`dagster_partlake.delta.scd2`), one
  partition (snapshot) per run.

With `WriteTarget.writer` "delta-spark", `partition` and `table` are committed by Spark's own
Delta instead (`kinds.native`); the other kinds refuse it.

Each kind is a strategy over one `WriteSession` (`kinds.session`: the table's log read once, the
partition codec, the live files replaced): `kinds.replace` (`partition`, `table`, `tracked`),
`kinds.append`, `kinds.merge`, `kinds.scd2`. Each writes its files with one Spark job that also
returns their facts, and commits once through `delta.transaction.commit`.

Before any commit, `WriteTarget.check` (the asset's quality gates, `dagster_partlake.gates`)
is called on the data about to be committed (`kinds.check`): the written files, with what the
write job counted for it, or for `merge` and `scd2` the incoming batch (persisted, so the rows
checked are the rows written). When it raises, the written files are deleted and the table stays
as it was.

For `append` and `merge` on the dimension columns, a run partition that got no rows keeps its
existing files and is recorded as `kept`, so it does not look written by someone else.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from dagster import TimeWindowPartitionsDefinition

from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.writer import StageSeconds
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.faults import fault_point
from dagster_partlake.kinds.append import unit_fields, write_append
from dagster_partlake.kinds.check import check_batch
from dagster_partlake.kinds.merge import UnitPosition, merge_rows
from dagster_partlake.kinds.native import write_native
from dagster_partlake.kinds.outcome import KindWrite
from dagster_partlake.kinds.replace import record_only, write_replace
from dagster_partlake.kinds.scd2 import apply_snapshot
from dagster_partlake.kinds.session import Batch, BatchCheck, WriteSession, WriteTarget
from dagster_partlake.kinds.units import unit_time
from dagster_partlake.metadata import DELTA_SPARK_WRITER
from dagster_partlake.partitions.keys import key_values
from dagster_partlake.records.queries import record_at
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import AlreadyWritten, CommitResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Batch", "BatchCheck", "KindWrite", "WriteTarget", "write_in_order", "write_output"]


def write_output(
    df: DataFrame, target: WriteTarget, record: CommitRecord, *, skip: str | None = None
) -> KindWrite:
    """Write `df` as `target.kind` says, recording `record` (completed here); with `skip` (a
    run guard's reason) write no rows and only record what the run consumed."""
    record = replace(record, kind=target.kind.kind)
    fault_point("before_write", target.asset_name)
    session = WriteSession.open(target)
    try:
        return _write(df, session, record, skip)
    except AlreadyWritten as already:
        return KindWrite(None, already.record, {}, already_written_by=already.record.run_id)


def write_in_order(
    units: Sequence[tuple[str, DataFrame]],
    target: WriteTarget,
    record: CommitRecord,
    *,
    skip: str | None = None,
    check_for: Callable[[WriteTarget], BatchCheck | None] | None = None,
) -> KindWrite:
    """Write an in-order kind's partitions one after the other (`kinds.units`), each as a run
    of that partition alone would: its own session on the table as the unit before left it,
    its own gates (`check_for`: the check of a one-partition target), its own commit and record.
    A unit that fails stops the rest; the units before it stay committed, each a whole unit of
    work the planner sees as written.

    Returns:
        The units' writes as one: their commits' totals, the last one's version and record.
    """
    writes: list[KindWrite] = []
    for key, df in units:
        unit = replace(
            target,
            keys=[key],
            snapshot_time=unit_time(target, key) if target.kind.kind == "scd2" else None,
        )
        unit = replace(unit, check=check_for(unit) if check_for is not None else None)
        writes.append(write_output(df, unit, replace(record, partition_keys=(key,)), skip=skip))
    return combined(writes)


def combined(writes: Sequence[KindWrite]) -> KindWrite:
    """Several units' writes as one run's: counts summed (rows_unchanged: the last unit's, the
    rest of the table after it), the last commit's version and record."""
    last = writes[-1]
    metrics: dict[str, int] = {}
    for write in writes:
        for name, value in write.metrics.items():
            metrics[name] = metrics.get(name, 0) + value
    if "rows_unchanged" in last.metrics:
        metrics["rows_unchanged"] = last.metrics["rows_unchanged"]
    commits = [w.commit for w in writes if w.commit is not None]
    notes = [w.note for w in writes if w.note is not None]
    return KindWrite(
        _commits(commits) if commits else None,
        last.record,
        metrics,
        unchanged_partitions=tuple(p for w in writes for p in w.unchanged_partitions),
        files_rewritten=sum(w.files_rewritten for w in writes),
        already_written_by=last.already_written_by if not commits else None,
        note="\n".join(notes) if notes else None,
        warning=any(w.warning for w in writes),
        gates_seconds=sum(w.gates_seconds for w in writes),
    )


def _commits(commits: Sequence[CommitResult]) -> CommitResult:
    last = commits[-1]
    return replace(
        last,
        num_records=sum(c.num_records for c in commits),
        files_added=sum(c.files_added for c in commits),
        files_removed=sum(c.files_removed for c in commits),
        attempts=sum(c.attempts for c in commits),
        rows_removed=sum(c.rows_removed for c in commits),
        commit_seconds=sum(c.commit_seconds for c in commits),
        publish_seconds=sum(c.publish_seconds for c in commits),
        staged=StageSeconds(
            spark=sum(c.staged.spark for c in commits),
            listing=sum(c.staged.listing for c in commits),
        ),
    )


def _write(
    df: DataFrame, session: WriteSession, record: CommitRecord, skip: str | None
) -> KindWrite:
    kind = session.target.kind.kind
    if skip is not None:
        return record_only(df, session, record)
    if session.target.writer == DELTA_SPARK_WRITER:
        return write_native(df, session, record)
    if kind in ("merge", "scd2"):
        if session.target.check is None:
            return (_merge if kind == "merge" else _scd2)(df, session, record)
        # The batch is checked and then written: persisted, so both see the same rows.
        batch = df.persist()
        try:
            gates = check_batch(session, batch)
            written = (_merge if kind == "merge" else _scd2)(batch, session, record)
            return replace(written, gates_seconds=gates)
        finally:
            batch.unpersist()
    if kind == "append":
        return write_append(df, session, record)
    return write_replace(df, session, record)


def _merge(df: DataFrame, session: WriteSession, record: CommitRecord) -> KindWrite:
    target = session.target
    selection = (
        PartitionSelection.everything() if target.decoupled else target.selection(target.keys)
    )
    merged = merge_rows(
        df,
        session,
        unique_key=target.kind.unique_key,
        selection=selection,
        record_for=lambda batch: replace(record, **unit_fields(session, batch)),
        # A merge's result depends on the table it merges into, and the days after a re-merged
        # one are merged again, in order, from unchanged inputs.
        units=None if target.incremental_inputs else _unit_positions(target),
    )
    note, warning = None, False
    if merged.rolled_back is not None:
        note = (
            f"{target.asset_name}: merging {', '.join(target.keys)} again: "
            f"{merged.rolled_back.describe()}, so keys that left its input go too; the later "
            "partitions merge again after it"
        )
    elif merged.not_rolled_back is not None:
        note, warning = (
            f"{target.asset_name}: merging {', '.join(target.keys)} again on top of the table: "
            f"the merges since could not be undone ({merged.not_rolled_back}); keys that left "
            "the input stay. Rebuild the table (remove it, then run every partition) to drop "
            "them.",
            True,
        )
    return KindWrite(
        merged.commit,
        merged.commit.record,
        merged.metrics,
        files_rewritten=merged.files_rewritten,
        note=note,
        warning=warning,
    )


def _unit_positions(target: WriteTarget) -> Callable[[Sequence[str]], UnitPosition] | None:
    """Where a commit's units of work (partition keys) stand against this run's: a unit of the
    same series (the other dimensions' keys) before its first one is `earlier`, at or after it
    `later`; None for an asset without exactly one time dimension (its units have no order)."""
    timed = [c for c in target.columns if c.is_time]
    if len(timed) != 1 or not target.keys:
        return None
    time_def = timed[0].partitions_def
    assert isinstance(time_def, TimeWindowPartitionsDefinition)
    dimensions = sorted({c.dimension for c in target.columns})
    at = dimensions.index(timed[0].dimension)

    def unit(key: str) -> tuple[tuple[str, ...], dt.datetime] | None:
        values = key_values(key) if len(dimensions) > 1 else [key]
        if len(values) != len(dimensions):
            return None
        try:
            start = time_def.time_window_for_partition_key(values[at]).start
        except Exception:  # Dagster: not a key of this definition (an older definition's)
            return None
        return tuple(v for i, v in enumerate(values) if i != at), start

    first: dict[tuple[str, ...], dt.datetime] = {}
    for key in target.keys:
        found = unit(key)
        if found is not None and (found[0] not in first or found[1] < first[found[0]]):
            first[found[0]] = found[1]

    def position(keys: Sequence[str]) -> UnitPosition:
        seen = set()
        for key in keys:
            found = unit(key)
            if found is not None and found[0] in first:
                seen.add("earlier" if found[1] < first[found[0]] else "later")
        if len(seen) == 2:
            return "mixed"
        return "other" if not seen else "earlier" if "earlier" in seen else "later"

    return position


def _scd2(df: DataFrame, session: WriteSession, record: CommitRecord) -> KindWrite:
    target = session.target
    if len(target.keys) > 1 or target.snapshot_time is None:
        raise PartlakeConfigError(
            f"scd2 asset {target.asset_name} got {len(target.keys)} partitions in one run; "
            "snapshots apply one at a time, in order. Remove its backfill policy (or use "
            "BackfillPolicy.multi_run(1)) so that each run applies one partition."
        )
    snapshot_ms = int(target.snapshot_time.timestamp() * 1000)
    newest = _newest_snapshot(session)
    applied = apply_snapshot(
        df,
        session,
        unique_key=target.kind.unique_key,
        snapshot_time=target.snapshot_time,
        newest_applied=(
            None if newest is None else dt.datetime.fromtimestamp(newest / 1000, dt.UTC)
        ),
        record_for=lambda metrics: replace(
            record, metrics=metrics, rows_by_partition=None, snapshot_ms=snapshot_ms
        ),
        partition_by=target.partition_by,
    )
    return KindWrite(
        applied.commit,
        applied.commit.record,
        applied.metrics,
        files_rewritten=applied.files_rewritten,
    )


def _newest_snapshot(session: WriteSession) -> int | None:
    """The snapshot time of the table's latest scd2 commit: the history's state."""
    snapshot = session.snapshot
    if snapshot is None:
        return None
    for version, payload in snapshot.newest_first():
        found = None if payload is None else record_at(snapshot, version)
        if found is not None and found.snapshot_ms is not None:
            return found.snapshot_ms
    return None
