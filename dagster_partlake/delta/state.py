"""Partition state of tables and folders: lastUpdated per partition, read without data files.

For a Delta table, the live files of the latest version give, per partition, lastUpdated = the
newest modification time of its files (our writer sets that time to the commit time). A first
read replays the log (`dagster_partlake.delta.log_state`: the newest checkpoint and the JSON
commits after it), falling back to delta-rs' snapshot for what that replay does not handle.
Later syncs follow only the new commits: appends and whole-partition replacements from the
JSON commits alone (read as columns, `log_state.read_file_actions`), other changes through
delta-rs re-aggregating just the touched partitions.
A state is held column-wise (`dagster_partlake.columnar`: int64 arrays over interned partition
values), so a table of a million partitions costs a few arrays, not a million objects.

The state is cached per process by table version; `StateCache.sync` first checks that the commit
it was read at is unchanged and whether the commit after it exists (two `stat`s), so a table
that did not move costs next to nothing, and a table re-created at the same path or a damaged
commit is read anew. A `StateCache(persist_dir=...)` also keeps each state on disk in the same
column-wise form (`marshal`, stamped with the commit file it was read at), so a new process
loads it without reading the log and follows only the commits made since.

Commits made by dagster_partlake carry a `CommitRecord` (what was written and what was read);
`TableState.commits` lists them, oldest first, for the planner's records.

A folder source (Hive-style `col=value/` sub-folders, any files) has no log: its lastUpdated per
partition is the newest file modification time, found by a walk on every sync.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from dagster_partlake.columnar.interner import VALUES
from dagster_partlake.columnar.intmap import ABSENT, NONE, IntMap
from dagster_partlake.columnar.memory import give_back
from dagster_partlake.delta import state_file
from dagster_partlake.delta.log_state import (
    TEXT_TYPES,
    FileActions,
    LogState,
    read_file_actions,
    read_log_state,
)
from dagster_partlake.delta.record import CommitRecord
from dagster_partlake.delta.schema import delta_types
from dagster_partlake.delta.table import (
    arrow_schema,
    is_delta_error,
    log_versions,
    read_record,
    table_exists,
    unreadable,
)
from dagster_partlake.errors import PartlakeError, TableUnreadableError
from dagster_partlake.layout import commit_file, log_dir
from dagster_partlake.layout import default_persist_dir as default_persist_dir

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from deltalake import DeltaTable

    from dagster_partlake.delta.schema import DeltaType

    Ids = npt.NDArray[np.int64]

Values = tuple[str | None, ...]


@dataclass(frozen=True)
class TableState:
    """Partitions with data at one version of a table (or one walk of a folder)."""

    root: str
    version: int  # Delta version; for a folder, a hash of its state
    partition_by: tuple[str, ...]
    column_types: dict[str, DeltaType]
    # Column-wise over the interned partition values (`dagster_partlake.planning.state_maps`):
    last_updated: IntMap[Values]  # partition values -> newest modification time (ms)
    touched_in: IntMap[Values] = field(default_factory=lambda: IntMap(VALUES))  # -> version
    commits: tuple[CommitRecord, ...] = ()  # partlake commit records, oldest first
    # Set when this state was derived from the state at version `follows` by its new commits:
    # the partitions whose lastUpdated or version may differ from that one's (not persisted).
    follows: int | None = field(default=None, compare=False)
    moved: Ids | None = field(default=None, compare=False)  # ids in `VALUES`
    # Live files per partition, where known: lets `sync` follow appends and partition
    # replacements from the JSON commits alone.
    file_counts: IntMap[Values] | None = field(default=None, compare=False)


class StateCache:
    """Per-process cache of `TableState`s, refreshed only when a table's version moved."""

    def __init__(self, persist_dir: str | None = None) -> None:
        self._tables: dict[str, TableState] = {}
        # The commit file each cached state was read at (version, size, mtime).
        self._stamps: dict[str, list[int] | None] = {}
        self._persist_dir = persist_dir

    def sync(
        self, root: str, *, with_commits: bool = True, name: str | None = None
    ) -> TableState | None:
        """The current state of the Delta table at `root`, or None if there is no table.

        Raises:
            TableUnreadableError: the table's log cannot be read (`name` is used in the message).
        """
        root = os.path.abspath(root)
        try:
            return self._sync(root, with_commits=with_commits)
        except TableUnreadableError as error:
            self._tables.pop(root, None)
            if name is None:
                raise
            raise unreadable(root, error, table_name=name) from error
        except Exception as error:
            if not is_delta_error(error):
                raise
            self._tables.pop(root, None)  # reload from scratch once it is repaired
            raise unreadable(root, error, table_name=name) from error

    @property
    def persist_dir(self) -> str | None:
        return self._persist_dir

    def persisted(self, root: str, *, with_commits: bool = True) -> TableState | None:
        """The state of `root` this cache holds, else the one on disk, without following the
        commits after it (None: neither; the next `sync` follows from the state returned)."""
        root = os.path.abspath(root)
        cached = self._tables.get(root)
        if cached is None and self._persist_dir is not None:
            cached = _load_state(self._persist_dir, root, with_commits=with_commits)
            if cached is not None:
                self._tables[root] = cached
                self._stamps[root] = _stamp(root, cached.version)
        return cached

    def moved(self, root: str, version: int) -> bool:
        """Whether the table at `root` may differ from its state at `version` as this cache
        holds it: not cached at that version, a commit after it, or its commit file changed."""
        root = os.path.abspath(root)
        cached = self._tables.get(root)
        if cached is None or cached.version != version:
            return True
        return _has_commit(root, version + 1) or _stamp(root, version) != self._stamps.get(root)

    def _sync(self, root: str, *, with_commits: bool) -> TableState | None:
        cached = self._tables.get(root)
        if cached is not None and _stamp(root, cached.version) != self._stamps.get(root):
            # The commit it was read at changed or vanished: the table was re-created at the same
            # path, or that commit file was damaged. Read it again from scratch.
            cached = None
            del self._tables[root]
        if cached is None and self._persist_dir is not None:
            persisted = _load_state(self._persist_dir, root, with_commits=with_commits)
            if persisted is not None:
                cached = self._tables[root] = persisted
                self._stamps[root] = _stamp(root, persisted.version)
        if cached is not None and not _has_commit(root, cached.version + 1):
            return cached
        if cached is not None:
            followed = _follow_log(root, cached, with_commits=with_commits)
            if followed is not None:  # appends and partition replacements: no delta-rs needed
                return self._keep(root, followed, with_commits=with_commits)
        if cached is None:
            if not os.path.isdir(log_dir(root)):
                return None
            # A log that replays is a table's: delta-rs (about 20 MB once imported) is asked
            # only about the others.
            replayed = read_log_state(root)
            if replayed is not None:  # the log replayed without a delta-rs snapshot
                state = _state_of_log(root, replayed, with_commits=with_commits)
                return self._keep(root, state, with_commits=with_commits)
            if not table_exists(root):
                return None
        # Imported here: a process whose states all come from the persisted cache (or whose
        # tables do not exist yet) never needs it.
        from deltalake import DeltaTable

        # The delta-rs table is not kept: its snapshot holds every live file (hundreds of bytes
        # each), while the state holds a few numbers per partition. Most syncs follow the JSON
        # commits (above); the rest load the table again.
        state = _read_state(root, DeltaTable(root), cached, with_commits=with_commits)
        return self._keep(root, state, with_commits=with_commits)

    def _keep(self, root: str, state: TableState, *, with_commits: bool) -> TableState:
        self._tables[root] = state
        self._stamps[root] = _stamp(root, state.version)
        if self._persist_dir is not None:
            _save_state(self._persist_dir, state, with_commits=with_commits)
        return state


