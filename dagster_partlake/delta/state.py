"""Partition state of tables and folders: lastUpdated per partition, read without data files.

For a Delta table, a partition's lastUpdated is the time of the newest commit that changed its
live files (`dagster_partlake.delta.change_rule`: for partlake's commits, the record's commit
time). A first read replays the log (`dagster_partlake.delta.log_state`: the newest checkpoint,
the JSON commits after it, and the older JSON commits the log still holds, for when each
partition changed). Later syncs follow only the new commits, from their JSON alone (read as
columns, `log_state.read_file_actions`): each partition they changed gets the time of the newest
of them, and its live file count moves by what they added and removed. A sync reads the table
anew after a schema or protocol change, and when the log no longer holds the commit that gave
some partition its time (a cold read would then give it its files' time: the two must agree).
A state is held column-wise (`dagster_partlake.columnar`: int64 arrays over interned partition
values), so a table of a million partitions costs a few arrays, not a million objects.

The state is cached per process by table version; `StateCache.sync` first checks that the commit
it was read at is unchanged and whether the commit after it exists (two `stat`s; on an object
store two HEAD requests, `delta.log_files`), so a table that did not move costs next to nothing,
and a table re-created at the same path or a damaged commit is read anew. A table is named by
its location (`dagster_partlake.storage`: a path or a URI and its storage options); the cache
keys it by its URI and its store (`TableLocation.cache_key`: the same URI on another S3 server
is another table). A `StateCache(persist_dir=...)` also keeps each state on disk in the same
column-wise form (`marshal`, stamped with the commit file it was read at), so a new process
loads it without reading the log and follows only the commits made since.

Commits made by dagster_partlake carry a payload (`delta.payload.CommitPayload`: which
partitions they wrote and when, the rest opaque here); `TableState.commits` lists them, oldest
first, for the planner's records (`CommitRecord.from_payload`).

A folder source (Hive-style `col=value/` sub-folders, any files) has no log: its lastUpdated per
partition is the newest file modification time, found by a walk (one listing on an object
store) on every sync.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING
from urllib.parse import unquote

from dagster_partlake.columnar.interner import VALUES
from dagster_partlake.columnar.intmap import ABSENT, NONE, IntMap
from dagster_partlake.columnar.memory import give_back
from dagster_partlake.delta import state_file
from dagster_partlake.delta.log_files import LogFiles
from dagster_partlake.delta.log_state import (
    FileActions,
    Layout,
    LogState,
    read_file_actions,
    read_log_state,
)
from dagster_partlake.delta.payload import CommitPayload
from dagster_partlake.delta.table import is_delta_error, unreadable
from dagster_partlake.errors import (
    PartlakeError,
    StorageError,
    TableUnreadableError,
    UnreadableTableFeatureError,
)
from dagster_partlake.layout import default_persist_dir as default_persist_dir
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt

    from dagster_partlake.delta.schema import DeltaType

    Ids = npt.NDArray[np.int64]

Values = tuple[str | None, ...]
Where = str | TableLocation


@dataclass(frozen=True)
class TableState:
    """Partitions with data at one version of a table (or one walk of a folder)."""

    root: str  # the table's URI (a local table's absolute path)
    version: int  # Delta version; for a folder, a hash of its state
    partition_by: tuple[str, ...]
    column_types: dict[str, DeltaType]
    # Column-wise over the interned partition values (`dagster_partlake.planning.state_maps`):
    last_updated: IntMap[Values]  # partition values -> newest modification time (ms)
    touched_in: IntMap[Values] = field(default_factory=lambda: IntMap(VALUES))  # -> version
    commits: tuple[CommitPayload, ...] = ()  # partlake commit payloads, oldest first
    # Set when this state was derived from the state at version `follows` by its new commits:
    # the partitions whose lastUpdated or version may differ from that one's (not persisted).
    follows: int | None = field(default=None, compare=False)
    moved: Ids | None = field(default=None, compare=False)  # ids in `VALUES`
    # Live files per partition, where known: lets `sync` follow new commits from their JSON.
    file_counts: IntMap[Values] | None = field(default=None, compare=False)
    # The version of the commit that gave each partition its lastUpdated (absent: no JSON
    # commit of the log changed it; its files' time); None where not known (a folder).
    changed_in: IntMap[Values] | None = None
    # The names partition values are keyed by in the log (column mapping); None: partition_by.
    physical: tuple[str, ...] | None = None

    @property
    def layout(self) -> Layout:
        """How the table's files are partitioned (`log_state.Layout`)."""
        return Layout(self.partition_by, self.physical or self.partition_by, self.column_types)

    def time_of(self, partition_values: Mapping[str, str | None]) -> int | None:
        """The lastUpdated of the table partition a live file's partition values name (as the
        log or delta-rs spells them); None: the state has no such partition."""
        from dagster_partlake.delta.partition_text import normalized

        key = tuple(
            normalized([partition_values.get(c)], self.column_types.get(c, "string"))[0]
            for c in self.partition_by
        )
        return self.last_updated.get(key)


