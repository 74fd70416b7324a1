"""One loaded version of a Delta table: the log read once, and everything a reader or a writer
asks of it.

`open_snapshot` loads the table through its location (delta-rs reads the newest checkpoint and the
JSON commits after it); the schema, the partition columns, the live files of any selection, the
application transaction versions and the commit payloads of its partitions all come from that
one load (`Snapshot.newest_first` reads commit files newest first, each at most once). `refresh`
follows only the commits made since, as a conflicting commit's retry does. `delta.table.LOG_READS`
counts the loads and follows of this process, which is how a test shows one read of the log per
write.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.payload import CommitPayload
from dagster_partlake.delta.schema import delta_types
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.table import (
    LiveFile,
    all_live_files,
    load_table,
    log_versions,
    newest_per_id,
    note_read,
    table_exists,
    unreadable,
)
from dagster_partlake.errors import PartlakeConfigError, TableUnreadableError
from dagster_partlake.layout import LOG_DIR
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

    from dagster_partlake.delta.schema import DeltaType


@dataclass
class Snapshot:
    """A table at one version, read once. Mutable only through `refresh`."""

    location: TableLocation
    name: str
    table: DeltaTable
    _files: list[LiveFile] | None = field(default=None, repr=False)
    _stats_columns: tuple[str, ...] = ()
    _versions: list[int] | None = field(default=None, repr=False)
    _payloads: dict[int, CommitPayload | None] = field(default_factory=dict, repr=False)

    @property
    def root(self) -> str:
        """The table's URI (a local path for a local table)."""
        return self.location.uri

    @property
    def version(self) -> int:
        return self.table.version()

    @property
    def schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema(self.table.schema().to_arrow())

    @property
    def column_types(self) -> dict[str, DeltaType]:
        return delta_types(self.schema)

    @property
    def partition_by(self) -> tuple[str, ...]:
        return tuple(self.table.metadata().partition_columns)

    def live_files(
        self, selection: PartitionSelection, stats_columns: Sequence[str] = ()
    ) -> list[LiveFile]:
        """The live files whose partition values lie in `selection`, with the min/max
        statistics of `stats_columns` where the log has them (from the one load)."""
        wanted = tuple(stats_columns)
        if self._files is None or not set(wanted) <= set(self._stats_columns):
            self._files = all_live_files(self.table, wanted)
            self._stats_columns = wanted
        return [f for f in self._files if selection.contains(f.partition_values)]

    def check_writable(self) -> None:
        """Refuse to write a table whose protocol partlake's writer cannot honour
        (`delta.protocol`); reading and planning it are not affected.

        Raises:
            TableFeatureError: naming the feature and the way out.
        """
        from dagster_partlake.delta.protocol import check_table_writable

        check_table_writable(self.table, table_name=self.name, root=self.location.uri)

    def check_readable(self) -> None:
        """Refuse a table whose protocol partlake cannot read (`delta.protocol`).

        Raises:
            UnreadableTableFeatureError: naming the feature.
        """
        from dagster_partlake.delta.protocol import Protocol, check_readable

        check_readable(Protocol.of_table(self.table), table_name=self.name, root=self.location.uri)

    def transaction_version(self, app_id: str) -> int | None:
        return self.table.transaction_version(app_id)

    def refresh(self) -> None:
        """Follow the commits made since this snapshot (after a conflict); nothing else is
        read again."""
        from deltalake.exceptions import DeltaError

        note_read("follow", self.location)
        try:
            self.table.update_incremental()
        except DeltaError as error:
            raise unreadable(self.location, error, table_name=self.name) from error
        self._files = None
        self._versions = None

    # Records of partlake's commits, newest first.

    def versions(self) -> list[int]:
        """The versions with a JSON commit in the log, up to this snapshot's (one listing)."""
        if self._versions is None:
            self._versions = [v for v in log_versions(self.location) if v <= self.version]
        return self._versions

    def newest_first(self) -> Iterator[tuple[int, CommitPayload | None]]:
        """(version, payload) of each JSON commit up to the snapshot's version, newest first.
        Reads commit files directly (no listing), each once per snapshot; only when one is
        missing (a checkpoint trimmed the log) does it list the log for the ones left."""
        version = self.version
        while version >= 0:
            try:
                yield version, self.payload(version)
            except FileNotFoundError:
                for older in reversed([v for v in self.versions() if v < version]):
                    yield older, self.payload(older)
                return
            version -= 1

    def payload(self, version: int) -> CommitPayload | None:
        """The partlake payload of one commit (read once per snapshot)."""
        from dagster_partlake.delta.table import read_payload

        if version not in self._payloads:
            self._payloads[version] = read_payload(self.location, version, missing_ok=False)
        return self._payloads[version]

    def latest_payloads(
        self, partition_ids: Sequence[str], *, named: bool = False
    ) -> dict[str, CommitPayload]:
        """The newest payload that wrote each of `partition_ids` (absent: none did).

        `named`: only payloads of commits that named their partitions in application
        transactions (`partition_txn_id`: replacing writes and appends; not merges, whose
        transactions name table partitions). The snapshot then knows when each id was last
        written without reading a commit: an id never named is absent at once, and the search
        stops at the oldest of those times."""
        wanted = set(partition_ids)
        floor = None
        if named:
            times = {pid: self.transaction_version(partition_txn_id(pid)) for pid in wanted}
            wanted = {pid for pid, t in times.items() if t is not None}
            floor = min((t for t in times.values() if t is not None), default=None)
        if not wanted:
            return {}
        payloads = (payload for _, payload in self.newest_first())
        return newest_per_id(payloads, wanted, floor_ms=floor)

    def last_updated(self, selection: PartitionSelection, key_of: Any) -> dict[str, int]:
        """lastUpdated per partition id (`key_of` maps a file's partition values to it) of
        the partitions in `selection` that have files."""
        times: dict[str, int] = {}
        for f in self.live_files(selection):
            key = key_of(f.partition_values)
            times[key] = max(times.get(key, 0), f.modification_time)
        return times