def _stamp(root: str, version: int) -> list[int] | None:
    # A table deleted and re-created at the same path repeats version numbers: the commit file's
    # size and modification time tell the two apart.
    try:
        stat = os.stat(commit_file(root, version))
    except FileNotFoundError:
        return None
    return [version, stat.st_size, stat.st_mtime_ns]


def _state_file(persist_dir: str, root: str) -> str:
    return os.path.join(persist_dir, hashlib.sha1(root.encode()).hexdigest() + ".state")


def _load_state(persist_dir: str, root: str, *, with_commits: bool) -> TableState | None:
    """The persisted state of `root` (`dagster_partlake.delta.state_file`), if the commit it was
    read at is still in the log as it was (`sync` then reads only the commits after it)."""
    try:
        found = state_file.load(_state_file(persist_dir, root))
    except (OSError, ValueError, EOFError, TypeError, KeyError, struct.error):
        return None  # no cache, or a damaged one: read the table
    if found is None:
        return None
    header, reader = found
    try:
        if (
            header.get("root") != root
            or header.get("stamp") != _stamp(root, int(header.get("version", -1)))
            or (with_commits and not header.get("with_commits"))
        ):
            return None
        ids = state_file.values_of(header, reader)
        columns = header["columns"]
        return TableState(
            root=root,
            version=int(header["version"]),
            partition_by=tuple(header["partition_by"]),
            column_types=header["column_types"],
            last_updated=state_file.state_column(reader, columns["last_updated"], ids),
            touched_in=state_file.state_column(reader, columns["touched_in"], ids),
            commits=state_file.records_of(header, reader),
            file_counts=(
                None
                if columns["file_counts"] is None
                else state_file.state_column(reader, columns["file_counts"], ids)
            ),
        )
    except (ValueError, EOFError, TypeError, KeyError, IndexError, PartlakeError):
        return None  # a damaged cache: read the table
    finally:
        reader.close()


