"""A landing folder whose files are consumed once (`partlake_source(..., folder=True,
after_commit="archive" | "delete")`; SmartDataLakeBuilder's file incremental move).

A run reads the files in the folder's partition sub-folders, its commit records their paths
(`CommitRecord.consumed_files`), and only after that commit landed are the files moved to
`<folder>/_archive/<same path>` or deleted. A run that dies between its commit and the move
leaves files that its record already names: the next run of the consuming asset finishes that
move first and never reads them again. The folder's state then holds only unread files, so the
planner sees the consumer stale exactly when new files arrived. The folder is a location
(`dagster_partlake.storage`): on disk or on an object store.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from typing import Literal

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.metadata import plain
from dagster_partlake.storage.location import TableLocation, as_location

AFTER_COMMIT_KEY = "partlake/after_commit"
ARCHIVE_DIR = "_archive"
AfterCommit = Literal["archive", "delete"]


def after_commit_of(value: object, *, asset_name: str) -> AfterCommit | None:
    """The validated `after_commit` of a folder source.

    Raises:
        PartlakeConfigError: not "archive", "delete" or None.
    """
    value = plain(value)
    if value is None or value in ("archive", "delete"):
        return value
    raise PartlakeConfigError(
        f"{AFTER_COMMIT_KEY} of source {asset_name} is {value!r}; use 'archive' (move consumed "
        "files to <folder>/_archive/), 'delete', or None (keep them)."
    )


def data_files(root: str | TableLocation, directories: Iterable[str]) -> list[str]:
    """The data files under `directories` (names relative to the folder at `root`; '' is the
    folder itself) of the folder at `root`, relative to it ('/'-separated), sorted. Folders and
    files starting with `_` or `.` are skipped (`_archive`)."""
    store = as_location(root).store
    found = []
    for directory in directories:
        base = directory.strip("/")
        for entry in store.walk(base, skip_hidden=True):
            if not posixpath.basename(entry.name).startswith(("_", ".")):
                found.append(f"{base}/{entry.name}" if base else entry.name)
    return sorted(found)


def finish(root: str | TableLocation, files: Sequence[str], mode: AfterCommit) -> int:
    """Archive or delete the consumed `files` (relative names) still in the folder at `root`;
    returns how many moved. On an object store an archive is a copy and a delete: a file seen
    in both places is finished by the next run, which deletes it."""
    store = as_location(root).store
    moved = 0
    for relative in files:
        if store.head(relative) is None:
            continue  # moved by an earlier run
        if mode == "delete":
            store.delete([relative])
        else:
            store.move(relative, f"{ARCHIVE_DIR}/{relative}")
        moved += 1
    return moved
