"""The on-disk form of a table state: a small header and raw columns, read by memory map.

A state of a million partitions, with the partlake payloads of a commit that wrote all of them,
is a few arrays, and so is its file: a `marshal` header (what the state was read at, the table's
partition columns, each payload's small fields, and where each column lies) followed by raw int32
and int64 columns. Partition values are stored per partition column as codes into that column's
distinct values; a payload's per-partition int columns (`CommitPayload.named_columns`: rows,
kept partitions, its opaque groups) and the written partition keys as codes into one list of the
file's partition keys, itself stored as word columns (a key's parts between `|`, each as codes
into its distinct parts). A reader maps the file and copies only the columns it asks for (a
source's payloads are never read), and interns values and keys from those codes
(`Interner.ids_of_words`): no Python object per partition.

marshal's format is tied to the Python version, which is stamped in the header and checked.
"""

from __future__ import annotations

import marshal
import mmap
import struct
import sys
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dagster_partlake.columnar.interner import (
    KEYS,
    VALUES,
    Interner,
    Key,
    KeyList,
    Values,
    WordColumn,
)
from dagster_partlake.columnar.intmap import ABSENT, IntMap
from dagster_partlake.delta.payload import CommitPayload

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt

    from dagster_partlake.delta.state import TableState

    Ints = npt.NDArray[np.int64]

K = TypeVar("K", bound=Hashable)
# Where a raw column lies after the header: (offset, size in bytes, numpy dtype char).
Where = tuple[int, int, str]

# 4: lastUpdated is the time of the commit that changed a partition (`delta.change_rule`), with
# the version of that commit (`changed_in`) and the partition columns' physical names: a state
# saved by format 3 (its files' newest modification time) is read anew, never mixed in.
# 5: each commit's payload (`CommitPayload.small_fields`, `named_columns`): all its small
# entries, where format 4 kept a record's known fields only (it dropped a stream's query and
# batch), so a format-4 state is read anew rather than compared unequal to the log's.
FORMAT = (5, marshal.version, *sys.version_info[:2])
_LENGTH = struct.Struct("<Q")


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
    vocab, codes = _dump_words(np, writer, VALUES, values_ids, len(state.partition_by))
    columns = {
        name: None if values is None else writer.add(_at(np, values, values_ids))
        for name, values in (
            ("last_updated", state.last_updated),
            ("touched_in", state.touched_in),
            ("file_counts", state.file_counts),
            ("changed_in", state.changed_in),
        )
    }
    commits: list[dict[str, object]] = []
    keys: dict[str, object] | None = None
    if with_commits:
        commits, keys = _dump_records(np, writer, state.commits)
    body = {
        **header,
        "format": FORMAT,
        "with_commits": with_commits,
        "version": state.version,
        "partition_by": list(state.partition_by),
        "physical": None if state.physical is None else list(state.physical),
        "column_types": state.column_types,
        "rows": len(values_ids),
        "vocab": vocab,
        "codes": codes,
        "columns": columns,
        "commits": commits,
        "keys": keys,
    }
    head = marshal.dumps(body)
    return b"".join([_LENGTH.pack(len(head)), head, *writer.parts])


def _dump_words(
    np: ModuleType, writer: _Writer, interner: Interner[K], ids: Ints, arity: int
) -> tuple[list[list[str | None]], list[Where]]:
    """Interned keys of `arity` words as one column of codes per word, each into its own
    list of the words it holds."""
    columns = interner.words_of(ids)
    if columns is None or (len(ids) and len(columns) != arity):
        raise ValueError("keys of different lengths")
    if not len(ids):
        columns = [np.zeros(0, np.int32) for _ in range(arity)]
    vocab, codes = [], []
    for column in columns:
        used, local = np.unique(column, return_inverse=True)
        vocab.append([interner.words[c] for c in used.tolist()])
        codes.append(writer.add(local.reshape(-1).astype(np.int32)))
    return vocab, codes


def _dump_keys(np: ModuleType, writer: _Writer, ids: Ints) -> dict[str, object]:
    """Partition keys (by id) as word columns when they all have as many words, else as a
    list."""
    columns = KEYS.words_of(ids)
    if columns is None or not len(ids):
        keys = KEYS.keys_of(ids)
        return {"list": writer.add(np.frombuffer(marshal.dumps(keys), np.uint8))}
    vocab, codes = _dump_words(np, writer, KEYS, ids, len(columns))
    return {"rows": len(ids), "vocab": vocab, "codes": codes}