class StateCache:
    """Per-process cache of `TableState`s, refreshed only when a table's version moved."""

    def __init__(self, persist_dir: str | None = None) -> None:
        self._tables: dict[str, TableState] = {}
        # The commit file each cached state was read at (version, size, mtime).
        self._stamps: dict[str, list[int] | None] = {}
        self._persist_dir = persist_dir

    def sync(
        self, root: Where, *, with_commits: bool = True, name: str | None = None
    ) -> TableState | None:
        """The current state of the Delta table at `root` (a path or a location), or None if
        there is no table.

        Raises:
            TableUnreadableError: the table's log cannot be read (`name` is used in the message).
            StorageError: the object store refused or did not answer (naming the table).
        """
        files = LogFiles(root)
        key = files.key
        try:
            return self._sync(files, with_commits=with_commits, name=name)
        except UnreadableTableFeatureError:
            self._tables.pop(key, None)
            raise  # the table is valid: its message names the feature, not a damage
        except StorageError as error:
            raise _named(error, name) from error.__cause__  # the cache stays: nothing moved
        except TableUnreadableError as error:
            self._tables.pop(key, None)
            if name is None:
                raise
            raise unreadable(files.location, error, table_name=name) from error
        except Exception as error:
            if not is_delta_error(error):
                raise
            self._tables.pop(key, None)  # reload from scratch once it is repaired
            raise unreadable(files.location, error, table_name=name) from error

    @property
    def persist_dir(self) -> str | None:
        return self._persist_dir

    def persisted(self, root: Where, *, with_commits: bool = True) -> TableState | None:
        """The state of `root` this cache holds, else the one on disk, without following the
        commits after it (None: neither; the next `sync` follows from the state returned)."""
        files = LogFiles(root)
        key = files.key
        cached = self._tables.get(key)
        if cached is None and self._persist_dir is not None:
            cached = _load_state(self._persist_dir, files, with_commits=with_commits)
            if cached is not None:
                self._tables[key] = cached
                self._stamps[key] = files.stamp(cached.version)
        return cached

    def moved(self, root: Where, version: int) -> bool:
        """Whether the table at `root` may differ from its state at `version` as this cache
        holds it: not cached at that version, a commit after it, or its commit file changed."""
        files = LogFiles(root)
        cached = self._tables.get(files.key)
        if cached is None or cached.version != version:
            return True
        return files.has_commit(version + 1) or files.stamp(version) != self._stamps.get(files.key)

    def at_version(self, root: Where, version: int, *, name: str | None = None) -> TableState:
        """The state of the table at `root` at `version`: the synced one when the table is
        still there, else replayed up to that version (commit records not read).

        Raises:
            TableUnreadableError: that version cannot be read (see `sync`).
        """
        current = self.sync(root, with_commits=False, name=name)
        if current is not None and current.version == version:
            return current
        files = LogFiles(root)
        replayed = read_log_state(files, version=version, table_name=name)
        if replayed is None:
            raise TableUnreadableError(f"there is no Delta table at {files.root}")
        return _state_of_log(files, replayed, with_commits=False)

    def _sync(self, files: LogFiles, *, with_commits: bool, name: str | None) -> TableState | None:
        root = files.key
        cached = self._tables.get(root)
        if cached is not None and files.stamp(cached.version) != self._stamps.get(root):
            # The commit it was read at changed or vanished: the table was re-created at the same
            # path, or that commit file was damaged. Read it again from scratch.
            cached = None
            del self._tables[root]
        if cached is None and self._persist_dir is not None:
            persisted = _load_state(self._persist_dir, files, with_commits=with_commits)
            if persisted is not None:
                cached = self._tables[root] = persisted
                self._stamps[root] = files.stamp(persisted.version)
        if cached is not None and not files.has_commit(cached.version + 1):
            return cached
        if cached is not None:
            followed = _follow_log(files, cached, with_commits=with_commits)
            if followed is not None:  # the new commits alone
                return self._keep(files, followed, with_commits=with_commits)
        if not files.folder_exists():
            return None
        replayed = read_log_state(files, table_name=name)
        if replayed is None:
            return None  # a log folder without a commit: no table yet
        state = _state_of_log(files, replayed, with_commits=with_commits, previous=cached)
        return self._keep(files, state, with_commits=with_commits)

    def _keep(
        self, files: LogFiles | Where, state: TableState, *, with_commits: bool
    ) -> TableState:
        files = files if isinstance(files, LogFiles) else LogFiles(files)
        self._tables[files.key] = state
        self._stamps[files.key] = files.stamp(state.version)
        if self._persist_dir is not None:
            _save_state(self._persist_dir, files, state, with_commits=with_commits)
        return state


