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

Before any commit, `WriteTarget.check` (the asset's quality gates, `dagster_partlake.gates`)
is called on the data about to be committed: the staged files, or for `merge` and `scd2` the
incoming batch (persisted, so the rows checked are the rows written). For the kinds that stage,
what the check asks to count row by row (`BatchCheck.while_writing`) is counted by Spark while it
writes the staged files, so the check need not read them again for it. When it raises, the staged
files are discarded and the table stays as it was.

For `append` and `merge` on the dimension columns, a run partition that got no rows keeps its
existing files and is recorded as `kept`, so it does not look written by someone else.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from dagster import TimeWindowPartitionsDefinition

from dagster_partlake.delta.content import partition_hashes, unchanged_partitions
from dagster_partlake.delta.merge import UnitPosition, merge_rows
from dagster_partlake.delta.record import WHOLE_TABLE_ID, CommitRecord
from dagster_partlake.delta.scd2 import apply_snapshot
from dagster_partlake.delta.schema import arrow_to_spark
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.staging import Removal, StagedWrite, discarded_on_failure
from dagster_partlake.delta.table import (
    latest_records,
    live_files,
    load_table,
    log_versions,
    read_record,
    table_exists,
)
from dagster_partlake.delta.writer import (
    AlreadyWritten,
    CommitResult,
    commit_staged,
    stage_partitions,
)
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.faults import fault_point
from dagster_partlake.kinds.spec import ModelKind
from dagster_partlake.partitions.keys import (
    DimensionColumn,
    KeyCodec,
    key_values,
    selection_for_keys,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation

    from dagster_partlake.delta.schema import DeltaType


class BatchCheck(Protocol):
    """An asset's quality gates as a write calls them (`dagster_partlake.gates.GateCheck`)."""

    def while_writing(self) -> Sequence[Column]:
        """Named aggregates Spark should compute while it stages the rows (none: the check reads
        the staged rows for everything)."""
        ...

    def __call__(
        self,
        new: DataFrame,
        observed: Mapping[str, Any] | None = None,
        rows: Mapping[str, int] | None = None,
    ) -> None:
        """Check `new`, the rows about to be committed; raise to stop the commit. `observed`: the
        values of `while_writing`'s aggregates over exactly those rows; `rows`: rows per partition
        key, from the staged files."""
        ...


@dataclass(frozen=True)
class KindWrite:
    """What a write did: the commit (None when a retried append found its own, or another run
    had committed the same), row metrics."""

    commit: CommitResult | None
    record: CommitRecord
    metrics: dict[str, int]
    unchanged_partitions: tuple[str, ...] = ()
    files_rewritten: int = 0
    # Nothing committed: this run (its id) already had, from the same inputs (`once_per_inputs`).
    already_written_by: str | None = None
    note: str | None = None  # what the run's log should say about the write (a merge roll back)
    warning: bool = False  # the note is a warning
    gates_seconds: float = 0.0  # evaluating the quality gates, their results logged


@dataclass(frozen=True)
class WriteTarget:
    """Where and how one output is written."""

    root: str
    asset_name: str
    kind: ModelKind
    columns: Sequence[DimensionColumn]
    column_types: Mapping[str, DeltaType]
    keys: Sequence[str]
    allow_new_columns: bool
    max_attempts: int
    # scd2: when the snapshot was taken (the run's time window start, else the run's start).
    snapshot_time: dt.datetime | None = None
    # The asset's quality gates, called on the rows about to be committed; raises to stop the
    # commit. None: the asset declares no gates.
    check: BatchCheck | None = None
    # Planned runs (partlake run, the sensor): commit nothing that another run already
    # committed from the same inputs (`delta.table.same_inputs_commit`).
    once_per_inputs: bool = False
    # An input was read incrementally (a watermark, the log, a landing folder): the run does not
    # see its partitions' whole input, so a merge never undoes earlier merges.
    incremental_inputs: bool = False

    @property
    def dimension_columns(self) -> list[str]:
        return [c.column for c in self.columns]

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.kind.table_partition_by(self.dimension_columns)

    @property
    def decoupled(self) -> bool:
        return self.kind.decoupled(self.dimension_columns)

    def selection(self, keys: Sequence[str]) -> PartitionSelection:
        return selection_for_keys(self.columns, keys, self.column_types, asset_name=self.asset_name)

    def key_of(self, values: Mapping[str, str | None]) -> str:
        if not self.columns:
            return WHOLE_TABLE_ID
        codec = KeyCodec(self.columns, self.column_types)
        return codec.key([values[c.column] for c in self.columns]) or WHOLE_TABLE_ID


def write_output(
    df: DataFrame, target: WriteTarget, record: CommitRecord, *, skip: str | None = None
) -> KindWrite:
    """Write `df` as `target.kind` says, recording `record` (completed here); with `skip` (a
    run guard's reason) write no rows and only record what the run consumed."""
    kind = target.kind.kind
    record = replace(record, kind=kind)
    fault_point("before_write", target.asset_name)
    try:
        return _write(df, target, record, skip)
    except AlreadyWritten as already:
        return KindWrite(None, already.record, {}, already_written_by=already.record.run_id)


def _write(df: DataFrame, target: WriteTarget, record: CommitRecord, skip: str | None) -> KindWrite:
    kind = target.kind.kind
    if skip is not None:
        return _record_only(df, target, record)
    if kind in ("merge", "scd2"):
        if target.check is None:
            return (_merge if kind == "merge" else _scd2)(df, target, record)
        # The batch is checked and then written: persisted, so both see the same rows.
        batch = df.persist()
        try:
            started = time.perf_counter()
            target.check(batch)
            gates = time.perf_counter() - started
            written = (
                _merge(batch, target, record) if kind == "merge" else _scd2(batch, target, record)
            )
            return replace(written, gates_seconds=gates)
        finally:
            batch.unpersist()
    if kind == "append":
        return _append(df, target, record)
    observed, observation = _observing(df, target)
    staged = _stage(observed, target, removal="selection")
    rows = _rows_by_key(staged, target)
    gates = _check_staged(df, target, staged, observation, _staged_rows(staged, target))
    record = replace(record, rows_by_partition=rows)
    unchanged: dict[str, int] = {}
    if kind == "tracked":
        hashes = partition_hashes(
            df.sparkSession, staged, lambda f: target.key_of(f.partition_values)
        )
        stored = latest_records(target.root, list(hashes)) if table_exists(target.root) else {}
        unchanged = unchanged_partitions(
            hashes,
            {pid: r.content_hashes.get(pid, "") for pid, r in stored.items()},
            _last_updated(target, list(hashes)),
            {pid: r.written_last_updated(pid) for pid, r in stored.items()},
        )
        record = replace(record, content_hashes=hashes, kept=unchanged)
        if unchanged:
            changed = [k for k in target.keys if k not in unchanged]
            dropped = [f for f in staged.files if target.key_of(f.partition_values) in unchanged]
            staged = staged.without(dropped, target.selection(changed))
            if not changed:
                staged = replace(staged, removal="none")
    result = commit_staged(
        staged,
        record=record,
        max_attempts=target.max_attempts,
        once_per_inputs=target.once_per_inputs,
    )
    metrics = {
        "rows_inserted": staged.num_records,
        "rows_updated": 0,
        "rows_deleted": result.rows_removed,
        "rows_unchanged": sum(rows.get(pid, 0) for pid in unchanged),
    }
    return KindWrite(result, result.record, metrics, tuple(sorted(unchanged)), gates_seconds=gates)


def _record_only(df: DataFrame, target: WriteTarget, record: CommitRecord) -> KindWrite:
    """A commit without files: the run's partitions keep their data and lastUpdated, and the
    record says what was consumed, so they are not planned again until an input changes."""
    staged = _stage(df.limit(0), target, removal="none")
    # Spark writes one empty file for an unpartitioned table: commit none.
    staged = staged.without(staged.files, staged.selection)
    metrics = {"rows_inserted": 0, "rows_updated": 0, "rows_deleted": 0, "rows_unchanged": 0}
    record = replace(record, metrics=metrics, **_unit_fields(staged, target))
    result = commit_staged(
        staged,
        record=record,
        max_attempts=target.max_attempts,
        once_per_inputs=target.once_per_inputs,
    )
    return KindWrite(result, result.record, metrics)


def _append(df: DataFrame, target: WriteTarget, record: CommitRecord) -> KindWrite:
    previous = _same_run_commit(target, record)
    if previous is not None:
        return KindWrite(None, previous, dict(previous.metrics))
    observed, observation = _observing(df, target)
    staged = _stage(observed, target, removal="none")
    gates = _check_staged(df, target, staged, observation, _staged_rows(staged, target))
    rows = staged.num_records
    metrics = {"rows_inserted": rows, "rows_updated": 0, "rows_deleted": 0, "rows_unchanged": 0}
    record = replace(record, metrics=metrics, **_unit_fields(staged, target))
    result = commit_staged(
        staged,
        record=record,
        max_attempts=target.max_attempts,
        once_per_inputs=target.once_per_inputs,
    )
    return KindWrite(result, result.record, metrics, gates_seconds=gates)


def _merge(df: DataFrame, target: WriteTarget, record: CommitRecord) -> KindWrite:
    selection = (
        PartitionSelection.everything() if target.decoupled else target.selection(target.keys)
    )
    merged = merge_rows(
        df,
        target.root,
        unique_key=target.kind.unique_key,
        partition_by=target.partition_by,
        selection=selection,
        record_for=lambda batch: replace(record, **_unit_fields(batch, target)),
        allow_new_columns=target.allow_new_columns,
        table_name=target.asset_name,
        max_attempts=target.max_attempts,
        # Not once per inputs: a merge's result depends on the table it merges into, and the
        # days after a re-merged one are merged again, in order, from unchanged inputs.
        # Merging the same batch twice leaves the same rows.
        once_per_inputs=False,
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


def _scd2(df: DataFrame, target: WriteTarget, record: CommitRecord) -> KindWrite:
    if len(target.keys) > 1 or target.snapshot_time is None:
        raise PartlakeConfigError(
            f"scd2 asset {target.asset_name} got {len(target.keys)} partitions in one run; "
            "snapshots apply one at a time, in order. Remove its backfill policy (or use "
            "BackfillPolicy.multi_run(1)) so that each run applies one partition."
        )
    snapshot_ms = int(target.snapshot_time.timestamp() * 1000)
    newest = _newest_snapshot(target.root)
    applied = apply_snapshot(
        df,
        target.root,
        unique_key=target.kind.unique_key,
        snapshot_time=target.snapshot_time,
        newest_applied=(
            None if newest is None else dt.datetime.fromtimestamp(newest / 1000, dt.UTC)
        ),
        record_for=lambda metrics: replace(
            record, metrics=metrics, rows_by_partition=None, snapshot_ms=snapshot_ms
        ),
        partition_by=target.partition_by,
        table_name=target.asset_name,
        max_attempts=target.max_attempts,
        # As for merge: history depends on the table; a snapshot applied twice is refused by
        # `newest_applied`, not by its inputs.
        once_per_inputs=False,
    )
    return KindWrite(
        applied.commit,
        applied.commit.record,
        applied.metrics,
        files_rewritten=applied.files_rewritten,
    )


def _observing(df: DataFrame, target: WriteTarget) -> tuple[DataFrame, Observation | None]:
    """`df`, computing the check's `while_writing` aggregates as Spark writes it (one pass over
    the rows instead of a second read of the staged files)."""
    aggregates = list(target.check.while_writing()) if target.check is not None else []
    if not aggregates:
        return df, None
    from pyspark.errors import AnalysisException
    from pyspark.sql import Observation

    observation = Observation()  # unnamed: a unique name, so concurrent runs do not clash
    try:
        observed = df.observe(observation, *aggregates)
        observed.schema  # noqa: B018 - analysed now, not in the write (Spark Connect is lazy)
    except AnalysisException:
        # A gate names a column the rows lack: the check, reading the staged rows, says which.
        return df, None
    return observed, observation


def _check_staged(
    df: DataFrame,
    target: WriteTarget,
    staged: StagedWrite,
    observation: Observation | None,
    rows: Mapping[str, int] | None,
) -> float:
    """Run the gates on the staged files; on a blocking failure remove them and raise. Returns
    the seconds the gates took (0.0: the asset has none)."""
    if target.check is None:
        return 0.0
    started = time.perf_counter()
    # The write that filled the observation has ended, so this does not wait.
    observed = observation.get if observation is not None else None
    spark = df.sparkSession
    schema = arrow_to_spark(staged.schema)
    paths = ["file://" + os.path.join(staged.staging_dir, f.relative_path) for f in staged.files]
    new = (
        spark.read.schema(schema).option("basePath", "file://" + staged.staging_dir).parquet(*paths)
        if paths
        else spark.createDataFrame([], schema)
    )
    with discarded_on_failure(staged.staging_dir):
        target.check(new.select(*schema.fieldNames()), observed, rows)
    return time.perf_counter() - started


def _newest_snapshot(root: str) -> int | None:
    """The snapshot time of the table's latest scd2 commit: the history's state."""
    if not table_exists(root):
        return None
    for version in reversed(log_versions(root)):
        found = read_record(root, version)
        if found is not None and found.snapshot_ms is not None:
            return found.snapshot_ms
    return None


def _same_run_commit(target: WriteTarget, record: CommitRecord) -> CommitRecord | None:
    """This run's earlier commit of the same partitions, if it landed (a retried step)."""
    if record.run_id is None or not table_exists(target.root):
        return None
    first = record.partition_ids[0]
    found = latest_records(target.root, [first]).get(first)
    if (
        found is not None
        and found.kind == "append"
        and found.run_id == record.run_id
        and found.partition_ids == record.partition_ids
    ):
        return found
    return None


def _stage(df: DataFrame, target: WriteTarget, *, removal: Removal) -> StagedWrite:
    decoupled = target.decoupled
    return stage_partitions(
        df,
        target.root,
        partition_by=target.partition_by,
        selection=PartitionSelection.everything() if decoupled else target.selection(target.keys),
        partition_ids=list(target.keys) or [WHOLE_TABLE_ID],
        allow_new_columns=target.allow_new_columns,
        table_name=target.asset_name,
        removal=removal,
    )


class _UnitFields(TypedDict, total=False):
    """The `CommitRecord` fields of one unit of an append or merge."""

    rows_by_partition: dict[str, int] | None
    kept: dict[str, int]


def _unit_fields(staged: StagedWrite, target: WriteTarget) -> _UnitFields:
    """rows_by_partition and kept of an append/merge: per run partition on the dimension
    columns; unknown (None: every run partition counts as written) when decoupled."""
    if target.decoupled:
        return {"rows_by_partition": None}
    rows = _rows_by_key(staged, target)
    before = _last_updated(target, [k for k, n in rows.items() if n == 0])
    return {"rows_by_partition": rows, "kept": before}


def _staged_rows(staged: StagedWrite, target: WriteTarget) -> dict[str, int] | None:
    """Rows per Dagster key from the staged files; None when the table's partitions are not the
    asset's (a decoupled append or merge: a file's partition values name no key)."""
    return None if target.decoupled else _rows_by_key(staged, target)


def _rows_by_key(staged: StagedWrite, target: WriteTarget) -> dict[str, int]:
    rows: dict[str, int] = dict.fromkeys(target.keys or [WHOLE_TABLE_ID], 0)
    for f in staged.files:
        key = target.key_of(f.partition_values)
        rows[key] = rows.get(key, 0) + f.num_records
    return rows


def _last_updated(target: WriteTarget, keys: Sequence[str]) -> dict[str, int]:
    """lastUpdated of those run partitions that have files now."""
    if not keys or not table_exists(target.root):
        return {}
    table = load_table(target.root, table_name=target.asset_name)
    selection = target.selection([k for k in keys if k != WHOLE_TABLE_ID])
    times: dict[str, int] = {}
    for f in live_files(table, selection):
        key = target.key_of(f.partition_values)
        times[key] = max(times.get(key, 0), f.modification_time)
    return times
