"""A table's partition state replayed from its Delta log with Arrow, without a delta-rs snapshot.

delta-rs keeps every live file of a loaded snapshot in memory (about 500 bytes per file, kept by
its allocator after the table is dropped), while partition state needs a few numbers per
partition. So a read replays the log itself, in bulk:

- the folder is listed once (`log_listing.Listing`): the newest complete checkpoint at or before
  the version read (classic, multi-part, or V2 with its sidecar files, under its own name or the
  classic one) and the JSON commits after it, which must follow it without a gap;
- a first pass over those JSON commits finds the metaData and protocol lines (read with
  `json.loads`) and the files some later action may replace (removed ones, and re-added ones),
  by a scan for their line starts; the protocol then goes through the gate
  (`dagster_partlake.delta.protocol`) before anything large is parsed;
- the checkpoint's add actions are read as Arrow columns, a batch of rows at a time (only
  `add.partitionValues`, `add.modificationTime`, and `add.path` / `add.deletionVector` when some
  later action may name the file);
- every JSON commit the log still holds (also those before the checkpoint, which say when each
  partition last changed) is parsed a block of lines at a time (`_BLOCK`), several small commits
  per block, with Arrow's JSON reader against a schema of just what liveness and change times
  need, and of the commits the first pass read, only what their bytes name (`_Shape`: most
  hold adds alone, and Arrow would build a null in every leaf of the remove action and the
  deletion vector for each of their rows); their commitInfo lines are never parsed whole (a
  partlake record of a large commit is most of its bytes): only their first bytes are read for
  the commit's time (`change_rule.commit_clock`), and where the first pass found a commit's
  only one on its first line, no other line is searched for one. One commit is not parsed:
  when the log holds every commit up to the checkpoint and only the checkpoint's own adds
  files, and it holds adds alone, each data-changing, its changes are the checkpoint's files
  (read anyway), which no deletion vector may mark (a table written by one large commit,
  checkpointed after it: partlake's writer does so). partlake's own commits say so in the first
  bytes of their payload (`_declared_bulk`: the count of their actions, `payload.with_actions`,
  checked against the checkpoint's files); of any other, two searches of its bytes show it
  (`_adds_only`).

A file is its path plus its deletion vector; it is live when the last action naming it is an add.
Only files some later action names are followed one by one, in log order; for the rest only
their partition values (as codes into the distinct values of this read) and modification times
are kept, and they are grouped by partition at once with numpy. Partition values are read
under their physical column names (column mapping) and keyed as `partition_text` spells them.
Each partition's lastUpdated is the time of the newest commit that changed it
(`dagster_partlake.delta.change_rule`); a live file's partition is looked up in `VALUES` once,
for both.

`read_file_actions` reads the actions of commits made since a state was read the same way, as
columns (`dagster_partlake.delta.state` follows a table with them).

Every file is named relative to the log folder and opened through `log_files.LogFiles`, so a
table on an object store replays the same way as one on disk (one listing, one read per file).

Nothing here converts Arrow data through pandas: pyarrow imports pandas (about 110 MB) for
`to_numpy`, `group_by`, `pyarrow.parquet.read_table`, `pa.array` and Python scalars, so columns
are read through their buffers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from dagster_partlake.columnar.interner import VALUES
from dagster_partlake.columnar.intmap import ABSENT, IntMap
from dagster_partlake.columnar.memory import give_back
from dagster_partlake.delta.change_rule import (
    NATIVE_KEY,
    PARTLAKE_KEYS,
    ChangeTimes,
    commit_clock,
)
from dagster_partlake.delta.log_files import LogFiles
from dagster_partlake.delta.log_listing import SIDECARS, Listing
from dagster_partlake.delta.partition_text import TEXT_TYPES, normalized
from dagster_partlake.delta.protocol import Protocol, check_readable
from dagster_partlake.errors import TableUnreadableError
from dagster_partlake.layout import commit_name
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    from dagster_partlake.delta.schema import DeltaType

    Flags = npt.NDArray[np.bool_]
    Codes = npt.NDArray[np.int32]
    Times = npt.NDArray[np.int64]
    Ids = npt.NDArray[np.int64]

__all__ = ["TEXT_TYPES", "FileActions", "Layout", "LogState", "read_file_actions", "read_log_state"]

# Bytes of JSON lines handed to Arrow at a time: bounds the memory of a commit of any size.
_BLOCK = 1 << 22
_BATCH = 1 << 16  # checkpoint rows read at a time
_HEAD = 1 << 16  # bytes of a large commitInfo line read for its time
_SMALL_LINE = 1 << 20  # a commitInfo line at most this long is kept whole
_COMMIT_INFO, _META, _PROTOCOL = b'{"commitInfo"', b'{"metaData"', b'{"protocol"'
_REMOVE, _ADD = b'{"remove"', b'{"add"'
_QUIET = b'"dataChange":false'  # an action that changes no data (writers write compact JSON)
_MAPPED = frozenset({"name", "id"})  # column mapping modes that key values by physical name
Values = tuple[str | None, ...]


@dataclass(frozen=True)
class Layout:
    """How a table's files are partitioned: its partition columns (logical names, and the
    physical names its partition values are keyed by) and its columns' Delta types."""

    partition_by: tuple[str, ...]
    physical: tuple[str, ...]
    column_types: dict[str, DeltaType]

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> Layout:
        """From the body of a `metaData` action (an old one may lack a schema: no types)."""
        schema = metadata.get("schemaString")
        fields = json.loads(schema)["fields"] if schema else []
        configuration = metadata.get("configuration") or {}
        mapped = str(configuration.get("delta.columnMapping.mode") or "none").lower() in _MAPPED
        by_name = {f["name"]: f.get("metadata") or {} for f in fields}
        partition_by = tuple(metadata["partitionColumns"])
        physical = tuple(
            str(by_name.get(c, {}).get("delta.columnMapping.physicalName", c)) if mapped else c
            for c in partition_by
        )
        return cls(partition_by, physical, {f["name"]: f["type"] for f in fields})


@dataclass(frozen=True)
class LogState:
    """Per partition of one version: lastUpdated, live files, and the version of the commit
    that gave it its lastUpdated (absent: no JSON commit the log holds changed it)."""

    version: int
    layout: Layout
    newest: IntMap[Values]  # over `compact.VALUES`
    counts: IntMap[Values]
    changed_in: IntMap[Values]
    commits: tuple[int, ...]  # the JSON commits the log held, ascending

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.layout.partition_by

    @property
    def column_types(self) -> dict[str, DeltaType]:
        return self.layout.column_types


class CannotReplay(Exception):
    """The log holds something this reader cannot replay."""


def read_log_state(
    root: str | TableLocation | LogFiles,
    *,
    version: int | None = None,
    table_name: str | None = None,
) -> LogState | None:
    """The partition state of the table at `root` (a path, a location, or its `LogFiles`) at
    `version` (default: the newest), replayed from its log; None if there is no table there
    (no log, or a log without a commit).

    Raises:
        UnreadableTableFeatureError: the table needs a reader feature partlake lacks.
        TableUnreadableError: the log cannot be replayed (a damaged or missing file, or a
            version no longer in the log); `table_name` is used in the message.
        StorageError: the object store refused or did not answer.
    """
    from dagster_partlake.delta.table import unreadable

    files = root if isinstance(root, LogFiles) else LogFiles(root)
    name = table_name or files.location.name
    try:
        listing = Listing.of(files.names())
    except (FileNotFoundError, NotADirectoryError):
        return None
    newest = listing.newest_version()
    if newest is None:
        return None
    if version is not None and not 0 <= version <= newest:
        raise TableUnreadableError(
            f"table {name} at {files.root} has no version {version}: its newest "
            f"version is {newest}."
        )
    try:
        return _Replay(files, listing, newest if version is None else version, name).run()
    except TableUnreadableError:
        raise
    except Exception as error:  # noqa: BLE001 - explained to the user by `unreadable`
        from dagster_partlake.errors import StorageError

        if isinstance(error, StorageError):
            raise
        raise unreadable(files.location, error, table_name=name) from error


