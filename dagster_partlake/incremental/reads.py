"""Reading an input incrementally (`dagster_partlake.incremental.spec`): only what its asset has not
consumed yet, judged by the asset's own newest commit record.

- log: the files added to the upstream table since the version the record says it read
  (`dagster_partlake.delta.increments`); a rewrite in between fails the run unless a full
  re-read is allowed. No old file is opened: the row count comes from the log.
- watermark: the rows whose column is greater than the recorded watermark; one Spark
  aggregation over them gives the new watermark (the maximum, as Spark renders it as a string,
  which casts back exactly) and the row count.

Either way the run consumes the whole selection's current state (every partition's
lastUpdated), so the planner sees the asset fresh until the upstream moves again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_partlake.delta.increments import files_added
from dagster_partlake.delta.reader import TableSnapshot, read_files
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.table import LiveFile, table_exists
from dagster_partlake.errors import PartlakeError
from dagster_partlake.incremental.spec import Incremental
from dagster_partlake.records.queries import newest_record
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class UpstreamRewrittenError(PartlakeError):
    """A log-based input's upstream was not append-only since the last run."""


@dataclass(frozen=True)
class IncrementalRead:
    df: DataFrame
    rows: int
    state: tuple[LiveFile, ...]  # every live file of the selection: what the run consumed
    watermark: Mapping[str, str] | None  # watermark mode: the one to record
    description: str  # what was read, for the run's log


def read_incremental(
    spark: SparkSession,
    snapshot: TableSnapshot,
    selection: PartitionSelection,
    incremental: Incremental,
    *,
    consumer_root: str | TableLocation,
    consumer: str,
) -> IncrementalRead:
    """The part of `selection` of the upstream `snapshot` that `consumer` has not read yet.

    Raises:
        UpstreamRewrittenError: log mode, the upstream removed or rewrote data since the last
            run (or the log no longer holds those commits), and no full re-read is allowed.
        PartlakeConfigError: watermark mode, the column is not in the upstream table.
    """
    upstream = snapshot.name
    previous = newest_record(consumer_root) if table_exists(consumer_root) else None
    state = tuple(snapshot.live_files(selection))
    version = snapshot.table.version()
    if incremental.mode == "log":
        since = None if previous is None else previous.upstream_versions.get(upstream)
        if since is None:
            read = read_files(spark, snapshot, state)
            return IncrementalRead(
                read.df, _rows(state), state, None, f"all of {upstream} (first run)"
            )
        increment = files_added(snapshot.location, since=since, until=version, selection=selection)
        if since > version or not increment.append_only:
            why = _why_not_append_only(upstream, since, version, increment)
            if not incremental.allow_full_reread:
                raise UpstreamRewrittenError(
                    f"{consumer} reads {upstream} incrementally from its log, but {why}; the new "
                    "rows cannot be told apart. Re-read it in full once with "
                    '{"mode": "log", "allow_full_reread": true} in partlake/incremental, or '
                    f"rebuild {consumer}."
                )
            read = read_files(spark, snapshot, state)
            return IncrementalRead(read.df, _rows(state), state, None, f"all of {upstream} ({why})")
        read = read_files(spark, snapshot, increment.files)
        return IncrementalRead(
            read.df,
            increment.num_records,
            state,
            None,
            f"{len(increment.files)} file(s) added to {upstream} in versions "
            f"{since + 1}..{version}",
        )
    return _watermark(spark, snapshot, state, incremental, previous, upstream)


def _watermark(
    spark: SparkSession,
    snapshot: TableSnapshot,
    state: tuple[LiveFile, ...],
    incremental: Incremental,
    previous: object,
    upstream: str,
) -> IncrementalRead:
    from pyspark.sql import functions as F

    from dagster_partlake.errors import PartlakeConfigError

    column = incremental.column
    assert column is not None
    df = read_files(spark, snapshot, state).df
    if column not in df.columns:
        raise PartlakeConfigError(
            f"partlake/incremental compares column {column!r}, which {upstream} does not have "
            f"(columns: {', '.join(df.columns)}); name one of them."
        )
    known = getattr(previous, "watermarks", {}).get(upstream) if previous is not None else None
    if known is not None:
        df = df.where(F.col(column) > F.lit(known["value"]).cast(known["type"]))
    found = df.agg(
        F.max(column).cast("string").alias("high"), F.count(F.lit(1)).alias("rows")
    ).first()
    assert found is not None
    column_type = df.schema[column].dataType.simpleString()
    watermark = (
        {"value": found["high"], "type": column_type} if found["high"] is not None else known
    )
    since = f"{column} > {known['value']}" if known is not None else "first run"
    return IncrementalRead(
        df,
        int(found["rows"]),
        state,
        dict(watermark) if watermark is not None else None,
        f"{found['rows']} row(s) of {upstream} with {since}",
    )


def _rows(files: tuple[LiveFile, ...]) -> int:
    return sum(f.num_records or 0 for f in files)


def _why_not_append_only(upstream: str, since: int, until: int, increment: object) -> str:
    if since > until:
        return f"its table is at version {until}, older than the version {since} read last"
    missing = getattr(increment, "missing", ())
    if missing:
        return f"its log no longer holds commit(s) {', '.join(map(str, missing[:5]))}"
    rewritten = getattr(increment, "rewritten", ())
    return (
        f"it removed or rewrote data in version(s) {', '.join(map(str, rewritten[:5]))} "
        f"since version {since}"
    )
