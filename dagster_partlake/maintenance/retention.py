"""Retiring partitions: remove what the retention rules retire, after an optional archive copy.

`retire_table` works on one table, given which of its partitions are retired (the planner's
`Retirement`, cascades included, see `planning.retirement`):

1. The live files of the retired partitions are found from the log (rows from their
   `numRecords`). A dry run stops here and lists them.
2. With an archive (`partlake/retention` `archive`): the files not already live in the archive
   table are copied there byte for byte, under the same relative paths, and added to it in ONE
   commit (created with the table's schema and partitioning on first use). A copy already live
   there (an earlier run archived it, then died before its removal) is not copied again.
3. `fault_point("retention_archived")`: a fault drill may kill the process here.
4. ONE commit on the table removes every retired file with `dataChange: true`, naming each
   partition's application transaction (a concurrent writer of it conflicts), with
   `{"partlake_maintenance": {"operation": "retention", ...}}`: readers see the rows gone.

So nothing is lost if the removal fails: the archive's commit landed first, and the next run
finds the rows still in the table, copies nothing twice, and removes them. The planner does not
rebuild what was removed (a retired partition is never judged) and what reads it keeps its
verdict, unless it asks for `cascade`.

`compact_retained` is the archive compaction (`compact_after`): the partitions older than the
newest N windows are rewritten into one file each by `maintenance.compact` (`dataChange: false`,
lastUpdated kept: nothing becomes stale).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.payload import MAINTENANCE_KEY
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.snapshot import open_snapshot
from dagster_partlake.delta.table import LiveFile, table_exists
from dagster_partlake.delta.transaction import Actions, Readd, commit
from dagster_partlake.errors import PartlakeError
from dagster_partlake.faults import fault_point
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    from dagster import DagsterInstance
    from pyspark.sql import SparkSession

    from dagster_partlake.delta.snapshot import Snapshot
    from dagster_partlake.maintenance.compact import CompactResult
    from dagster_partlake.maintenance.operations import TableOutcome
    from dagster_partlake.partitions.retention import RetentionRule
    from dagster_partlake.planning.definition import Retirement
    from dagster_partlake.planning.graph import LakeGraph

PartitionValues = Mapping[str, str | None]
# Larger than any file: every qualifying partition becomes one file (`compact_retained`).
_ONE_FILE = 1 << 62


@dataclass(frozen=True)
class RetiredPartition:
    """One retired partition of a table and what it holds."""

    partition: str
    files: int
    rows: int | None  # None: a file's log entry has no numRecords

    def to_json(self) -> dict[str, object]:
        return {"partition": self.partition, "files": self.files, "rows": self.rows}


@dataclass(frozen=True)
class RetentionResult:
    """What `retire_table` removed (or, as a dry run, would remove)."""

    dry_run: bool
    partitions: tuple[RetiredPartition, ...]
    version: int | None = None  # the removal commit (None: dry run, or nothing retired)
    archive: str | None = None  # the archive table (None: no archive)
    archive_version: int | None = None  # the archive's commit (None: nothing copied)
    files_archived: int = 0  # copied in this run
    files_already_archived: int = 0  # found live in the archive (an earlier half-done run)

    @property
    def rows(self) -> int:
        return sum(p.rows or 0 for p in self.partitions)

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "partitions": [p.to_json() for p in self.partitions],
            "rows": self.rows,
            "version": self.version,
            "archive": self.archive,
            "archive_version": self.archive_version,
            "files_archived": self.files_archived,
            "files_already_archived": self.files_already_archived,
        }


def retire_table(
    root: str | TableLocation,
    retired: Callable[[str], bool],
    partition_id: Callable[[PartitionValues], str],
    *,
    archive: TableLocation | None = None,
    dry_run: bool = True,
    table_name: str | None = None,
) -> RetentionResult:
    """Remove the retired partitions of the table at `root` in one commit, after copying them
    to `archive` in one commit there (see the module docstring).

    Args:
        root: the table's path or location.
        retired: whether a partition (by its id, a Dagster partition key) is retired.
        partition_id: a partition's id given its values.
        archive: where retired partitions are copied before their removal (None: not copied).
        dry_run: only list what would be removed (the default); commit nothing.
        table_name: name used in messages and commits.

    Raises:
        PartlakeError: there is no table at `root`, or the archive is partitioned otherwise.
        CommitConflictError: concurrent writers kept conflicting; nothing more was committed.
    """
    location = as_location(root)
    name = table_name or location.name
    snapshot = open_snapshot(location, table_name=name, must_exist=False)
    if snapshot is None:
        raise PartlakeError(f"there is no Delta table for {name} at {location}; nothing to retire.")
    files = _retired_files(snapshot, retired, partition_id)
    partitions = _partitions(files, partition_id)
    result = RetentionResult(
        dry_run, partitions, archive=archive.uri if archive is not None else None
    )
    if dry_run or not files:
        return result
    ids = [p.partition for p in partitions]
    if archive is not None:
        result = _archive(snapshot, files, archive, ids, name, result)
    fault_point("retention_archived", name)

    def removal(current: Snapshot) -> Actions:
        gone = _retired_files(current, retired, partition_id)
        return Actions(removes=gone, data_change=True, partition_ids=ids)

    committed = commit(
        location,
        snapshot,
        removal,
        payload=lambda commit_id, _now: {
            MAINTENANCE_KEY: {
                "operation": "retention",
                "partitions": ids,
                "rows": result.rows,
                "archive": result.archive,
                "id": commit_id,
            }
        },
        name=name,
        partition_ids=ids,
    )
    return _with(result, version=committed.version)


def _retired_files(
    snapshot: Snapshot,
    retired: Callable[[str], bool],
    partition_id: Callable[[PartitionValues], str],
) -> list[LiveFile]:
    files = snapshot.live_files(PartitionSelection.everything())
    return [f for f in files if retired(partition_id(f.partition_values))]


def _partitions(
    files: Sequence[LiveFile], partition_id: Callable[[PartitionValues], str]
) -> tuple[RetiredPartition, ...]:
    by_id: dict[str, list[LiveFile]] = {}
    for f in files:
        by_id.setdefault(partition_id(f.partition_values), []).append(f)
    return tuple(
        RetiredPartition(
            key,
            len(group),
            None
            if any(f.num_records is None for f in group)
            else sum(f.num_records or 0 for f in group),
        )
        for key, group in sorted(by_id.items())
    )


def _archive(
    snapshot: Snapshot,
    files: Sequence[LiveFile],
    archive: TableLocation,
    ids: Sequence[str],
    name: str,
    result: RetentionResult,
) -> RetentionResult:
    """Copy `files` into the archive table and add them there in one commit, but those an
    earlier run already archived."""
    target = open_snapshot(archive, table_name=f"{name} archive", must_exist=False)
    if target is not None and tuple(target.partition_by) != tuple(snapshot.partition_by):
        raise PartlakeError(
            f"the archive of {name} at {archive} is partitioned by "
            f"({', '.join(target.partition_by) or 'nothing'}), the table by "
            f"({', '.join(snapshot.partition_by) or 'nothing'}); give the rule another archive."
        )
    live = (
        {f.path for f in target.live_files(PartitionSelection.everything())}
        if target is not None
        else set()
    )
    copy = [f for f in files if f.path not in live]
    already = len(files) - len(copy)
    if not copy:
        return _with(result, files_already_archived=already)
    source, sink = snapshot.location.store, archive.store
    for f in copy:
        sink.write(f.relative_path, source.read(f.relative_path))
    committed = commit(
        archive,
        target,
        lambda _current: Actions(adds=[Readd(f) for f in copy], data_change=True),
        payload=lambda commit_id, _now: {
            MAINTENANCE_KEY: {
                "operation": "retention_archive",
                "table": name,
                "from_version": snapshot.version,
                "partitions": list(ids),
                "id": commit_id,
            }
        },
        name=f"{name} archive",
        schema=snapshot.schema,
        partition_by=snapshot.partition_by,
    )
    return _with(
        result,
        archive_version=committed.version,
        files_archived=len(copy),
        files_already_archived=already,
    )


def _with(result: RetentionResult, **changes: Any) -> RetentionResult:
    return replace(result, **changes)


def compact_retained(
    spark: SparkSession,
    root: str | TableLocation,
    selection: PartitionSelection,
    *,
    table_name: str | None = None,
) -> CompactResult:
    """Rewrite each partition inside `selection` that has several files into one file
    (`maintenance.compact.compact_table`: `dataChange: false`, lastUpdated kept)."""
    from dagster_partlake.maintenance.compact import compact_table

    return compact_table(
        spark,
        root,
        target_file_bytes=_ONE_FILE,
        selection=selection,
        table_name=table_name,
    )


def retain_tables(
    graph: LakeGraph,
    select: Sequence[str] | None = None,
    *,
    dry_run: bool = True,
    spark: Callable[[], SparkSession] | None = None,
) -> list[TableOutcome]:
    """Apply the retention rules of a code location's managed tables: per table with retired
    partitions, `retire_table`, then the archive compaction of its `compact_after`. One outcome
    per table with a rule or a cascade (operation "retention"); a table that fails is reported
    and the others still run.

    Raises:
        PartlakeConfigError: `select` names an asset that is not a managed one.
    """
    from dagster_partlake.maintenance.operations import TableOutcome, managed_tables
    from dagster_partlake.planning.session import PlanningSession

    tables = managed_tables(graph, select)
    # Only an asset with a rule (its own, or a cascade) has retired partitions.
    wanted = [(n, location) for n, location in tables if graph.specs[n].retention is not None]
    if not wanted:
        return []
    inputs, _ = PlanningSession(graph).gather()
    outcomes = []
    for name, location in wanted:
        retired = inputs.retired.get(name)
        rule = graph.specs[name].retention
        asset = graph.assets[name]
        if asset.decoupled:
            outcomes.append(
                TableOutcome(
                    name,
                    "retention",
                    "skipped",
                    f"its table (kind {asset.kind}) is not partitioned by its Dagster "
                    "partitions, so no table partition is a retired one; nothing removed",
                )
            )
            continue
        if not table_exists(location):
            outcomes.append(TableOutcome(name, "retention", "no_table", "no table yet, skipped"))
            continue
        try:
            outcome = _retain_one(graph, name, location, retired, rule, dry_run, spark)
        except PartlakeError as error:
            outcome = TableOutcome(
                name, "retention", "failed", f"failed: {error}", {"error": str(error)}
            )
        outcomes.append(outcome)
    return outcomes


def _retain_one(
    graph: LakeGraph,
    name: str,
    location: TableLocation,
    retired: Retirement | None,
    rule: RetentionRule | None,
    dry_run: bool,
    spark: Callable[[], SparkSession] | None,
) -> TableOutcome:
    from dagster_partlake.maintenance.operations import TableOutcome
    from dagster_partlake.partitions.keys import KeyCodec, selection_for_keys
    from dagster_partlake.partitions.retention import window_cutoff, window_start
    from dagster_partlake.storage.location import table_location

    asset = graph.assets[name]
    snapshot = open_snapshot(location, table_name=name)
    assert snapshot is not None
    codec = KeyCodec(asset.columns, snapshot.column_types)
    columns = [c.column for c in asset.columns]

    def partition_id(values: PartitionValues) -> str:
        key = codec.key([values.get(c) for c in columns])
        return key or "/".join(f"{c}={values.get(c)}" for c in columns)

    archive = (
        table_location(graph.lake, asset.key, rule.archive)
        if rule is not None and rule.archive
        else None
    )
    result = retire_table(
        location,
        retired.contains if retired is not None else (lambda _key: False),
        partition_id,
        archive=archive,
        dry_run=dry_run,
        table_name=name,
    )
    details: dict[str, object] = {"operation": "retention", **result.to_json()}
    if retired is not None:
        details["retires"] = retired.rule
    text = _describe(result, retired)
    if rule is not None and rule.compact_after is not None:
        present = {
            partition_id(f.partition_values)
            for f in snapshot.live_files(PartitionSelection.everything())
        } - {p.partition for p in result.partitions}
        cutoff = window_cutoff(rule.dimension, max(rule.compact_after, 1), asset.columns, present)
        if cutoff is not None:
            column, start = cutoff
            old = (
                sorted(k for k in present if window_start(column, k, asset.columns) < start)
                if rule.compact_after
                else sorted(present)
            )
            if old and dry_run:
                text += (
                    f"; would compact {len(old)} partition(s) older than the last "
                    f"{rule.compact_after} into one file each"
                )
                details["compact"] = {"dry_run": True, "partitions": old}
            elif old:
                if spark is None:
                    raise PartlakeError("archive compaction needs a Spark session; pass spark=.")
                current = open_snapshot(location, table_name=name)
                assert current is not None
                selection = selection_for_keys(
                    asset.columns, old, current.column_types, asset_name=name
                )
                done = compact_retained(spark(), location, selection, table_name=name)
                from dagster_partlake.maintenance.operations import describe

                text += f"; archive compaction: {describe(done)}"
                details["compact"] = {"partitions": old, "version": done.version}
    return TableOutcome(name, "retention", "ok", text, details)


def _describe(result: RetentionResult, retired: Retirement | None) -> str:
    rule = f" ({retired.rule})" if retired is not None else ""
    if not result.partitions:
        return f"no retired partition holds data{rule}"
    shown = ", ".join(
        f"{p.partition} ({p.rows if p.rows is not None else '?'} rows)"
        for p in result.partitions[:10]
    )
    more = f" (+{len(result.partitions) - 10} more)" if len(result.partitions) > 10 else ""
    count = f"{len(result.partitions)} retired partition(s), {result.rows} row(s){rule}"
    if result.dry_run:
        archive = f", after a copy to {result.archive}" if result.archive else ""
        return (
            f"would remove {count}{archive}: {shown}{more}; dry run, nothing committed "
            "(--apply removes them)"
        )
    archived = ""
    if result.archive:
        archived = (
            f"; archived to {result.archive} (version {result.archive_version}, "
            f"{result.files_archived} file(s) copied, {result.files_already_archived} already "
            "there)"
        )
    return f"removed {count} in version {result.version}: {shown}{more}{archived}"


def record_retired(
    instance: DagsterInstance, graph: LakeGraph, outcomes: list[TableOutcome]
) -> int:
    """Record the removed partitions' `partlake_fresh` results: passed, "retired" (Dagster's
    Partitions tab has no status of its own for a partition retired on purpose); how many."""
    import uuid

    from dagster_partlake.compat import record_check_evaluations
    from dagster_partlake.freshness.check import checked_assets, retired_evaluation

    checked = checked_assets(graph.asset_graph.asset_check_keys)
    evaluations = [
        retired_evaluation(checked[o.asset], str(p["partition"]), str(o.details.get("retires", "")))
        for o in outcomes
        if o.asset in checked and o.status == "ok" and o.details.get("version") is not None
        for p in _removed(o)
    ]
    if evaluations:
        record_check_evaluations(instance, evaluations, f"retention-{uuid.uuid4().hex}")
    return len(evaluations)


def _removed(outcome: TableOutcome) -> list[Mapping[str, object]]:
    found = outcome.details.get("partitions")
    return list(found) if isinstance(found, list) else []
