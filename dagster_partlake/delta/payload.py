"""A commit's partlake payload as the storage layer sees it: versioned, partly opaque.

Every partlake write puts one JSON object under `partlake` in its commit's `commitInfo` (a
commit made through delta-spark: in `userMetadata`, `to_user_metadata`). To the storage layer
that object is a `CommitPayload`: its `format`, its `write_id` (how a writer finds its own
commit again), its `commit_time_ms`, the partitions it wrote (`partition_keys` on disk), their
rows, the partitions it kept with their lastUpdated and those it left empty. These are the
Delta-level facts, "which partitions this commit changed and when", that the change rule and
the state cache need. Everything else is opaque here: the `small` JSON-able entries, and the
`columns`, groups of per-partition int columns (a top-level entry whose every value is an
object of ints: a commit that wrote a million partitions holds them as `IntMap`s, never as
dicts). What those entries mean is the records layer's business
(`dagster_partlake.records.record.CommitRecord`, `to_payload` / `from_payload`).

A payload of a newer `format` than `FORMAT` is refused ("upgrade"): a reader of format 1 would
take format 2's kept partitions for rewritten ones. `to_commit_info` writes the entries in the
payload's `layout` (the order its writer gave), so the bytes on disk are those readers of
every earlier dagster_partlake know.

A row delete's commit carries no payload but a `DeleteRecord` under `MAINTENANCE_KEY` (the
predicate, the rows and files it removed, the partitions it touched): every reader of payloads
sees it as a change of those partitions by someone other than their writer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Self, cast

from dagster_partlake.columnar.interner import KEYS, Key, KeyList
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.errors import PartlakeError

RECORD_KEY = "partlake"
FORMAT = 2
# Key of the custom commit metadata of maintenance commits (restore, compaction, vacuum, row
# deletes): not a partlake write's payload, so no reader takes them for partlake writes.
MAINTENANCE_KEY = "partlake_maintenance"
# Partition id of an unpartitioned table: its key in payloads and its commit conflict id.
WHOLE_TABLE_ID = "__all__"
# Delta's one free-form commitInfo field that delta-spark's writers fill (a string).
USER_METADATA = "userMetadata"
# How a partlake payload in `userMetadata` starts (`to_user_metadata` writes it so).
USER_METADATA_PREFIX = '{"partlake'

# The payload's own entries on disk, in the order a payload without a `layout` writes them.
_WRITTEN = "partition_keys"
_ROWS = "rows_by_partition"
_EMPTY = "empty_partition_keys"
# What the commit's actions were, written by the transaction right after `format` (`with_actions`).
ACTIONS = "actions"
_OWN = ("format", ACTIONS, _WRITTEN, _ROWS, _EMPTY, "write_id", "commit_time_ms", "kept")


def to_user_metadata(payload: Mapping[str, Any]) -> str:
    """A commit's partlake metadata (`{"partlake": {...}, "partlake_commit": ...}`) as the
    string delta-spark stores in `commitInfo.userMetadata`: compact JSON, its partlake keys
    first (readers recognise it by its first bytes)."""
    ordered = dict(sorted(payload.items(), key=lambda item: not item[0].startswith("partlake")))
    text = json.dumps(ordered, separators=(",", ":"))
    if not text.startswith(USER_METADATA_PREFIX):
        raise ValueError("a partlake payload must hold a key starting with 'partlake'")
    return text


def with_actions(
    metadata: Mapping[str, Any], *, adds: int, removes: int, data_change: bool
) -> dict[str, Any]:
    """`metadata` (a commit's custom metadata) with its payload, if it has one, saying what
    the commit's actions are, right after its `format`: within the first bytes of a commitInfo
    line however large the payload, so a cold read learns there that a commit holds
    data-changing adds alone (`log_state._declared_bulk`), without searching its actions."""
    body = metadata.get(RECORD_KEY)
    if not isinstance(body, Mapping):
        return dict(metadata)
    counts = {"adds": adds, "removes": removes, "data_change": data_change}
    rest = {k: v for k, v in body.items() if k not in ("format", ACTIONS)}
    return {**metadata, RECORD_KEY: {"format": body.get("format", 1), ACTIONS: counts, **rest}}


def commit_metadata(info: Mapping[str, Any], *, compact: bool = False) -> Mapping[str, Any]:
    """A commit's `commitInfo` as partlake reads its custom metadata: as it is (delta-rs puts
    partlake's keys there), or with the partlake keys of its `userMetadata` (a delta-spark
    commit, `to_user_metadata`) added; a payload there gets its commit's own time as its
    `commit_time_ms`. `compact`: large objects of ints as `IntMap`s (`compact_pairs`).

    Raises:
        PartlakeError: the userMetadata starts like partlake's but is not a JSON object.
    """
    text = info.get(USER_METADATA)
    if not isinstance(text, str) or not text.startswith(USER_METADATA_PREFIX):
        return info
    try:
        body = json.loads(text, object_pairs_hook=compact_pairs if compact else None)
    except ValueError as error:
        raise PartlakeError(
            f"a commit's userMetadata starts like a partlake record but is not JSON ({error}); "
            "it was not written by dagster_partlake. Write other userMetadata there."
        ) from error
    if not isinstance(body, Mapping):
        return info
    merged = {**info, **{k: v for k, v in body.items() if k.startswith("partlake")}}
    payload = merged.get(RECORD_KEY)
    if isinstance(payload, Mapping) and payload.get("commit_time_ms") is None:
        clock = info.get("inCommitTimestamp", info.get("timestamp"))
        if isinstance(clock, int) and not isinstance(clock, bool):
            merged[RECORD_KEY] = {**payload, "commit_time_ms": clock}
    return merged


def empty_ids(
    rows_by_partition: Mapping[str, int] | None, written: Sequence[str]
) -> frozenset[str]:
    """The partitions among `written` (ids) that got no rows: they have no data after it."""
    rows = rows_by_partition or {}
    if isinstance(rows, IntMap) and isinstance(written, KeyList):
        return frozenset(rows.keys_with(0, among=written.ids.astype("int64")))  # compact
    zeros = [pid for pid, count in rows.items() if count == 0]
    if not zeros:
        return frozenset()
    among = set(written)
    return frozenset(pid for pid in zeros if pid in among)


class WrittenPartitions:
    """What a commit says of the partitions it wrote, from its `partition_keys`,
    `rows_by_partition`, `kept` and `commit_time_ms`: the storage layer's `CommitPayload` and the
    records layer's `CommitRecord` (frozen dataclasses both) answer alike."""

    partition_keys: Sequence[str]
    rows_by_partition: Mapping[str, int] | None
    kept: Mapping[str, int]
    commit_time_ms: int | None

    @property
    def partition_ids(self) -> Sequence[str]:
        """The written partitions' ids: their keys, or `WHOLE_TABLE_ID` for a whole table."""
        return self.partition_keys or (WHOLE_TABLE_ID,)

    @cached_property  # asked once per written partition: 100,000 of them in one commit
    def empty_partition_ids(self) -> frozenset[str]:
        """Written partitions that got no rows (the write removed their data)."""
        return empty_ids(self.rows_by_partition, self.partition_ids)

    def written_last_updated(self, partition_id: str) -> int | None:
        """The lastUpdated this commit left the partition with (None: it has no rows)."""
        if partition_id in self.kept:
            return self.kept[partition_id]
        if partition_id in self.empty_partition_ids:
            return None
        return self.commit_time_ms

    def committed(self, *, write_id: str, commit_time_ms: int) -> Self:
        """The commit's payload or record as one commit attempt writes it."""
        return replace(cast(Any, self), write_id=write_id, commit_time_ms=commit_time_ms)


