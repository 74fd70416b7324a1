"""A landing folder whose files are consumed once (`partlake_source(..., folder=True,
after_commit="archive" | "delete")`; SmartDataLakeBuilder's file incremental move).

A run reads the files in the folder's partition sub-folders, its commit records their paths
(`CommitRecord.consumed_files`), and only after that commit landed are the files moved to
`<folder>/_archive/<same path>` or deleted. A run that dies between its commit and the move
leaves files that its record already names: the next run of the consuming asset finishes that
move first and never reads them again. The folder's state then holds only unread files, so the
planner sees the consumer stale exactly when new files arrived.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from typing import Literal

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.metadata import plain

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


def data_files(root: str, directories: Iterable[str]) -> list[str]:
    """The data files under `directories` of the folder at `root`, relative to it, sorted."""
    found = []
    for directory in directories:
        for current, subdirs, names in os.walk(directory):
            subdirs[:] = [d for d in subdirs if not d.startswith(("_", "."))]
            for name in names:
                if not name.startswith(("_", ".")):
                    found.append(os.path.relpath(os.path.join(current, name), root))
    return sorted(found)


def finish(root: str, files: Sequence[str], mode: AfterCommit) -> int:
    """Archive or delete the consumed `files` still in the folder; returns how many moved."""
    moved = 0
    for relative in files:
        source = os.path.join(root, relative)
        if not os.path.exists(source):
            continue  # moved by an earlier run
        if mode == "delete":
            os.remove(source)
        else:
            target = os.path.join(root, ARCHIVE_DIR, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.move(source, target)
        moved += 1
    return moved