def _load_keys(header: Mapping[str, Any], reader: _Reader) -> Ints:
    """The interned ids of the keys `_dump_keys` wrote."""
    import numpy as np

    if "list" in header:
        return np.asarray(KEYS.ids_of(marshal.loads(reader.column(header["list"]).tobytes())))
    return KEYS.ids_of_words(_word_columns(header, reader), header["rows"])


def _word_columns(header: Mapping[str, Any], reader: _Reader) -> list[WordColumn]:
    columns = []
    for words, where in zip(header["vocab"], header["codes"], strict=True):
        codes = reader.column(where)
        if len(codes) != header["rows"] or (len(codes) and int(codes.max()) >= len(words)):
            raise ValueError("a damaged state file")
        columns.append((codes, words))
    return columns


def _dump_records(
    np: ModuleType, writer: _Writer, records: Sequence[CommitPayload]
) -> tuple[list[dict[str, object]], dict[str, object] | None]:
    """Each payload's small fields, and its per-partition columns as codes into one key list."""
    per_record: list[dict[str, tuple[Ints, Ints | None]]] = []
    every: list[Ints] = []
    for record in records:
        fields: dict[str, tuple[Ints, Ints | None]] = {}
        for name, values in _per_partition_fields(record).items():
            ids = _ids(np, values)
            fields[name] = (ids, _at(np, values, ids))
            every.append(ids)
        written = _key_ids(np, record.partition_keys)
        fields["partition_keys"] = (written, None)
        every.append(written)
        per_record.append(fields)
    known = np.unique(np.concatenate(every)) if every else np.zeros(0, np.int64)
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
    return out, _dump_keys(np, writer, known) if len(known) else None


def _key_ids(np: ModuleType, keys: Sequence[str]) -> Ints:
    if isinstance(keys, KeyList):
        return keys.ids.astype("int64")
    return np.asarray(KEYS.ids_of(list(keys)), np.int64)


def _per_partition_fields(record: CommitPayload) -> dict[str, IntMap[Key]]:
    fields = record.named_columns()
    found: dict[str, IntMap[Key]] = {}
    for name, values in fields.items():
        if isinstance(values, IntMap) and values.interner is KEYS:
            found[name] = values
        elif values is not None:
            found[name] = IntMap.build(KEYS, values.items())
    return found


def _ids(np: ModuleType, values: IntMap[K]) -> Ints:
    return np.flatnonzero(values.slots() != ABSENT) + values.base


def _at(np: ModuleType, values: IntMap[K], ids: Ints) -> Ints:
    """The stored value of each id (`ABSENT` where none)."""
    column = values.slots()
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


def values_of(header: Mapping[str, Any], reader: _Reader) -> Ints:
    """The interned ids of the state's partition values, in the file's row order."""
    return VALUES.ids_of_words(_word_columns(header, reader), header["rows"])


def state_column(reader: _Reader, where: Where | None, ids: Ints) -> IntMap[Values]:
    """One of the state's columns over the interned values `ids`."""
    if where is None:
        raise ValueError("no such column")
    values = reader.column(where)
    if len(values) != len(ids):
        raise ValueError("a damaged state file")
    return _int_map(VALUES, ids, values)


def optional_column(reader: _Reader, where: Where | None, ids: Ints) -> IntMap[Values] | None:
    """`state_column` of a column a state may lack (None: it has none)."""
    return None if where is None else state_column(reader, where, ids)


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
    return IntMap.of_slots(interner, base, slots)


def records_of(header: Mapping[str, Any], reader: _Reader) -> tuple[CommitPayload, ...]:
    """The partlake payloads of the state, compact (see `CommitPayload.from_columns`)."""
    import numpy as np

    if not header["commits"]:
        return ()
    ids = _load_keys(header["keys"], reader) if header["keys"] is not None else np.zeros(0)
    records = []
    for commit in header["commits"]:
        columns = dict(commit["columns"])
        written_at, _ = columns.pop("partition_keys")
        written = KeyList(ids[reader.column(written_at)].astype(np.int32))
        fields = {
            name: _int_map(KEYS, ids[reader.column(codes)], reader.column(values))
            for name, (codes, values) in columns.items()
        }
        records.append(
            CommitPayload.from_columns(commit["info"], written, fields, commit["version"])
        )
    return tuple(records)