@dataclass(frozen=True)
class CommitPayload(WrittenPartitions):
    """What one partlake commit's `partlake` entry is to the storage layer."""

    # Partition ids written; () for a whole table (compact: a `KeyList`).
    partition_keys: Sequence[str]
    write_id: str = ""
    commit_time_ms: int | None = None  # None: written before partlake recorded commit times
    rows_by_partition: Mapping[str, int] | None = None  # partition id -> rows written
    # Partition id -> the lastUpdated it kept: partitions the commit lists but did not rewrite.
    kept: Mapping[str, int] = field(default_factory=dict)
    # Opaque: the other entries, JSON-able, and the groups of per-partition int columns
    # (group -> column name -> partition id -> int).
    small: Mapping[str, Any] = field(default_factory=dict)
    columns: Mapping[str, Mapping[str, Mapping[str, int]]] = field(default_factory=dict)
    # The order of the entries on disk (its writer's; () for `_OWN`, then the opaque ones): how
    # they are written, not what they are.
    layout: tuple[str, ...] = field(default=(), compare=False)
    format: int = FORMAT
    # Not written: the table version the payload was read from.
    table_version: int | None = None

    def to_commit_info(self) -> dict[str, dict[str, object]]:
        """`{"partlake": {...}}` for the commit's custom metadata."""
        own: dict[str, object] = {
            "format": self.format,
            _WRITTEN: list(self.partition_keys),
            _ROWS: None if self.rows_by_partition is None else dict(self.rows_by_partition),
            _EMPTY: sorted(self.empty_partition_ids),
            "write_id": self.write_id,
        }
        if self.commit_time_ms is not None:
            own["commit_time_ms"] = self.commit_time_ms
        if self.kept:
            own["kept"] = dict(self.kept)
        entries: dict[str, object] = {**own, **self.small}
        entries.update(
            (group, {name: dict(values) for name, values in columns.items()})
            for group, columns in self.columns.items()
        )
        order = self.layout or (*_OWN, *self.small, *self.columns)
        body = {name: entries[name] for name in order if name in entries}
        body.update((name, value) for name, value in entries.items() if name not in body)
        return {RECORD_KEY: body}

    def small_fields(self) -> dict[str, object]:
        """The entries but those holding a value per written partition, as plain JSON values
        (what a state cache stores beside `named_columns`; `from_columns` reads both back)."""
        body: dict[str, object] = {"format": self.format, "write_id": self.write_id}
        if self.commit_time_ms is not None:
            body["commit_time_ms"] = self.commit_time_ms
        body.update((name, _plain(value)) for name, value in self.small.items())
        return body

    def named_columns(self) -> dict[str, Mapping[str, int]]:
        """The per-partition int columns by name: `rows_by_partition`, `kept` and each
        group's as `<group>/<name>`."""
        named: dict[str, Mapping[str, int]] = {
            f"{group}/{name}": values
            for group, columns in self.columns.items()
            for name, values in columns.items()
        }
        if self.rows_by_partition is not None:
            named[_ROWS] = self.rows_by_partition
        named["kept"] = self.kept
        return named

    @classmethod
    def from_columns(
        cls,
        small: Mapping[str, object],
        partition_keys: Sequence[str],
        named: Mapping[str, IntMap[Key]],
        table_version: int | None,
    ) -> CommitPayload:
        """The compact payload of `small_fields()` and `named_columns()` (as `IntMap`s over
        interned keys) with its written partitions.

        Raises:
            PartlakeError: the small fields are from a newer format.
        """
        body = {**small, _WRITTEN: []}
        payload = cls.from_commit_info(
            {RECORD_KEY: body}, table_version=table_version, compact=True
        )
        assert payload is not None
        columns: dict[str, dict[str, Mapping[str, int]]] = {}
        for name, values in named.items():
            group, _, column = name.partition("/")
            if column:
                columns.setdefault(group, {})[column] = cast("Mapping[str, int]", values)
        rows = named.get(_ROWS)
        kept = named.get("kept")
        return replace(
            payload,
            partition_keys=partition_keys,
            rows_by_partition=None if rows is None else cast("Mapping[str, int]", rows),
            kept=payload.kept if kept is None else cast("Mapping[str, int]", kept),
            columns={**payload.columns, **columns},
        )

    @classmethod
    def from_commit_info(
        cls, info: Mapping[str, Any], *, table_version: int | None = None, compact: bool = False
    ) -> CommitPayload | None:
        """The payload of a commit's `commitInfo` (None when partlake did not write it).

        `compact`: per-partition values (rows, kept, the columns) as `IntMap`s over interned
        partition ids and the written ids as a `KeyList`: how table states hold large commits.

        Raises:
            PartlakeError: the payload is from a newer format or lists no written partitions.
        """
        body = commit_metadata(info, compact=compact).get(RECORD_KEY)
        if not isinstance(body, Mapping):
            return None
        where = f"commit {table_version}" if table_version is not None else "a commit"
        fmt = body.get("format", 1)
        if not isinstance(fmt, int) or fmt > FORMAT:
            raise PartlakeError(
                f"{where} carries a partlake record of format {fmt!r}, newer than this "
                f"dagster_partlake reads ({FORMAT}); upgrade dagster_partlake."
            )
        if _WRITTEN not in body:
            raise PartlakeError(
                f"{where} carries a partlake record without {_WRITTEN}; it was not written by "
                "dagster_partlake's writer. Remove the 'partlake' entry from that writer's "
                "commit metadata."
            )
        per_partition = _per_partition if compact else _as_dict
        rows = body.get(_ROWS)
        if rows is None and body.get(_EMPTY):
            # Some writers recorded only the empty partitions.
            rows = {str(k): 0 for k in body[_EMPTY]}
        time_ms = body.get("commit_time_ms")
        small: dict[str, Any] = {}
        columns: dict[str, Mapping[str, Mapping[str, int]]] = {}
        for name, value in body.items():
            if name in _OWN:
                continue
            if _is_column_group(value):
                columns[name] = {str(k): per_partition(v) for k, v in value.items()}
            else:
                small[name] = value
        return cls(
            partition_keys=_written(body[_WRITTEN], compact),
            write_id=str(body.get("write_id") or ""),
            commit_time_ms=None if time_ms is None else int(time_ms),
            rows_by_partition=None if rows is None else per_partition(rows),
            kept=per_partition(body.get("kept") or {}),
            small=small,
            columns=columns,
            layout=tuple(body),
            format=fmt,
            table_version=table_version,
        )