def partition_txn_id(partition_id: str) -> str:
    """The application transaction id by which a commit names one partition it writes."""
    return f"partlake:{partition_id}"


def open_snapshot(
    where: str | TableLocation,
    *,
    table_name: str | None = None,
    version: int | None = None,
    timestamp: dt.datetime | str | None = None,
    must_exist: bool = True,
) -> Snapshot | None:
    """The table at `where`, at its latest version or the one asked for (time travel).

    Raises:
        PartlakeConfigError: there is no table and `must_exist`.
        PartlakeError: the version or timestamp is not in the table's log.
        TableUnreadableError: its log cannot be read.
    """
    location = as_location(where)
    name = table_name or location.name
    if version is None and timestamp is None:
        table = _latest(location, name)
        if table is not None:
            return Snapshot(location, name, table)
    elif table_exists(location):
        from dagster_partlake.delta.history import load_version, resolve_version

        wanted = resolve_version(location, version=version, timestamp=timestamp, table_name=name)
        table = (
            load_table(location, table_name=name)
            if wanted is None
            else load_version(location, wanted, table_name=name)
        )
        return Snapshot(location, name, table)
    if not must_exist:
        return None
    raise PartlakeConfigError(
        f"there is no Delta table for {name} at {location}; materialize it first (or, for a "
        "source, run the system that writes it)."
    )


def _latest(location: TableLocation, name: str) -> DeltaTable | None:
    """The table's latest version, None when there is no table (one load of the log)."""
    from deltalake.exceptions import TableNotFoundError

    if location.is_local and not os.path.isdir(os.path.join(location.uri, LOG_DIR)):
        return None
    try:
        return load_table(location, table_name=name)
    except TableUnreadableError as error:
        if isinstance(error.__cause__, TableNotFoundError):
            return None
        raise
