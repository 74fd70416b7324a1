"""The commit record: what a partlake write stores in its Delta commit, and reads back.

Every write of a managed asset puts one record under `partlake` in the commit's `commitInfo`: which
asset and partitions it wrote, with which code version, in which run, how many rows per partition,
and per upstream asset the table version and the lastUpdated of every partition it read. The
planner's records come from these, so storage stays the source of truth even without Dagster's
event log. One typed definition serves every writer and reader: a renamed field is an error here,
never a silent "every partition looks stale".

Format 2 adds what model kinds need: the `kind`, the partitions the commit `kept` as they were
(with their lastUpdated: an early-cut-off `tracked` partition, a merge that touched no file of a
partition), per-partition `content_hashes` (`tracked`), the row `metrics` and the `snapshot_ms` an
scd2 write applied, the `watermarks` of incremental inputs and the `consumed_files` of landing
folders. Format 1 (written with `"format": 1`, or before that field existed) has none of them and
is read as a `partition` or `table` write that kept nothing. A reader of format 1 refuses format 2
("upgrade"), since it would take kept partitions for rewritten ones. A record without
`commit_time_ms` predates recording what was consumed: it is read, but says nothing about freshness
(`commit_time_ms is None`).

A row delete (`partlake delete`) is not a write of its partitions, so it carries no
`CommitRecord`: its `DeleteRecord` (the predicate, the rows and files it removed, the partitions
it touched) goes under `partlake_maintenance`, like a restore's. Every reader of commit records
(the planner, incremental inputs, a retried append, scd2's newest snapshot) and every older
dagster_partlake therefore sees what a delete is: a change of those partitions by someone other
than their writer (`out_of_band`). Putting it into `CommitRecord` would have needed format 3,
since a format-2 reader would take the deleted partitions for freshly written ones. The
`stream` field (the streaming query and micro-batch of an `append` commit,
`dagster_partlake.incremental.streams`) is read by older readers as the plain append it also
is: format 2 still.

The storage layer (`delta/`) commits, reads and caches a record as its payload
(`dagster_partlake.delta.payload.CommitPayload`: the format, write id, commit time and the
partitions written, kept and left empty, the rest opaque); `to_payload` / `from_payload` convert,
and the bytes on disk are the record's JSON, the same as before the payload existed.

delta-spark puts no custom keys in `commitInfo`: a commit made through Spark's Delta (the
`delta-spark` writer, `dagster_partlake.delta.native`) carries the same record as a JSON object
string in Delta's `userMetadata` (`delta.payload.to_user_metadata`), without a commit time,
which it learns only as it commits: the record's `commit_time_ms` is that commit's own time (its
`inCommitTimestamp`, else `timestamp`), which is also the time the log reader gives the
partitions it changed (`dagster_partlake.delta.change_rule`). `delta.payload.commit_metadata` is how
every reader sees both forms alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict, cast

from dagster_partlake.columnar.interner import Key
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.delta.payload import (
    FORMAT,
    RECORD_KEY,
    CommitPayload,
    WrittenPartitions,
)
from dagster_partlake.errors import PartlakeError

# The order of a record's entries on disk (format 2), kept so its bytes stay those every
# earlier reader knows.
_LAYOUT = (
    "format",
    "run_id",
    "asset_key",
    "partition_keys",
    "code_version",
    "upstream_versions",
    "consumed",
    "rows_by_partition",
    "empty_partition_keys",
    "write_id",
    "commit_time_ms",
    "kind",
    "kept",
    "content_hashes",
    "metrics",
    "snapshot_ms",
    "watermarks",
    "consumed_files",
    "stream",
)


@dataclass(frozen=True)
class CommitRecord(WrittenPartitions):
    """What one partlake commit wrote and read."""

    asset_key: str
    # Dagster partition keys written; () for a whole table (a compact record: a `KeyList`).
    partition_keys: Sequence[str]
    code_version: str | None
    run_id: str | None
    # Upstream asset -> partition id -> lastUpdated (ms) of that partition when it was read.
    consumed: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    upstream_versions: Mapping[str, int] = field(default_factory=dict)  # asset -> version read
    rows_by_partition: Mapping[str, int] | None = None  # partition id -> rows written
    write_id: str = ""
    commit_time_ms: int | None = None
    kind: str | None = None  # the model kind; None in format 1 records
    # Partition id -> lastUpdated it kept: partitions this commit recorded but did not rewrite.
    kept: Mapping[str, int] = field(default_factory=dict)
    content_hashes: Mapping[str, str] = field(default_factory=dict)  # partition id -> hash
    metrics: Mapping[str, int] = field(default_factory=dict)  # rows_inserted, rows_updated, ...
    snapshot_ms: int | None = None  # scd2: the time of the snapshot applied
    # Incremental inputs: upstream asset -> the high watermark read (a Spark SQL literal and
    # its type, `{"value": "2024-01-02 10:00:00", "type": "timestamp"}`).
    watermarks: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Landing folders consumed once: upstream asset -> the files read (relative paths).
    consumed_files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # A streaming micro-batch (`incremental.streams`): the query's Delta application id and the
    # batch id, which the commit also carries as its `txn`; a run's closing record has no batch.
    stream_query: str | None = None
    stream_batch: int | None = None
    # Not written: the table version the record was read from.
    table_version: int | None = None

    def to_payload(self) -> CommitPayload:
        """The record as the storage layer commits it: its Delta-level fields, the others
        opaque (what was consumed as per-partition columns)."""
        small: dict[str, Any] = {
            "run_id": self.run_id,
            "asset_key": self.asset_key,
            "code_version": self.code_version,
            "upstream_versions": dict(self.upstream_versions),
        }
        columns: dict[str, Mapping[str, Mapping[str, int]]] = {}
        if self.consumed:
            columns["consumed"] = self.consumed
        else:
            small["consumed"] = {}
        if self.kind is not None:
            small["kind"] = self.kind
        if self.content_hashes:
            small["content_hashes"] = dict(self.content_hashes)
        if self.metrics:
            small["metrics"] = dict(self.metrics)
        if self.snapshot_ms is not None:
            small["snapshot_ms"] = self.snapshot_ms
        if self.watermarks:
            small["watermarks"] = {k: dict(v) for k, v in self.watermarks.items()}
        if self.consumed_files:
            small["consumed_files"] = {k: list(v) for k, v in self.consumed_files.items()}
        if self.stream_query is not None:
            small["stream"] = {"query": self.stream_query, "batch_id": self.stream_batch}
        return CommitPayload(
            partition_keys=self.partition_keys,
            write_id=self.write_id,
            commit_time_ms=self.commit_time_ms,
            rows_by_partition=self.rows_by_partition,
            kept=self.kept,
            small=small,
            columns=columns,
            layout=_LAYOUT,
            table_version=self.table_version,
        )

    def to_commit_info(self) -> dict[str, dict[str, object]]:
        """`{"partlake": {...}}` for the commit's custom metadata."""
        return self.to_payload().to_commit_info()

    def small_fields(self) -> dict[str, object]:
        """The record's fields but those holding a value per written partition (the written
        keys, what was consumed, rows, kept partitions): see `from_columns`."""
        body: dict[str, object] = {
            "format": FORMAT,
            "run_id": self.run_id,
            "asset_key": self.asset_key,
            "code_version": self.code_version,
            "upstream_versions": dict(self.upstream_versions),
            "write_id": self.write_id,
        }
        full = CommitRecord(
            self.asset_key,
            (),
            self.code_version,
            self.run_id,
            commit_time_ms=self.commit_time_ms,
            kind=self.kind,
            content_hashes=self.content_hashes,
            metrics=self.metrics,
            snapshot_ms=self.snapshot_ms,
            watermarks=self.watermarks,
            consumed_files=self.consumed_files,
        ).to_commit_info()[RECORD_KEY]
        skipped = {"partition_keys", "consumed", "rows_by_partition", "empty_partition_keys"}
        body.update({k: v for k, v in full.items() if k not in skipped and k not in body})
        return body

    @classmethod
    def from_columns(
        cls,
        small: Mapping[str, object],
        partition_keys: Sequence[str],
        per_partition: Mapping[str, IntMap[Key]],
        table_version: int | None,
    ) -> CommitRecord:
        """The compact record of `small_fields()` and its per-partition fields (`consumed/<asset>`,
        `rows_by_partition`, `kept`) as `IntMap`s over interned keys.

        Raises:
            PartlakeError: the small fields are malformed or from a newer format.
        """
        body = {**small, "partition_keys": [], "consumed": {}}
        record = cls.from_commit_info({RECORD_KEY: body}, table_version=table_version, compact=True)
        assert record is not None
        prefix = "consumed/"
        consumed = {
            name[len(prefix) :]: cast("Mapping[str, int]", values)
            for name, values in per_partition.items()
            if name.startswith(prefix)
        }
        rows = per_partition.get("rows_by_partition")
        kept = per_partition.get("kept")
        return replace(
            record,
            partition_keys=partition_keys,
            consumed=consumed,
            rows_by_partition=None if rows is None else cast("Mapping[str, int]", rows),
            kept=record.kept if kept is None else cast("Mapping[str, int]", kept),
        )

    @classmethod
    def from_payload(cls, payload: CommitPayload) -> CommitRecord:
        """The record a payload carries: its opaque entries read as a record's fields.

        Raises:
            PartlakeError: the payload carries no asset key (not written by partlake).
        """
        small = payload.small
        if "asset_key" not in small:
            where = (
                "a commit" if payload.table_version is None else f"commit {payload.table_version}"
            )
            raise PartlakeError(
                f"{where} carries a partlake record without asset_key; it was not written by "
                "dagster_partlake's writer. Remove the 'partlake' entry from that writer's "
                "commit metadata."
            )
        consumed = payload.columns.get("consumed", small.get("consumed") or {})
        return cls(
            asset_key=str(small["asset_key"]),
            partition_keys=payload.partition_keys,
            code_version=small.get("code_version"),
            run_id=small.get("run_id"),
            consumed=dict(consumed),
            upstream_versions={
                str(k): int(v) for k, v in (small.get("upstream_versions") or {}).items()
            },
            rows_by_partition=payload.rows_by_partition,
            write_id=payload.write_id,
            commit_time_ms=payload.commit_time_ms,
            kind=small.get("kind"),
            kept=payload.kept,
            content_hashes={str(k): str(v) for k, v in (small.get("content_hashes") or {}).items()},
            metrics={str(k): int(v) for k, v in (small.get("metrics") or {}).items()},
            snapshot_ms=None if small.get("snapshot_ms") is None else int(small["snapshot_ms"]),
            watermarks={
                str(k): {"value": str(v["value"]), "type": str(v["type"])}
                for k, v in (small.get("watermarks") or {}).items()
            },
            consumed_files={
                str(k): tuple(str(f) for f in v)
                for k, v in (small.get("consumed_files") or {}).items()
            },
            **_stream_fields(small.get("stream")),
            table_version=payload.table_version,
        )

    @classmethod
    def from_commit_info(
        cls, info: Mapping[str, Any], *, table_version: int | None = None, compact: bool = False
    ) -> CommitRecord | None:
        """The record of a commit's `commitInfo` (None when partlake did not write it).

        `compact`: per-partition fields (consumed, rows, kept) as `IntMap`s over interned
        partition ids instead of dicts: how table states hold the records of large commits.

        Raises:
            PartlakeError: the record is malformed or from a newer format.
        """
        payload = CommitPayload.from_commit_info(info, table_version=table_version, compact=compact)
        return None if payload is None else cls.from_payload(payload)


class _StreamFields(TypedDict, total=False):
    stream_query: str
    stream_batch: int | None


def _stream_fields(stream: object) -> _StreamFields:
    if not isinstance(stream, Mapping) or stream.get("query") is None:
        return {}
    batch = stream.get("batch_id")
    return {
        "stream_query": str(stream["query"]),
        "stream_batch": None if batch is None else int(batch),
    }


def records_of(infos: Sequence[tuple[int, Mapping[str, Any]]]) -> tuple[CommitRecord, ...]:
    """The partlake records among `(version, commitInfo)` pairs, in the given order."""
    found = (CommitRecord.from_commit_info(info, table_version=v) for v, info in infos)
    return tuple(r for r in found if r is not None)
