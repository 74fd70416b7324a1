"""partlake's own reads and deletes of a location's files: a local disk or an object store.

Everything partlake reads itself (the Delta log it plans from, folder sources, its staging
leftovers) goes through a `Store`, keyed by '/'-separated names relative to the location.
`LocalStore` calls the operating system directly (a planning tick stats a file per table, so
this path stays as cheap as it was); `ArrowStore` uses pyarrow's filesystem for S3, ADLS and
GCS. Every store counts its requests by kind (`REQUESTS`), which is how tests and benchmarks
count what a plan or a write costs.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    from dagster_partlake.storage.location import TableLocation

# Requests by kind (list, get, head, delete, put) made through any store in this process.
REQUESTS: Counter[str] = Counter()
# Buckets (or containers) seen to exist, by (scheme, endpoint, bucket): an empty listing in one
# is a folder with nothing in it, not a missing bucket (asked once per process).
_BUCKETS: set[tuple[str, str | None, str]] = set()


@dataclass(frozen=True)
class Entry:
    """One file: its name relative to the listed folder, size and modification time (ms)."""

    name: str
    size: int
    mtime_ms: int


class Store(Protocol):
    """Files below one location, named relative to it with '/'."""

    def list_folder(self, folder: str = "") -> list[Entry]:
        """The files directly in `folder` (no sub-folders; [] if it does not exist)."""
        ...

    def walk(self, folder: str = "", *, skip_hidden: bool = True) -> list[Entry]:
        """Every file below `folder`, names relative to it (folders starting with `_` or `.`
        skipped when `skip_hidden`)."""
        ...

    def read(self, name: str) -> bytes:
        """The whole file. Raises FileNotFoundError."""
        ...

    def open(self, name: str) -> BinaryIO:
        """The file for streaming reads (Arrow, Parquet). Raises FileNotFoundError."""
        ...

    def head(self, name: str) -> Entry | None:
        """The file's size and time, None if it does not exist."""
        ...

    def delete(self, names: Iterable[str]) -> int:
        """Delete these files (missing ones are skipped); how many were deleted."""
        ...

    def delete_folder(self, folder: str) -> None:
        """Delete a folder and everything in it (nothing if it does not exist)."""
        ...

    def remove_empty_folders(self, folders: Iterable[str]) -> int:
        """Remove those of `folders` that are empty ('' is the location itself), deepest first;
        how many were removed. A folder holding anything stays."""
        ...

    def write(self, name: str, data: bytes) -> None:
        """Create or replace the file."""
        ...

    def copy(self, source: str, target: str) -> None:
        """Copy a file within the location (an object store has no atomic rename)."""
        ...

    def move(self, source: str, target: str) -> None:
        """Move a file within the location: a rename on disk, a copy and a delete on an
        object store."""
        ...


def _ms(stat: os.stat_result) -> int:
    """A file's modification time in whole ms, as partlake's state has always counted it."""
    return stat.st_mtime_ns // 1_000_000


