"""The `scd2` kind: apply a snapshot of entities to a type 2 history table in one commit.

The asset returns the current snapshot; the table holds every version of every key, with
`valid_from` (timestamp), `valid_to` (timestamp, null while current) and `is_current` (boolean).
Applying a snapshot taken at time `t`:

- a key whose other columns changed: its current row is closed (`valid_to = t`, `is_current`
  false) and a new current row from `t` is added;
- a key absent from the snapshot: its current row is closed;
- a key new in the snapshot: a current row from `t`;
- an unchanged key: untouched. A snapshot that changes nothing commits no file.

Snapshots apply in time order. A snapshot at or before the newest one applied (re-running an
older day) first rolls the history back to `t`: rows valid from `t` or later are dropped and rows
closed at `t` or later are open again; then it applies, and later snapshots must be applied again
after it (the planner makes them stale).

Only files that hold current rows are read and rewritten (their `valid_to` null count in the log
says so), unless a roll back needs every file. Closed and current rows are written to separate
files, so history that no longer changes is never rewritten again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.files import WrittenFiles, write_files
from dagster_partlake.delta.schema import arrow_to_spark, spark_to_arrow
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot
from dagster_partlake.delta.table import LiveFile
from dagster_partlake.delta.transaction import Actions
from dagster_partlake.errors import SchemaMismatchError
from dagster_partlake.kinds.merge import RewriteResult, check_key_columns, check_keys
from dagster_partlake.kinds.session import WriteSession
from dagster_partlake.kinds.spec import ModelKind
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import CommitResult
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

HISTORY_COLUMNS = ("valid_from", "valid_to", "is_current")


class _Changed(Exception):
    """The newest snapshot, applied again, differs from the first time: roll back first."""


def apply_snapshot(
    df: DataFrame,
    root: str | TableLocation | WriteSession,
    *,
    unique_key: Sequence[str],
    snapshot_time: dt.datetime,
    newest_applied: dt.datetime | None,
    record_for: Callable[[dict[str, int]], CommitRecord],
    partition_by: Sequence[str] = (),
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> RewriteResult:
    """Apply the snapshot `df` taken at `snapshot_time` to the history table at `root` (or the
    session's).

    Args:
        root: the table's path or location, or the output's write session.
        newest_applied: the newest snapshot time already applied (None: none); at or after
            `snapshot_time` the history is rolled back to it first.
        record_for: the commit record, given the row metrics.
        partition_by: the history table's partition columns (columns of the snapshot).

    Raises:
        SchemaMismatchError: the snapshot has history columns or lacks a key column;
            DuplicateKeyError: it repeats a key or has a null one. Nothing is written then.
    """
    session = WriteSession.for_table(
        root,
        ModelKind("scd2", tuple(unique_key), tuple(partition_by)),
        table_name=table_name,
        max_attempts=max_attempts,
    )
    name = session.name
    present = [c for c in HISTORY_COLUMNS if c in df.columns]
    if present:
        raise SchemaMismatchError(
            f"the snapshot for scd2 table {name} already has column(s) {', '.join(present)}, "
            "which the IO manager adds; return the entities' own columns only (rename or drop "
            "those)."
        )
    check_key_columns(df, unique_key, name)
    outside = [c for c in partition_by if c not in df.columns]
    if outside:
        raise SchemaMismatchError(
            f"scd2 table {name} is to be partitioned by {', '.join(outside)}, which the snapshot "
            f"does not have (columns: {', '.join(df.columns)}); return those columns or fix "
            "'partlake/partition_by'."
        )
    check_keys(df, unique_key, name)
    apply = _Apply(
        df,
        session,
        tuple(unique_key),
        snapshot_time,
        tuple(partition_by),
        rollback=newest_applied is not None and snapshot_time < newest_applied,
        # The newest snapshot again: a no-op if it is unchanged, else rolled back and re-applied.
        again=newest_applied is not None and snapshot_time == newest_applied,
    )
    schema = _history_schema(df, tuple(partition_by))
    try:
        committed, landed = session.commit(
            apply.actions,
            record_for({}),
            schema=schema,
            partition_ids=session.target.partition_ids,
            finish=lambda _record: record_for(apply.done().metrics),
        )
    except BaseException:
        apply.discard()
        raise
    done = apply.done()
    result = CommitResult.of(committed, landed, done.written.num_records, done.written.seconds)
    return RewriteResult(result, done.metrics, len(done.candidates))


@dataclass(frozen=True)
class _Applied:
    """A snapshot applied on one version of the history: what it removes and adds."""

    expected: frozenset[str]  # every live file it was based on
    candidates: tuple[LiveFile, ...]  # the files it removes
    written: WrittenFiles  # the history rows it writes in their place
    metrics: dict[str, int]


class _Apply:
    """The apply as the transaction asks for it: worked out on the transaction's snapshot, and
    again on a newer one whenever a concurrent commit changed the table (one retry loop, the
    transaction's)."""

    def __init__(
        self,
        df: DataFrame,
        session: WriteSession,
        unique_key: tuple[str, ...],
        t: dt.datetime,
        partition_by: tuple[str, ...],
        *,
        rollback: bool,
        again: bool,
    ) -> None:
        self.df, self.session, self.unique_key, self.t = df, session, unique_key, t
        self.partition_by, self.rollback, self.again = partition_by, rollback, again
        self.applied: _Applied | None = None

    def actions(self, snapshot: Snapshot) -> Actions:
        applied = self.applied
        if applied is not None:
            every = snapshot.live_files(PartitionSelection.everything())
            if frozenset(f.path for f in every) == applied.expected:
                return Actions(adds=applied.written.files, removes=applied.candidates)
            self.discard()
        try:
            applied = self._apply(snapshot, rollback=self.rollback, again=self.again)
        except _Changed:
            applied = self._apply(snapshot, rollback=True, again=False)
        self.applied = applied
        return Actions(adds=applied.written.files, removes=applied.candidates)

    def done(self) -> _Applied:
        assert self.applied is not None
        return self.applied

    def discard(self) -> None:
        if self.applied is not None:
            self.applied.written.discard()

    def _apply(self, snapshot: Snapshot, *, rollback: bool, again: bool) -> _Applied:
        from pyspark.sql import functions as F

        df, unique_key = self.df, self.unique_key
        ts = F.lit(self.t).cast("timestamp")
        old = _read_history(df, snapshot, self.session.name, self.partition_by, rollback=rollback)
        existing = _rolled_back(old.rows, ts) if rollback else old.rows
        values = [c for c in df.columns if c not in unique_key]
        joined, counts = _compare(df, existing, unique_key, values)
        inserted, updated = counts.get("inserted", 0), counts.get("updated", 0)
        closed_keys = counts.get("closed", 0)
        metrics = {
            "rows_inserted": inserted,
            "rows_updated": updated,
            "rows_deleted": closed_keys,  # closed: the key is gone from the snapshot
            "rows_unchanged": max(old.rows_before - updated - closed_keys, 0),
        }
        nothing = not rollback and not (inserted or updated or closed_keys)
        if again and not nothing:
            raise _Changed
        schema = _history_schema(df, self.partition_by)
        if nothing:  # A snapshot that changes nothing commits no file.
            empty = WrittenFiles(snapshot.location, (), schema, self.partition_by)
            return _Applied(old.expected, (), empty, metrics)
        columns = [*df.columns, *HISTORY_COLUMNS]
        rows = _new_history(existing, joined, unique_key, values, ts, columns)
        # The key's statistics let a row delete skip files; valid_to's, later snapshots.
        written = write_files(
            rows,
            snapshot.location,
            partition_by=self.partition_by,
            schema=schema,
            stats_columns=(*unique_key, "valid_to"),
        )
        return _Applied(old.expected, old.candidates, written, metrics)


def _history_schema(df: DataFrame, partition_by: tuple[str, ...]) -> pa.Schema:
    """The history table's schema: the snapshot's columns and the history columns, partition
    columns last (as a partitioned Delta table stores them)."""
    from pyspark.sql import functions as F

    columns = [c for c in df.columns if c not in partition_by]
    history = df.select(
        *columns,
        F.lit(None).cast("timestamp").alias("valid_from"),
        F.lit(None).cast("timestamp").alias("valid_to"),
        F.lit(None).cast("boolean").alias("is_current"),
        *partition_by,
    )
    return spark_to_arrow(history.schema)


@dataclass(frozen=True)
class _History:
    """What a snapshot is applied to: the history rows that may change, and where they live."""

    rows: DataFrame  # the candidate files' rows (all history rows when rolling back)
    candidates: tuple[LiveFile, ...]  # files that hold them: the commit removes exactly these
    expected: frozenset[str]  # every live file when read (a concurrent change is detected)
    rows_before: int  # rows in the table when read


def _read_history(
    df: DataFrame, snapshot: Snapshot, name: str, partition_by: tuple[str, ...], *, rollback: bool
) -> _History:
    """The table's history rows that may change: all of them when rolling back, else those in
    files that may hold current rows (an empty history for a new table).

    Raises:
        SchemaMismatchError: the table is partitioned otherwise than `partition_by`.
    """
    from pyspark.sql import functions as F

    spark = df.sparkSession
    candidates: list[LiveFile] = []
    expected: frozenset[str] = frozenset()
    rows_before = 0
    rows = None
    if snapshot.partition_by != partition_by:
        shown = [", ".join(cols) or "nothing" for cols in (snapshot.partition_by, partition_by)]
        raise SchemaMismatchError(
            f"scd2 table {name} is partitioned by ({shown[0]}) but the write is "
            f"partitioned by ({shown[1]}); keep 'partlake/partition_by' unchanged, or write "
            "a new table."
        )
    every = snapshot.live_files(PartitionSelection.everything(), ("valid_to",))
    expected = frozenset(f.path for f in every)
    rows_before = sum(f.num_records or 0 for f in every)
    candidates = every if rollback else [f for f in every if _may_be_current(f)]
    if candidates:
        location = snapshot.location
        rows = (
            spark.read.schema(arrow_to_spark(snapshot.schema))
            .option("basePath", location.spark_uri())
            .parquet(*location.spark_uris([f.relative_path for f in candidates]))
            .select(*df.columns, *HISTORY_COLUMNS)
        )
    if rows is None:
        rows = spark.createDataFrame([], df.select(*df.columns).schema).select(
            "*",
            F.lit(None).cast("timestamp").alias("valid_from"),
            F.lit(None).cast("timestamp").alias("valid_to"),
            F.lit(None).cast("boolean").alias("is_current"),
        )
    return _History(rows, tuple(candidates), expected, rows_before)


def _rolled_back(existing: DataFrame, ts: Column) -> DataFrame:
    """The history as it was before time `ts`: later rows dropped, rows closed at or after it
    open again."""
    from pyspark.sql import functions as F

    existing = existing.where(F.col("valid_from") < ts).withColumn(
        "is_current", F.col("is_current") | (F.col("valid_to") >= ts)
    )
    return existing.withColumn(
        "valid_to", F.when(F.col("valid_to") >= ts, F.lit(None)).otherwise(F.col("valid_to"))
    )


def _compare(
    df: DataFrame, existing: DataFrame, unique_key: Sequence[str], values: Sequence[str]
) -> tuple[DataFrame, dict[str, int]]:
    """The snapshot joined with the current rows on the key, each key with its `_status`
    (inserted, closed, updated, unchanged), and the count per status."""
    from pyspark.sql import functions as F

    current = existing.where(F.col("is_current"))
    cur = current.select(
        *unique_key, F.struct(*values).alias("_old"), F.col("valid_from").alias("_from")
    )
    snap = df.select(*unique_key, F.struct(*values).alias("_new"))
    joined = cur.join(snap, on=list(unique_key), how="full_outer")
    changed = (
        F.col("_old").isNotNull()
        & F.col("_new").isNotNull()
        & ~F.col("_old").eqNullSafe(F.col("_new"))
    )
    status = (
        F.when(F.col("_old").isNull(), F.lit("inserted"))
        .when(F.col("_new").isNull(), F.lit("closed"))
        .when(changed, F.lit("updated"))
        .otherwise(F.lit("unchanged"))
    )
    joined = joined.withColumn("_status", status)
    counts = {
        row["_status"]: row["n"]
        for row in joined.groupBy("_status").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    return joined, counts


def _new_history(
    existing: DataFrame,
    joined: DataFrame,
    unique_key: Sequence[str],
    values: Sequence[str],
    ts: Column,
    columns: Sequence[str],
) -> DataFrame:
    """The history after the snapshot: closed rows as they were, unchanged keys kept, changed
    and absent keys closed at `ts`, changed and new keys opened at `ts`."""
    from pyspark.sql import functions as F

    old_cols = [F.col(f"_old.{c}").alias(c) for c in values]
    new_cols = [F.col(f"_new.{c}").alias(c) for c in values]
    open_to = F.lit(None).cast("timestamp").alias("valid_to")
    keep = joined.where(F.col("_status") == "unchanged").select(
        *unique_key,
        *old_cols,
        F.col("_from").alias("valid_from"),
        open_to,
        F.lit(True).alias("is_current"),
    )
    closed = joined.where(F.col("_status").isin("updated", "closed")).select(
        *unique_key,
        *old_cols,
        F.col("_from").alias("valid_from"),
        ts.alias("valid_to"),
        F.lit(False).alias("is_current"),
    )
    opened = joined.where(F.col("_status").isin("updated", "inserted")).select(
        *unique_key, *new_cols, ts.alias("valid_from"), open_to, F.lit(True).alias("is_current")
    )
    return (
        existing.where(~F.col("is_current"))
        .select(*columns)
        .unionByName(keep.select(*columns))
        .unionByName(closed.select(*columns))
        .unionByName(opened.select(*columns))
        # Closed and current rows in separate files: later snapshots rewrite only current ones.
        .repartitionByRange(2, "is_current")
    )


def _may_be_current(f: LiveFile) -> bool:
    """False only when the file's statistics prove every row is closed (no null `valid_to`)."""
    nulls = f.null_count.get("valid_to")
    return nulls is None or nulls > 0