def _save_state(persist_dir: str, state: TableState, *, with_commits: bool) -> None:
    stamp = _stamp(state.root, state.version)
    if stamp is None:
        return
    data = state_file.dump({"root": state.root, "stamp": stamp}, state, with_commits=with_commits)
    try:
        os.makedirs(persist_dir, exist_ok=True)
        # Write then rename: a concurrent reader sees the old file or the new one, never half.
        handle, temp = tempfile.mkstemp(dir=persist_dir, suffix=".tmp")
        with os.fdopen(handle, "wb") as saved:
            saved.write(data)
        os.replace(temp, _state_file(persist_dir, state.root))
    except (OSError, ValueError):
        pass  # the cache is an optimization: a read-only home only costs the next process time


def _has_commit(root: str, version: int) -> bool:
    return os.path.exists(commit_file(root, version))


def _read_state(
    root: str, table: DeltaTable, previous: TableState | None, *, with_commits: bool
) -> TableState:
    version = table.version()
    partition_by = tuple(table.metadata().partition_columns)
    import pyarrow as pa
    import pyarrow.compute as pc

    actions = pa.table(table.get_add_actions(flatten=True))
    touched = _touched_since(root, previous, version, partition_by)
    if touched is not None and _comparable(actions, partition_by):
        # Only the partitions the new commits added or removed files in can have moved: the
        # rest of the previous state stands (a table of 100,000 partitions with one rewritten
        # costs one filtered aggregation, not 100,000 Python objects).
        assert previous is not None
        newest, touched_counts = _newest(pa, pc, actions, partition_by, touched)
        gone = [v for v in touched if v not in newest]
        last_updated = previous.last_updated.updated(newest, gone)
        counts = (
            None
            if previous.file_counts is None
            else previous.file_counts.updated(touched_counts, gone)
        )
    else:
        touched = None
        last_updated, counts = (
            IntMap.build(VALUES, m.items()) for m in _newest(pa, pc, actions, partition_by, None)
        )
    del actions
    touched_ids = None if touched is None else _values_ids(touched)
    commits: tuple[CommitRecord, ...] = ()
    if with_commits:
        commits = _partlake_commits(root, version, previous)
    return TableState(
        root=root,
        version=version,
        partition_by=partition_by,
        column_types=delta_types(arrow_schema(table)),
        last_updated=last_updated,
        touched_in=_touched_in(commits, last_updated, previous, touched_ids),
        commits=commits,
        follows=None if touched is None or previous is None else previous.version,
        moved=None if touched is None else touched_ids,
        file_counts=counts,
    )


def _state_of_log(root: str, log: LogState, *, with_commits: bool) -> TableState:
    last_updated = log.newest
    commits = _partlake_commits(root, log.version, None) if with_commits else ()
    return TableState(
        root=root,
        version=log.version,
        partition_by=log.partition_by,
        column_types=log.column_types,
        last_updated=last_updated,
        touched_in=_touched_in(commits, last_updated, None, None),
        commits=commits,
        file_counts=log.counts,
    )


