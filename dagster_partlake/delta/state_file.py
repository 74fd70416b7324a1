"""The on-disk form of a table state: a small header and raw columns, read by memory map.

A state of a million partitions, with the partlake records of a commit that wrote all of them,
is a few arrays, and so is its file: a `marshal` header (what the state was read at, the table's
partition columns, each record's small fields, and where each column lies) followed by raw int32
and int64 columns. Partition values are stored per partition column as codes into that column's
distinct values; the record fields with one value per partition (what was consumed, rows, kept
partitions) and the written partition keys as codes into one list of the file's partition keys.
A reader maps the file and copies only the columns it asks for (a source's records are never
read), building no Python object per partition but the interned values and keys themselves.

marshal's format is tied to the Python version, which is stamped in the header and checked.
"""

from __future__ import annotations

import marshal
import mmap
import struct
import sys
from array import array
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dagster_partlake.columnar.interner import KEYS, VALUES, Interner, Key, Values
from dagster_partlake.columnar.intmap import ABSENT, IntMap
from dagster_partlake.delta.record import CommitRecord

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt

    from dagster_partlake.delta.state import TableState

    Ints = npt.NDArray[np.int64]

K = TypeVar("K", bound=Hashable)
# Where a raw column lies after the header: (offset, size in bytes, numpy dtype char).
Where = tuple[int, int, str]

FORMAT = (2, marshal.version, *sys.version_info[:2])
_LENGTH = struct.Struct("<Q")
# Record fields holding one int per written partition (`IntMap`s in a compact record).
_PER_PARTITION = ("rows_by_partition", "kept")


class _Writer:
    """Raw columns appended after the header; the header says where each one lies."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, column: np.ndarray) -> Where:
        raw = column.tobytes()
        where = (self.size, len(raw), column.dtype.char)
        self.parts.append(raw)
        self.size += len(raw)
        return where


def dump(header: Mapping[str, object], state: TableState, *, with_commits: bool) -> bytes:
    """The file of `state` (a `TableState`) with `header` (what it was read at)."""
    import numpy as np

    writer = _Writer()
    values_ids = _ids(np, state.last_updated)
    rows = [VALUES.keys[i] for i in values_ids.tolist()]
    table = list(zip(*rows, strict=True)) if rows else [() for _ in state.partition_by]
    vocab, codes = [], []
    for column in table:
        words = list(dict.fromkeys(column))
        index = {w: i for i, w in enumerate(words)}
        vocab.append(words)
        codes.append(writer.add(np.array([index[w] for w in column], np.int32)))
    columns = {
        name: None if values is None else writer.add(_at(np, values, values_ids))
        for name, values in (
            ("last_updated", state.last_updated),
            ("touched_in", state.touched_in),
            ("file_counts", state.file_counts),
        )
    }
    commits: list[dict[str, object]] = []
    keys: list[str | None] = []
    if with_commits:
        commits, keys = _dump_records(np, writer, state.commits)
    if keys:
        key_list = writer.add(np.frombuffer(marshal.dumps(keys), np.uint8))
    body = {
        **header,
        "format": FORMAT,
        "with_commits": with_commits,
        "version": state.version,
        "partition_by": list(state.partition_by),
        "column_types": state.column_types,
        "rows": len(rows),
        "vocab": vocab,
        "codes": codes,
        "columns": columns,
        "commits": commits,
        "keys": key_list if keys else None,
    }
    head = marshal.dumps(body)
    return b"".join([_LENGTH.pack(len(head)), head, *writer.parts])


def _dump_records(
    np: ModuleType, writer: _Writer, records: Sequence[CommitRecord]
) -> tuple[list[dict[str, object]], list[str | None]]:
    """Each record's small fields, and its per-partition columns as codes into one key list."""
    per_record: list[dict[str, tuple[Ints, Ints | None]]] = []
    every: list[Ints] = []
    for record in records:
        fields: dict[str, tuple[Ints, Ints | None]] = {}
        for name, values in _per_partition_fields(record).items():
            ids = _ids(np, values)
            fields[name] = (ids, _at(np, values, ids))
            every.append(ids)
        written = np.asarray(KEYS.ids_of(record.partition_keys), np.int64)
        fields["partition_keys"] = (written, None)
        every.append(written)
        per_record.append(fields)
    known = np.unique(np.concatenate(every)) if every else np.zeros(0, np.int64)
    keys = [KEYS.keys[i] for i in known.tolist()]
    out: list[dict[str, object]] = []
    for record, fields in zip(records, per_record, strict=True):
        small = record.small_fields()
        columns = {
            name: (
                writer.add(np.searchsorted(known, ids).astype(np.int32)),
                None if values is None else writer.add(values),
            )
            for name, (ids, values) in fields.items()
        }
        out.append({"info": small, "version": record.table_version, "columns": columns})
    return out, keys