class _Replay:
    """One cold read of a table's log (`read_log_state`)."""

    def __init__(self, files: LogFiles, listing: Listing, version: int, name: str) -> None:
        self.files, self.listing, self.version, self.name = files, listing, version, name
        self.root = files.root
        self.checkpoint = listing.newest_checkpoint(version)
        start = 0 if self.checkpoint is None else self.checkpoint.version + 1
        after = [v for v in listing.commits if start <= v <= version]
        if after != list(range(start, version + 1)):
            oldest = _oldest_readable(listing)
            if oldest is not None and version < oldest:
                raise TableUnreadableError(
                    f"version {version} of table {name} at {files.root} is no longer "
                    f"in its log: the oldest version it can still rebuild is {oldest}."
                )
            raise CannotReplay(f"a commit between {start} and {version} is missing")
        self.after = after  # the JSON commits after the checkpoint, up to `version`

    def run(self) -> LogState:
        tops, sidecars, meta = self._checkpoint_tops()
        removed, metas, shapes = _first_pass(self.files, self._paths(self.after))
        meta.update({kind: action for _, kind, action in metas})
        protocol, metadata = meta.get("protocol"), meta.get("metaData")
        if protocol is None or metadata is None:
            raise CannotReplay("the log has no protocol or no metaData action")
        if not metadata.get("schemaString") or metadata.get("partitionColumns") is None:
            raise CannotReplay("its metaData action has no schema or no partition columns")
        check_readable(Protocol.from_action(protocol), table_name=self.name, root=self.root)
        layout = Layout.of(metadata)
        vocabulary = _Vocabulary(layout)
        rows = _Rows(vocabulary, removed)
        held = [v for v in self.listing.commits if v <= self.version]
        start = self.after[0] if self.after else self.version + 1
        before = [v for v in held if v < start]  # read only for when partitions changed
        bulk = self._bulk_commit(before, tops)
        rows.bulk = None if bulk is None else []
        for path, is_json in tops:
            if is_json:
                for block in _blocks(self.files, path):
                    parsed = _Decoded(vocabulary, _parse(vocabulary, block, tagged=False))
                    rows.add_json(parsed, checkpoint=True)
            else:
                rows.add_checkpoint(self.files, path)
        for path in sidecars:
            rows.add_checkpoint(self.files, path)
        if bulk is not None and rows.bulk is not None and bulk.declared is not None:
            if bulk.declared != sum(len(times) for _, _, times in rows.bulk):
                # The checkpoint holds files its payload does not account for: the bytes decide.
                bulk = _adds_only(self.files, bulk.version)
                rows.bulk = None if bulk is None else rows.bulk
        changes = _Changes(vocabulary)
        for version, kind, action in metas:
            changes.meta(version, kind, action)
        alone = None  # the bulk commit when no commit follows its checkpoint: it decides alone
        if bulk is not None and rows.bulk is not None:
            if self.after:
                bulk.apply(changes, rows.bulk)
            else:
                alone = bulk.version
            before = before[:-1]
        rows.bulk = None
        for table in _tagged_tables(
            vocabulary, self.files, self._paths(before), changes, file_keys=False
        ):
            changes.add(_Decoded(vocabulary, table))
        after = _tagged_tables(
            vocabulary, self.files, self._paths(self.after), changes, meta=False, shapes=shapes
        )
        for table in after:
            decoded = _Decoded(vocabulary, table)
            changes.add(decoded, rows.add_json(decoded, checkpoint=False))
        return self._state(layout, rows, changes, held, alone=alone)

    def _state(
        self,
        layout: Layout,
        rows: _Rows,
        changes: _Changes,
        held: list[int],
        *,
        alone: int | None = None,
    ) -> LogState:
        import numpy as np

        newest, counts = rows.per_partition()
        if alone is not None:
            # Every live file came from the commit `alone` (`_bulk_commit`), newer than any other
            # change: each live partition changed there, at its files' newest time.
            pids = counts.id_array()
            give_back()
            versions = np.full(len(pids), alone, np.int64)
            changed_in = IntMap.from_ids(VALUES, pids, versions)
            return LogState(self.version, layout, newest, counts, changed_in, tuple(held))
        times = changes.reduced(self.files, since=changes.repartitioned - 1, live=rows.ids)
        pids, versions, when = times.newest_changes()
        live = np.isin(pids, counts.id_array()) if len(pids) else np.zeros(0, bool)
        pids, versions, when = pids[live], versions[live], when[live]
        give_back()  # the replay's temporaries (`columnar.memory`)
        return LogState(
            version=self.version,
            layout=layout,
            newest=_overridden(newest, pids, when),
            counts=counts,
            changed_in=IntMap.from_ids(VALUES, pids, versions),
            commits=tuple(held),
        )

    def _paths(self, versions: Iterable[int]) -> list[tuple[int, str]]:
        return [(v, commit_name(v)) for v in versions]

    def _bulk_commit(self, before: list[int], tops: list[tuple[str, bool]]) -> _BulkCommit | None:
        """The commit that added every file of the checkpoint, when the log holds every commit
        from the first up to the checkpoint's, no older one than the checkpoint's names an add,
        and the checkpoint's own holds data-changing adds alone (`_adds_only`): its changes are
        then the checkpoint's files (`_Rows.bulk`), which need not be parsed again from its
        JSON (a table written by one large commit, checkpointed after it). None otherwise."""
        checkpoint = self.checkpoint
        if checkpoint is None or any(is_json for _, is_json in tops):
            return None
        if before != list(range(checkpoint.version + 1)):
            return None
        if any(_names_adds(self.files, commit_name(v)) for v in reversed(before[:-1])):
            return None
        declared = _declared_bulk(self.files, checkpoint.version)
        return declared if declared is not None else _adds_only(self.files, checkpoint.version)

    def _checkpoint_tops(
        self,
    ) -> tuple[list[tuple[str, bool]], list[str], dict[str, dict[str, Any] | None]]:
        """The checkpoint's top-level files (path, JSON or not), its sidecar files, and the
        metaData and protocol it holds."""
        meta: dict[str, dict[str, Any] | None] = {"metaData": None, "protocol": None}
        if self.checkpoint is None:
            return [], [], meta
        tops = [(f, f.endswith(".json")) for f in self.checkpoint.files]
        sidecars: list[str] = []
        for path, is_json in tops:
            found, named = (
                _json_checkpoint_meta(self.files, path)
                if is_json
                else _checkpoint_meta(self.files, path)
            )
            for kind, action in found.items():
                if meta[kind] is None:
                    meta[kind] = action
            sidecars.extend(_sidecar_path(name) for name in named)
        return tops, sidecars, meta


def _overridden(values: IntMap[Values], ids: Ids, new: Times) -> IntMap[Values]:
    """`values` with `new` at `ids`, every one of which `values` has (one copy of its column:
    `IntMap.updated_ids` sorts the ids)."""
    import numpy as np

    if not len(ids):
        return values
    slots = values.slots().copy()
    slots[ids - values.base] = new
    return IntMap.of_slots(VALUES, values.base, np.asarray(slots, np.int64))


def _oldest_readable(listing: Listing) -> int | None:
    """The oldest version the log can rebuild: its oldest checkpoint's, or 0 when every commit
    from the first on is there."""
    if listing.commits[:1] == (0,):
        return 0
    return listing.checkpoints[0].version if listing.checkpoints else None


def _sidecar_path(name: str) -> str:
    """A sidecar's name for `LogFiles.open`: below the log folder, an absolute local path, or a
    URI."""
    relative = unquote(name)
    if relative.startswith("file:"):
        return TableLocation.parse(relative).uri  # the one place that reads `file://`
    if "/" in relative:
        return relative
    return f"{SIDECARS}/{relative}"


def _first_pass(
    files: LogFiles, paths: Sequence[tuple[int, str]]
) -> tuple[set[str], list[tuple[int, str, dict[str, Any]]], dict[int, _Shape]]:
    """The keys of the files the JSON commits at `paths` remove or re-add without changing
    data (a later action may name a file of before), their metaData and protocol actions
    (version, kind, action), in log order, and what each commit's lines may hold."""
    metas: list[tuple[int, str, dict[str, Any]]] = []
    named: set[str] = set()
    shapes: dict[int, _Shape] = {}
    for version, path in paths:
        shape = _NONE
        leading: list[bool] = []  # per commitInfo line: the commit's first line
        for block in _blocks(files, path, leading=leading):
            here = _Shape.of(block)
            shape = shape | here
            metas.extend((version, kind, action) for kind, action in _meta_lines(block))
            lines = []
            if here.removes:  # (one scan for the key spares the scan for line starts)
                lines = [block[start:end] for start, end in _line_starts(block, _REMOVE)]
            if _QUIET in block:  # (one scan; most blocks have none)
                lines.extend(
                    block[start:end]
                    for start, end in _line_starts(block, _ADD)
                    if _QUIET in block[start:end]
                )
            if lines:
                named.update(_named_keys(b"\n".join(lines)))
        shapes[version] = shape | _Shape(False, False, infos=not all(leading))
    return named, metas, shapes