def _touched_in(
    commits: Sequence[CommitRecord],
    last_updated: IntMap[Values],
    previous: TableState | None,
    touched: Ids | None,
) -> IntMap[Values]:
    """Per partition, the version of the partlake commit that set its lastUpdated (only the
    `touched` partitions, ids in `VALUES`, are looked up again when the previous state is
    followed)."""
    import numpy as np

    by_time = {c.commit_time_ms: c.table_version for c in commits if c.table_version is not None}
    if touched is None or previous is None:
        return _versions_by_time(by_time, last_updated)
    now = _at(np, last_updated, touched)  # ABSENT and NONE are no commit's time
    times = sorted(t for t in by_time if t is not None)
    found = np.zeros(len(touched), bool)
    versions = np.zeros(len(touched), np.int64)
    if times:
        keys = np.array(times, np.int64)
        at = np.minimum(np.searchsorted(keys, now), len(keys) - 1)
        found = keys[at] == now
        versions = np.array([by_time[t] for t in times], np.int64)[at]
    return previous.touched_in.updated_ids(touched[found], versions[found], touched[~found])


def _values_ids(values: set[Values]) -> Ids:
    import numpy as np

    return np.unique(np.asarray(VALUES.ids_of(list(values)), np.int64))


def _at(np: ModuleType, values: IntMap[Values], ids: Ids) -> Ids:
    """The stored value of each id (`ABSENT` where none)."""
    slots = values.slots()
    out = np.full(len(ids), ABSENT, np.int64)
    at = ids - values.base
    inside = (at >= 0) & (at < len(slots))
    out[inside] = slots[at[inside]]
    return out


def _versions_by_time(
    by_time: Mapping[int | None, int], last_updated: IntMap[Values]
) -> IntMap[Values]:
    """Per partition whose lastUpdated is a commit time of `by_time`, that commit's version."""
    import numpy as np

    times = [t for t in by_time if t is not None]
    if not times or not len(last_updated):
        return IntMap(VALUES)
    keys = np.array(times, np.int64)
    versions = np.array([by_time[t] for t in times], np.int64)
    order = np.argsort(keys)
    keys, versions = keys[order], versions[order]
    slots = last_updated.slots()
    at = np.minimum(np.searchsorted(keys, slots), len(keys) - 1)
    hit = (keys[at] == slots) & (slots != ABSENT)
    found = np.flatnonzero(hit)
    return IntMap.from_ids(VALUES, found + last_updated.base, versions[at[found]])


def _follow_log(root: str, previous: TableState, *, with_commits: bool) -> TableState | None:
    """The state after the JSON commits following `previous`, read from those commits alone
    (no delta-rs), when each touched partition was only appended to or wholly replaced; None
    when that cannot be told (another kind of action, a partition partly rewritten, unknown
    file counts): `sync` then reads the table."""
    import numpy as np

    counts = previous.file_counts
    partition_by = previous.partition_by
    if (
        counts is None
        or not partition_by
        or any(previous.column_types.get(c) not in TEXT_TYPES for c in partition_by)
    ):
        return None
    version = previous.version
    while _has_commit(root, version + 1):
        version += 1
    if version == previous.version:
        return None
    paths = [commit_file(root, v) for v in range(previous.version + 1, version + 1)]
    actions = read_file_actions(paths, partition_by)
    if actions is None:
        return None
    changes = _partition_changes(np, actions)
    followed = _followed(np, previous, counts, *changes)
    if followed is None:
        return None
    touched, newest, new_counts, gone = followed
    last_updated = previous.last_updated.updated_ids(newest[0], newest[1], gone)
    commits = _partlake_commits(root, version, previous) if with_commits else ()
    give_back()  # the parse's temporaries (`columnar.memory`)
    return replace(
        previous,
        version=version,
        last_updated=last_updated,
        touched_in=_touched_in(commits, last_updated, previous, touched),
        commits=commits,
        follows=previous.version,
        moved=touched,
        file_counts=counts.updated_ids(new_counts[0], new_counts[1], gone),
    )