def _per_partition_fields(record: CommitRecord) -> dict[str, IntMap[Key]]:
    fields: dict[str, Mapping[str, int] | None] = {
        f"consumed/{u}": v for u, v in record.consumed.items()
    }
    fields.update({name: getattr(record, name) for name in _PER_PARTITION})
    found: dict[str, IntMap[Key]] = {}
    for name, values in fields.items():
        if isinstance(values, IntMap) and values.interner is KEYS:
            found[name] = values
        elif values is not None:
            found[name] = IntMap.build(KEYS, values.items())
    return found


def _ids(np: ModuleType, values: IntMap[K]) -> Ints:
    column = np.frombuffer(values.column, np.int64)
    return np.flatnonzero(column != ABSENT) + values.base


def _at(np: ModuleType, values: IntMap[K], ids: Ints) -> Ints:
    """The stored value of each id (`ABSENT` where none)."""
    column = np.frombuffer(values.column, np.int64)
    out = np.full(len(ids), ABSENT, np.int64)
    at = ids - values.base
    inside = (at >= 0) & (at < len(column))
    out[inside] = column[at[inside]]
    return out


def load(path: str) -> tuple[dict[str, Any], _Reader] | None:
    """The header of the file at `path` and a reader of its columns (None: not this format)."""
    with open(path, "rb") as state_file:
        mapped = mmap.mmap(state_file.fileno(), 0, access=mmap.ACCESS_READ)
    (length,) = _LENGTH.unpack(mapped[: _LENGTH.size])
    header = marshal.loads(mapped[_LENGTH.size : _LENGTH.size + length])
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        mapped.close()
        return None
    return header, _Reader(mapped, _LENGTH.size + length)


class _Reader:
    """Columns of a mapped state file, each copied out on request."""

    def __init__(self, mapped: mmap.mmap, start: int) -> None:
        self.mapped = mapped
        self.start = start

    def column(self, where: Where) -> np.ndarray:
        import numpy as np

        offset, size, kind = where
        begin = self.start + offset
        if begin + size > len(self.mapped):
            raise ValueError("a truncated state file")
        return np.frombuffer(self.mapped[begin : begin + size], np.dtype(kind))

    def close(self) -> None:
        self.mapped.close()


def values_of(header: Mapping[str, Any], reader: _Reader) -> list[int]:
    """The interned ids of the state's partition values, in the file's row order."""
    columns = []
    for words, where in zip(header["vocab"], header["codes"], strict=True):
        codes = reader.column(where)
        if len(codes) != header["rows"]:
            raise ValueError("a damaged state file")
        columns.append([words[c] for c in codes.tolist()])
    rows: list[Values] = list(zip(*columns, strict=True)) if columns else []
    if not columns and header["rows"]:
        rows = [()] * header["rows"]
    return VALUES.ids_of(rows)


def state_column(reader: _Reader, where: Where | None, ids: list[int]) -> IntMap[Values]:
    """One of the state's columns over the interned values `ids`."""
    if where is None:
        raise ValueError("no such column")
    values = reader.column(where)
    if len(values) != len(ids):
        raise ValueError("a damaged state file")
    return _int_map(VALUES, ids, values)


def _int_map(interner: Interner[K], ids: npt.ArrayLike, values: npt.ArrayLike) -> IntMap[K]:
    import numpy as np

    keys = np.asarray(ids, np.int64)
    numbers = np.asarray(values, np.int64)
    present = numbers != ABSENT
    keys, numbers = keys[present], numbers[present]
    if not len(keys):
        return IntMap(interner)
    base = int(keys.min())
    slots = np.full(int(keys.max()) - base + 1, ABSENT, np.int64)
    slots[keys - base] = numbers
    return IntMap(interner, base, array("q", slots.tobytes()), len(keys))


def records_of(header: Mapping[str, Any], reader: _Reader) -> tuple[CommitRecord, ...]:
    """The partlake records of the state, as compact records (see `CommitRecord`)."""
    import numpy as np

    if not header["commits"]:
        return ()
    keys = marshal.loads(reader.column(header["keys"]).tobytes())
    ids = np.asarray(KEYS.ids_of(keys), np.int64)
    records = []
    for commit in header["commits"]:
        columns = dict(commit["columns"])
        written_at, _ = columns.pop("partition_keys")
        written = tuple(KEYS.keys[i] for i in ids[reader.column(written_at)].tolist())
        fields = {
            name: _int_map(KEYS, ids[reader.column(codes)], reader.column(values))
            for name, (codes, values) in columns.items()
        }
        records.append(
            CommitRecord.from_columns(commit["info"], written, fields, commit["version"])
        )
    return tuple(records)