def _named_keys(lines: bytes) -> list[str]:
    """The file keys (unquoted path, deletion vector) of some remove and add lines."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    file = pa.struct([("path", pa.string()), ("deletionVector", _dv_type())])
    schema = pa.schema([("remove", file), ("add", file)])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pj.read_json(pa.py_buffer(lines), parse_options=options)
    keys = []
    for kind in ("remove", "add"):
        actions = table.column(kind).combine_chunks()
        actions = actions.filter(pc.is_valid(actions))
        if pc.struct_field(actions, "path").null_count:
            raise CannotReplay(f"a {kind} without a path")
        keys.extend(_python_keys(actions))
    return keys


def _python_keys(actions: pa.StructArray) -> list[str]:
    """Unquoted file keys of some add or remove actions, as Python strings."""
    import pyarrow.compute as pc

    paths = pc.struct_field(actions, "path").to_pylist()
    vectors = _vectors(actions)
    ids = [None] * len(paths) if vectors is None else _dv_ids(vectors).to_pylist()
    return [
        unquote(p) if d is None else f"{unquote(p)}\x00{d}" for p, d in zip(paths, ids, strict=True)
    ]


def _dv_ids(vectors: pa.Array) -> pa.Array:
    """A deletion vector's unique id (storage type, path or inline data, `@offset`), or null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = pc.struct_field(vectors, "storageType")
    where = pc.struct_field(vectors, "pathOrInlineDv")
    offset = pc.cast(pc.struct_field(vectors, "offset"), pa.string())
    base = pc.binary_join_element_wise(kind, where, _repeated(len(vectors), ""))
    at = pc.binary_join_element_wise(base, offset, _repeated(len(vectors), "@"))
    return pc.if_else(pc.is_valid(offset), at, base)