def _partition_changes(np: ModuleType, actions: FileActions) -> tuple[Ids, Ids, Ids, Ids]:
    """Per partition the commits touched (ids in `VALUES`, ascending): how many files they
    added that are still there, the newest of those files' times (`ABSENT`: none), and how many
    files from before them they removed. A file is its partition and path: a remove of a file
    the same commits added takes that add back, as a replay in log order would."""
    kinds, values, paths, times = actions.removes, actions.values, actions.paths, actions.times
    touched = np.unique(values)
    pair = values * (int(paths.max()) + 1 if len(paths) else 1) + paths
    removed_pairs = np.unique(pair[kinds])
    mixed = np.isin(pair, removed_pairs) & np.isin(pair, pair[~kinds])  # added and removed
    rank = {v: i for i, v in enumerate(touched.tolist())}
    added = np.zeros(len(touched), np.int64)
    newest = np.full(len(touched), ABSENT, np.int64)
    removed = np.zeros(len(touched), np.int64)
    # Files only removed: each remove takes one file of before.
    np.add.at(removed, np.searchsorted(touched, values[kinds & ~mixed]), 1)
    # Files only added: the last add of each counts (once), with its time.
    plain = np.flatnonzero(~kinds & ~mixed)
    last = plain[len(plain) - 1 - np.unique(pair[plain][::-1], return_index=True)[1]]
    where = np.searchsorted(touched, values[last])
    np.add.at(added, where, 1)
    np.maximum.at(newest, where, times[last])
    # Files both added and removed: replayed in log order.
    state: dict[int, tuple[int, int] | None] = {}  # pair -> (partition rank, time) if there
    for i in np.flatnonzero(mixed).tolist():
        key, part = int(pair[i]), rank[int(values[i])]
        if not kinds[i]:
            state[key] = (part, int(times[i]))
        elif state.get(key) is not None:
            state[key] = None
        else:
            removed[part] += 1
    for found in state.values():
        if found is not None:
            added[found[0]] += 1
            newest[found[0]] = max(int(newest[found[0]]), found[1])
    return touched, added, newest, removed


def _followed(
    np: ModuleType,
    previous: TableState,
    counts: IntMap[Values],
    touched: Ids,
    added: Ids,
    newest: Ids,
    removed: Ids,
) -> tuple[Ids, tuple[Ids, Ids], tuple[Ids, Ids], Ids] | None:
    """(touched, (ids, newest lastUpdated), (ids, file counts), gone ids) after the changes;
    None when a partition had only some of its files replaced (which of the rest is newest
    needs the table)."""
    old = _at(np, counts, touched)
    old[(old == ABSENT) | (old == NONE)] = 0
    replaced = removed == old  # every file it had is gone (or it is new)
    appended = ~replaced & (removed == 0)  # its newest file is the newest of all
    if not np.all(replaced | appended):
        return None
    before = _at(np, previous.last_updated, touched[appended])
    if np.any(before == ABSENT):
        raise KeyError("a partition with files but no lastUpdated")
    before[before == NONE] = 0
    lately = np.maximum(before, np.where(newest[appended] == ABSENT, 0, newest[appended]))
    kept = replaced & (added > 0)
    ids = np.concatenate([touched[kept], touched[appended]])
    times = np.concatenate([newest[kept], lately])
    files = np.concatenate([added[kept], old[appended] + added[appended]])
    return touched, (ids, times), (ids, files), touched[replaced & (added == 0)]


def _newest(
    pa: ModuleType,
    pc: ModuleType,
    actions: pa.Table,
    partition_by: Sequence[str],
    only: set[Values] | None,
) -> tuple[dict[Values, int], dict[Values, int]]:
    """Newest modification time and number of live files per partition (of the `only`
    partitions)."""
    if not actions.num_rows:
        return {}, {}
    if not partition_by:
        newest = int(pc.max(actions.column("modification_time")).as_py())
        return {(): newest}, {(): actions.num_rows}
    columns = [f"partition.{c}" for c in partition_by]
    # Cast partition values to their Delta string form (dates become YYYY-MM-DD).
    as_text = pa.table(
        {
            **{
                c: pc.cast(actions.column(c), pa.string())
                if not pa.types.is_string(actions.column(c).type)
                else actions.column(c)
                for c in columns
            },
            "t": actions.column("modification_time"),
        }
    )
    if only is not None:
        keys = pc.binary_join_element_wise(
            *(as_text.column(c) for c in columns),
            _SEP,
            null_handling="replace",
            null_replacement=_NULL,
        )
        wanted = pa.array([_SEP.join(_NULL if v is None else v for v in vs) for vs in only])
        as_text = as_text.filter(pc.is_in(keys, value_set=wanted))
    grouped = as_text.group_by(columns).aggregate([("t", "max"), ("t", "count")])
    # Through a dictionary per column, so that the partitions' value tuples share one string
    # object per distinct value (a million partitions have ten thousand dates).
    values = list(zip(*(_shared_strings(pc, grouped.column(c)) for c in columns), strict=True))
    return (
        dict(zip(values, grouped.column("t_max").to_pylist(), strict=True)),
        dict(zip(values, grouped.column("t_count").to_pylist(), strict=True)),
    )


