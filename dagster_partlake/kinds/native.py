"""The replacing kinds written by Spark's own Delta (`partlake/writer: "delta-spark"`).

`partition` and `table` replace the run's partitions (the whole table) as partlake's writer does
(`kinds.replace`), with the same record, the same quality gates and the same checks, but Spark's
Delta writes the files and commits them (`delta.native.commit_with_delta_spark`: `replaceWhere`
over the run's partitions, the record in `userMetadata`). The rows are persisted once: one job
counts them per partition (the record's rows, and the check that every row lies in the run's
partitions), the gates read them, the write reads them again. The other kinds decide their
actions from the files they read and write (`tracked`'s hashes, `append`'s retry, `merge` and
`scd2`'s rewrites) through partlake's transaction: the delta-spark writer refuses them.

The table's version 0 is partlake's empty creation, whichever writer writes first
(`delta.transaction.created`). delta-spark honours the table features partlake's writer does not
(deletion vectors, column mapping, change data feed, ...): the protocol gate only asks that
partlake can read the table.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from dagster_partlake.delta.native import (
    check_native_location,
    commit_with_delta_spark,
    replace_where,
)
from dagster_partlake.delta.schema import arrow_to_spark, delta_types
from dagster_partlake.delta.transaction import created
from dagster_partlake.errors import PartitionMismatchError
from dagster_partlake.kinds.check import check_batch
from dagster_partlake.kinds.outcome import KindWrite, unless_written
from dagster_partlake.kinds.session import WriteSession

# The setting is checked where the kinds are declared (light enough for a code location load).
from dagster_partlake.kinds.spec import check_native_kind
from dagster_partlake.records.queries import read_record
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import CommitResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def write_native(df: DataFrame, session: WriteSession, record: CommitRecord) -> KindWrite:
    """Replace the run's partitions (the whole table for `table`) with `df`'s rows, committed
    by Spark's Delta.

    Raises:
        PartlakeConfigError: the kind or the table's place is not for this writer.
        SchemaMismatchError: the rows do not fit the table.
        PartitionMismatchError: a row falls outside the run's partitions.
    """
    target = session.target
    check_native_kind(target.kind.kind, target.asset_name)
    check_native_location(session.location, session.name)
    schema = session.schema_of(df)
    snapshot = session.snapshot
    if snapshot is None:
        snapshot = created(session.location, session.name, schema, target.partition_by)
        session.snapshot = snapshot
    unless_written(snapshot, record, target.once_per_inputs)
    spark_schema = arrow_to_spark(schema)
    rows = df.select(*(df[f"`{f.name}`"].cast(f.dataType).alias(f.name) for f in spark_schema))
    persisted = rows.persist()
    try:
        by_key = _rows_by_key(session, persisted)
        gates = check_batch(session, persisted)
        record = replace(record, rows_by_partition=by_key)
        predicate = (
            None if target.decoupled else replace_where(session.replaced, delta_types(schema))
        )
        committed = commit_with_delta_spark(
            persisted,
            snapshot,
            predicate=predicate,
            payload=record.to_commit_info(),
            commit_id=uuid.uuid4().hex,
            partition_ids=target.partition_ids,
            merge_schema=target.allow_new_columns,
            max_attempts=target.max_attempts,
        )
    finally:
        persisted.unpersist()
    landed = read_record(session.location, committed.version)
    assert landed is not None  # the commit carries it
    inserted = sum(by_key.values())
    result = CommitResult(
        version=committed.version,
        num_records=inserted,
        files_added=len(committed.adds),
        files_removed=len(committed.removes),
        attempts=committed.attempts,
        commit_time_ms=landed.commit_time_ms or 0,
        record=landed,
        rows_removed=committed.rows_removed,
        commit_seconds=committed.seconds,
    )
    metrics = {
        "rows_inserted": inserted,
        "rows_updated": 0,
        "rows_deleted": committed.rows_removed,
        "rows_unchanged": 0,
    }
    return KindWrite(result, landed, metrics, gates_seconds=gates)


def _rows_by_key(session: WriteSession, rows: DataFrame) -> dict[str, int]:
    """Rows per run partition key (0 for a key that got none), counted in one job; every row
    must lie in the partitions the run writes.

    Raises:
        PartitionMismatchError: naming up to five partitions outside them.
    """
    target = session.target
    partition_by = list(target.partition_by)
    counts: dict[str, int] = dict.fromkeys(target.partition_ids, 0)
    if not partition_by:
        counts[target.partition_ids[0]] = rows.count()
        return counts
    grouped = rows.groupBy(*(rows[f"`{c}`"].cast("string").alias(c) for c in partition_by))
    outside = []
    for row in grouped.count().collect():
        values = {c: row[c] for c in partition_by}
        if not target.decoupled and not session.replaced.contains(values):
            outside.append("|".join(f"{c}={'null' if v is None else v}" for c, v in values.items()))
            continue
        key = target.key_of(values)
        counts[key] = counts.get(key, 0) + int(row["count"])
    if outside:
        raise PartitionMismatchError(
            f"rows for table {session.name} fall outside the partitions being written: "
            f"{', '.join(sorted(outside)[:5])}{' ...' if len(outside) > 5 else ''}; this write "
            f"may only contain {session.replaced.describe()}. Filter the DataFrame to the run's "
            "partitions (context.partition_key / partition_keys) before returning it."
        )
    return counts