def _named(error: StorageError, name: str | None) -> StorageError:
    """`error` with the table's asset name in front (once)."""
    text = str(error)
    if name is None or text.startswith(f"table {name}: "):
        return error
    return StorageError(f"table {name}: {text}")


def _state_file(persist_dir: str, key: str) -> str:
    return os.path.join(persist_dir, hashlib.sha1(key.encode()).hexdigest() + ".state")


def _load_state(persist_dir: str, files: LogFiles, *, with_commits: bool) -> TableState | None:
    """The persisted state of the table (`dagster_partlake.delta.state_file`), if the commit it
    was read at is still in the log as it was (`sync` then reads only the commits after it)."""
    root, key = files.root, files.key
    try:
        found = state_file.load(_state_file(persist_dir, key))
    except (OSError, ValueError, EOFError, TypeError, KeyError, struct.error):
        return None  # no cache, or a damaged one: read the table
    if found is None:
        return None
    header, reader = found
    try:
        if (
            header.get("root") != key
            or header.get("stamp") != files.stamp(int(header.get("version", -1)))
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
            file_counts=state_file.optional_column(reader, columns["file_counts"], ids),
            changed_in=state_file.optional_column(reader, columns["changed_in"], ids),
            physical=None if header["physical"] is None else tuple(header["physical"]),
        )
    except (ValueError, EOFError, TypeError, KeyError, IndexError, PartlakeError):
        return None  # a damaged cache: read the table
    finally:
        reader.close()


def _save_state(
    persist_dir: str, files: LogFiles, state: TableState, *, with_commits: bool
) -> None:
    stamp = files.stamp(state.version)
    if stamp is None:
        return
    # Keyed by the table's store too: the same URI on another server is another table.
    data = state_file.dump({"root": files.key, "stamp": stamp}, state, with_commits=with_commits)
    try:
        os.makedirs(persist_dir, exist_ok=True)
        # Write then rename: a concurrent reader sees the old file or the new one, never half.
        handle, temp = tempfile.mkstemp(dir=persist_dir, suffix=".tmp")
        with os.fdopen(handle, "wb") as saved:
            saved.write(data)
        os.replace(temp, _state_file(persist_dir, files.key))
    except (OSError, ValueError):
        pass  # the cache is an optimization: a read-only home only costs the next process time


