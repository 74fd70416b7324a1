"""The code Spark's Python workers run to write a table's Parquet files where they will live.

Self-contained on purpose (the standard library and pyarrow only): Spark ships it to its workers
by value (`cloudpickle.register_pickle_by_value`), so a cluster needs pyarrow, not
dagster_partlake. `write_batches` receives a task's rows as Arrow batches, sorted by their
partition folders, and writes one Parquet file per table partition it sees, straight into the
table's `col=value/` folders under a new unique name. It yields one JSON line per file with what
the commit needs (size, rows, partition values, key statistics), what the write was asked to
count on the way (flagged rows, summed values, and over all the task's rows, those whose key has
no null column and a hash another such row shares), so nothing reads the rows again, and the
folders it made (which a write that is not committed removes).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

# Spark's Hive folder escaping (ExternalCatalogUtils.escapePathName): these characters become
# %XX in a partition folder's value.
_ESCAPED = {chr(c) for c in range(0x01, 0x20)} | set("\"#%'*/:=?\\\x7f{[]^")
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Longer strings would need Delta's truncation rules for maxValues; such columns get no stats.
MAX_STAT_STRING = 32
# Rows are buffered into row groups of up to this many rows or bytes (Spark's own writer cuts
# them at 128 MB): mapInArrow hands a task batches of 10,000 rows, and one row group per batch made
# files of a thousand row groups, 70% slower to write at 10M rows and slower for every reader.
ROW_GROUP_ROWS = 1_048_576
ROW_GROUP_BYTES = 128 * 1024 * 1024
# A task keeps its rows' key hashes (8 bytes a row per key) up to this many rows to count the
# repeated ones; past it the count is unknown (the caller then counts another way).
MAX_REPEAT_ROWS = 4_000_000
# Tries at making a file's folders and opening it (another write may remove a folder it made).
OPEN_ATTEMPTS = 3


def escape_folder_value(value: str | None) -> str:
    """A partition value as Spark writes it into a folder name."""
    if value is None or value == "":
        return HIVE_NULL
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def make_filesystem(kind: str, arguments: dict[str, Any]) -> Any:
    """The pyarrow filesystem a worker writes with (see `TableLocation.arrow`)."""
    import pyarrow.fs as pafs

    if kind == "local":
        return pafs.LocalFileSystem()
    if kind == "s3":
        return pafs.S3FileSystem(**arguments)
    if kind == "gs":
        return pafs.GcsFileSystem(**arguments)
    return pafs.AzureFileSystem(**arguments)


def make_folders(root: str, folders: Sequence[str]) -> list[str]:
    """Make the table's root folder and the partition `folders` below it on the local disk;
    those this call made, relative to the root ('' for the root itself).

    A write that is not committed removes exactly these (`delta.files.WrittenFiles.discard`):
    never a folder that was there before or that another write made. The folders above the
    root (the lake's) are made too but not reported: they are not the table's.
    """
    import os

    base = root.rstrip("/")
    os.makedirs(os.path.dirname(base), exist_ok=True)
    made = []
    for depth in range(len(folders) + 1):
        try:
            os.mkdir(os.path.join(base, *folders[:depth]))
        except FileExistsError:
            continue
        made.append("/".join(folders[:depth]))
    return made


def write_batches(
    batches: Iterator[Any],
    *,
    fs_kind: str,
    fs_arguments: dict[str, Any],
    root: str,
    data_columns: Sequence[str],
    partition_by: Sequence[str],
    folder_columns: Sequence[str],
    flag_columns: Sequence[str],
    sum_columns: Sequence[str],
    hash_columns: Sequence[str],
    stats_columns: Sequence[str],
    write_id: str,
    repeat_columns: Sequence[str] = (),
) -> Iterator[Any]:
    """mapInArrow's function: write the batches' rows, yield one `fact` (JSON) per file.

    Every fact also names the task (`task`) and, per column of `repeat_columns` (64-bit hashes
    of a key, null for a key with a null column, which is not counted), how many of the task's
    rows have a hash another of its rows has (`repeats`; None past `MAX_REPEAT_ROWS`): when one
    task wrote every file of a write, that is the write's count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs = make_filesystem(fs_kind, fs_arguments)
    facts: list[dict[str, Any]] = []
    current: tuple[str | None, ...] | None = None
    file: _OpenFile | None = None
    repeats = _Repeats(repeat_columns)
    for batch in batches:
        table = pa.Table.from_batches([batch])
        repeats.add(table)
        for start, end in _runs(table, folder_columns):
            values = tuple(table.column(c)[start].as_py() for c in folder_columns)
            if file is None or values != current:
                if file is not None:
                    facts.append(file.close())
                current = values
                file = _OpenFile(
                    fs,
                    root,
                    partition_by,
                    values,
                    table.select(list(data_columns)).schema,
                    write_id,
                    pq,
                    fs_kind == "local",
                )
            piece = table.slice(start, end - start)
            file.write(piece, data_columns, flag_columns, sum_columns, hash_columns, stats_columns)
    if file is not None:
        facts.append(file.close())
    task = {"task": uuid.uuid4().hex, "repeats": repeats.counts()}
    lines = [json.dumps({**fact, **task}) for fact in facts]
    yield pa.RecordBatch.from_pydict({"fact": lines}, schema=pa.schema([("fact", pa.string())]))


class _Repeats:
    """A task's key hashes, kept to count the rows whose hash another row shares (rows whose key
    has a null column, a null hash, are left out)."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self.kept: dict[str, list[Any]] = {c: [] for c in self.columns}
        self.rows = 0

    def add(self, table: Any) -> None:
        if not self.columns or self.rows > MAX_REPEAT_ROWS:
            return
        self.rows += table.num_rows
        if self.rows > MAX_REPEAT_ROWS:
            self.kept = {}
            return
        for column in self.columns:
            # A null hash is a key with a null column (`delta.files._key_hash`): as SQL's
            # UNIQUE, it repeats no other key.
            self.kept[column].append(table.column(column).drop_null().to_numpy())

    def counts(self) -> dict[str, int | None]:
        import numpy as np

        if self.rows > MAX_REPEAT_ROWS:
            return dict.fromkeys(self.columns)
        found: dict[str, int | None] = {}
        for column in self.columns:
            values = np.sort(np.concatenate(self.kept[column] or [np.empty(0, np.int64)]))
            if len(values) < 2:
                found[column] = 0
                continue
            same = values[1:] == values[:-1]
            # A row repeats when its hash equals its neighbour's on either side.
            repeated = np.zeros(len(values), dtype=bool)
            repeated[1:] |= same
            repeated[:-1] |= same
            found[column] = int(repeated.sum())
        return found


def _runs(table: Any, columns: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) of the runs of equal values of `columns` in a sorted table."""
    import pyarrow.compute as pc

    n = table.num_rows
    if n == 0:
        return []
    cuts: set[int] = set()
    if n > 1:
        for column in columns:
            array = table.column(column).combine_chunks()
            differs = pc.fill_null(pc.not_equal(array.slice(1), array.slice(0, n - 1)), True)
            both_null = pc.and_(pc.is_null(array.slice(1)), pc.is_null(array.slice(0, n - 1)))
            differs = pc.and_(differs, pc.invert(both_null))
            cuts.update(int(i) + 1 for i in pc.indices_nonzero(differs).to_pylist())
    bounds = [0, *sorted(cuts), n]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


class _OpenFile:
    """One Parquet file being written, and the facts gathered while writing it."""

    def __init__(
        self,
        fs: Any,
        root: str,
        partition_by: Sequence[str],
        values: tuple[str | None, ...],
        schema: Any,
        write_id: str,
        pq: Any,
        local: bool,
    ) -> None:
        folders = [
            f"{c}={escape_folder_value(v)}" for c, v in zip(partition_by, values, strict=True)
        ]
        name = f"part-{write_id[:8]}-{uuid.uuid4().hex}.c000.snappy.parquet"
        self.relative = "/".join([*folders, name])
        self.full = "/".join([root.rstrip("/"), self.relative])
        self.folders_made: list[str] = []
        self.stream = self._open(fs, root, folders, local)
        self.writer = pq.ParquetWriter(self.stream, schema, compression="snappy")
        self.pending: list[Any] = []  # pieces of the next row group
        self.pending_rows = self.pending_bytes = 0
        self.partition_values = {
            c: (None if v is None or v == "" else v)
            for c, v in zip(partition_by, values, strict=True)
        }
        self.rows = 0
        self.flags: dict[str, int] = {}
        self.sums: dict[str, list[float]] = {}
        self.hashes: dict[str, int] = {}
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.nulls: dict[str, int] = {}
        self.exact: dict[str, bool] = {}

    def _open(self, fs: Any, root: str, folders: Sequence[str], local: bool) -> Any:
        """The file's output stream, its folders made first on a local disk (an object store
        has none)."""
        if not local:
            return fs.open_output_stream(self.full)
        attempt = 1
        while True:
            try:
                self.folders_made += make_folders(root, folders)
                return fs.open_output_stream(self.full)
            except FileNotFoundError:
                # Another write, not committed, removed a folder it had made after this one
                # found it there: make it again.
                if attempt == OPEN_ATTEMPTS:
                    raise
                attempt += 1

    def write(
        self,
        piece: Any,
        data_columns: Sequence[str],
        flag_columns: Sequence[str],
        sum_columns: Sequence[str],
        hash_columns: Sequence[str],
        stats_columns: Sequence[str],
    ) -> None:
        import pyarrow.compute as pc

        data = piece.select(list(data_columns))
        self.pending.append(data)
        self.pending_rows += data.num_rows
        self.pending_bytes += data.nbytes
        if self.pending_rows >= ROW_GROUP_ROWS or self.pending_bytes >= ROW_GROUP_BYTES:
            self._flush(whole=False)
        self.rows += piece.num_rows
        for column in flag_columns:
            flagged = pc.sum(pc.fill_null(piece.column(column), False).cast("int64")).as_py() or 0
            self.flags[column] = self.flags.get(column, 0) + flagged
        for column in sum_columns:
            values = piece.column(column)
            kept = self.sums.setdefault(column, [0.0, 0])
            kept[0] += pc.sum(values).as_py() or 0.0
            kept[1] += piece.num_rows - values.null_count
        for column in hash_columns:
            self.hashes[column] = (
                self.hashes.get(column, 0) + _wrapping_sum(piece.column(column))
            ) % 2**64
        for column in stats_columns:
            self._stats(piece.column(column), column)

    def _stats(self, values: Any, column: str) -> None:
        import datetime as dt

        import pyarrow.compute as pc

        self.nulls[column] = self.nulls.get(column, 0) + values.null_count
        if values.null_count == len(values) or not self.exact.get(column, True):
            return
        low_high = pc.min_max(values).as_py()
        low, high = low_high["min"], low_high["max"]
        exact = all(
            isinstance(v, int | str | dt.date) and not isinstance(v, bool | dt.datetime)
            for v in (low, high)
        )
        if not exact or (isinstance(high, str) and len(high) > MAX_STAT_STRING):
            self.exact[column] = False
            self.low.pop(column, None)
            self.high.pop(column, None)
            return
        self.low[column] = low if column not in self.low else min(self.low[column], low)
        self.high[column] = high if column not in self.high else max(self.high[column], high)

    def _flush(self, *, whole: bool = True) -> None:
        """Write the buffered rows as row groups of `ROW_GROUP_ROWS` (past `ROW_GROUP_BYTES`: all
        of them); `whole=False` keeps a last group smaller than that for the rows to come."""
        import pyarrow as pa

        if not self.pending:
            return
        together = pa.concat_tables(self.pending)  # the pieces' buffers, not copied
        cut = together.num_rows
        if not whole and self.pending_bytes < ROW_GROUP_BYTES:
            cut -= together.num_rows % ROW_GROUP_ROWS
        self.writer.write_table(together.slice(0, cut), row_group_size=ROW_GROUP_ROWS)
        rest = together.slice(cut)
        self.pending = [rest] if rest.num_rows else []
        self.pending_rows, self.pending_bytes = rest.num_rows, rest.nbytes if rest.num_rows else 0

    def close(self) -> dict[str, Any]:
        self._flush()
        self.writer.close()  # the stream stays open: the writer did not open it
        size = int(self.stream.tell())
        self.stream.close()
        low = {c: v.isoformat() if hasattr(v, "isoformat") else v for c, v in self.low.items()}
        high = {c: v.isoformat() if hasattr(v, "isoformat") else v for c, v in self.high.items()}
        return {
            "path": self.relative,
            "size": size,
            "rows": self.rows,
            "values": self.partition_values,
            "min": low,
            "max": high,
            "nulls": self.nulls,
            "flags": self.flags,
            "sums": self.sums,
            "hashes": {c: str(h) for c, h in self.hashes.items()},
            "folders": self.folders_made,
        }


def _wrapping_sum(values: Any) -> int:
    """The sum of an int64 column modulo 2**64 (hash sums: order-independent, may overflow)."""
    import numpy as np

    array = values.combine_chunks() if hasattr(values, "combine_chunks") else values
    data = array.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
    return int(np.sum(data, dtype=np.uint64))


def rewrite_batches(
    batches: Iterator[Any],
    *,
    fs_kind: str,
    fs_arguments: dict[str, Any],
    root: str,
    data_schema: Any,
    partition_by: Sequence[str],
    files: Sequence[tuple[str, dict[str, str | None]]],
    key_column: str,
    key_files: Sequence[str],
    stats_columns: Sequence[str],
    write_id: str,
) -> Iterator[Any]:
    """mapInArrow's function for a rewrite: each row (`id`) is the position of a table file in
    `files` (its path relative to `root`, its partition values); the file is read here, its rows
    whose `key_column` value is among those of `key_files` dropped, and the rest written as a
    new file in the same partition folder (none when no row is left). Yields one `fact` per new
    file, as `write_batches` does. The rows never pass through the JVM."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs = make_filesystem(fs_kind, fs_arguments)
    base = root.rstrip("/")
    keys = pa.chunked_array(
        [
            pq.read_table(f"{base}/{f}", columns=[key_column], filesystem=fs).column(0)
            for f in key_files
        ],
        type=data_schema.field(key_column).type,
    ).combine_chunks()
    data_columns = list(data_schema.names)
    facts: list[str] = []
    for batch in batches:
        for position in batch.column("id").to_pylist():
            path, values = files[position]
            table = _conformed(pq.read_table(f"{base}/{path}", filesystem=fs), data_schema, pa)
            # A row with a null key is no batch key: kept (`skip_nulls`: null never matches).
            drop = pc.is_in(table.column(key_column), value_set=keys, skip_nulls=True)
            kept = table.filter(pc.invert(drop))
            if not kept.num_rows:
                continue
            file = _OpenFile(
                fs,
                root,
                partition_by,
                tuple(values.get(c) for c in partition_by),
                data_schema,
                write_id,
                pq,
                fs_kind == "local",
            )
            file.write(kept, data_columns, (), (), (), stats_columns)
            facts.append(json.dumps(file.close()))
    yield pa.RecordBatch.from_pydict({"fact": facts}, schema=pa.schema([("fact", pa.string())]))


def _conformed(table: Any, schema: Any, pa: Any) -> Any:
    """A file's rows with the table's data columns, in order and types: a column the file
    lacks (added to the table after it was written) is null."""
    arrays = [
        table.column(f.name).cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)
