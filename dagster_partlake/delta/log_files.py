"""The files of one table's Delta log, read through the table's location (`storage`).

The planning side's log reader (`log_state`, `state`) names log files relative to the
`_delta_log` folder and opens them here, so a table on an object store is read the same way as
one on disk. On disk everything is a system call on a path, as before (a planning tick stats a
file or two per table). On an object store each question is a request, so the answers are
shaped to cost few:

- whether a commit exists is asked by reading it (a missing object costs one request; a HEAD of
  a missing object costs pyarrow a HEAD and a LIST), and what was read is kept;
- a JSON file of the log is fetched once: what `open` reads is kept for the next reader (a
  replay reads a commit up to three times: for its metaData, its actions and its record), up
  to `_KEEP_BYTES` (a larger one is streamed each time);
- the log is listed at most once per `LogFiles` (`entries`), and only when the caller must know
  every file (a cold read, a follow that found a new commit);
- a commit's stamp (size, time) is one HEAD, asked once.

One `LogFiles` lives as long as one sync of a table: what it keeps is never stale for longer.
"""

from __future__ import annotations

import io
import os
import posixpath
from typing import TYPE_CHECKING, Any, BinaryIO

from dagster_partlake.layout import LOG_DIR, commit_name
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    from dagster_partlake.delta.payload import CommitPayload
    from dagster_partlake.storage.store import Entry

# A commit read to learn that it exists is kept for its reader up to this size; a larger one is
# read again, streamed (a large partlake record is most of its commit's bytes).
_KEEP_BYTES = 8 << 20


class LogFiles:
    """The `_delta_log` folder of the table at `location`: its names, stamps and contents."""

    def __init__(self, where: str | TableLocation) -> None:
        self.location = as_location(where)
        self.local = self.location.is_local
        self.folder = os.path.join(self.location.uri, LOG_DIR) if self.local else LOG_DIR
        self._kept: dict[str, bytes] = {}
        self._entries: dict[str, Entry] | None = None
        self._heads: dict[str, Entry | None] = {}

    @property
    def root(self) -> str:
        """The table's URI (a local table's absolute path)."""
        return self.location.uri

    @property
    def key(self) -> str:
        """The table's key in a cache: its URI and its store (`TableLocation.cache_key`)."""
        return self.location.cache_key

    def path(self, name: str) -> str:
        """A log file's local path, or its name below the table for the store."""
        if self.local:
            return os.path.join(self.folder, name)
        return posixpath.join(LOG_DIR, name)

    def folder_exists(self) -> bool:
        """Whether the log folder may exist: on disk, whether it does; an object store has no
        folders, so there the listing (`names`) decides."""
        return os.path.isdir(self.folder) if self.local else True

    def table_may_exist(self) -> bool:
        """Whether a table may be here now: on disk, its log folder exists; on an object store,
        its first commit does (one request; a table starts at version 0)."""
        return self.folder_exists() if self.local else self.has_commit(0)

    def names(self) -> list[str]:
        """The names of the files directly in the log folder (one listing).

        Raises:
            FileNotFoundError: a local table has no log folder.
        """
        if self.local:
            return os.listdir(self.folder)
        return list(self.entries())

    def entries(self) -> dict[str, Entry]:
        """The log folder's files by name, with size and time (listed once per instance)."""
        if self._entries is None:
            from dagster_partlake.delta.table import note_read

            note_read("list", self.location)
            self._entries = {e.name: e for e in self.location.store.list_folder(LOG_DIR)}
        return self._entries

    def versions(self) -> list[int]:
        """Versions with a JSON commit in the log, ascending (one listing)."""
        from dagster_partlake.layout import commit_version

        found = (commit_version(name) for name in (self.names() if self.local else self.entries()))
        return sorted(v for v in found if v is not None)

    def has_commit(self, version: int) -> bool:
        """Whether the log holds the JSON commit `version` (on an object store: read, and kept)."""
        name = commit_name(version)
        if self.local:
            return os.path.exists(self.path(name))
        if name in self._kept:
            return True
        if self._entries is not None and name in self._entries:
            return True
        try:
            data = self.location.store.read(self.path(name))
        except FileNotFoundError:
            return False
        if len(data) <= _KEEP_BYTES:
            self._kept[name] = data
        return True

    def stamp(self, version: int) -> list[int] | None:
        """(version, size, modification time in ns) of the commit `version`: a table deleted and
        re-created at the same place repeats version numbers, its commit files tell the two
        apart. None when the commit is not there."""
        if self.local:
            try:
                stat = os.stat(self.path(commit_name(version)))
            except FileNotFoundError:
                return None
            return [version, stat.st_size, stat.st_mtime_ns]
        entry = self._entry(commit_name(version))
        return None if entry is None else [version, entry.size, entry.mtime_ms * 1_000_000]

    def mtime_ms(self, name: str) -> int | None:
        """A log file's modification time (ms), None when it is not there."""
        if self.local:
            try:
                return os.stat(self.path(name)).st_mtime_ns // 1_000_000
            except FileNotFoundError:
                return None
        entry = self._entry(name)
        return None if entry is None else entry.mtime_ms

    def _entry(self, name: str) -> Entry | None:
        if self._entries is not None:
            return self._entries.get(name)
        if name not in self._heads:
            self._heads[name] = self.location.store.head(self.path(name))
        return self._heads[name]

    def open(self, name: str) -> BinaryIO:
        """A log file for streaming reads (a name with a '/' or a URI: a sidecar elsewhere).

        Raises:
            FileNotFoundError: it is not there.
        """
        if self.local:
            return open(self.path(name), "rb")
        kept = self._kept.get(name)
        if kept is not None:
            return io.BytesIO(kept)
        listed = self._entries.get(name) if self._entries is not None else None
        if listed is not None and listed.size > _KEEP_BYTES:
            return self.location.store.open(self._relative(name))
        data = self.location.store.read(self._relative(name))
        if len(data) <= _KEEP_BYTES:
            self._kept[name] = data
        return io.BytesIO(data)

    def parquet_source(self, name: str) -> Any:
        """What `pyarrow.parquet.ParquetFile` opens the log file `name` from: a local path (read
        by Arrow's own file system), else the store's file."""
        if self.local:
            return self.path(name)
        return self.location.store.open(self._relative(name))

    def _relative(self, name: str) -> str:
        """A log file's name below the table (a sidecar may be named by its URI)."""
        if "://" in name:
            below = self.location.relative(as_location(name))
            if below is None:
                raise FileNotFoundError(f"{name} is not inside the table {self.location}")
            return below
        return self.path(name)

    def payload(self, version: int) -> CommitPayload | None:
        """The compact partlake payload of the commit `version` (None: partlake did not write
        it, or the log no longer holds it), from what `has_commit` kept when it can."""
        from dagster_partlake.delta.payload import CommitPayload
        from dagster_partlake.delta.table import compact_commit_info, note_read, unreadable

        note_read("commit", self.location)
        try:
            with self.open(commit_name(version)) as log_file:
                info = compact_commit_info(log_file)
        except FileNotFoundError:
            return None  # `checkpoint_table` deleted it: it held no needed record
        except ValueError as error:  # a damaged commit file
            raise unreadable(self.location, error) from error
        return CommitPayload.from_commit_info(info, table_version=version, compact=True)
