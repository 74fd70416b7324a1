"""Spark's own Delta on the session: reading through it, and committing through it (the
`delta-spark` writer).

partlake's writer (Spark's Python workers write the files, delta-rs commits, `delta.files`,
`delta.transaction`) needs no Delta JARs. Where they are on the session (`make install` fetches
them; `SparkResource` loads Delta's extension), Spark can commit a replacing write itself:
`commit_with_delta_spark` overwrites the rows of a `replaceWhere` predicate (or the whole table)
in one Delta commit that carries

- partlake's commit record, as the JSON string of Delta's `userMetadata` (delta-spark puts no
  other custom keys in `commitInfo`); it has no commit time, which only the commit knows: every
  reader takes that commit's own time (`record.commit_metadata`), and so does the log reader for
  the partitions the commit changed (`change_rule`), so `partlake plan` judges the write as it
  judges one of partlake's own;
- the commit's id (`COMMIT_ID_KEY`, in the same string), by which its version is found;
- for a write of one partition (or of a whole table), the application transaction partlake's
  writer names it by (`partition_txn_id`, Delta's `txnAppId`/`txnVersion`), so that it conflicts
  with a concurrent partlake commit of that partition. Delta skips a write whose transaction
  version is not above the table's: the version is the write's time, raised past the table's.

Delta retries nothing that conflicts at the partition level (a concurrent write of the same
partitions); `commit_with_delta_spark` writes again on the newer table, up to `max_attempts`.
Only local tables: delta-storage's `S3SingleDriverLogStore` publishes a commit with a plain PUT
(no conditional write), so a delta-spark commit on S3 can overwrite a concurrent delta-rs commit
of the same version; the other stores are not tested here.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.payload import to_user_metadata
from dagster_partlake.delta.selection import DateRanges, PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot, partition_txn_id
from dagster_partlake.delta.table import commit_actions
from dagster_partlake.delta.transaction import COMMIT_ID_KEY, find_commit
from dagster_partlake.errors import CommitConflictError, PartlakeConfigError
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dagster_partlake.delta.schema import DeltaType

# Delta's SQL extension, as `dagster_partlake.spark.jars` names it (this layer cannot import it).
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
# How Delta's conflicts read in the errors Spark raises (classic and Connect alike): its error
# classes and exception names. Each means a concurrent commit changed what this one read.
_CONFLICTS = (
    "DELTA_CONCURRENT_",
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "MetadataChangedException",
    "ProtocolChangedException",
)


def delta_on_session(spark: SparkSession) -> bool:
    """Whether Spark's Delta is on the session: its SQL extension is configured and, for a
    classic session, its classes load (Spark only warns about an extension it cannot load)."""
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
    except Exception:  # a session that cannot answer has no Delta to offer
        return False
    if DELTA_EXTENSION not in [e.strip() for e in extensions.split(",")]:
        return False
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the server loaded what its conf names
        return True
    try:
        jvm.java.lang.Class.forName(DELTA_EXTENSION)
    except Exception:
        return False
    return True


def replace_where(
    selection: PartitionSelection, column_types: Mapping[str, DeltaType]
) -> str | None:
    """The Spark SQL predicate of the partitions in `selection` (None: the whole table), with
    each partition value as a literal of its column's type.

    Raises:
        ValueError: the selection is empty.
    """
    if selection.boxes is None:
        return None
    if not selection.boxes:
        raise ValueError("a write of no partition has no replaceWhere predicate")
    boxes = []
    for box in selection.boxes:
        parts = []
        for column, constraint in box.constraints.items():
            name = "`" + column.replace("`", "``") + "`"
            kind = column_types.get(column, "string")
            if isinstance(constraint, DateRanges):
                parts.append(_date_ranges(name, kind, constraint))
            else:
                values = ", ".join(_literal(v, kind) for v in sorted(constraint))
                parts.append(f"{name} IN ({values})")
        boxes.append("(" + " AND ".join(parts or ["true"]) + ")")
    return " OR ".join(boxes)


def _date_ranges(name: str, kind: DeltaType, ranges: DateRanges) -> str:
    def bound(day: dt.date) -> str:
        return _literal(day.isoformat(), kind)

    spans = [
        f"({name} >= {bound(start)} AND {name} < {bound(end)})" for start, end in ranges.ranges
    ]
    return "(" + " OR ".join(spans) + ")"


def _literal(value: str, kind: DeltaType) -> str:
    quoted = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if kind == "string":
        return quoted
    spark_type = {"timestamp": "TIMESTAMP", "timestamp_ntz": "TIMESTAMP_NTZ"}.get(str(kind))
    return f"CAST({quoted} AS {spark_type or str(kind).upper()})"


@dataclass(frozen=True)
class NativeCommit:
    """A commit delta-spark made for partlake."""

    version: int
    attempts: int
    seconds: float  # the Spark job and the commit, retries included
    commit_id: str
    info: Mapping[str, Any] = field(repr=False)  # its commitInfo
    adds: Sequence[Mapping[str, Any]] = field(default=(), repr=False)
    removes: Sequence[Mapping[str, Any]] = field(default=(), repr=False)

    @property
    def rows_removed(self) -> int:
        """Rows of the files the commit removed (their statistics' numRecords)."""
        return sum(_num_records(r) for r in self.removes)


def commit_with_delta_spark(
    df: DataFrame,
    snapshot: Snapshot,
    *,
    predicate: str | None,
    payload: Mapping[str, Any],
    commit_id: str,
    partition_ids: Sequence[str],
    merge_schema: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> NativeCommit:
    """Replace the rows of `predicate` (None: all) of the table with `df`'s rows in one commit
    made by Spark's Delta, carrying `payload` (the commit record) and `commit_id` in its
    `userMetadata`; writes again on the newer table when a concurrent commit conflicts.

    Args:
        snapshot: the table as the write read it (it exists: version 0 is made by partlake).
        partition_ids: the partitions written: with exactly one, the commit names it in an
            application transaction as partlake's writer does.

    Raises:
        PartlakeConfigError: the table is not local, or Spark's Delta is not on the session.
        CommitConflictError: concurrent writers kept conflicting for `max_attempts` attempts.
    """
    check_native_location(snapshot.location, snapshot.name)
    if not delta_on_session(df.sparkSession):
        raise PartlakeConfigError(
            f"the delta-spark writer of table {snapshot.name} needs Spark's Delta on the session, "
            f"which lacks its extension {DELTA_EXTENSION}; run `make install` (it fetches the "
            "Delta JARs that SparkResource loads) or use partlake's writer (remove "
            "'partlake/writer', or set it to 'partlake')."
        )
    started = time.perf_counter()
    metadata = to_user_metadata({**payload, COMMIT_ID_KEY: commit_id})
    app_id = partition_txn_id(partition_ids[0]) if len(partition_ids) == 1 else None
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        if attempt > 1:
            snapshot.refresh()
        before = snapshot.version
        writer = (
            df.write.format("delta")
            .mode("overwrite")
            # Only the predicate's rows (or all): never Spark's dynamic partition overwrite.
            .option("partitionOverwriteMode", "static")
            .option("userMetadata", metadata)
        )
        if predicate is not None:
            writer = writer.option("replaceWhere", predicate)
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        if app_id is not None:
            # Delta skips a write whose version is not above the table's for that app id.
            done = snapshot.transaction_version(app_id) or 0
            version = max(int(time.time() * 1000), done + 1)
            writer = writer.option("txnAppId", app_id).option("txnVersion", str(version))
        try:
            writer.save(snapshot.location.spark_uri())
        except Exception as error:
            if not any(marker in str(error) for marker in _CONFLICTS):
                raise
            last_error = error
            continue
        landed = find_commit(snapshot.location, before, commit_id)
        if landed is None:  # skipped: a newer write of the partition's transaction landed
            last_error = None
            continue
        info, adds, removes = commit_actions(snapshot.location, landed)
        return NativeCommit(
            landed, attempt, time.perf_counter() - started, commit_id, info, adds, removes
        )
    cause = f" (last error: {_first_line(last_error)})" if last_error is not None else ""
    raise CommitConflictError(
        f"could not commit to table {snapshot.name} through delta-spark after {max_attempts} "
        f"attempts because concurrent writers kept changing the same partitions{cause}; lower "
        "the number of parallel writers of this table or raise the IO manager's "
        "max_commit_attempts. Nothing was committed."
    )


def check_native_location(location: TableLocation, name: str) -> None:
    """Refuse the delta-spark writer outside a local file system.

    Raises:
        PartlakeConfigError: naming the store and the way out.
    """
    if location.is_local:
        return
    why = (
        "delta-storage's S3SingleDriverLogStore publishes a commit with a plain PUT, without "
        "the conditional write delta-rs relies on, so a delta-spark commit can overwrite a "
        "concurrent partlake commit of the same version"
        if location.scheme in ("s3", "s3a")
        else "partlake's tests cover it on local file systems only"
    )
    raise PartlakeConfigError(
        f"the delta-spark writer does not write table {name} at {location.uri}: {why}. Use "
        "partlake's writer there (remove 'partlake/writer', or set it to 'partlake')."
    )


def _num_records(action: Mapping[str, Any]) -> int:
    try:
        stats = json.loads(action.get("stats") or "{}")
    except ValueError:
        return 0
    return int(stats.get("numRecords") or 0)


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
