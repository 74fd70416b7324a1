"""A table's partition state replayed from its Delta log with Arrow, without a delta-rs snapshot.

delta-rs keeps every live file of a loaded snapshot in memory (about 500 bytes per file, kept by
its allocator after the table is dropped), while partition state needs two numbers per partition.
So a first read replays the log itself, in bulk, in two passes over the JSON commits:

- the first finds the metaData and protocol lines (read with `json.loads`) and the paths of the
  remove actions, by a scan for their line starts, so that a table this reader cannot replay is
  handed to delta-rs before anything large is parsed;
- the newest classic checkpoint (one Parquet file, as delta-rs writes them): only the columns
  `add.partitionValues` and `add.modificationTime` are read, as Arrow columns (and `add.path` when
  some remove may name one of its files);
- the second parses the JSON commits after it, a block of lines at a time (`_BLOCK`), with
  Arrow's JSON reader against a schema of just what liveness needs (an add's path, partition
  values and modification time, a remove's path), skipping the commitInfo lines, which are never
  parsed (a partlake record of a large commit is most of its bytes).

A file is live when the last action naming it is an add. Only files that some remove names are
followed one by one, in log order; for the rest only their partition values (as codes into the
distinct values of this read) and modification times are kept, and they are grouped by partition
at once with numpy (the newest modification time and the file count per partition).

`read_file_actions` reads the add and remove actions of commits made since a state was read
the same way, as columns (`dagster_partlake.delta.state` follows a table with them).

Nothing here converts Arrow data through pandas: pyarrow imports pandas (about 110 MB) for
`to_numpy`, `group_by`, `pyarrow.parquet.read_table`, `pa.array` and Python scalars, so columns
are read through their buffers.

Returns None where this reader would have to know more of the protocol than it does, and the
caller then asks delta-rs: multi-part or V2 checkpoints, column mapping, deletion vectors, a
partition column whose JSON text is not the Arrow text delta-rs gives (timestamps, decimals), a
log with gaps, or anything it cannot parse (a value of an unexpected type, a missing field).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from dagster_partlake.columnar.interner import VALUES
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.columnar.memory import give_back
from dagster_partlake.layout import commit_version, log_dir

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    from dagster_partlake.delta.schema import DeltaType

    Flags = npt.NDArray[np.bool_]

    Codes = npt.NDArray[np.int32]
    Times = npt.NDArray[np.int64]
    # One block's actions: which are removes, partition value codes, paths, times.
    _Chunk = tuple[npt.NDArray[np.bool_], list[Codes], pa.Array, Times]

# Delta partition types whose JSON commit value is the text Arrow casts them to.
TEXT_TYPES = frozenset({"string", "date", "byte", "short", "integer", "long"})
# Reader features this replay handles (neither changes which files are live or when).
_READER_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})
# Bytes of JSON lines handed to Arrow at a time: bounds the memory of a commit of any size.
_BLOCK = 1 << 22
_BATCH = 1 << 16  # checkpoint rows read at a time
_COMMIT_INFO, _META, _PROTOCOL = b'{"commitInfo"', b'{"metaData"', b'{"protocol"'
_REMOVE = b'{"remove"'
Values = tuple[str | None, ...]


@dataclass(frozen=True)
class LogState:
    """Per partition of the latest version: the newest modification time and the live files."""

    version: int
    partition_by: tuple[str, ...]
    column_types: dict[str, DeltaType]
    newest: IntMap[tuple[str | None, ...]]  # over `compact.VALUES`
    counts: IntMap[tuple[str | None, ...]]


class _CannotReplay(Exception):
    """The log holds something this reader does not replay: delta-rs reads it."""


def read_log_state(root: str) -> LogState | None:
    """The partition state of the table at `root` from its log, or None (see the module
    docstring)."""
    try:
        return _read(root)
    except Exception:  # noqa: BLE001 - any failure here only means "ask delta-rs"
        return None  # delta-rs reads it, and raises the error worth showing if it is damaged


def _read(root: str) -> LogState | None:
    log = log_dir(root)
    names = os.listdir(log)
    versions = sorted(v for v in map(commit_version, names) if v is not None)
    checkpoint = _newest_checkpoint(log, names)
    if checkpoint is False:
        return None
    start = 0 if checkpoint is None else checkpoint[0] + 1
    wanted = [v for v in versions if v >= start]
    if wanted != list(range(start, start + len(wanted))) or (checkpoint is None and not wanted):
        return None  # a gap in the log
    paths = [os.path.join(log, f"{version:020d}.json") for version in wanted]
    scanned = _scan(paths, checkpoint)
    if scanned is None:
        return None
    metadata, protocol, removed = scanned
    partition_by = tuple(metadata["partitionColumns"])
    fields = json.loads(metadata["schemaString"])["fields"]
    column_types = {f["name"]: f["type"] for f in fields}
    if any(column_types.get(c) not in TEXT_TYPES for c in partition_by):
        return None
    rows = _Rows(partition_by, removed)
    if checkpoint is not None:
        rows.add_checkpoint(checkpoint[1])
    for path in paths:
        for block in _blocks(path):
            rows.add_block(block)
    newest, counts = rows.per_partition()
    give_back()  # the replay's temporaries (`columnar.memory`)
    return LogState(
        version=wanted[-1] if wanted else start - 1,
        partition_by=partition_by,
        column_types=column_types,
        newest=newest,
        counts=counts,
    )


def _scan(
    paths: Sequence[str], checkpoint: tuple[int, str] | None
) -> tuple[dict[str, Any], dict[str, Any], set[str]] | None:
    """The first pass: the table's metaData and protocol, and the (unquoted) paths every
    remove action of the JSON commits names; None if this reader does not replay the log."""
    meta: dict[str, dict[str, Any] | None] = {"metaData": None, "protocol": None}
    partitionings = set()
    if checkpoint is not None:
        meta["metaData"], meta["protocol"] = _checkpoint_meta(checkpoint[1])
        if meta["metaData"] is not None:
            partitionings.add(tuple(meta["metaData"]["partitionColumns"]))
    removed: set[str] = set()
    for path in paths:
        for block in _blocks(path):
            for kind, action in _meta_lines(block):
                meta[kind] = action
                if kind == "metaData":
                    partitionings.add(tuple(action["partitionColumns"]))
            lines = [block[start:end] for start, end in _line_starts(block, _REMOVE)]
            if lines:
                removed.update(map(unquote, _remove_paths(b"\n".join(lines))))
    metadata, protocol = meta["metaData"], meta["protocol"]
    if metadata is None or protocol is None or not _supported(metadata, protocol):
        return None
    if len(partitionings) > 1:
        return None  # repartitioned: the older adds are keyed otherwise
    return metadata, protocol, removed


class _Vocabulary:
    """The distinct partition values of one read, each with a code (None's is 0)."""

    def __init__(self, partition_by: tuple[str, ...]) -> None:
        import numpy as np
        import pyarrow as pa

        self.np, self.pa = np, pa
        self.partition_by = partition_by
        self.words: dict[str | None, int] = {None: 0}

    def code(self, word: str | None) -> int:
        """The code of a partition value in this read (an empty value is no value)."""
        return self.words.setdefault(word or None, len(self.words))


@dataclass(frozen=True)
class FileActions:
    """The add and remove actions of some JSON commits, in log order, as columns."""

    removes: npt.NDArray[np.bool_]  # the action is a remove (else an add)
    values: npt.NDArray[np.int64]  # its partition's values, as ids in `VALUES`
    paths: npt.NDArray[np.int64]  # its file's path as a code: equal paths, equal codes
    times: npt.NDArray[np.int64]  # an add's modification time (0 for a remove)


def read_file_actions(paths: Sequence[str], partition_by: tuple[str, ...]) -> FileActions | None:
    """The add and remove actions of the JSON commits at `paths` (commitInfo and txn lines
    skipped), read with Arrow; None if there is any other action (a schema change, a protocol
    upgrade, ...), an action without partition values, or a commit that cannot be read."""
    try:
        actions = _Actions(partition_by)
        for path in paths:
            for block in _blocks(path):
                actions.add_block(block)
        return actions.collected()
    except Exception:  # noqa: BLE001 - any failure here only means "read the table"
        return None


class _Actions(_Vocabulary):
    """The add and remove actions of JSON commits, a block of lines at a time."""

    def __init__(self, partition_by: tuple[str, ...]) -> None:
        super().__init__(partition_by)
        pa = self.pa
        values = pa.struct([(c, pa.string()) for c in partition_by])
        add = [("path", pa.string()), ("partitionValues", values), ("modificationTime", pa.int64())]
        remove = [("path", pa.string()), ("partitionValues", values)]
        txn = [("appId", pa.string())]
        self.schema = pa.schema(
            [(k, pa.struct(v)) for k, v in (("add", add), ("remove", remove), ("txn", txn))]
        )
        self.chunks: list[_Chunk] = []

    def add_block(self, block: bytes) -> None:
        import pyarrow.compute as pc
        import pyarrow.json as pj

        np, pa = self.np, self.pa
        options = pj.ParseOptions(explicit_schema=self.schema, unexpected_field_behavior="ignore")
        table = pj.read_json(
            pa.py_buffer(block),
            parse_options=options,
            read_options=pj.ReadOptions(block_size=max(len(block), 1 << 20), use_threads=False),
            memory_pool=pa.system_memory_pool(),
        )
        add, remove, txn = (table.column(k).combine_chunks() for k in ("add", "remove", "txn"))
        is_add, is_remove = _bools(np, pc.is_valid(add)), _bools(np, pc.is_valid(remove))
        if np.any(is_add & is_remove) or np.any(
            ~is_add & ~is_remove & ~_bools(np, pc.is_valid(txn))
        ):
            raise _CannotReplay("an action other than add, remove, txn and commitInfo")
        rows = np.flatnonzero(is_add | is_remove)
        removes = is_remove[rows]
        at = _indices(pa, np, rows)
        parts = []
        for action in (add, remove):
            chosen = action.take(at)
            values = pc.struct_field(chosen, "partitionValues")
            parts.append((chosen, values))
        (added, added_values), (removed, removed_values) = parts
        if not np.all(_bools(np, pc.is_valid(added_values)) | removes):
            raise _CannotReplay("an add without partition values")
        if not np.all(_bools(np, pc.is_valid(removed_values)) | ~removes):
            raise _CannotReplay("a remove without partition values")
        codes = [
            np.where(
                removes,
                _codes(self, pc.struct_field(removed_values, c)),
                _codes(self, pc.struct_field(added_values, c)),
            )
            for c in self.partition_by
        ]
        mask = pa.Array.from_buffers(
            pa.bool_(), len(rows), [None, pa.py_buffer(np.packbits(removes, bitorder="little"))]
        )
        path = pc.if_else(mask, pc.struct_field(removed, "path"), pc.struct_field(added, "path"))
        times = pc.struct_field(added, "modificationTime")
        if path.null_count or not np.all(_bools(np, pc.is_valid(times)) | removes):
            raise _CannotReplay("an action without a path or an add without a time")
        t = np.where(removes, 0, _ints(np, times, np.int64))
        self.chunks.append((removes, codes, path, t))

    def collected(self) -> FileActions:
        import pyarrow.compute as pc

        np, pa = self.np, self.pa
        removes = np.concatenate([c[0] for c in self.chunks]) if self.chunks else np.zeros(0, bool)
        times = (
            np.concatenate([c[3] for c in self.chunks]) if self.chunks else np.zeros(0, np.int64)
        )
        size = len(removes)
        words = list(self.words)
        columns = (
            [
                (np.concatenate([c[1][i] for c in self.chunks]), words)
                for i in range(len(self.partition_by))
            ]
            if self.chunks
            else [(np.zeros(0, np.int32), words) for _ in self.partition_by]
        )
        values = VALUES.ids_of_words(columns, size)
        paths = np.zeros(0, np.int64)
        if size:
            encoded = pc.dictionary_encode(pa.concat_arrays([c[2] for c in self.chunks]))
            paths = _ints(np, encoded.indices, np.int32).astype(np.int64)
        self.chunks = []
        pa.default_memory_pool().release_unused()  # what Arrow's allocator kept of the parse
        return FileActions(removes, values, paths, times)


def _remove_paths(lines: bytes) -> list[str]:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("remove", pa.struct([("path", pa.string())]))])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pj.read_json(pa.py_buffer(lines), parse_options=options)
    import pyarrow.compute as pc

    paths = pc.struct_field(table.column("remove").combine_chunks(), "path")
    if paths.null_count:
        raise _CannotReplay("a remove without a path")
    found: list[str] = paths.to_pylist()
    return found


