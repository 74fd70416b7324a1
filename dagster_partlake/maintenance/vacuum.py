"""Vacuum: delete the files of a table that no live version references.

Files removed by a commit more than the retention ago, files a write put under the table and
never committed (a writer killed before its commit: invisible to every reader until now), and
folders `_partlake_staging/<id>/` that older partlake versions staged writes in. delta-rs'
`vacuum` finds the first two (its `full` mode lists every file under the table); nothing here
makes a partition look changed (delta-rs records the vacuum as two commits without data).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from dagster_partlake.delta.defaults import DEFAULT_RETENTION_HOURS
from dagster_partlake.delta.payload import MAINTENANCE_KEY
from dagster_partlake.delta.reader import open_table
from dagster_partlake.delta.transaction import post_commit
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.layout import STAGING_DIR
from dagster_partlake.storage.location import TableLocation, as_location


@dataclass(frozen=True)
class VacuumResult:
    """What `vacuum_table` removed (or, with `dry_run`, would remove) from one table."""

    root: str
    retention_hours: int
    dry_run: bool
    files: tuple[str, ...]  # data files, relative to the table root
    staging_dirs: tuple[str, ...]  # abandoned `_partlake_staging/<id>` folders
    bytes: int  # of all of them

    @property
    def num_files(self) -> int:
        return len(self.files)


def vacuum_table(
    root: str | TableLocation,
    *,
    retention_hours: int = DEFAULT_RETENTION_HOURS,
    force: bool = False,
    dry_run: bool = False,
    table_name: str | None = None,
) -> VacuumResult:
    """Delete the files of the table that no live version references and that are older than
    the retention: files removed by a commit more than `retention_hours` ago, files never
    committed (written or moved into the table but not in the log), and abandoned
    `_partlake_staging/<uuid>/` folders.

    Args:
        root: path or location of the Delta table.
        retention_hours: keep anything removed or written within this many hours, so readers of
            recent versions and writers between writing and committing keep their files.
        force: allow a retention below 1 hour (a writer still committing may lose its files).
        dry_run: only report what would be deleted.
        table_name: name used in messages (default: the folder name).

    Raises:
        PartlakeConfigError: retention below 1 hour without `force`, or no table at `root`.
    """
    if retention_hours < 0:
        raise ValueError(f"retention_hours must not be negative, got {retention_hours}")
    location = as_location(root)
    name = table_name or location.name
    if retention_hours < 1 and not force:
        raise PartlakeConfigError(
            f"a vacuum retention of {retention_hours} hours for table {name} would delete files "
            "that a writer has written but not committed yet; use at least 1 hour (default "
            f"{DEFAULT_RETENTION_HOURS}), or pass force=True (`partlake maintain vacuum --force`) "
            "when no writer is running."
        )
    table = open_table(location, table_name=name).table
    # delta-rs's `full` mode also finds files that were never committed (by file time); without
    # it only removed files are found. It skips `_` and `.` folders, so staging is ours.
    kwargs: dict[str, Any] = dict(
        retention_hours=int(retention_hours), enforce_retention_duration=False, full=True
    )
    # delta-rs also lists tombstoned files an earlier vacuum already deleted (as absolute
    # paths): only files still on disk count.
    store = location.store
    sizes = {
        path: entry.size
        for path in map(lambda p: _relative(location, p), table.vacuum(dry_run=True, **kwargs))
        if (entry := store.head(path)) is not None
    }
    if dry_run or not sizes:
        files = sorted(sizes)
    else:
        metadata = {"operation": "vacuum", "retention_hours": int(retention_hours)}
        from deltalake import CommitProperties

        deleted = table.vacuum(
            dry_run=False,
            commit_properties=CommitProperties(custom_metadata={MAINTENANCE_KEY: metadata}),
            post_commithook_properties=post_commit(),
            **kwargs,
        )
        files = sorted(
            path
            for path in map(lambda p: _relative(location, p), deleted)
            if path in sizes and store.head(path) is None
        )
    staging = _old_staging(location, time.time() - retention_hours * 3600)
    if not dry_run:
        for folder, _ in staging:
            store.delete_folder(folder)
    return VacuumResult(
        root=location.uri,
        retention_hours=int(retention_hours),
        dry_run=dry_run,
        files=tuple(files),
        staging_dirs=tuple(folder for folder, _ in staging),
        bytes=sum(sizes.get(path, 0) for path in files) + sum(size for _, size in staging),
    )


def _relative(location: TableLocation, path: str) -> str:
    """A path delta-rs reports (relative, or a URI under the table) relative to the table."""
    if "://" not in path and not path.startswith("/"):
        return path
    below = location.relative(TableLocation.parse(path))
    return below if below is not None else path


def _old_staging(location: TableLocation, cutoff: float) -> list[tuple[str, int]]:
    """Folders `_partlake_staging/<id>/` (left by partlake versions that staged writes there)
    with nothing modified since `cutoff`, and their size in bytes."""
    found: dict[str, tuple[float, int]] = {}
    for entry in location.store.walk(STAGING_DIR, skip_hidden=False):
        folder = f"{STAGING_DIR}/{entry.name.split('/')[0]}"
        newest, size = found.get(folder, (0.0, 0))
        found[folder] = (max(newest, entry.mtime_ms / 1000), size + entry.size)
    return [(f, size) for f, (newest, size) in sorted(found.items()) if newest < cutoff]