def _state_of_log(
    files: LogFiles | Where,
    log: LogState,
    *,
    with_commits: bool,
    previous: TableState | None = None,
) -> TableState:
    """The state of a replayed log (`previous`: a state of the same table, whose records are
    kept)."""
    files = files if isinstance(files, LogFiles) else LogFiles(files)
    last_updated = log.newest
    commits = _partlake_commits(files, log.commits, log.version, previous) if with_commits else ()
    return TableState(
        root=files.root,
        version=log.version,
        partition_by=log.partition_by,
        column_types=log.column_types,
        last_updated=last_updated,
        touched_in=_touched_in(commits, last_updated, None, None),
        commits=commits,
        file_counts=log.counts,
        changed_in=log.changed_in,
        physical=log.layout.physical if log.layout.physical != log.partition_by else None,
    )


def _touched_in(
    commits: Sequence[CommitPayload],
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


def _follow_log(files: LogFiles, previous: TableState, *, with_commits: bool) -> TableState | None:
    """The state after the JSON commits following `previous`, read from those commits alone;
    None when that cannot be told (a schema or protocol change, a commit re-adding files, file
    counts or change versions not known, a partition whose time a cold read would give
    otherwise): `sync` then reads the table anew."""
    import numpy as np

    counts, changed_in = previous.file_counts, previous.changed_in
    if counts is None or changed_in is None:
        return None
    version = _newest_after(files, previous.version)
    if version == previous.version:
        return None
    new = range(previous.version + 1, version + 1)
    actions = read_file_actions(files, new, previous.layout)
    if actions is None or actions.re_adds:
        return None
    followed = _followed(np, previous, counts, changed_in, actions)
    if followed is None or not _still_logged(np, files, followed[3]):
        return None
    touched, last_updated, file_counts, changed = followed
    commits = _partlake_commits(files, new, version, previous) if with_commits else ()
    give_back()  # the parse's temporaries (`columnar.memory`)
    return replace(
        previous,
        version=version,
        last_updated=last_updated,
        touched_in=_touched_in(commits, last_updated, previous, touched),
        commits=commits,
        follows=previous.version,
        moved=touched,
        file_counts=file_counts,
        changed_in=changed,
    )


def _followed(
    np: ModuleType,
    previous: TableState,
    counts: IntMap[Values],
    changed_in: IntMap[Values],
    actions: FileActions,
) -> tuple[Ids, IntMap[Values], IntMap[Values], IntMap[Values]] | None:
    """(touched partition ids, lastUpdated, file counts, change versions) after the actions;
    None when a partition they touch without changing data has no time a cold read would give
    it too (a new one, or one whose time is its files')."""
    touched, added, removed = _partition_changes(np, actions)
    before = _at(np, counts, touched)
    before[(before == ABSENT) | (before == NONE)] = 0
    after = before + added - removed
    if np.any(after < 0):
        return None  # removes of files the state does not know: read the table
    changed, versions, times = actions.changes.newest_changes()
    quiet = np.setdiff1d(touched, changed)  # touched by maintenance (dataChange false) only
    if len(quiet):
        known = _at(np, counts, quiet) != ABSENT
        if np.any(~known & (after[np.searchsorted(touched, quiet)] > 0)):
            return None  # a partition that appears without a data change: its files' time
        if np.any(known & (_at(np, changed_in, quiet) < 0)):
            return None  # its time is its files' newest, and its files changed
    gone = touched[after == 0]
    alive = np.isin(changed, touched[after > 0])
    return (
        touched,
        previous.last_updated.updated_ids(changed[alive], times[alive], gone),
        counts.updated_ids(touched[after > 0], after[after > 0], gone),
        changed_in.updated_ids(changed[alive], versions[alive], gone),
    )


def _newest_after(files: LogFiles, version: int) -> int:
    """The newest version of the JSON commits that follow `version` without a gap. On disk each
    next commit is probed (a `stat`); on an object store the next one is read and, if it is
    there, the log is listed once (the listing `_still_logged` needs anyway) instead of probing
    each later commit."""
    if files.local or not files.has_commit(version + 1):
        while files.has_commit(version + 1):
            version += 1
        return version
    held = set(files.versions())
    version += 1
    while version + 1 in held:
        version += 1
    return version


def _still_logged(np: ModuleType, files: LogFiles, changed_in: IntMap[Values]) -> bool:
    """Whether the log still holds the JSON commit of every change a partition's time comes
    from (else a cold read would take those partitions' times from their files)."""
    versions = changed_in.slots()
    versions = versions[(versions != ABSENT) & (versions != NONE)]
    if not len(versions):
        return True
    held = np.asarray(files.versions(), np.int64)
    if not len(held):
        return False
    oldest = int(versions.min())
    if oldest >= held[0] and len(held) == held[-1] - held[0] + 1:
        return True  # no gap: everything from the oldest commit on is there
    return bool(np.all(np.isin(np.unique(versions), held)))


def _partition_changes(np: ModuleType, actions: FileActions) -> tuple[Ids, Ids, Ids]:
    """Per partition the commits touched (ids in `VALUES`, ascending): how many files they
    added that are still there, and how many files from before them they removed. A file is
    its path plus its deletion vector: a remove of a file the same commits added takes that add
    back, as a replay in log order would."""
    kinds, values, paths = actions.removes, actions.values, actions.paths
    touched = np.unique(values)
    pair = values * (int(paths.max()) + 1 if len(paths) else 1) + paths
    removed_pairs = np.unique(pair[kinds])
    mixed = np.isin(pair, removed_pairs) & np.isin(pair, pair[~kinds])  # added and removed
    rank = {v: i for i, v in enumerate(touched.tolist())}
    added = np.zeros(len(touched), np.int64)
    removed = np.zeros(len(touched), np.int64)
    # Files only removed: each remove takes one file of before.
    np.add.at(removed, np.searchsorted(touched, values[kinds & ~mixed]), 1)
    # Files only added: the last add of each counts (once).
    plain = np.flatnonzero(~kinds & ~mixed)
    last = plain[len(plain) - 1 - np.unique(pair[plain][::-1], return_index=True)[1]]
    np.add.at(added, np.searchsorted(touched, values[last]), 1)
    # Files both added and removed: replayed in log order.
    state: dict[int, int | None] = {}  # pair -> partition rank if there
    for i in np.flatnonzero(mixed).tolist():
        key, part = int(pair[i]), rank[int(values[i])]
        if not kinds[i]:
            state[key] = part
        elif state.get(key) is not None:
            state[key] = None
        else:
            removed[part] += 1
    for found in state.values():
        if found is not None:
            added[found] += 1
    return touched, added, removed


def _partlake_commits(
    files: LogFiles, held: Iterable[int], version: int, previous: TableState | None
) -> tuple[CommitPayload, ...]:
    """The payloads of `previous` and of the JSON commits `held` (the versions the log holds)
    after it, up to `version`."""
    known = previous.commits if previous is not None else ()
    since = previous.version if previous is not None else -1
    # Only the commits after the cached version, read from their JSON files (exact versions;
    # commits older than the log retention are gone, and so are their records).
    new = (files.payload(v) for v in held if since < v <= version)
    return (*known, *(r for r in new if r is not None))


def folder_state(root: Where, partition_by: Sequence[str]) -> TableState | None:
    """State of a folder of files partitioned as `col=value/` sub-folders (a path or a
    location; None if missing): one walk of its files (one listing on an object store)."""
    location = as_location(root)
    if location.is_local and not os.path.isdir(location.uri):
        return None
    entries = location.store.walk(skip_hidden=True)
    if not location.is_local and not entries:
        return None  # an object store has no empty folders: nothing is there
    last_updated: dict[Values, int] = {}
    depth = len(partition_by)
    for entry in entries:
        *segments, file_name = entry.name.split("/")
        if len(segments) != depth or file_name.startswith(("_", ".")):
            continue
        values: list[str | None] = []
        for segment, column in zip(segments, partition_by, strict=True):
            key, _, raw = segment.partition("=")
            if key != column:
                break
            values.append(unquote(raw))
        else:
            found = tuple(values)
            last_updated[found] = max(last_updated.get(found, entry.mtime_ms), entry.mtime_ms)
    digest = hashlib.sha1(repr(sorted(last_updated.items())).encode()).hexdigest()
    return TableState(
        root=location.uri,
        version=int(digest[:12], 16),
        partition_by=tuple(partition_by),
        column_types={c: "string" for c in partition_by},
        last_updated=IntMap.build(VALUES, last_updated.items()),
    )