def _plain(value: object) -> object:
    """`value` with its mappings as dicts and its sequences as lists (JSON and marshal)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _is_column_group(value: object) -> bool:
    """A non-empty object whose every value is an object of ints: per-partition columns."""
    if not isinstance(value, Mapping) or not value:
        return False
    return all(
        isinstance(v, IntMap)
        or (isinstance(v, Mapping) and all(type(n) is int for n in v.values()))
        for v in value.values()
    )


def _written(written: Any, compact: bool) -> Sequence[str]:
    if isinstance(written, KeyList) and compact:  # read in bulk (`delta.commit_scan`)
        return written
    listed = [str(k) for k in written or ()]
    return _interned(listed) if compact else tuple(listed)


def _per_partition(values: Mapping[Any, Any]) -> Mapping[str, int]:
    """Partition id -> int, column-wise over the interned ids (an `IntMap` of ints only, read
    like the dict it replaces)."""
    if isinstance(values, IntMap):
        return cast("Mapping[str, int]", values)
    built = IntMap[Key].build(KEYS, ((str(k), int(v)) for k, v in values.items()))
    return cast("Mapping[str, int]", built)


def _interned(partition_ids: list[str]) -> Sequence[str]:
    """`partition_ids` as their ids in `KEYS` (a commit may have written a million)."""
    import numpy as np

    return KeyList(np.asarray(KEYS.ids_of(partition_ids), np.int32))


def compact_pairs(pairs: list[tuple[str, Any]]) -> Mapping[str, Any]:
    """`object_pairs_hook` for reading a payload compactly: a large object of ints (a group's
    column, the rows per partition) becomes an `IntMap` as it is parsed, so a commit of a
    million partitions never exists as dicts of a million entries."""
    if len(pairs) >= _LARGE and all(type(v) is int for _, v in pairs):
        return cast("Mapping[str, Any]", IntMap[Key].build(KEYS, pairs))
    return dict(pairs)


_LARGE = 256


def _as_dict(values: Mapping[Any, Any]) -> dict[str, int]:
    return {str(k): int(v) for k, v in values.items()}


@dataclass(frozen=True)
class DeleteRecord:
    """What a row delete records in its commit (under `MAINTENANCE_KEY`, operation "delete")."""

    predicate: str  # the Spark SQL condition whose matching rows were removed
    rows_deleted: int
    files_removed: int  # files rewritten (or dropped when every row matched)
    files_added: int  # the rewritten files' remaining rows
    partitions: tuple[str, ...]  # partition ids touched (Dagster partition keys)
    delete_id: str  # finds the commit in the log once it landed
    partition: str | None = None  # the `--partition` the delete was limited to

    OPERATION = "delete"

    def to_commit_info(self) -> dict[str, dict[str, object]]:
        """`{"partlake_maintenance": {"operation": "delete", ...}}` for the commit metadata."""
        body: dict[str, object] = {
            "operation": self.OPERATION,
            "id": self.delete_id,
            "predicate": self.predicate,
            "rows_deleted": self.rows_deleted,
            "files_removed": self.files_removed,
            "files_added": self.files_added,
            "partitions": list(self.partitions),
        }
        if self.partition is not None:
            body["partition"] = self.partition
        return {MAINTENANCE_KEY: body}

    @classmethod
    def from_commit_info(cls, info: Mapping[str, Any]) -> DeleteRecord | None:
        """The delete record of a commit's `commitInfo` (None: the commit is no delete)."""
        body = commit_metadata(info).get(MAINTENANCE_KEY)
        if not isinstance(body, Mapping) or body.get("operation") != cls.OPERATION:
            return None
        return cls(
            predicate=str(body.get("predicate", "")),
            rows_deleted=int(body.get("rows_deleted") or 0),
            files_removed=int(body.get("files_removed") or 0),
            files_added=int(body.get("files_added") or 0),
            partitions=tuple(str(p) for p in body.get("partitions") or ()),
            delete_id=str(body.get("id") or ""),
            partition=None if body.get("partition") is None else str(body["partition"]),
        )
