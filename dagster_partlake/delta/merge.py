"""Upsert a batch of rows into a Delta table on a unique key: Spark rewrites, delta-rs commits.

1. The batch is staged like any write (Parquet in a private folder, min/max of the key columns
   in each file's footer) and checked: no key column may be null or repeat inside the batch.
2. The table files that can hold a batch key are found from the log alone: files of the table
   partitions the batch touches, whose key statistics overlap the batch's key range.
3. One Spark job rewrites those files without the rows whose key is in the batch (a left anti
   join); the data never passes through the driver.
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

import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from dagster_partlake.delta.record import WHOLE_TABLE_ID, CommitRecord
from dagster_partlake.delta.selection import Box, PartitionSelection
from dagster_partlake.delta.staging import (
    StagedFile,
    StagedWrite,
    discard_published,
    discarded_on_failure,
    publish_staged,
    staged_files,
    write_parquet_files,
)
from dagster_partlake.delta.table import (
    LiveFile,
    arrow_schema,
    commit_actions,
    live_files,
    load_table,
    log_versions,
    read_record,
    table_exists,
)
from dagster_partlake.delta.writer import (
    DEFAULT_MAX_ATTEMPTS,
    AlreadyWritten,
    CommitResult,
    InputsMovedError,
    commit_staged,
    stage_partitions,
)
from dagster_partlake.errors import CommitConflictError, SchemaMismatchError
from dagster_partlake.layout import staging_dir

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

MAX_SHOWN_KEYS = 5


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
    root: str,
    *,
    unique_key: Sequence[str],
    partition_by: Sequence[str],
    selection: PartitionSelection,
    record_for: Callable[[StagedWrite], CommitRecord],
    allow_new_columns: bool = False,
    table_name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    once_per_inputs: bool = False,
    units: Callable[[Sequence[str]], UnitPosition] | None = None,
) -> RewriteResult:
    """Upsert the rows of `df` into the Delta table at `root` on `unique_key`.

    Args:
        selection: where the batch's rows may lie (everything, unless the table partitions
            are the run's partitions).
        record_for: what the commit records, given the staged batch; `metrics` are filled in
            here.
        once_per_inputs: as for `commit_staged` (raises `AlreadyWritten`).
        units: for a time-ordered merge, where the units of work a commit records (its
            `partition_keys`) stand against this merge's; merges of this unit or later ones of
            its series are undone first (the module docstring). None: never undo.

    Raises:
        SchemaMismatchError: a key column is missing; DuplicateKeyError: the batch repeats a key
            or has a null one; CommitConflictError: concurrent writers kept changing the touched
            partitions. In each case nothing was committed.
    """
    name = table_name or os.path.basename(os.path.abspath(root))
    check_key_columns(df, unique_key, name)
    batch = stage_partitions(
        df,
        root,
        partition_by=partition_by,
        selection=selection,
        partition_ids=[WHOLE_TABLE_ID],
        allow_new_columns=allow_new_columns,
        table_name=name,
        removal="none",
        stats_columns=unique_key,
    )
    with discarded_on_failure(batch.staging_dir):
        paths = [os.path.join(batch.staging_dir, f.relative_path) for f in batch.files]
        if any(f.num_records for f in batch.files):
            # basePath: the partition columns (which the key may include) come from the folders.
            staged_rows = df.sparkSession.read.option(
                "basePath", "file://" + batch.staging_dir
            ).parquet(*("file://" + p for p in paths))
            check_keys(staged_rows, unique_key, name)
    touched = _touched(batch)
    batch = replace(batch, partition_ids=touched.ids, selection=touched.selection)
    record = record_for(batch)
    publish_staged(batch)
    for _ in range(max_attempts):
        rollback, why_not = (
            find_rollback(batch.root, units, unique_key) if units is not None else (None, None)
        )
        try:
            result = _merge_once(
                df, batch, unique_key, record, max_attempts, once_per_inputs, rollback
            )
        except InputsMovedError:
            continue
        return replace(result, rolled_back=rollback, not_rolled_back=why_not)
    raise CommitConflictError(
        f"could not merge into table {name}: concurrent writers kept changing the partitions it "
        f"touches ({', '.join(touched.ids[:5])}) for {max_attempts} attempts. Nothing was "
        "committed; run it again when they are done."
    )


@dataclass(frozen=True)
class _Touched:
    ids: tuple[str, ...]  # commit conflict ids of the touched table partitions
    selection: PartitionSelection


def _touched(batch: StagedWrite) -> _Touched:
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


def _merge_once(
    df: DataFrame,
    batch: StagedWrite,
    unique_key: Sequence[str],
    record: CommitRecord,
    max_attempts: int,
    once_per_inputs: bool = False,
    rollback: Rollback | None = None,
) -> RewriteResult:
    spark = df.sparkSession
    candidates: list[LiveFile] = []
    expected: frozenset[str] = frozenset()
    rows_before = 0
    undone: list[LiveFile] = []  # live files the roll back removes
    back: list[LiveFile] = []  # files of the roll back's version that are not live now
    selection = batch.selection
    if table_exists(batch.root):
        table = load_table(batch.root, table_name=batch.table_name)
        everything = live_files(table, PartitionSelection.everything(), stats_columns=unique_key)
        if rollback is not None:
            undone, back = _rolled_back(everything, rollback)
            gone = {f.path for f in undone}
            # The table as the roll back leaves it: what the merge reads and counts against.
            everything = [f for f in everything if f.path not in gone] + back
            selection = _union(batch.selection, rollback.selection)
        rows_before = sum(f.num_records or 0 for f in everything)
        in_touched = [f for f in everything if batch.selection.contains(f.partition_values)]
        expected = frozenset(f.path for f in live_files(table, selection))
        low, high = _key_range(batch.files, unique_key)
        candidates = [f for f in in_touched if _may_hold(f, low, high, unique_key)]
        schema = arrow_schema(table)
    kept: StagedWrite | None = None
    if candidates:
        kept = _rewrite_without_batch_keys(spark, batch, candidates, unique_key, schema)
        publish_staged(kept)
    files = batch.files + (kept.files if kept else ())
    back_paths = {f.path for f in back}
    read = {f.path for f in candidates}
    write = replace(
        batch,
        files=files,
        selection=selection,
        partition_ids=_ids(batch.partition_ids, rollback),
        removal="files",
        # A candidate of the roll back's version is not live: it is rewritten, never removed.
        remove_files=tuple(undone + [f for f in candidates if f.path not in back_paths]),
        readd_files=tuple(f for f in back if f.path not in read),
        expected_live=expected,
    )
    existing = sum(f.num_records or 0 for f in candidates)
    copied = kept.num_records if kept else 0
    updated = existing - copied
    metrics = {
        "rows_inserted": batch.num_records - updated,
        "rows_updated": updated,
        "rows_deleted": max(0, _rows(undone) - _rows(back)),
        "rows_unchanged": rows_before - updated,
    }
    try:
        result = commit_staged(
            write,
            record=replace(record, metrics=metrics),
            max_attempts=max_attempts,
            once_per_inputs=once_per_inputs,
        )
    except (InputsMovedError, AlreadyWritten):
        if kept is not None:
            discard_published(kept)
        raise
    return RewriteResult(result, metrics, len(candidates))


def find_rollback(
    root: str, units: Callable[[Sequence[str]], UnitPosition], unique_key: Sequence[str]
) -> tuple[Rollback | None, str | None]:
    """The merges to undo before this one (see the module docstring): (the roll back, None),
    (None, None) when there is nothing to undo, or (None, why it cannot be done)."""
    if not table_exists(root):
        return None, None
    versions = log_versions(root)
    undone: list[int] = []
    for version in reversed(versions):
        record = read_record(root, version)
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
        if undone and versions and versions[0] > 0:
            return None, "the log no longer holds the commits before the merges to undo"
    if not undone:
        return None, None
    first = min(undone)
    partition_by = load_table(root).metadata().partition_columns
    selection, ids = _selection_of(_partitions_of(root, undone), partition_by)
    for version in versions:
        if version <= first or version in undone:
            continue
        record = read_record(root, version)
        if record is None or record.kind != "merge" or units(record.partition_keys) != "other":
            continue
        if any(selection.contains(values) for values in _partitions_of(root, [version])):
            return None, (
                f"version {version}, a merge of other units of work, changed the same table "
                f"partitions ({selection.describe()}) since"
            )
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        old = DeltaTable(root, version=first - 1)
    except (DeltaError, OSError) as error:
        return None, f"version {first - 1} cannot be read any more ({error})"
    files = tuple(live_files(old, selection, stats_columns=unique_key))
    missing = [f.path for f in files if not os.path.exists(f.absolute_path(root))]
    if missing:
        return None, f"files of version {first - 1} were vacuumed (e.g. {unquote(missing[0])})"
    return Rollback(first - 1, tuple(sorted(undone)), selection, ids, files), None


def _partitions_of(root: str, versions: Sequence[int]) -> list[dict[str, str | None]]:
    """The table partitions (their values) whose files the commits added or removed."""
    touched: list[dict[str, str | None]] = []
    for version in versions:
        _, adds, removes = commit_actions(root, version)
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


def _rows(files: Sequence[LiveFile]) -> int:
    return sum(f.num_records or 0 for f in files)


def _rewrite_without_batch_keys(
    spark: SparkSession,
    batch: StagedWrite,
    candidates: Sequence[LiveFile],
    unique_key: Sequence[str],
    schema: pa.Schema,
) -> StagedWrite:
    """Spark: the candidate files' rows whose key is not in the batch, staged (not committed)."""
    from dagster_partlake.delta.schema import arrow_to_spark

    existing = (
        spark.read.schema(arrow_to_spark(schema))
        .option("basePath", "file://" + batch.root)
        .parquet(*("file://" + f.absolute_path(batch.root) for f in candidates))
    )
    batch_keys = (
        spark.read.option("basePath", "file://" + batch.root)
        .parquet(*("file://" + os.path.join(batch.root, f.relative_path) for f in batch.files))
        .select(*unique_key)
    )
    remaining = existing.join(batch_keys, on=list(unique_key), how="left_anti").select(
        *existing.columns
    )
    stage = os.path.join(staging_dir(batch.root), uuid.uuid4().hex)
    write_parquet_files(remaining, stage, batch.partition_by)
    files = staged_files(stage, batch.partition_by, unique_key)
    return replace(batch, staging_dir=stage, files=tuple(files))


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
    files: Sequence[StagedFile], unique_key: Sequence[str]
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
