"""A table's partition state replayed from its Delta log with Arrow, without a delta-rs snapshot.

delta-rs keeps every live file of a loaded snapshot in memory (about 500 bytes per file, kept by
its allocator after the table is dropped), while partition state needs two numbers per partition.
So a first read replays the log itself, in bulk:

- the newest classic checkpoint (one Parquet file, as delta-rs writes them): only the columns
  `add.path`, `add.partitionValues` and `add.modificationTime` are read, as Arrow columns;
- the JSON commits after it, a block of lines at a time (`_BLOCK`), parsed by Arrow's JSON reader
  against a schema of just what liveness needs (an add's path, partition values and modification
  time, a remove's path), skipping the commitInfo lines, which are never parsed (a partlake
  record of a large commit is most of its bytes). The metaData and protocol lines are found
  first, by a scan for their line starts, and read with `json.loads`.

A file is live when the last action naming it is an add. Only files that some remove names are
followed one by one, in log order; the rest are grouped by partition at once (Arrow's group-by:
the newest modification time and the file count per partition).

Returns None where this reader would have to know more of the protocol than it does, and the
caller then asks delta-rs: multi-part or V2 checkpoints, column mapping, deletion vectors, a
partition column whose JSON text is not the Arrow text delta-rs gives (timestamps, decimals), a
log with gaps, or anything it cannot parse (a value of an unexpected type, a missing field).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from dagster_partlake.columnar.interner import VALUES
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.layout import commit_version, log_dir

if TYPE_CHECKING:
    from types import ModuleType

    import pyarrow as pa

    from dagster_partlake.delta.schema import DeltaType

# Delta partition types whose JSON commit value is the text Arrow casts them to.
TEXT_TYPES = frozenset({"string", "date", "byte", "short", "integer", "long"})
# Reader features this replay handles (neither changes which files are live or when).
_READER_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})
# Bytes of JSON lines handed to Arrow at a time: bounds the memory of a commit of any size.
_BLOCK = 1 << 22
_COMMIT_INFO, _META, _PROTOCOL = b'{"commitInfo"', b'{"metaData"', b'{"protocol"'


@dataclass(frozen=True)
class LogState:
    """Per partition of the latest version: the newest modification time and the live files."""

    version: int
    partition_by: tuple[str, ...]
    column_types: dict[str, DeltaType]
    newest: IntMap[tuple[str | None, ...]]  # over `compact.VALUES`
    counts: IntMap[tuple[str | None, ...]]


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
    meta: dict[str, dict[str, Any] | None] = {"metaData": None, "protocol": None}
    if checkpoint is not None:
        meta["metaData"], meta["protocol"] = _checkpoint_meta(checkpoint[1])
    import pyarrow as pa

    adds: _Adds | None = None
    for path in paths:
        for block in _blocks(path):
            for kind, action in _meta_lines(block):
                if kind == "metaData" and adds is not None:
                    if tuple(action["partitionColumns"]) != adds.partition_by:
                        return None  # repartitioned: the older adds are keyed otherwise
                meta[kind] = action
            if adds is None:
                if meta["metaData"] is None:
                    return None
                adds = _Adds(pa, tuple(meta["metaData"]["partitionColumns"]), checkpoint)
            adds.add_block(block)
    metadata, protocol = meta["metaData"], meta["protocol"]
    if metadata is None or protocol is None or not _supported(metadata, protocol):
        return None
    partition_by = tuple(metadata["partitionColumns"])
    fields = json.loads(metadata["schemaString"])["fields"]
    column_types = {f["name"]: f["type"] for f in fields}
    if any(column_types.get(c) not in TEXT_TYPES for c in partition_by):
        return None
    live = (adds or _Adds(pa, partition_by, checkpoint)).live()
    if live is None:
        return None
    newest, counts = _per_partition(pa, live, partition_by)
    return LogState(
        version=wanted[-1] if wanted else start - 1,
        partition_by=partition_by,
        column_types=column_types,
        newest=newest,
        counts=counts,
    )


class _Adds:
    """The add actions of a checkpoint and JSON commits, as Arrow columns, with the removes
    in log order (`seq`: the action's position in the replay)."""

    chunks: list[pa.Table]  # path, one column per partition column, t, seq

    def __init__(
        self, pa: ModuleType, partition_by: tuple[str, ...], checkpoint: tuple[int, str] | None
    ) -> None:
        self.pa = pa
        self.partition_by = partition_by
        values = [(c, pa.string()) for c in partition_by]
        add = [("path", pa.string()), ("modificationTime", pa.int64())]
        if values:
            add.insert(1, ("partitionValues", pa.struct(values)))
        self.schema = pa.schema(
            [("add", pa.struct(add)), ("remove", pa.struct([("path", pa.string())]))]
        )
        self.chunks = []
        self.removes: list[tuple[int, str]] = []  # (seq, unquoted path)
        self.seq = 0
        if checkpoint is not None:
            self._add_checkpoint(checkpoint[1])

    def _keep(
        self,
        paths: pa.ChunkedArray | pa.Array,
        values: list[pa.ChunkedArray | pa.Array],
        times: pa.ChunkedArray | pa.Array,
        seq: pa.Array,
    ) -> None:
        pa = self.pa
        columns = {"path": paths, **dict(zip(self.partition_by, values, strict=True))}
        self.chunks.append(pa.table({**columns, "t": times, "seq": seq}))

    def _add_checkpoint(self, path: str) -> None:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        wanted = ["add.path", "add.modificationTime"]
        if self.partition_by:
            wanted.append("add.partitionValues")
        # Leaf columns of the `add` struct only: they come back as top-level columns.
        rows = pq.read_table(path, columns=wanted)
        rows = rows.filter(pc.is_valid(rows.column("path")))
        mapped = rows.column("partitionValues") if self.partition_by else None
        values = [pc.map_lookup(mapped, c, "first") for c in self.partition_by]
        import numpy as np

        seq = self.pa.array(np.full(rows.num_rows, -1, np.int64))  # before every commit
        self._keep(rows.column("path"), values, rows.column("modificationTime"), seq)

    def add_block(self, block: bytes) -> None:
        """The actions of one block of JSON lines (`_blocks`)."""
        import pyarrow.json as pj

        options = pj.ParseOptions(explicit_schema=self.schema, unexpected_field_behavior="ignore")
        table = pj.read_json(
            self.pa.py_buffer(block),
            parse_options=options,
            read_options=pj.ReadOptions(block_size=max(len(block), 1 << 20)),
        )
        self._take(table)

    def _take(self, table: pa.Table) -> None:
        import numpy as np
        import pyarrow.compute as pc

        pa = self.pa
        seq = pa.array(np.arange(self.seq, self.seq + table.num_rows, dtype=np.int64))
        self.seq += table.num_rows
        removed = table.column("remove").combine_chunks()
        has_remove = pc.is_valid(removed)
        if pc.any(has_remove).as_py():
            paths = pc.struct_field(removed.filter(has_remove), "path").to_pylist()
            self.removes.extend(
                zip(seq.filter(has_remove).to_pylist(), map(unquote, paths), strict=True)
            )
        added = table.column("add").combine_chunks()
        has_add = pc.is_valid(added)
        added, seq = added.filter(has_add), seq.filter(has_add)
        values = pc.struct_field(added, "partitionValues") if self.partition_by else None
        self._keep(
            pc.struct_field(added, "path"),
            [pc.struct_field(values, c) for c in self.partition_by],
            pc.struct_field(added, "modificationTime"),
            seq,
        )

    def live(self) -> pa.Table | None:
        """Partition values and modification time of every live file (None: an add without a
        path or a modification time)."""
        import pyarrow.compute as pc

        pa = self.pa
        if not self.chunks:
            return None
        adds = pa.concat_tables(self.chunks)
        self.chunks = []
        if adds.column("path").null_count or adds.column("t").null_count:
            return None
        if not self.removes:
            return adds
        removed = {path for _, path in self.removes}
        paths = adds.column("path")
        named = pc.is_in(paths, value_set=pa.array(list(removed), pa.string()))
        named = named.to_numpy(zero_copy_only=False).copy()
        # A percent-encoded path names the file its decoded form does.
        for i in pc.indices_nonzero(pc.match_substring(paths, "%")).to_pylist():
            named[i] = unquote(paths[i].as_py()) in removed
        mask = pa.array(named)
        return pa.concat_tables([adds.filter(pc.invert(mask)), self._followed(adds.filter(mask))])

    def _followed(self, adds: pa.Table) -> pa.Table:
        """The files some remove names that are live at the end of the log, replayed in order."""
        events: list[tuple[int, str, dict[str, Any] | None]] = [
            (row["seq"], unquote(row["path"]), row) for row in adds.to_pylist()
        ]
        events.extend((seq, path, None) for seq, path in self.removes)
        events.sort(key=lambda event: event[0])
        last: dict[str, dict[str, Any] | None] = {}
        for _, path, row in events:
            last[path] = row
        rows = [row for row in last.values() if row is not None]
        return self.pa.Table.from_pylist(rows, schema=adds.schema)


def _per_partition(
    pa: ModuleType, live: pa.Table, partition_by: tuple[str, ...]
) -> tuple[IntMap[tuple[str | None, ...]], IntMap[tuple[str | None, ...]]]:
    """Per partition, the newest modification time and the number of live files."""
    if not live.num_rows:
        return IntMap(VALUES), IntMap(VALUES)
    if not partition_by:
        newest = int(max(live.column("t").to_pylist()))
        ids = [VALUES.id(())]
        return (
            IntMap.newest(VALUES, ids, [newest]),
            IntMap.newest(VALUES, ids, [live.num_rows]),
        )
    grouped = live.group_by(list(partition_by)).aggregate([("t", "max"), ("t", "count")])
    del live
    times = grouped.column("t_max").to_numpy()
    counts = grouped.column("t_count").to_numpy().astype("int64")
    # One string object per distinct value (a million partitions have ten thousand days); an
    # empty value is no value, as Delta writes a null partition.
    columns = [_shared(pa, grouped.column(c)) for c in partition_by]
    del grouped
    ids = VALUES.ids_of(zip(*columns, strict=True))
    del columns
    pa.default_memory_pool().release_unused()  # what Arrow's allocator kept of the parse
    return IntMap.newest(VALUES, ids, times), IntMap.newest(VALUES, ids, counts, add=True)


def _shared(pa: ModuleType, column: pa.ChunkedArray) -> list[str | None]:
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column.combine_chunks())
    words = [w or None for w in encoded.dictionary.to_pylist()]
    return [None if i is None else words[i] for i in encoded.indices.to_pylist()]


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
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows = pq.read_table(path, columns=["metaData", "protocol"])
    found: list[dict[str, Any] | None] = []
    for kind in ("metaData", "protocol"):
        column = rows.column(kind)
        present = column.filter(pc.is_valid(column)).to_pylist()
        row = present[0] if present else None
        if row is not None and kind == "metaData":
            row["configuration"] = dict(row.get("configuration") or [])
        found.append(row)
    return found[0], found[1]


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