class LocalStore:
    """A `Store` on the local disk, through the operating system."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _full(self, name: str) -> str:
        return os.path.join(self.root, *name.split("/")) if name else self.root

    def list_folder(self, folder: str = "") -> list[Entry]:
        REQUESTS["list"] += 1
        try:
            entries = list(os.scandir(self._full(folder)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                if entry.is_file():
                    stat = entry.stat()
                    found.append(Entry(entry.name, stat.st_size, _ms(stat)))
        return found

    def walk(self, folder: str = "", *, skip_hidden: bool = True) -> list[Entry]:
        REQUESTS["list"] += 1
        base = self._full(folder)
        found = []
        for directory, subdirs, names in os.walk(base):
            if skip_hidden:
                subdirs[:] = [d for d in subdirs if not d.startswith(("_", "."))]
            for name in names:
                full = os.path.join(directory, name)
                with contextlib.suppress(FileNotFoundError):
                    stat = os.stat(full)
                    relative = os.path.relpath(full, base).replace(os.sep, "/")
                    found.append(Entry(relative, stat.st_size, _ms(stat)))
        return found

    def read(self, name: str) -> bytes:
        REQUESTS["get"] += 1
        with open(self._full(name), "rb") as handle:
            return handle.read()

    def open(self, name: str) -> BinaryIO:
        REQUESTS["get"] += 1
        return open(self._full(name), "rb")

    def head(self, name: str) -> Entry | None:
        REQUESTS["head"] += 1
        try:
            stat = os.stat(self._full(name))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Entry(posixpath.basename(name), stat.st_size, _ms(stat))

    def delete(self, names: Iterable[str]) -> int:
        deleted = 0
        for name in names:
            REQUESTS["delete"] += 1
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._full(name))
                deleted += 1
        return deleted

    def delete_folder(self, folder: str) -> None:
        REQUESTS["delete"] += 1
        shutil.rmtree(self._full(folder), ignore_errors=True)

    def remove_empty_folders(self, folders: Iterable[str]) -> int:
        removed = 0
        for folder in sorted(set(folders), key=lambda f: -(f.count("/") + bool(f))):
            REQUESTS["delete"] += 1
            # rmdir removes only an empty folder: one another write put a file in stays.
            with contextlib.suppress(OSError):
                os.rmdir(self._full(folder))
                removed += 1
        return removed

    def write(self, name: str, data: bytes) -> None:
        REQUESTS["put"] += 1
        full = self._full(name)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as handle:
            handle.write(data)

    def copy(self, source: str, target: str) -> None:
        REQUESTS["put"] += 1
        full = self._full(target)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        shutil.copyfile(self._full(source), full)

    def move(self, source: str, target: str) -> None:
        REQUESTS["put"] += 1
        full = self._full(target)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        shutil.move(self._full(source), full)


class ArrowStore:
    """A `Store` on an object store, through a pyarrow filesystem."""

    def __init__(self, location: TableLocation) -> None:
        self.location = location
        self.fs, self.root = location.arrow()

    def _full(self, name: str) -> str:
        return posixpath.join(self.root, name) if name else self.root

    def _entries(self, folder: str, recursive: bool) -> Iterator[tuple[str, Entry]]:
        import pyarrow.fs as pafs

        REQUESTS["list"] += 1
        base = self._full(folder)
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=recursive)
        with self._errors(folder or "."):
            infos = self.fs.get_file_info(selector)
        if not infos:
            self._check_bucket(folder)
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            relative = info.path[len(base) :].lstrip("/")
            mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0
            yield relative, Entry(relative, info.size or 0, mtime)

    def list_folder(self, folder: str = "") -> list[Entry]:
        return [e for _, e in self._entries(folder, recursive=False)]

    def walk(self, folder: str = "", *, skip_hidden: bool = True) -> list[Entry]:
        found = []
        for relative, entry in self._entries(folder, recursive=True):
            folders = relative.split("/")[:-1]
            if skip_hidden and any(f.startswith(("_", ".")) for f in folders):
                continue
            found.append(entry)
        return found

    def read(self, name: str) -> bytes:
        REQUESTS["get"] += 1
        with self._errors(name), self.fs.open_input_stream(self._full(name)) as stream:
            return bytes(stream.read())

    def open(self, name: str) -> BinaryIO:
        REQUESTS["get"] += 1
        with self._errors(name):
            return self.fs.open_input_file(self._full(name))

    def head(self, name: str) -> Entry | None:
        import pyarrow.fs as pafs

        REQUESTS["head"] += 1
        with self._errors(name):
            info = self.fs.get_file_info(self._full(name))
        if info.type != pafs.FileType.File:
            return None
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0
        return Entry(posixpath.basename(name), info.size or 0, mtime)

    def delete(self, names: Iterable[str]) -> int:
        deleted = 0
        for name in names:
            REQUESTS["delete"] += 1
            with contextlib.suppress(FileNotFoundError), self._errors(name):
                self.fs.delete_file(self._full(name))
                deleted += 1
        return deleted

    def delete_folder(self, folder: str) -> None:
        REQUESTS["delete"] += 1
        with contextlib.suppress(FileNotFoundError), self._errors(folder):
            self.fs.delete_dir(self._full(folder))

    def remove_empty_folders(self, folders: Iterable[str]) -> int:
        return 0  # an object store has no folders: a key's prefix goes with its last object

    def write(self, name: str, data: bytes) -> None:
        REQUESTS["put"] += 1
        with self._errors(name), self.fs.open_output_stream(self._full(name)) as stream:
            stream.write(data)

    def copy(self, source: str, target: str) -> None:
        REQUESTS["put"] += 1
        with self._errors(source):
            self.fs.copy_file(self._full(source), self._full(target))

    def move(self, source: str, target: str) -> None:
        self.copy(source, target)
        self.delete([source])

    def _check_bucket(self, name: str) -> None:
        """Raise the clear error when the location's bucket does not exist (an object store
        lists a missing bucket as an empty folder)."""
        import pyarrow.fs as pafs

        from dagster_partlake.storage.options import endpoint

        bucket = self.root.split("/", 1)[0]
        key = (self.location.scheme, endpoint(self.location.options), bucket)
        if key in _BUCKETS:
            return
        REQUESTS["head"] += 1
        with self._errors(name or "."):
            info = self.fs.get_file_info(bucket)
        if info.type == pafs.FileType.NotFound:
            from dagster_partlake.storage.errors import storage_error

            raise storage_error(
                self.location, name, OSError(f"NoSuchBucket: the bucket {bucket} does not exist")
            )
        _BUCKETS.add(key)

    @contextlib.contextmanager
    def _errors(self, name: str) -> Iterator[None]:
        """An object store's failure as one clear `StorageError` naming the location, the
        endpoint and what to check (a missing file stays FileNotFoundError)."""
        try:
            yield
        except FileNotFoundError:
            raise
        except OSError as error:
            from dagster_partlake.storage.errors import storage_error

            raise storage_error(self.location, name, error) from error


def store_for(location: TableLocation) -> Store:
    """The store of a location."""
    if location.is_local:
        return LocalStore(location.uri)
    return ArrowStore(location)
