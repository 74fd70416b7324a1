"""The `merge` kind: upsert a batch of rows on a unique key; Spark rewrites, one commit lands.

1. The batch is written like any write (`WriteSession.write`: files under the table, not yet
   committed, with the min/max of the key columns of each file from the write job) and checked:
   no key column may be null or repeat inside the batch.
2. The table files that can hold a batch key are found from the log alone: files of the table
   partitions the batch touches, whose key statistics overlap the batch's key range.
3. One Spark job rewrites those files without the rows whose key is in the batch (a left anti
   join; from `WORKER_ROWS` rows on a one-column key, Python workers read, filter and write
   each file, so the rows never cross from the JVM); the data never passes through the driver.
4. One commit removes the candidate files and adds the batch and the rewritten files. It lands
   only if the touched partitions still hold exactly the files step 2 saw; otherwise (a concurrent
   writer changed them) steps 2-4 run again.

Merging a unit of work again (a day whose input changed, re-applied after it or later days
were) first undoes the merges since that unit: a time-ordered merge's result is its units applied
in order, and a key that the new input no longer has must not stay from the old one (a row
deleted at the source, a corrected export). `units` says where a commit's units of work stand
against this merge's: `find_rollback` walks the log back from the newest commit to the last
merge of an earlier unit of the same series, and the table partitions those merges touched go
back to their files of the version before the first of them, in the same commit as the merge.
It is not done (and the merge goes on top of the table as it is, `RewriteResult.not_rolled_back`
says why) when the log no longer holds those commits or files, or when a merge of another series
(other values of the other dimensions) changed those table partitions since.

Row counts follow Delta's MERGE metrics: inserted (new keys), updated (keys that existed),
unchanged (every other row of the table), deleted (0, except the rows a roll back removed), all
counted against the table as the roll back left it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.files import (
    WrittenFile,
    WrittenFiles,
    discarded_on_failure,
    rewrite_without_keys,
    write_files,
)
from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.delta.selection import Box, PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot
from dagster_partlake.delta.table import LiveFile, commit_actions, load_table
from dagster_partlake.delta.transaction import Actions, Readd
from dagster_partlake.errors import SchemaMismatchError
from dagster_partlake.kinds.session import WriteSession
from dagster_partlake.kinds.spec import ModelKind
from dagster_partlake.records.queries import record_at
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import CommitResult
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

MAX_SHOWN_KEYS = 5
# From this many rows in the files a merge rewrites, Python workers rewrite them file by file
# (`delta.files.rewrite_without_keys`) instead of Spark's anti join handing every row to the
# workers that write: at 10M rows 1.7 s against 5.5 s; at 250k rows the job's own start made it
# 0.6 s slower (benchmarks/merge_scale.py).
WORKER_ROWS = 1_000_000


class DuplicateKeyError(SchemaMismatchError):
    """A merge batch repeats a unique key (or has a null one)."""


# Where a commit's units of work stand against the merge's own: an earlier one of the same
# series, the same or a later one, units of other series only, or both earlier and later ones.
UnitPosition = Literal["earlier", "later", "other", "mixed"]


@dataclass(frozen=True)
class RewriteResult:
    """A merge or scd2 write: its commit, row counts, and how many table files it rewrote."""

    commit: CommitResult
    metrics: dict[str, int]
    files_rewritten: int
    rolled_back: Rollback | None = None  # the merges undone first
    not_rolled_back: str | None = None  # why merges of later units could not be undone


@dataclass(frozen=True)
class Rollback:
    """Merges undone before merging a unit of work again: the table partitions they touched go
    back to their files of table version `version`."""

    version: int
    undone: tuple[int, ...]  # the versions of the merges undone
    selection: PartitionSelection  # the table partitions they touched
    partition_ids: tuple[str, ...]  # their commit conflict ids (as `_touched` names them)
    files: tuple[LiveFile, ...]  # the files of those partitions at `version`

    def describe(self) -> str:
        return (
            f"{len(self.undone)} merge(s) undone first ({self.selection.describe()} back to "
            f"version {self.version})"
        )


def check_key_columns(df: DataFrame, unique_key: Sequence[str], name: str) -> None:
    """Every unique key column is in `df`.

    Raises:
        SchemaMismatchError: naming the missing columns.
    """
    missing = [c for c in unique_key if c not in df.columns]
    if missing:
        raise SchemaMismatchError(
            f"the unique key of table {name} names column(s) {', '.join(missing)} that the "
            f"returned DataFrame does not have (columns: {', '.join(df.columns)}); fix "
            "'partlake/unique_key' or return those columns."
        )


def merge_rows(
    df: DataFrame,
    root: str | TableLocation | WriteSession,
    *,
    unique_key: Sequence[str],
    selection: PartitionSelection,
    record_for: Callable[[WrittenFiles], CommitRecord],
    units: Callable[[Sequence[str]], UnitPosition] | None = None,
    partition_by: Sequence[str] = (),
    allow_new_columns: bool = False,
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> RewriteResult:
    """Upsert the rows of `df` into the table at `root` (or the session's) on `unique_key`.

    Args:
        root: the table's path or location, or the output's write session (whose target gives
            the partitioning, the schema rule, the name and the attempts; the arguments
            `partition_by` to `max_attempts` apply to a path or location only).
        selection: where the batch's rows may lie (everything, unless the table partitions
            are the run's partitions).
        record_for: what the commit records, given the written batch; `metrics` are filled in
            here.
        units: for a time-ordered merge, where the units of work a commit records (its
            `partition_keys`) stand against this merge's: merges of this unit or later ones of
            its series are undone first (the module docstring). None: never undo.

    Raises:
        SchemaMismatchError: a key column is missing; DuplicateKeyError: the batch repeats a key
            or has a null one; CommitConflictError: concurrent writers kept changing the touched
            partitions. In each case nothing was committed.
    """
    session = WriteSession.for_table(
        root,
        ModelKind("merge", tuple(unique_key), tuple(partition_by)),
        table_name=table_name,
        allow_new_columns=allow_new_columns,
        max_attempts=max_attempts,
    )
    name = session.name
    check_key_columns(df, unique_key, name)
    batch = session.write(df, selection=selection, stats_columns=unique_key)
    with discarded_on_failure(batch):
        if any(f.num_records for f in batch.files):
            check_keys(_rows(df.sparkSession, batch, batch.files), unique_key, name)
        merge = _Merge(df.sparkSession, batch, _touched(batch), tuple(unique_key), units)
        try:
            committed, landed = session.commit(
                merge.actions,
                record_for(batch),
                schema=batch.schema,
                partition_ids=(),
                finish=lambda record: replace(record, metrics=merge.done().metrics),
            )
        except BaseException:
            merge.discard()
            raise
    done = merge.done()
    result = CommitResult.of(committed, landed, batch.num_records, batch.seconds)
    return RewriteResult(
        result,
        done.metrics,
        done.files_rewritten,
        rolled_back=done.rollback,
        not_rolled_back=done.why_not,
    )


@dataclass(frozen=True)
class _Prepared:
    """A merge worked out on one snapshot: what it removes, adds back and adds new."""

    expected: frozenset[str]  # the live files of `selection` it was based on
    selection: PartitionSelection  # the table partitions it touches (with a roll back's)
    actions: Actions
    metrics: dict[str, int]
    files_rewritten: int
    kept: WrittenFiles | None  # the rewritten candidates (deleted if this is not committed)
    rollback: Rollback | None
    why_not: str | None


class _Merge:
    """The merge as the transaction asks for it: worked out on the transaction's snapshot, and
    again on a newer one whenever a concurrent commit changed the files it was based on (one
    retry loop, the transaction's). Not once per inputs: a merge's result depends on the table
    it merges into, and the days after a re-merged one are merged again, in order, from
    unchanged inputs; merging the same batch twice leaves the same rows."""

    def __init__(
        self,
        spark: SparkSession,
        batch: WrittenFiles,
        touched: _Touched,
        unique_key: tuple[str, ...],
        units: Callable[[Sequence[str]], UnitPosition] | None,
    ) -> None:
        self.spark, self.batch, self.touched = spark, batch, touched
        self.unique_key, self.units = unique_key, units
        self.prepared: _Prepared | None = None

    def actions(self, snapshot: Snapshot) -> Actions:
        prepared = self.prepared
        if prepared is not None:
            live = frozenset(f.path for f in snapshot.live_files(prepared.selection))
            if live == prepared.expected:
                return prepared.actions
            self.discard()
        prepared = self.prepared = self._prepare(snapshot)
        return prepared.actions

    def done(self) -> _Prepared:
        assert self.prepared is not None
        return self.prepared

    def discard(self) -> None:
        if self.prepared is not None and self.prepared.kept is not None:
            self.prepared.kept.discard()

    def _prepare(self, snapshot: Snapshot) -> _Prepared:
        rollback, why_not = (
            find_rollback(snapshot, self.units, self.unique_key)
            if self.units is not None
            else (None, None)
        )
        batch, touched, unique_key = self.batch, self.touched, self.unique_key
        everything = snapshot.live_files(PartitionSelection.everything(), stats_columns=unique_key)
        undone: list[LiveFile] = []  # live files the roll back removes
        back: list[LiveFile] = []  # files of the roll back's version that are not live now
        selection = touched.selection
        if rollback is not None:
            undone, back = _rolled_back(everything, rollback)
            gone = {f.path for f in undone}
            # The table as the roll back leaves it: what the merge reads and counts against.
            everything = [f for f in everything if f.path not in gone] + back
            selection = _union(touched.selection, rollback.selection)
        rows_before = sum(f.num_records or 0 for f in everything)
        in_touched = [f for f in everything if touched.selection.contains(f.partition_values)]
        expected = frozenset(f.path for f in snapshot.live_files(selection))
        low, high = _key_range(batch.files, unique_key)
        candidates = [f for f in in_touched if _may_hold(f, low, high, unique_key)]
        kept = (
            _rewrite_without_batch_keys(self.spark, snapshot, batch, candidates, unique_key)
            if candidates
            else None
        )
        back_paths = {f.path for f in back}
        read = {f.path for f in candidates}
        existing = sum(f.num_records or 0 for f in candidates)
        updated = existing - (kept.num_records if kept else 0)
        metrics = {
            "rows_inserted": batch.num_records - updated,
            "rows_updated": updated,
            "rows_deleted": max(0, _count(undone) - _count(back)),
            "rows_unchanged": rows_before - updated,
        }
        adds: list[WrittenFile | Readd] = [*batch.files, *(kept.files if kept else ())]
        # A candidate of the roll back's version is not live: it is rewritten, never removed.
        adds += [Readd(f) for f in back if f.path not in read]
        removes = [*undone, *(f for f in candidates if f.path not in back_paths)]
        return _Prepared(
            expected,
            selection,
            # Its conflict ids: the touched partitions' and a roll back's.
            Actions(adds=adds, removes=removes, partition_ids=_ids(touched.ids, rollback)),
            metrics,
            len(candidates),
            kept,
            rollback,
            why_not,
        )


@dataclass(frozen=True)
class _Touched:
    ids: tuple[str, ...]  # commit conflict ids of the touched table partitions
    selection: PartitionSelection


def _touched(batch: WrittenFiles) -> _Touched:
    if not batch.partition_by:
        return _Touched((WHOLE_TABLE_ID,), PartitionSelection.everything())
    values: list[tuple[str | None, ...]] = sorted(
        {tuple(f.partition_values[c] for c in batch.partition_by) for f in batch.files},
        key=lambda v: tuple("" if x is None else x for x in v),
    )
    ids: tuple[str, ...] = tuple(
        "|".join(
            f"{c}={'null' if x is None else x}" for c, x in zip(batch.partition_by, v, strict=True)
        )
        for v in values
    )
    if any(x is None for v in values for x in v):
        # A box cannot hold a null value: compare against every file instead (still exact).
        return _Touched(ids, PartitionSelection.everything())
    boxes = tuple(
        Box({c: frozenset({str(x)}) for c, x in zip(batch.partition_by, v, strict=True)})
        for v in values
    )
    return _Touched(ids, PartitionSelection(boxes))


def find_rollback(
    snapshot: Snapshot, units: Callable[[Sequence[str]], UnitPosition], unique_key: Sequence[str]
) -> tuple[Rollback | None, str | None]:
    """The merges to undo before this one (see the module docstring): (the roll back, None),
    (None, None) when there is nothing to undo, or (None, why it cannot be done)."""
    undone: list[int] = []
    oldest = snapshot.version
    for version, payload in snapshot.newest_first():
        oldest = version
        record = None if payload is None else record_at(snapshot, version)
        if record is None or record.kind != "merge":
            continue  # not a unit of work: a delete, a compaction, a restore ...
        position = units(record.partition_keys)
        if position == "earlier":
            break
        if position == "mixed":
            return None, (
                f"version {version} merged units of work before and after this one at once"
            )
        if position == "later":
            undone.append(version)
    else:
        if undone and oldest > 0:
            return None, "the log no longer holds the commits before the merges to undo"
    if not undone:
        return None, None
    versions = snapshot.versions()
    first = min(undone)
    location = snapshot.location
    selection, ids = _selection_of(_partitions_of(location, undone), snapshot.partition_by)
    for version in versions:
        if version <= first or version in undone:
            continue
        record = record_at(snapshot, version)
        if record is None or record.kind != "merge" or units(record.partition_keys) != "other":
            continue
        if any(selection.contains(values) for values in _partitions_of(location, [version])):
            return None, (
                f"version {version}, a merge of other units of work, changed the same table "
                f"partitions ({selection.describe()}) since"
            )
    from dagster_partlake.errors import PartlakeError

    try:
        old = load_table(location, version=first - 1)
    except PartlakeError as error:
        return None, f"version {first - 1} cannot be read any more ({error})"
    from dagster_partlake.delta.snapshot import Snapshot as Loaded

    files = tuple(Loaded(location, snapshot.name, old).live_files(selection, unique_key))
    missing = [f for f in files if location.store.head(f.relative_path) is None]
    if missing:
        return None, f"files of version {first - 1} were vacuumed (e.g. {missing[0].relative_path})"
    return Rollback(first - 1, tuple(sorted(undone)), selection, ids, files), None


def _partitions_of(location: Any, versions: Sequence[int]) -> list[dict[str, str | None]]:
    """The table partitions (their values) whose files the commits added or removed."""
    touched: list[dict[str, str | None]] = []
    for version in versions:
        _, adds, removes = commit_actions(location, version)
        touched.extend(dict(a.get("partitionValues") or {}) for a in [*adds, *removes])
    return touched


def _selection_of(
    touched: Sequence[dict[str, str | None]], partition_by: Sequence[str]
) -> tuple[PartitionSelection, tuple[str, ...]]:
    """The selection of exactly these table partitions, and their conflict ids (`_touched`)."""
    if not partition_by:
        return PartitionSelection.everything(), (WHOLE_TABLE_ID,)
    distinct = sorted({tuple((c, v.get(c)) for c in partition_by) for v in touched}, key=str)
    ids = tuple(
        "|".join(f"{c}={'null' if x is None else x}" for c, x in values) for values in distinct
    )
    if any(x is None for values in distinct for _, x in values):
        return PartitionSelection.everything(), ids
    boxes = tuple(Box({c: frozenset({str(x)}) for c, x in values}) for values in distinct)
    return PartitionSelection(boxes), ids


def _rolled_back(
    live: Sequence[LiveFile], rollback: Rollback
) -> tuple[list[LiveFile], list[LiveFile]]:
    """(live files the roll back removes, files of its version it makes live again); a file
    live in both stays as it is."""
    old = {f.path for f in rollback.files}
    now = {f.path for f in live if rollback.selection.contains(f.partition_values)}
    undone = [f for f in live if f.path in now and f.path not in old]
    back = [f for f in rollback.files if f.path not in now]
    return undone, back


def _union(a: PartitionSelection, b: PartitionSelection) -> PartitionSelection:
    if a.boxes is None or b.boxes is None:
        return PartitionSelection.everything()
    return PartitionSelection(a.boxes + b.boxes)


def _ids(ids: Sequence[str], rollback: Rollback | None) -> tuple[str, ...]:
    return tuple(sorted({*ids, *(rollback.partition_ids if rollback else ())}))


def _count(files: Sequence[LiveFile]) -> int:
    return sum(f.num_records or 0 for f in files)


def _rows(spark: SparkSession, batch: WrittenFiles, files: Sequence[WrittenFile]) -> DataFrame:
    """The rows of some of the batch's files (partition columns from their folders)."""
    from dagster_partlake.delta.schema import arrow_to_spark

    location = batch.location
    reader = spark.read.schema(arrow_to_spark(batch.schema)).option(
        "basePath", location.spark_uri()
    )
    return reader.parquet(*location.spark_uris([f.relative_path for f in files]))


def _rewrite_without_batch_keys(
    spark: SparkSession,
    snapshot: Snapshot,
    batch: WrittenFiles,
    candidates: Sequence[LiveFile],
    unique_key: Sequence[str],
) -> WrittenFiles:
    """Spark: the candidate files' rows whose key is not in the batch, written (not committed)."""
    from dagster_partlake.delta.schema import arrow_to_spark

    location = snapshot.location
    schema: pa.Schema = snapshot.schema
    rows = sum(f.num_records or 0 for f in candidates)
    if len(unique_key) == 1 and unique_key[0] not in batch.partition_by and rows >= WORKER_ROWS:
        # The common key: Python workers read, filter and write each file (no JVM hop).
        return rewrite_without_keys(
            spark,
            location,
            [(f.relative_path, f.partition_values) for f in candidates],
            schema=schema,
            partition_by=batch.partition_by,
            key_column=unique_key[0],
            key_files=[f.relative_path for f in batch.files],
            stats_columns=unique_key,
        )
    existing = (
        spark.read.schema(arrow_to_spark(schema))
        .option("basePath", location.spark_uri())
        .parquet(*location.spark_uris([f.relative_path for f in candidates]))
    )
    batch_keys = _rows(spark, batch, batch.files).select(*unique_key)
    remaining = existing.join(batch_keys, on=list(unique_key), how="left_anti").select(
        *existing.columns
    )
    # The table's columns as they are: a column the batch adds stays null in these rows.
    return write_files(
        remaining,
        location,
        partition_by=batch.partition_by,
        schema=schema,
        stats_columns=unique_key,
    )


def check_keys(df: DataFrame, unique_key: Sequence[str], name: str) -> None:
    """No null and no repeated key among the rows of `df` (one Spark aggregation).

    Raises:
        DuplicateKeyError: naming up to five offending keys.
    """
    from pyspark.sql import functions as F

    rows = df.select(*unique_key)
    any_null = F.lit(False)
    for column in unique_key:
        any_null = any_null | F.col(column).isNull()
    bad = (
        rows.groupBy(*unique_key)
        .agg(F.count(F.lit(1)).alias("n"), F.max(any_null).alias("has_null"))
        .where((F.col("n") > 1) | F.col("has_null"))
        .limit(MAX_SHOWN_KEYS + 1)
        .collect()
    )
    if not bad:
        return
    shown = [
        f"({', '.join(f'{c}={row[c]!r}' for c in unique_key)}) x{row['n']}"
        for row in bad[:MAX_SHOWN_KEYS]
    ]
    more = " ..." if len(bad) > MAX_SHOWN_KEYS else ""
    raise DuplicateKeyError(
        f"the batch for table {name} repeats or nulls its unique key "
        f"({', '.join(unique_key)}): {'; '.join(shown)}{more}. A merge replaces one row per "
        "key: deduplicate the returned DataFrame (e.g. keep the latest row per key) and drop "
        "null keys. Nothing was written."
    )


def _key_range(
    files: Sequence[WrittenFile], unique_key: Sequence[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch's min and max per key column, for the columns every batch file has stats of."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    with_rows = [f for f in files if f.num_records]
    for column in unique_key:
        if with_rows and all(column in f.min_values for f in with_rows):
            low[column] = min(f.min_values[column] for f in with_rows)
            high[column] = max(f.max_values[column] for f in with_rows)
    return low, high


def _may_hold(
    f: LiveFile, low: dict[str, Any], high: dict[str, Any], unique_key: Sequence[str]
) -> bool:
    """False only when the file's statistics prove it holds no key in the batch's range."""
    if f.num_records == 0:
        return False
    for column in unique_key:
        if column in low and column in f.min_values and column in f.max_values:
            file_low, file_high = (
                _comparable(f.min_values[column]),
                _comparable(f.max_values[column]),
            )
            if file_high < _comparable(low[column]) or file_low > _comparable(high[column]):
                return False
    return True


def _comparable(value: Any) -> Any:
    # Staged statistics hold dates as ISO strings, the log's as dates: compare as text.
    return value.isoformat() if hasattr(value, "isoformat") else value