def _repeated(size: int, text: str) -> pa.Array:
    """A string array of `size` times `text` (made from buffers: a Python scalar would make
    pyarrow import pandas)."""
    import numpy as np
    import pyarrow as pa

    data = text.encode()
    offsets = np.arange(size + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(
        pa.string(), size, [None, pa.py_buffer(offsets), pa.py_buffer(data * size)]
    )


def _file_keys(paths: pa.Array, vectors: pa.Array | None) -> pa.Array:
    """Raw (quoted) file keys: the path, and the deletion vector's id when there is one."""
    import pyarrow.compute as pc

    if vectors is None or vectors.null_count == len(vectors):
        return paths
    ids = _dv_ids(vectors)
    joined = pc.binary_join_element_wise(paths, ids, _repeated(len(paths), "\x00"))
    return pc.if_else(pc.is_valid(ids), joined, paths)


class _Vocabulary:
    """The distinct partition values of one read, each with a code (None's is 0), and the
    table's layout."""

    def __init__(self, layout: Layout) -> None:
        import numpy as np
        import pyarrow as pa

        self.np, self.pa = np, pa
        self.layout = layout
        self.words: dict[str | None, int] = {None: 0}
        # The codes of the dictionaries `_codes` saw last: a checkpoint's batches of one row
        # group share theirs (at 1M partitions ~10,000 values coded again for every batch).
        self._coded: list[tuple[pa.Array, Codes]] = []

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.layout.partition_by

    def code(self, word: str | None) -> int:
        """The code of a partition value in this read (an empty value is no value)."""
        return self.words.setdefault(word or None, len(self.words))

    def mapping(self, dictionary: pa.Array) -> Codes:
        """The codes of a dictionary's values, then of None (the code of a null index)."""
        for seen, codes in self._coded:
            if seen.equals(dictionary):
                return codes
        codes = self.np.array(
            [self.code(w) for w in dictionary.to_pylist()] + [self.code(None)], self.np.int32
        )
        self._coded = [(dictionary, codes), *self._coded[:3]]
        return codes

    def ids(self, columns: Sequence[Codes], size: int) -> npt.NDArray[np.int64]:
        """The ids in `VALUES` of `size` partitions given as code columns, their values keyed
        as `partition_text` spells them."""
        if not self.partition_by:
            return self.np.full(size, VALUES.id(()), self.np.int64)
        words = list(self.words)
        word_columns = []
        for column, codes in zip(self.partition_by, columns, strict=True):
            kind = self.layout.column_types.get(column)
            if kind in TEXT_TYPES:
                word_columns.append((codes, words))
                continue
            used = self.np.unique(codes).tolist()
            spelled = list(words)
            for code, text in zip(
                used, normalized([words[c] for c in used], kind or "string"), strict=True
            ):
                spelled[code] = text
            word_columns.append((codes, spelled))
        return VALUES.ids_of_words(word_columns, size)


_DV_FIELDS = [("storageType", "string"), ("pathOrInlineDv", "string"), ("offset", "int64")]


def _dv_type() -> pa.DataType:
    import pyarrow as pa

    return pa.struct([(n, pa.string() if t == "string" else pa.int64()) for n, t in _DV_FIELDS])


@dataclass(frozen=True)
class _Shape:
    """Which optional actions and fields some JSON lines may hold. A key whose name appears
    nowhere in their bytes is in none of them, so Arrow need not build its columns (for every
    row a null in each of their leaves: a third of the parse of a block of adds). The bytes are
    searched, not the line starts: an action the first pass did not expect is still parsed,
    and refused."""

    removes: bool = True  # the bytes name `"remove"`
    vectors: bool = True  # the bytes name `"deletionVector"`
    infos: bool = True  # a commitInfo line may be elsewhere than on the first line

    @classmethod
    def of(cls, block: bytes) -> _Shape:
        return cls(b'"remove"' in block, b'"deletionVector"' in block, infos=False)

    def __or__(self, other: _Shape) -> _Shape:
        return _Shape(
            self.removes or other.removes,
            self.vectors or other.vectors,
            self.infos or other.infos,
        )


_ANY = _Shape()  # lines not looked at: anything may be there
_NONE = _Shape(removes=False, vectors=False, infos=False)


def _action_schema(
    vocabulary: _Vocabulary, *, tagged: bool, paths: bool = True, shape: _Shape = _ANY
) -> pa.Schema:
    """What the replay reads of a JSON line: the add and remove actions' file key (`paths`),
    partition values (by physical name), data change flag and times; `_v`, the commit version
    (`_tagged_tables`). Without `shape.vectors` the actions have no `deletionVector` field,
    without `shape.removes` there is no `remove` (`_parse` adds it back, all null)."""
    pa = vocabulary.pa
    physical = vocabulary.layout.physical
    common = [("dataChange", pa.bool_())]
    if shape.vectors:
        common.append(("deletionVector", _dv_type()))
    if paths:  # (only the times of the commits before a checkpoint are read: no file keys)
        common.insert(0, ("path", pa.string()))
    if physical:  # an unpartitioned table's values are `{}`: nothing to read
        common.append(("partitionValues", pa.struct([(c, pa.string()) for c in physical])))
    add = pa.struct([*common, ("modificationTime", pa.int64())])
    remove = pa.struct([*common, ("deletionTimestamp", pa.int64())])
    fields = [("add", add), ("remove", remove)] if shape.removes else [("add", add)]
    return pa.schema([("_v", pa.int64()), *fields] if tagged else fields)


def _parse(
    vocabulary: _Vocabulary,
    block: bytes,
    *,
    tagged: bool,
    paths: bool = True,
    shape: _Shape = _ANY,
) -> pa.Table:
    """The actions of some JSON lines as a table of `_action_schema` (`shape`: what the lines
    may hold, `_Shape.of` them or more); its `remove` column is there, all null, when `shape`
    says there is none."""
    import pyarrow.json as pj

    pa = vocabulary.pa
    options = pj.ParseOptions(
        explicit_schema=_action_schema(vocabulary, tagged=tagged, paths=paths, shape=shape),
        unexpected_field_behavior="ignore",
    )
    table = pj.read_json(
        pa.py_buffer(block),
        parse_options=options,
        read_options=pj.ReadOptions(block_size=max(len(block), 1 << 20), use_threads=False),
        memory_pool=pa.system_memory_pool(),
    )
    if tagged and table.column("_v").null_count:
        raise CannotReplay("a line of a commit that does not start with '{'")
    if not shape.removes:
        remove = _action_schema(vocabulary, tagged=False, paths=paths).field("remove").type
        table = table.append_column("remove", pa.nulls(table.num_rows, remove))
    return table


@dataclass
class _Seen:
    """The commitInfo line of one commit, as `_blocks` passes it: its first bytes and whether a
    partlake key appears anywhere in it."""

    head: bytes = b""
    partlake: bool = False
    native: bool = False  # a partlake record in its userMetadata (`change_rule.NATIVE_KEY`)
    tail: bytes = b""
    found: bool = False

    def start(self, data: bytes) -> None:
        # A small line whole (its time may need `json.loads`); of a large one its start.
        self.found, self.head = True, data if len(data) <= _SMALL_LINE else data[:_HEAD]
        self.feed(data)

    def feed(self, chunk: bytes) -> None:
        data = self.tail + chunk
        self.partlake = self.partlake or any(key in data for key in PARTLAKE_KEYS)
        self.native = self.native or NATIVE_KEY in data
        self.tail = data[-48:]


def _tagged_tables(
    vocabulary: _Vocabulary,
    files: LogFiles,
    paths: Sequence[tuple[int, str]],
    changes: _Changes,
    *,
    file_keys: bool = True,
    meta: bool = True,
    shapes: Mapping[int, _Shape] | None = None,
) -> Iterator[pa.Table]:
    """The add and remove actions of the JSON commits at `paths` (version, file), in log order,
    each row with its commit's version (`_v`): small commits several per Arrow parse, each line
    tagged with it, a large one a block at a time. Each commit's clock (and, with `meta`, its
    metaData and protocol actions) go to `changes`. Without `file_keys`, the actions' paths and
    deletion vectors' ids are not read. `shapes`: what each commit's lines may hold, as
    `_first_pass` found (a commit it lacks may hold anything)."""
    pending = _Pending(vocabulary, file_keys)
    for version, path in paths:
        seen = _Seen()
        shape = _ANY if shapes is None else shapes.get(version, _ANY)
        for block in _blocks(files, path, seen, first_only=not shape.infos):
            if meta:
                for kind, action in _meta_lines(block):
                    changes.meta(version, kind, action)
            # Without a first pass, each block says what it holds (its two searches cost less
            # than the parse of a deletion vector's null leaves in every row).
            here = _Shape.of(block) if shapes is None else shape
            if len(block) >= _BLOCK // 4:  # large: its own parse, no copy to tag its lines
                yield from pending.flushed()
                parsed = _parse(vocabulary, block, tagged=False, paths=file_keys, shape=here)
                yield _with_version(parsed, version)
                continue
            pending.add(version, block, here)
            if pending.size >= _BLOCK:
                yield from pending.flushed()
        changes.clock(version, seen)
    yield from pending.flushed()


class _Pending:
    """Small blocks of JSON lines waiting for one Arrow parse, with their commits' versions:
    the blocks of several commits get each line tagged with its version (`_v`, a copy of their
    bytes); those of one commit alone are parsed as they are, the version added as a column."""

    def __init__(self, vocabulary: _Vocabulary, file_keys: bool) -> None:
        self.vocabulary, self.file_keys = vocabulary, file_keys
        self.blocks: list[tuple[int, bytes]] = []
        self.size, self.held = 0, _NONE  # the bytes pending, and what they may hold

    def add(self, version: int, block: bytes, shape: _Shape) -> None:
        self.blocks.append((version, block if block.endswith(b"\n") else block + b"\n"))
        self.size, self.held = self.size + len(block), self.held | shape

    def flushed(self) -> Iterator[pa.Table]:
        """The parse of the pending blocks, if any; then none are pending."""
        if not self.blocks:
            return
        blocks, held = self.blocks, self.held
        self.blocks, self.size, self.held = [], 0, _NONE
        versions = {version for version, _ in blocks}
        if len(versions) == 1:
            joined = b"".join(block for _, block in blocks)
            parsed = _parse(self.vocabulary, joined, tagged=False, paths=self.file_keys, shape=held)
            yield _with_version(parsed, versions.pop())
            return
        tagged = b"".join(
            (b"\n" + block).replace(b"\n{", b'\n{"_v":%d,' % version)[1:]
            for version, block in blocks
        )
        yield _parse(self.vocabulary, tagged, tagged=True, paths=self.file_keys, shape=held)


def _with_version(table: pa.Table, version: int) -> pa.Table:
    """A parsed block of one commit with its version as the column `_v`."""
    import numpy as np
    import pyarrow as pa

    values = pa.py_buffer(np.full(table.num_rows, version, np.int64))
    return table.append_column(
        "_v", pa.Array.from_buffers(pa.int64(), table.num_rows, [None, values])
    )


# In a commit of adds alone: a line that is neither an add nor a txn (delta-rs writes those last:
# partlake's writer names each partition it wrote), and a data change flag that is not true (any
# key ending so: searched by its tail, a third faster, and a key of another name only costs the
# parse the search would have spared).
_NOT_ADD = re.compile(rb'\n(?!\{"add":\{|\{"txn":\{)')
_NOT_CHANGING = re.compile(rb'Change"\s*:\s*(?!t)')
_LEADING = ((_META, "metaData"), (_PROTOCOL, "protocol"))


@dataclass(frozen=True)
class _BulkCommit:
    """A JSON commit of data-changing adds alone (`_adds_only`): its version, its commitInfo
    as `_blocks` saw it, and its metaData and protocol actions."""

    version: int
    seen: _Seen
    metas: tuple[tuple[str, dict[str, Any]], ...]
    # The adds its payload says it made (`_declared_bulk`), to be checked against the
    # checkpoint's files; None: its bytes were searched (`_adds_only`).
    declared: int | None = None

    def apply(self, changes: _Changes, files: list[tuple[Ids, list[Codes], Times]]) -> None:
        """Give `changes` this commit as the checkpoint's `files` (`_Rows.bulk`) say it."""
        for kind, action in self.metas:
            changes.meta(self.version, kind, action)
        changes.clock(self.version, self.seen)
        for positions, codes, times in files:
            changes.add_adds(self.version, positions, codes, times)


def _adds_only(files: LogFiles, version: int) -> _BulkCommit | None:
    """The JSON commit `version` when every line of it but its first-line commitInfo, the
    metaData and protocol lines that start a block and its txn lines is an add not marked
    `dataChange` other than true, and it has no partlake record made through delta-spark (whose
    time is its own); else None. Two searches of its bytes, no parse: the checkpoint written
    after it holds the same files (and says whether one has a deletion vector)."""
    seen = _Seen()
    metas: list[tuple[str, dict[str, Any]]] = []
    for block in _blocks(files, commit_name(version), seen, first_only=True):
        start = 0
        while start < len(block) and not block.startswith((b'{"add":{', b'{"txn":{'), start):
            end = block.find(b"\n", start)
            end = len(block) if end < 0 else end
            kind = next((k for prefix, k in _LEADING if block.startswith(prefix, start)), None)
            if kind is None:
                return None
            metas.append((kind, json.loads(block[start:end])[kind]))
            start = end + 1
        other = _NOT_ADD.search(block, start)
        if other is not None and other.end() < len(block):
            return None
        if _NOT_CHANGING.search(block, start):
            return None
    if seen.native:
        return None
    return _BulkCommit(version, seen, tuple(metas))


# A partlake payload opening with the actions of its commit (`payload.with_actions`): adds
# alone, each changing data.
_DECLARED = re.compile(
    rb'"partlake":\{"format":\d+,"actions":\{"adds":(\d+),"removes":0,"data_change":true\}'
)


def _declared_bulk(files: LogFiles, version: int) -> _BulkCommit | None:
    """The JSON commit `version` when its commitInfo line (its first) holds a partlake payload
    that says the commit made data-changing adds alone (`payload.with_actions`, written by
    partlake's transaction), with the metaData and protocol lines that follow it; else None.
    Reads the commitInfo line and those lines, not the adds: the caller checks the count
    against the checkpoint written after it (`_BulkCommit.declared`)."""
    seen = _Seen()
    with files.open(commit_name(version)) as commit:
        chunk = commit.read(_BLOCK)
        found = _DECLARED.search(chunk) if chunk.startswith(_COMMIT_INFO) else None
        end = chunk.find(b"\n")
        if found is None or not 0 <= found.start() < (len(chunk) if end < 0 else end):
            return None
        seen.start(chunk if end < 0 else chunk[:end])
        # The rest of a large commitInfo line is skipped, not searched for partlake keys: its
        # payload is partlake's own, written by delta-rs (no delta-spark userMetadata record).
        while end < 0:
            chunk = commit.read(_BLOCK)
            if not chunk:
                return None
            end = chunk.find(b"\n")
        rest = chunk[end + 1 :]
        metas: list[tuple[str, dict[str, Any]]] = []
        while not rest.startswith((b'{"add":{', b'{"txn":{')):
            kind = next((k for prefix, k in _LEADING if rest.startswith(prefix)), None)
            if kind is None and len(rest) >= len(_META):
                return None  # neither an add nor a leading metaData or protocol line
            line_end = rest.find(b"\n")
            if kind is None or line_end < 0:
                more = commit.read(_BLOCK)
                if not more:
                    return None
                rest += more
                continue
            metas.append((kind, json.loads(rest[:line_end])[kind]))
            rest = rest[line_end + 1 :]
    if seen.native:
        return None
    return _BulkCommit(version, seen, tuple(metas), declared=int(found.group(1)))


def _names_adds(files: LogFiles, path: str) -> bool:
    """Whether the JSON commit at `path` may hold an add action (its bytes name one)."""
    return any(b'"add"' in block for block in _blocks(files, path))


class _Changes:
    """The data-changing actions of a replay's JSON commits, for `change_rule.ChangeTimes`."""

    def __init__(self, vocabulary: _Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.versions: list[Times] = []
        # Per action, its file's position among the live files (`_Rows.add_json`), or -1 and
        # its partition value codes (in `codes`): each partition's id is found once.
        self.live: list[Ids] = []
        self.codes: list[list[Codes]] = [[] for _ in vocabulary.partition_by]
        self.new_times: list[Times] = []
        self.stamps: list[tuple[Times, Times]] = []
        self.times = ChangeTimes()
        # Per metaData action: its version, and whether it partitions files as the table now.
        self.layouts: list[tuple[int, bool]] = []
        self.meta_seen = False  # some commit has a metaData or protocol action

    def meta(self, version: int, kind: str, action: Mapping[str, Any]) -> None:
        self.meta_seen = True
        if kind == "metaData":
            same = Layout.of(action).physical == self.vocabulary.layout.physical
            self.layouts.append((version, same))

    @property
    def repartitioned(self) -> int:
        """The version that partitioned the files as they are now, when an earlier commit of
        the log partitioned them otherwise (0: none did): the older commits' partition values
        name other partitions."""
        other = [v for v, same in self.layouts if not same]
        if not other:
            return 0
        after = [v for v, same in self.layouts if same and v > max(other)]
        return min(after, default=max(other) + 1)

    def clock(self, version: int, seen: _Seen) -> None:
        if seen.found:
            self.times.clocks[version] = commit_clock(
                seen.head, partlake=seen.partlake, native=seen.native
            )

    def add(self, decoded: _Decoded, live: Ids | None = None) -> None:
        """The data-changing add and remove actions of one parsed block (`live`: per row, the
        position of its added file among the live files, or -1)."""
        np = self.vocabulary.np
        found = _changed(decoded)
        if found is None:
            return
        rows, was_add, versions, codes, new_times, stamps = found
        at = np.full(len(rows), -1, np.int64) if live is None else np.where(was_add, live[rows], -1)
        unknown = at < 0
        self.versions.append(versions)
        self.live.append(at)
        for column, chunk in zip(self.codes, codes, strict=True):
            column.append(chunk if unknown.all() else chunk[unknown])
        self.new_times.append(new_times)
        self.stamps.append((versions, stamps))

    def add_adds(self, version: int, positions: Ids, codes: list[Codes], times: Times) -> None:
        """Data-changing adds of new files by the commit `version`: per file its position among
        the live files or -1, the partition value codes of those at -1, its modification
        time."""
        np = self.vocabulary.np
        versions = np.full(len(times), version, np.int64)
        self.versions.append(versions)
        self.live.append(positions)
        for column, chunk in zip(self.codes, codes, strict=True):
            column.append(chunk)
        self.new_times.append(times)
        self.stamps.append((versions, times))

    def reduced(self, files: LogFiles, *, since: int, live: Ids | None = None) -> ChangeTimes:
        """The collected changes as a `ChangeTimes` of partition ids (commits after `since`;
        `live`: the ids of the live files' partitions, `_Rows.ids`)."""
        np = self.vocabulary.np
        times = self.times
        if self.versions:
            versions = np.concatenate(self.versions)
            at = np.concatenate(self.live)
            keep = versions > since
            ids = np.full(len(versions), -1, np.int64)
            known = at >= 0
            if live is not None and known.any():
                ids[known] = live[at[known]]
            unknown = np.flatnonzero(~known)
            chosen = keep[unknown]  # (the codes are kept for the unknown rows only)
            columns = [np.concatenate(c)[chosen] for c in self.codes]
            ids[unknown[chosen]] = self.vocabulary.ids(columns, int(np.count_nonzero(chosen)))
            times.add(versions[keep], ids[keep], np.concatenate(self.new_times)[keep])
            for moments, stamps in self.stamps:
                _stamp_commits(np, times, moments, stamps)
        self.versions, self.live, self.new_times, self.stamps = [], [], [], []
        self.codes = [[] for _ in self.vocabulary.partition_by]
        times.file_times.update(_file_times(files, times.versions_without_clock()))
        return times


def _stamp_commits(np: ModuleType, times: ChangeTimes, versions: Times, stamps: Times) -> None:
    """Each commit's newest action stamp."""
    present = stamps != ABSENT
    if not np.any(present):
        return
    versions, stamps = versions[present], stamps[present]
    if bool(np.all(versions == versions[0])):  # (a block of one commit: most)
        times.stamp(int(versions[0]), int(stamps.max()))
        return
    order = np.lexsort((stamps, versions))
    last = np.r_[versions[order][1:] != versions[order][:-1], True]
    chosen = zip(versions[order][last].tolist(), stamps[order][last].tolist(), strict=True)
    for version, stamp in chosen:
        times.stamp(int(version), int(stamp))


class _Decoded:
    """One parsed block (`_parse`): its add and remove actions, each column decoded once for
    the live files (`_Rows`) and the change times (`_changed`) alike."""

    def __init__(self, vocabulary: _Vocabulary, table: pa.Table) -> None:
        self.vocabulary, self.table = vocabulary, table
        self.add, self.remove = _whole(table.column("add")), _whole(table.column("remove"))
        self._codes: dict[str, list[Codes]] = {}

    def codes(self, kind: str) -> list[Codes]:
        """Per partition column, the codes of every row's add or remove action (None's code
        where the row has none, or its action no partition values)."""
        import pyarrow.compute as pc

        if kind not in self._codes:
            action = self.add if kind == "add" else self.remove
            values = _partition_values(action, self.vocabulary.layout.physical)
            self._codes[kind] = [
                _codes(self.vocabulary, pc.struct_field(values, c))
                for c in self.vocabulary.layout.physical
            ]
        return self._codes[kind]

    def versions(self) -> Times:
        """Each row's commit version."""
        np = self.vocabulary.np
        return _ints(np, _whole(self.table.column("_v")), np.int64)


def _whole(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array (a parse gives one chunk: `combine_chunks` would copy it)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _changed(
    decoded: _Decoded,
) -> tuple[Ids, Flags, Times, list[Codes], Times, Times] | None:
    """(row, is an add, version, partition codes, new file time or `ABSENT`, action stamp or
    `ABSENT`) of each data-changing add or remove of a parsed block (a remove without partition
    values is not counted: no partition is known for it)."""
    import pyarrow.compute as pc

    np = decoded.vocabulary.np
    physical = decoded.vocabulary.layout.physical
    removes = decoded.remove.null_count < len(decoded.remove)
    changing = []
    for action in (decoded.add, decoded.remove) if removes else (decoded.add,):
        known = _bools(np, pc.is_valid(action)) & _changes_data(np, action)
        values = _partition_values(action, physical)
        changing.append(known if values is None else known & _bools(np, pc.is_valid(values)))
    is_add = changing[0]
    rows = np.flatnonzero(is_add | changing[1] if removes else is_add)
    if not len(rows):
        return None
    was_add = is_add[rows]
    modified = _nullable_ints(np, pc.struct_field(decoded.add, "modificationTime"))[rows]
    if removes:
        codes = [
            np.where(was_add, added[rows], removed[rows])
            for added, removed in zip(decoded.codes("add"), decoded.codes("remove"), strict=True)
        ]
        deleted = _nullable_ints(np, pc.struct_field(decoded.remove, "deletionTimestamp"))[rows]
        stamps = np.where(was_add, modified, deleted)
    else:  # (most blocks: adds alone)
        codes, stamps = [added[rows] for added in decoded.codes("add")], modified
    vectors = _vectors(decoded.add)
    new = was_add if vectors is None else was_add & ~_bools(np, pc.is_valid(vectors))[rows]
    new_times = np.where(new, modified, ABSENT)
    return rows, was_add, decoded.versions()[rows].copy(), codes, new_times, stamps


def _vectors(actions: pa.StructArray) -> pa.Array | None:
    """The deletion vectors of some parsed actions, None when the parse read none
    (`_Shape.vectors`)."""
    import pyarrow.compute as pc

    if actions.type.get_field_index("deletionVector") < 0:
        return None
    return pc.struct_field(actions, "deletionVector")


def _changes_data(np: ModuleType, actions: pa.StructArray) -> Flags:
    """Which actions are marked `dataChange: true` (or not marked: the protocol's default)."""
    import pyarrow.compute as pc

    flags = pc.struct_field(actions, "dataChange")
    return _bools(np, flags) | ~_bools(np, pc.is_valid(flags))


def _file_times(files: LogFiles, versions: Sequence[int]) -> dict[int, int]:
    """The modification time (ms) of some commits' files: the time of a commit that says
    nothing of it."""
    found = {}
    for version in versions:
        when = files.mtime_ms(commit_name(version))
        if when is not None:
            found[version] = when
    return found


@dataclass(frozen=True)
class FileActions:
    """The add and remove actions of some JSON commits, in log order, as columns, and when
    each partition they changed changed (`changes`)."""

    removes: npt.NDArray[np.bool_]  # the action is a remove (else an add)
    values: npt.NDArray[np.int64]  # its partition's values, as ids in `VALUES`
    paths: npt.NDArray[np.int64]  # its file key as a code: equal files, equal codes
    data_change: npt.NDArray[np.bool_]  # marked `dataChange: true`
    changes: ChangeTimes = field(default_factory=ChangeTimes)
    re_adds: bool = False  # some commit adds files without changing data and removes none


def read_file_actions(
    root: str | TableLocation | LogFiles, versions: Sequence[int], layout: Layout
) -> FileActions | None:
    """The add and remove actions of the JSON commits `versions` of the table at `root` (a
    path, a location, or its `LogFiles`) (other actions but metaData and protocol skipped), read
    with Arrow; None if a commit has a metaData or protocol action (a schema or protocol change:
    read the table anew), an action without partition values, or cannot be read.

    Raises:
        StorageError: the object store refused or did not answer.
    """
    from dagster_partlake.errors import StorageError

    files = root if isinstance(root, LogFiles) else LogFiles(root)
    try:
        actions = _Actions(_Vocabulary(layout))
        for table in _tagged_tables(
            actions.vocabulary, files, [(v, commit_name(v)) for v in versions], actions.changes
        ):
            actions.add(table)
        if actions.changes.meta_seen:
            return None
        return actions.collected(files)
    except StorageError:
        raise  # the store, not the log: reading the table anew would fail the same way
    except Exception:  # noqa: BLE001 - any failure here only means "read the table"
        return None


class _Actions:
    """The add and remove actions of JSON commits being followed, a parsed block at a time."""

    def __init__(self, vocabulary: _Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.changes = _Changes(vocabulary)  # the commits' clocks and metaData (`_tagged_tables`)
        # removes, partition value codes, file keys, data change, versions, new file times and
        # action stamps (`ABSENT`: none)
        self.chunks: list[tuple[Flags, list[Codes], pa.Array, Flags, Times, Times, Times]] = []

    def add(self, table: pa.Table) -> None:
        import pyarrow.compute as pc

        np, pa = self.vocabulary.np, self.vocabulary.pa
        add, remove = (_whole(table.column(k)) for k in ("add", "remove"))
        is_add, is_remove = _bools(np, pc.is_valid(add)), _bools(np, pc.is_valid(remove))
        rows = np.flatnonzero(is_add | is_remove)
        removes = is_remove[rows]
        at = _indices(pa, np, rows)
        adds, gone = add.take(at), remove.take(at)
        physical = self.vocabulary.layout.physical
        values = []
        for action, mine in ((adds, ~removes), (gone, removes)):
            found = _partition_values(action, physical)
            if found is not None and not np.all(_bools(np, pc.is_valid(found)) | ~mine):
                raise CannotReplay("an action without partition values")
            values.append(found)
        codes = [
            np.where(
                removes,
                _codes(self.vocabulary, pc.struct_field(values[1], c)),
                _codes(self.vocabulary, pc.struct_field(values[0], c)),
            )
            for c in physical
        ]
        mask = _mask(pa, np, removes)
        path = pc.if_else(mask, pc.struct_field(gone, "path"), pc.struct_field(adds, "path"))
        added_vectors, removed_vectors = _vectors(adds), _vectors(gone)
        vector = None
        if added_vectors is not None and removed_vectors is not None:
            vector = pc.if_else(mask, removed_vectors, added_vectors)
        if path.null_count:
            raise CannotReplay("an action without a path")
        change = pc.if_else(
            mask, pc.struct_field(gone, "dataChange"), pc.struct_field(adds, "dataChange")
        )
        data_change = _bools(np, change) | ~_bools(np, pc.is_valid(change))
        versions = _ints(np, _whole(table.column("_v")).take(at), np.int64).copy()
        modified = _nullable_ints(np, pc.struct_field(adds, "modificationTime"))
        deleted = _nullable_ints(np, pc.struct_field(gone, "deletionTimestamp"))
        new = ~removes
        if added_vectors is not None:
            new &= ~_bools(np, pc.is_valid(added_vectors))
        self.chunks.append(
            (
                removes,
                codes,
                _file_keys(path, vector),
                data_change,
                versions,
                np.where(new, modified, ABSENT),
                np.where(removes, deleted, modified),
            )
        )

    def collected(self, files: LogFiles) -> FileActions:
        import pyarrow.compute as pc

        np, pa = self.vocabulary.np, self.vocabulary.pa
        chunks = self.chunks

        def joined(at: int, dtype: Any) -> npt.NDArray[Any]:
            return np.concatenate([c[at] for c in chunks]) if chunks else np.zeros(0, dtype)

        removes, data_change = joined(0, bool), joined(3, bool)
        versions, new_times, stamps = (joined(i, np.int64) for i in (4, 5, 6))
        size = len(removes)
        columns = [
            np.concatenate([c[1][i] for c in chunks]) if chunks else np.zeros(0, np.int32)
            for i in range(len(self.vocabulary.partition_by))
        ]
        values = self.vocabulary.ids(columns, size)
        paths = np.zeros(0, np.int64)
        if size:
            encoded = pc.dictionary_encode(pa.concat_arrays([c[2] for c in chunks]))
            paths = _ints(np, encoded.indices, np.int32).astype(np.int64)
        self.chunks = []
        pa.default_memory_pool().release_unused()  # what Arrow's allocator kept of the parse
        quiet_adds = ~removes & ~data_change
        re_adds = any(
            np.any(quiet_adds[versions == v]) and not np.any(removes[versions == v])
            for v in np.unique(versions[quiet_adds]).tolist()
        )
        changes = self.changes.times  # their clocks known: their data-changing actions
        changes.add(versions[data_change], values[data_change], new_times[data_change])
        _stamp_commits(np, changes, versions[data_change], stamps[data_change])
        changes.file_times.update(_file_times(files, changes.versions_without_clock()))
        return FileActions(removes, values, paths, data_change, changes, re_adds)


class _Rows:
    """The live files of a replay: partition value codes and modification times of the files
    no later action names (`codes`, `times`: numpy chunks, `size` files), and the actions naming
    the others, with their position in the replay (`followed`; a checkpoint's files come first,
    at -1). `ids`: after `per_partition`, the id of each live file's partition, those of `codes`
    first, in order."""

    def __init__(self, vocabulary: _Vocabulary, named: set[str]) -> None:
        self.vocabulary = vocabulary
        np, pa = vocabulary.np, vocabulary.pa
        self.np, self.pa = np, pa
        self.named = named
        self.named_array = _string_array(pa, np, sorted(named)) if named else None
        self.codes: list[list[Codes]] = [[] for _ in vocabulary.partition_by]
        self.times: list[Times] = []
        # (position, file key, partition value codes or None for a remove, time)
        self.followed: list[tuple[int, str, tuple[int, ...] | None, int]] = []
        self.seq = 0
        self.size = 0
        self.ids: Ids | None = None
        # The checkpoint's files as one commit's adds (`_Replay._bulk_commit`): per batch their
        # positions (or -1), the codes of those at -1, their times; None: not wanted, or one
        # has a deletion vector (its time is not its file's).
        self.bulk: list[tuple[Ids, list[Codes], Times]] | None = None

    def add_checkpoint(self, files: LogFiles, path: str) -> None:
        """The add actions of a Parquet checkpoint file (classic, a part, a V2 top-level file or
        sidecar), a batch of rows at a time (reading the file whole held about four times its
        columns in memory)."""
        import pyarrow.compute as pc

        np, pa = self.np, self.pa
        physical = self.vocabulary.layout.physical
        source, children = _parquet_adds(files, path, partitioned=bool(physical))
        if source is None:
            return  # a V2 top-level file whose adds are all in its sidecars
        wanted = ["add.modificationTime"]
        if physical:
            wanted.append("add.partitionValues")
        if self.named:
            wanted.append("add.path")
        if "deletionVector" in children and (self.named or self.bulk is not None):
            wanted.append("add.deletionVector")
        for batch in source.iter_batches(_BATCH, columns=wanted, use_threads=False):
            added = batch.column(0)
            at = _true(np, pc.is_valid(added))
            times = pc.struct_field(added, "modificationTime")
            if not _bools(np, pc.is_valid(times))[at].all():
                raise CannotReplay("an add without a modification time")
            values = []
            if physical:
                mapped = pc.struct_field(added, "partitionValues")
                if not _bools(np, pc.is_valid(mapped))[at].all():
                    raise CannotReplay("an add without partition values")
                values = [codes[at] for codes in _map_columns(self.vocabulary, mapped)]
            keys = None
            if self.named:
                chosen = added.take(_indices(pa, np, at))
                vectors = None
                if "deletionVector" in children:
                    vectors = pc.struct_field(chosen, "deletionVector")
                keys = _file_keys(pc.struct_field(chosen, "path"), vectors)
            t = _ints(np, times, np.int64)[at]
            positions = self._keep(values, t, keys, None)
            if self.bulk is not None and "deletionVector" in children:
                if _bools(np, pc.is_valid(pc.struct_field(added, "deletionVector")))[at].any():
                    self.bulk = None
            if self.bulk is not None:
                followed = positions < 0
                self.bulk.append((positions, [v[followed] for v in values], t))

    def add_json(self, decoded: _Decoded, *, checkpoint: bool) -> Ids:
        """The actions of parsed JSON lines: a JSON checkpoint's adds, or a commit's adds and
        removes in log order. Returns per row the position of the file it adds among the files
        of `codes`, or -1."""
        import pyarrow.compute as pc

        np, pa = self.np, self.pa
        rows = decoded.table.num_rows
        seq = np.arange(self.seq, self.seq + rows, dtype=np.int64)
        self.seq += rows
        removes = decoded.remove
        if not checkpoint and removes.null_count < len(removes):
            at = _true(np, pc.is_valid(removes))
            for position, key in zip(
                at.tolist(), _python_keys(removes.take(_indices(pa, np, at))), strict=True
            ):
                if key not in self.named:
                    raise CannotReplay("a remove the first pass did not see")
                self.followed.append((int(seq[position]), key, None, 0))
        adds = decoded.add
        at = _true(np, pc.is_valid(adds))
        added = adds.take(_indices(pa, np, at))
        found = _partition_values(added, self.vocabulary.layout.physical)
        if found is not None and found.null_count:
            raise CannotReplay("an add without partition values")
        values = [codes[at] for codes in decoded.codes("add")]
        paths = pc.struct_field(added, "path")
        times = pc.struct_field(added, "modificationTime")
        if paths.null_count or times.null_count:
            raise CannotReplay("an add without a path or a modification time")
        keys = _file_keys(paths, _vectors(added))
        live = np.full(rows, -1, np.int64)
        live[at] = self._keep(
            values, _ints(np, times, np.int64), keys, None if checkpoint else seq[at]
        )
        return live

    def _keep(
        self, values: list[Codes], t: np.ndarray, keys: pa.Array | None, seq: np.ndarray | None
    ) -> Ids:
        """Files with these partition value codes and modification times; those some later
        action names are kept apart to be replayed in order. Returns each one's position
        among the files of `codes`, or -1 (kept apart)."""
        np = self.np
        named = None
        if keys is not None and self.named_array is not None:
            named = self._named(keys)
        positions = np.arange(self.size, self.size + len(t), dtype=np.int64)
        if keys is not None and named is not None and named.any():
            for i in np.flatnonzero(named).tolist():
                row = tuple(int(v[i]) for v in values)
                at = -1 if seq is None else int(seq[i])
                self.followed.append((at, _key(keys[i].as_py()), row, int(t[i])))
            keep = ~named
            values, t = [v[keep] for v in values], t[keep]
            positions = np.full(len(named), -1, np.int64)
            positions[keep] = np.arange(self.size, self.size + len(t), dtype=np.int64)
        for column, codes in zip(self.codes, values, strict=True):
            column.append(codes)
        self.times.append(np.array(t, np.int64))  # a copy: `t` may view an Arrow buffer
        self.size += len(t)
        return positions

    def _named(self, keys: pa.Array) -> np.ndarray:
        """Which of `keys` some later action names (a percent-encoded path names the file its
        decoded form does)."""
        import pyarrow.compute as pc

        np = self.np
        named = _bools(np, pc.is_in(keys, value_set=self.named_array))
        encoded = _true(np, pc.match_substring(keys, "%"))
        for i in encoded.tolist():
            named[i] = _key(keys[i].as_py()) in self.named
        return named

    def per_partition(self) -> tuple[IntMap[Values], IntMap[Values]]:
        """Per partition, the newest modification time and the number of live files."""
        np = self.np
        self._replay_followed()
        times = np.concatenate(self.times) if self.times else np.zeros(0, np.int64)
        if not len(times):
            return IntMap(VALUES), IntMap(VALUES)
        columns = [np.concatenate(chunks) for chunks in self.codes]
        self.codes, self.times = [], []
        ids = self.ids = self.vocabulary.ids(columns, len(times))
        del columns
        self.pa.default_memory_pool().release_unused()  # what Arrow's allocator kept of the parse
        ones = np.ones(len(times), np.int64)
        return IntMap.newest(VALUES, ids, times), IntMap.newest(VALUES, ids, ones, add=True)

    def _replay_followed(self) -> None:
        """The files some later action names that are live at the end, in log order."""
        if not self.followed:
            return
        np = self.np
        last: dict[str, tuple[tuple[int, ...] | None, int]] = {}
        for _, key, row, t in sorted(self.followed, key=lambda action: action[0]):
            last[key] = (row, t)
        live = [(row, t) for row, t in last.values() if row is not None]
        self.followed = []
        for i, column in enumerate(self.codes):
            column.append(np.array([row[i] for row, _ in live], np.int32))
        self.times.append(np.array([t for _, t in live], np.int64))


def _key(raw: str) -> str:
    """A file key with its path unquoted (a deletion vector's id may hold a '%')."""
    path, separator, vector = raw.partition("\x00")
    return unquote(path) + separator + vector


def _partition_values(actions: pa.StructArray, physical: Sequence[str]) -> pa.Array | None:
    import pyarrow.compute as pc

    return pc.struct_field(actions, "partitionValues") if physical else None


def _parquet_adds(files: LogFiles, path: str, *, partitioned: bool) -> tuple[Any, set[str]]:
    """A Parquet checkpoint file opened for its add actions (None if it has none), and the
    add columns it has."""
    import pyarrow.parquet as pq

    parts = [f"add.partitionValues.key_value.{f}" for f in ("key", "value")] if partitioned else []
    # `ParquetFile`, not `read_table` (which imports pandas); the partition values as read from
    # the file's dictionaries.
    source = pq.ParquetFile(files.parquet_source(path), read_dictionary=parts)
    schema = source.schema_arrow
    if schema.get_field_index("add") < 0:
        return None, set()
    add = schema.field("add").type
    return source, {add.field(i).name for i in range(add.num_fields)}


def _codes(vocabulary: _Vocabulary, column: pa.Array) -> Codes:
    """A column of partition values as codes of this read (null and empty: None's code)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    np = vocabulary.np
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    indices = encoded.indices
    mapping = vocabulary.mapping(encoded.dictionary)
    at = _ints(np, indices, np.int32)
    if indices.null_count:
        at = np.where(_bools(np, pc.is_valid(indices)), at, len(mapping) - 1)
    codes: Codes = mapping[at]
    return codes


def _map_columns(vocabulary: _Vocabulary, mapped: pa.MapArray) -> list[Codes]:
    """Per partition column, the codes of a checkpoint's `partitionValues` maps (the first
    entry of its physical name in each map; None where it has none)."""
    np = vocabulary.np
    offsets = _ints(np, mapped.offsets, np.int32)
    sizes = np.diff(offsets)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    # `keys` and `items` are the whole children; the offsets point into them.
    start, end = (int(offsets[0]), int(offsets[-1])) if len(offsets) else (0, 0)
    if len(mapped.keys) < end or len(mapped.items) < end:
        raise CannotReplay("partition value maps shorter than their offsets")
    keys = _codes(vocabulary, mapped.keys.slice(start, end - start))
    items = _codes(vocabulary, mapped.items.slice(start, end - start))
    found = []
    for column in vocabulary.layout.physical:
        codes = np.full(len(sizes), vocabulary.code(None), np.int32)
        at = np.flatnonzero(keys == vocabulary.code(column))
        owners, first = np.unique(owner[at], return_index=True)
        codes[owners] = items[at[first]]
        found.append(codes)
    return found


def _ints(np: ModuleType, array: pa.Array, dtype: Any) -> np.ndarray:
    """A primitive Arrow array's values as a numpy view (values under nulls unspecified)."""
    width = np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype, count=len(array), offset=array.offset * width)


def _nullable_ints(np: ModuleType, array: pa.Array) -> Times:
    """An int64 Arrow array as numpy, `ABSENT` where null."""
    import pyarrow.compute as pc

    values = _ints(np, array, np.int64)
    if array.null_count:
        return np.where(_bools(np, pc.is_valid(array)), values, ABSENT)
    return values.copy()


def _bools(np: ModuleType, array: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy (null: False)."""
    validity, data = array.buffers()[:2]

    def unpacked(buffer: pa.Buffer) -> Flags:
        bits = np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")
        return bits[array.offset : array.offset + len(array)].astype(bool)

    values = unpacked(data)
    return values & unpacked(validity) if validity is not None and array.null_count else values


def _mask(pa: ModuleType, np: ModuleType, flags: np.ndarray) -> pa.Array:
    """A numpy boolean array as an Arrow one."""
    packed = pa.py_buffer(np.packbits(flags, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(flags), [None, packed])


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
        raise CannotReplay("removed paths beyond a string array")
    data = pa.py_buffer(b"".join(encoded))
    narrow = pa.py_buffer(offsets.astype(np.int32))
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, narrow, data])


def _blocks(
    files: LogFiles,
    path: str,
    seen: _Seen | None = None,
    *,
    leading: list[bool] | None = None,
    first_only: bool = False,
) -> Iterator[bytes]:
    """The lines of one JSON file of the log (a commit, a V2 checkpoint) in blocks of about
    `_BLOCK` bytes, whole lines each, without the commitInfo lines (skipped as they are read,
    never held whole; `seen` gets their first bytes, `leading` whether each is the file's
    first line). With `first_only` (`leading` said so on an earlier read: a commit holds one
    commitInfo line, which writers put first) only the first line is looked at."""
    with files.open(path) as commit:
        carry, skipping, opening = b"", False, True  # opening: `carry` starts the file
        while chunk := commit.read(_BLOCK):
            head = 0  # where the chunk's lines start: past a commitInfo line dropped here
            if skipping:  # inside a commitInfo line: drop up to its end
                end = chunk.find(b"\n")
                if seen is not None:
                    seen.feed(chunk if end < 0 else chunk[:end])
                if end < 0:
                    continue
                head, skipping = end + 1, False
            elif opening and not carry and chunk.startswith(_COMMIT_INFO):
                end = chunk.find(b"\n")
                if end >= 0:  # the first line, ended here: dropped before the chunk is copied
                    if leading is not None:
                        leading.append(True)
                    if seen is not None:
                        seen.start(chunk[:end])
                    head, opening = end + 1, False
            cut = chunk.rfind(b"\n", head) + 1  # (a carry holds no newline)
            if cut:  # one copy of the chunk's whole lines, not two
                whole, carry = carry + memoryview(chunk)[head:cut], chunk[cut:]
            else:
                whole, carry = b"", carry + memoryview(chunk)[head:]
            if not first_only:
                spans = list(_line_starts(whole, _COMMIT_INFO))
            elif opening and whole.startswith(_COMMIT_INFO):
                spans = [(0, whole.find(b"\n"))]
            else:
                spans = []
            if leading is not None:
                leading.extend(opening and start == 0 for start, _ in spans)
            if seen is not None:
                for start, end in spans:
                    seen.start(whole[start:end])
            if carry.startswith(_COMMIT_INFO):
                if leading is not None:
                    leading.append(opening and not whole)
                if seen is not None:
                    seen.start(carry)
                carry, skipping = b"", True
            opening = opening and not whole and not skipping
            whole = _without(whole, spans)
            if whole and not whole.isspace():  # (`strip` would copy the block)
                yield whole
        if carry.startswith(_COMMIT_INFO):
            if seen is not None:
                seen.start(carry)
        elif carry and not carry.isspace():
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


def _without(data: bytes, spans: Sequence[tuple[int, int]]) -> bytes:
    """`data` without the lines at `spans` (`_line_starts`)."""
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


Meta = tuple[dict[str, dict[str, Any] | None], list[str]]


def _checkpoint_meta(files: LogFiles, path: str) -> Meta:
    """The first metaData and protocol actions of a Parquet checkpoint file, a batch of rows at
    a time until both are found (writers put them first; the columns of a million adds are
    mostly null), and the sidecar files it names (a V2 checkpoint)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found: dict[str, dict[str, Any] | None] = {"metaData": None, "protocol": None}
    source = pq.ParquetFile(files.parquet_source(path))  # not `read_table` (imports pandas)
    present = set(source.schema_arrow.names)
    kinds = [k for k in found if k in present]
    sidecars: list[str] = []
    if "sidecar" in present:
        for batch in source.iter_batches(_BATCH, columns=["sidecar.path"], use_threads=False):
            column = pc.struct_field(batch.column(0), "path")
            sidecars.extend(p for p in column.to_pylist() if p is not None)
    if kinds:
        for batch in source.iter_batches(_BATCH, columns=kinds, use_threads=False):
            for kind in kinds:
                if found[kind] is None:
                    column = batch.column(kind)
                    chosen = column.filter(pc.is_valid(column)).to_pylist()
                    found[kind] = chosen[0] if chosen else None
            if all(found[k] is not None for k in kinds):
                break
    metadata = found["metaData"]
    if metadata is not None:
        metadata["configuration"] = dict(metadata.get("configuration") or [])
    return found, sidecars


def _json_checkpoint_meta(files: LogFiles, path: str) -> Meta:
    """`_checkpoint_meta` of a JSON (V2) checkpoint file."""
    found: dict[str, dict[str, Any] | None] = {"metaData": None, "protocol": None}
    sidecars: list[str] = []
    for block in _blocks(files, path):
        for kind, action in _meta_lines(block):
            if found[kind] is None:
                found[kind] = action
        for start, end in _line_starts(block, b'{"sidecar"'):
            sidecars.append(json.loads(block[start:end])["sidecar"]["path"])
    return found, sidecars