class _Rows(_Vocabulary):
    """The live files of a replay: partition values and modification times of the files no
    remove names (`codes`, `times`: numpy chunks), and the actions naming the others, with
    their position in the replay (`seq`; a checkpoint's files come first, at -1)."""

    def __init__(self, partition_by: tuple[str, ...], removed: set[str]) -> None:
        super().__init__(partition_by)
        pa, np = self.pa, self.np
        self.removed = removed
        self.removed_array = _string_array(pa, np, sorted(removed)) if removed else None
        self.codes: list[list[Codes]] = [[] for _ in partition_by]
        self.times: list[Times] = []
        self.named: list[tuple[int, str, Values | None, int]] = []  # (seq, path, values, t)
        self.seq = 0
        values = [(c, pa.string()) for c in partition_by]
        add = [("path", pa.string()), ("modificationTime", pa.int64())]
        if values:
            add.insert(1, ("partitionValues", pa.struct(values)))
        self.schema = pa.schema(
            [("add", pa.struct(add)), ("remove", pa.struct([("path", pa.string())]))]
        )

    def add_checkpoint(self, path: str) -> None:
        """The add actions of a checkpoint, a batch of rows at a time (reading the file whole
        held about four times its columns in memory)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        np = self.np
        wanted = ["add.modificationTime"]
        parts = []
        if self.partition_by:
            wanted.append("add.partitionValues")
            parts = [f"add.partitionValues.key_value.{f}" for f in ("key", "value")]
        if self.removed:
            wanted.append("add.path")
        # `ParquetFile`, not `read_table` (which imports pandas); the partition values as read
        # from the file's dictionaries.
        source = pq.ParquetFile(path, read_dictionary=parts)
        for batch in source.iter_batches(_BATCH, columns=wanted, use_threads=False):
            added = batch.column(0)
            at = _true(np, pc.is_valid(added))
            times = pc.struct_field(added, "modificationTime")
            if not _bools(np, pc.is_valid(times))[at].all():
                raise _CannotReplay("an add without a modification time")
            values = []
            if self.partition_by:
                mapped = pc.struct_field(added, "partitionValues")
                if not _bools(np, pc.is_valid(mapped))[at].all():
                    raise _CannotReplay("an add without partition values")
                values = [codes[at] for codes in _map_columns(self, mapped)]
            paths = None
            if self.removed:
                paths = pc.struct_field(added, "path").take(_indices(self.pa, np, at))
            self._keep(values, _ints(np, times, np.int64)[at], paths, None)

    def add_block(self, block: bytes) -> None:
        """The actions of one block of JSON lines (`_blocks`)."""
        import pyarrow.compute as pc
        import pyarrow.json as pj

        pa, np = self.pa, self.np
        options = pj.ParseOptions(explicit_schema=self.schema, unexpected_field_behavior="ignore")
        table = pj.read_json(
            pa.py_buffer(block),
            parse_options=options,
            read_options=pj.ReadOptions(block_size=max(len(block), 1 << 20), use_threads=False),
            memory_pool=pa.system_memory_pool(),
        )
        seq = np.arange(self.seq, self.seq + table.num_rows, dtype=np.int64)
        self.seq += table.num_rows
        removes = table.column("remove").combine_chunks()
        if removes.null_count < len(removes):
            at = _true(np, pc.is_valid(removes))
            paths = pc.struct_field(removes, "path").take(_indices(pa, np, at)).to_pylist()
            for position, removed in zip(at.tolist(), paths, strict=True):
                if removed is None or unquote(removed) not in self.removed:
                    raise _CannotReplay("a remove the first pass did not see")
                self.named.append((int(seq[position]), unquote(removed), None, 0))
        adds = table.column("add").combine_chunks()
        at = _true(np, pc.is_valid(adds))
        added = adds.take(_indices(pa, np, at))
        values = []
        if self.partition_by:
            fields = pc.struct_field(added, "partitionValues")
            values = [_codes(self, pc.struct_field(fields, c)) for c in self.partition_by]
        paths = pc.struct_field(added, "path")
        times = pc.struct_field(added, "modificationTime")
        if paths.null_count or times.null_count:
            raise _CannotReplay("an add without a path or a modification time")
        self._keep(values, _ints(np, times, np.int64), paths, seq[at])

    def _keep(
        self,
        values: list[Codes],
        t: np.ndarray,
        paths: pa.Array | None,
        seq: np.ndarray | None,
    ) -> None:
        """Files with these partition value codes and modification times; those whose path
        some remove names are kept apart to be replayed in order."""
        np = self.np
        named = None
        if paths is not None and self.removed_array is not None:
            named = self._named(paths)
        if paths is not None and named is not None and named.any():
            words = list(self.words)
            for i in np.flatnonzero(named).tolist():
                row = tuple(words[int(v[i])] for v in values)
                at = -1 if seq is None else int(seq[i])
                self.named.append((at, unquote(paths[i].as_py()), row, int(t[i])))
            keep = ~named
            values, t = [v[keep] for v in values], t[keep]
        for column, codes in zip(self.codes, values, strict=True):
            column.append(codes)
        self.times.append(np.array(t, np.int64))  # a copy: `t` may view an Arrow buffer

    def _named(self, paths: pa.Array) -> np.ndarray:
        """Which of `paths` some remove names (a percent-encoded path names the file its
        decoded form does)."""
        import pyarrow.compute as pc

        np = self.np
        named = _bools(np, pc.is_in(paths, value_set=self.removed_array))
        encoded = _true(np, pc.match_substring(paths, "%"))
        for i in encoded.tolist():
            named[i] = unquote(paths[i].as_py()) in self.removed
        return named

    def per_partition(self) -> tuple[IntMap[Values], IntMap[Values]]:
        """Per partition, the newest modification time and the number of live files."""
        np = self.np
        self._replay_named()
        times = np.concatenate(self.times) if self.times else np.zeros(0, np.int64)
        if not len(times):
            return IntMap(VALUES), IntMap(VALUES)
        ones = np.ones(len(times), np.int64)
        if not self.partition_by:
            whole = [VALUES.id(())]
            return (
                IntMap.newest(VALUES, whole, [int(times.max())]),
                IntMap.newest(VALUES, whole, [len(times)]),
            )
        columns = [np.concatenate(chunks) for chunks in self.codes]
        self.codes, self.times = [], []
        words = list(self.words)
        ids = VALUES.ids_of_words([(column, words) for column in columns], len(times))
        del columns
        self.pa.default_memory_pool().release_unused()  # what Arrow's allocator kept of the parse
        return IntMap.newest(VALUES, ids, times), IntMap.newest(VALUES, ids, ones, add=True)

    def _replay_named(self) -> None:
        """The files some remove names that are live at the end of the log, in log order."""
        if not self.named:
            return
        np = self.np
        last: dict[str, tuple[Values | None, int]] = {}
        for _, path, row, t in sorted(self.named, key=lambda action: action[0]):
            last[path] = (row, t)
        live = [(row, t) for row, t in last.values() if row is not None]
        self.named = []
        for i, column in enumerate(self.codes):
            column.append(np.array([self.code(row[i]) for row, _ in live], np.int32))
        self.times.append(np.array([t for _, t in live], np.int64))


def _codes(rows: _Vocabulary, column: pa.Array) -> Codes:
    """A column of partition values as codes of this read (null and empty: None's code)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    np = rows.np
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    indices = encoded.indices
    mapping = np.array(
        [rows.code(w) for w in encoded.dictionary.to_pylist()] + [rows.code(None)], np.int32
    )
    at = _ints(np, indices, np.int32)
    if indices.null_count:
        at = np.where(_bools(np, pc.is_valid(indices)), at, len(mapping) - 1)
    codes: Codes = mapping[at]
    return codes


def _map_columns(rows: _Vocabulary, mapped: pa.MapArray) -> list[Codes]:
    """Per partition column, the codes of a checkpoint's `partitionValues` maps (the first
    entry of that column in each map; None where it has none)."""
    np = rows.np
    offsets = _ints(np, mapped.offsets, np.int32)
    sizes = np.diff(offsets)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    # `keys` and `items` are the whole children; the offsets point into them.
    start, end = (int(offsets[0]), int(offsets[-1])) if len(offsets) else (0, 0)
    if len(mapped.keys) < end or len(mapped.items) < end:
        raise _CannotReplay("partition value maps shorter than their offsets")
    keys = _codes(rows, mapped.keys.slice(start, end - start))
    items = _codes(rows, mapped.items.slice(start, end - start))
    found = []
    for column in rows.partition_by:
        codes = np.full(len(sizes), rows.code(None), np.int32)
        at = np.flatnonzero(keys == rows.code(column))
        owners, first = np.unique(owner[at], return_index=True)
        codes[owners] = items[at[first]]
        found.append(codes)
    return found


def _ints(np: ModuleType, array: pa.Array, dtype: Any) -> np.ndarray:
    """A primitive Arrow array's values as a numpy view (values under nulls unspecified)."""
    width = np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype, count=len(array), offset=array.offset * width)