_SEP, _NULL = "\x1f", "\x00"


def _shared_strings(pc: ModuleType, column: pa.ChunkedArray) -> list[str | None]:
    encoded = pc.dictionary_encode(column.combine_chunks())
    words = encoded.dictionary.to_pylist()
    return [None if i is None else words[i] for i in encoded.indices.to_pylist()]


def _comparable(actions: pa.Table, partition_by: Sequence[str]) -> bool:
    """Whether the partition values of the log's JSON commits read as their Arrow text form
    (strings, dates and integers do; timestamps and decimals may be formatted otherwise)."""
    import pyarrow as pa

    if not actions.num_rows:
        return True
    for column in partition_by:
        kind = actions.column(f"partition.{column}").type
        if not (pa.types.is_string(kind) or pa.types.is_date32(kind) or pa.types.is_integer(kind)):
            return False
    return True


def _touched_since(
    root: str, previous: TableState | None, version: int, partition_by: Sequence[str]
) -> set[Values] | None:
    """The partitions whose files the commits after `previous` up to `version` added or
    removed, from their JSON commits; None when that cannot be told (no previous state, an
    unpartitioned table, a schema or partitioning change, a commit the log no longer has)."""
    if previous is None or not partition_by or tuple(partition_by) != previous.partition_by:
        return None
    if version < previous.version:
        return None
    touched: set[Values] = set()
    for number in range(previous.version + 1, version + 1):
        actions = _file_actions(root, number)
        if actions is None:
            return None
        for action in actions:
            if "metaData" in action:
                return None
            body = action.get("add") or action.get("remove")
            if body is None:
                continue
            values = body.get("partitionValues")
            if values is None or any(c not in values for c in partition_by):
                return None
            touched.add(tuple(values[c] or None for c in partition_by))
    return touched


def _file_actions(root: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of one JSON commit but its commitInfo (a partlake record of a large commit is
    most of its bytes, and following the log needs none of it); None if it cannot be read."""
    try:
        with open(commit_file(root, version), encoding="utf-8") as log_file:
            return [
                json.loads(line)
                for line in log_file
                if line.strip() and not line.startswith('{"commitInfo"')
            ]
    except (OSError, ValueError):
        return None


def _partlake_commits(
    root: str, version: int, previous: TableState | None
) -> tuple[CommitRecord, ...]:
    known = previous.commits if previous is not None else ()
    since = previous.version if previous is not None else -1
    # Only the commits after the cached version, read from their JSON files (exact versions;
    # commits older than the log retention are gone, and so are their records).
    new = (read_record(root, v, compact=True) for v in log_versions(root) if since < v <= version)
    return (*known, *(r for r in new if r is not None))


def folder_state(root: str, partition_by: Sequence[str]) -> TableState | None:
    """State of a folder of files partitioned as `col=value/` sub-folders (None if missing)."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        return None
    last_updated: dict[Values, int] = {}
    depth = len(partition_by)
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith(("_", "."))]
        relative = os.path.relpath(directory, root)
        segments = [] if relative == "." else relative.split(os.sep)
        if len(segments) != depth:
            continue
        newest = max(
            (
                os.stat(os.path.join(directory, f)).st_mtime_ns // 1_000_000
                for f in files
                if not f.startswith(("_", "."))
            ),
            default=None,
        )
        if newest is None:
            continue
        values: list[str | None] = []
        for segment, column in zip(segments, partition_by, strict=True):
            key, _, raw = segment.partition("=")
            if key != column:
                break
            values.append(unquote(raw))
        else:
            last_updated[tuple(values)] = newest
    digest = hashlib.sha1(repr(sorted(last_updated.items())).encode()).hexdigest()
    return TableState(
        root=root,
        version=int(digest[:12], 16),
        partition_by=tuple(partition_by),
        column_types={c: "string" for c in partition_by},
        last_updated=IntMap.build(VALUES, last_updated.items()),
    )
