"""A table's earlier versions: finding and loading them.

`resolve_version` / `load_version` time-travel: a version number, or a timestamp resolved by the
commits' own `commitInfo.timestamp` (delta-rs `load_as_version` goes by the commit files'
modification times, which a copy of the table changes, and loads version 0 for a time before the
table existed).

Bringing partitions back to an earlier version is maintenance's (`maintenance.restore`); the
commits that changed some partitions, with what their records say, are
`dagster_partlake.records.history.table_history`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.table import (
    commit_info,
    delta_table,
    load_table,
    log_versions,
    table_exists,
)
from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.layout import LOG_DIR, commit_name
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    from deltalake import DeltaTable


PartitionValues = Mapping[str, str | None]


def resolve_version(
    root: str | TableLocation,
    *,
    version: int | None = None,
    timestamp: dt.datetime | str | None = None,
    table_name: str | None = None,
) -> int | None:
    """The table version a read asks for: `version` itself (checked to exist), the newest
    version committed at or before `timestamp`, or None (the latest) when neither is given.

    A timestamp without a time zone is UTC. A timestamp after the latest commit gives the latest
    version.

    Raises:
        ValueError: both `version` and `timestamp` are given, or the timestamp is not ISO 8601.
        PartlakeError: the version does not exist, or the timestamp is before the oldest commit
            the log still has.
    """
    if version is not None and timestamp is not None:
        raise ValueError("give a version or a timestamp to read, not both")
    root = as_location(root)
    name = table_name or root.name
    if version is not None:
        _check_version(root, version, name)
        return version
    if timestamp is None:
        return None
    moment = _as_utc(timestamp)
    wanted_ms = int(moment.timestamp() * 1000)
    versions = log_versions(root)
    found = None
    for candidate in versions:
        if commit_timestamp_ms(root, candidate, commit_info(root, candidate)) > wanted_ms:
            break
        found = candidate
    if found is None:
        oldest = (
            f"version {versions[0]}, committed "
            f"{_iso(commit_timestamp_ms(root, versions[0], commit_info(root, versions[0])))}"
            if versions
            else "no commit"
        )
        raise PartlakeError(
            f"table {name} has no version at {_iso(wanted_ms)}: the oldest commit its log still "
            f"has is {oldest}; read at that time or later, or without a timestamp."
        )
    return found


def load_version(
    root: str | TableLocation, version: int, *, table_name: str | None = None
) -> DeltaTable:
    """The table at `root` as of `version`.

    Raises:
        PartlakeError: the version does not exist or its log entries were removed.
        TableUnreadableError: the log cannot be read.
    """
    root = as_location(root)
    name = table_name or root.name
    _check_version(root, version, name)
    try:
        return delta_table(root, version=version)
    except PartlakeError as error:
        versions = log_versions(root)
        kept = f"{versions[0]} to {versions[-1]}" if versions else "none"
        raise PartlakeError(
            f"version {version} of table {name} can no longer be loaded ({error}); the log keeps "
            f"the commits of versions {kept} (older ones were removed by checkpointing); choose "
            "one of those."
        ) from error


def require_table(root: str | TableLocation, name: str) -> None:
    """Raise the clear error when there is no table at `root`."""
    if not table_exists(root):
        raise PartlakeConfigError(
            f"there is no Delta table for {name} at {as_location(root)}; materialize it first."
        )


def _check_version(root: TableLocation, version: int, name: str) -> None:
    require_table(root, name)
    latest = load_table(root, table_name=name).version()
    if not 0 <= version <= latest:
        raise PartlakeError(
            f"table {name} has no version {version}: its versions are 0 to {latest}."
        )


def _as_utc(timestamp: dt.datetime | str) -> dt.datetime:
    if isinstance(timestamp, str):
        try:
            timestamp = dt.datetime.fromisoformat(timestamp)
        except ValueError as error:
            raise ValueError(
                f"timestamp {timestamp!r} is not ISO 8601 (e.g. '2024-01-02T00:00:00Z')"
            ) from error
    if timestamp.tzinfo is None:
        return timestamp.replace(tzinfo=dt.UTC)
    return timestamp


def _iso(ms: int) -> str:
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def commit_timestamp_ms(root: str | TableLocation, version: int, info: Mapping[str, Any]) -> int:
    """A commit's time: its commitInfo's `timestamp`, else its file's modification time."""
    if isinstance(info.get("timestamp"), int):
        return int(info["timestamp"])
    # A commit without commitInfo: its file's modification time, as Delta readers do.
    entry = as_location(root).store.head(f"{LOG_DIR}/{commit_name(version)}")
    return entry.mtime_ms if entry is not None else 0