def _bools(np: ModuleType, array: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy (null: False)."""
    validity, data = array.buffers()[:2]

    def unpacked(buffer: pa.Buffer) -> Flags:
        bits = np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")
        return bits[array.offset : array.offset + len(array)].astype(bool)

    values = unpacked(data)
    return values & unpacked(validity) if validity is not None and array.null_count else values


def _true(np: ModuleType, array: pa.Array) -> np.ndarray:
    return np.flatnonzero(_bools(np, array))


def _indices(pa: ModuleType, np: ModuleType, positions: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(positions, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _string_array(pa: ModuleType, np: ModuleType, words: Sequence[str]) -> pa.Array:
    encoded = [w.encode() for w in words]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise _CannotReplay("removed paths beyond a string array")
    data = pa.py_buffer(b"".join(encoded))
    narrow = pa.py_buffer(offsets.astype(np.int32))
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, narrow, data])


def _blocks(path: str) -> Iterator[bytes]:
    """The lines of one JSON commit in blocks of about `_BLOCK` bytes, whole lines each, without
    the commitInfo lines (skipped as they are read, never held whole)."""
    with open(path, "rb") as commit:
        carry, skipping = b"", False
        while chunk := commit.read(_BLOCK):
            if skipping:  # inside a commitInfo line: drop up to its end
                end = chunk.find(b"\n")
                if end < 0:
                    continue
                chunk, skipping = chunk[end + 1 :], False
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            whole, carry = data[:cut], data[cut:]
            if carry.startswith(_COMMIT_INFO):
                carry, skipping = b"", True
            whole = _without(whole, _COMMIT_INFO)
            if whole.strip():
                yield whole
        if carry.strip() and not carry.startswith(_COMMIT_INFO):
            yield carry


def _line_starts(data: bytes, prefix: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of every whole line of `data` starting with `prefix`."""
    position = 0 if data.startswith(prefix) else data.find(b"\n" + prefix)
    while position >= 0:
        start = position if data.startswith(prefix, position) else position + 1
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        yield start, end
        position = data.find(b"\n" + prefix, end)


def _without(data: bytes, prefix: bytes) -> bytes:
    spans = list(_line_starts(data, prefix))
    if not spans:
        return data
    kept, position = [], 0
    for start, end in spans:
        kept.append(data[position:start])
        position = end + 1
    kept.append(data[position:])
    return b"".join(kept)


def _meta_lines(block: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    """The metaData and protocol actions of a block, in order."""
    found = [
        (start, kind, end)
        for prefix, kind in ((_META, "metaData"), (_PROTOCOL, "protocol"))
        for start, end in _line_starts(block, prefix)
    ]
    for start, kind, end in sorted(found):
        yield kind, json.loads(block[start:end])[kind]


def _checkpoint_meta(path: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The first metaData and protocol actions of a checkpoint, a batch of rows at a time until
    both are found (writers put them first; the columns of a million adds are mostly null)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found: dict[str, dict[str, Any] | None] = {"metaData": None, "protocol": None}
    source = pq.ParquetFile(path)  # not `read_table`, which imports pandas
    for batch in source.iter_batches(_BATCH, columns=list(found), use_threads=False):
        for kind in found:
            if found[kind] is not None:
                continue
            column = batch.column(kind)
            present = column.filter(pc.is_valid(column)).to_pylist()
            found[kind] = present[0] if present else None
        if all(row is not None for row in found.values()):
            break
    metadata = found["metaData"]
    if metadata is not None:
        metadata["configuration"] = dict(metadata.get("configuration") or [])
    return metadata, found["protocol"]


def _newest_checkpoint(log: str, names: list[str]) -> tuple[int, str] | None | Literal[False]:
    """(version, file) of the newest checkpoint; None if there is none; False if it is of a
    kind this reader does not read (multi-part, V2)."""
    found: dict[int, list[str]] = {}
    for name in names:
        head, _, rest = name.partition(".checkpoint")
        if rest and len(head) == 20 and head.isdigit():
            found.setdefault(int(head), []).append(rest)
    if not found:
        return None
    version = max(found)
    if found[version] != [".parquet"]:
        return False
    return version, os.path.join(log, f"{version:020d}.checkpoint.parquet")


def _supported(metadata: dict[str, Any], protocol: dict[str, Any]) -> bool:
    configuration = metadata.get("configuration") or {}
    if configuration.get("delta.columnMapping.mode", "none") != "none":
        return False  # partition values are keyed by physical column names
    features = set(protocol.get("readerFeatures") or ())
    return int(protocol.get("minReaderVersion", 1)) < 3 or features <= _READER_FEATURES
