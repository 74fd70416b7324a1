"""`WriteSession`: one output's write, from the DataFrame to its one commit.

A session holds what every model kind's write needs, read once: the table's location, the
snapshot of the table it is based on (`delta.snapshot`: the log read once), the partition codec
between Dagster keys and table partition values, and the live files of the partitions it
replaces. The kinds (`kinds.replace`, `tracked`, `append`, `merge`, `scd2`) are strategies over a
session: each decides which files to write and which actions to commit; the session writes the
files (`delta.files`: one Spark job returning their facts) and commits through the one
transaction (`delta.transaction.commit`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.files import Extras, WrittenFiles
from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.snapshot import Snapshot, open_snapshot
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import LiveFile
from dagster_partlake.delta.transaction import Actions, Committed
from dagster_partlake.delta.writer import table_schema, write_inside
from dagster_partlake.kinds.spec import ModelKind
from dagster_partlake.metadata import PARTLAKE_WRITER, Writer
from dagster_partlake.partitions.keys import DimensionColumn, KeyCodec, selection_for_keys
from dagster_partlake.records.queries import latest_records_in
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import commit_record
from dagster_partlake.storage.location import TableLocation, as_location

# Table states at the versions writes read (`WriteSession.last_updated`), one per process.
_STATES = StateCache()

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from dagster_partlake.delta.schema import DeltaType


@dataclass(frozen=True)
class Batch:
    """The rows a write is about to commit, as its quality gates see them."""

    # Makes the rows' DataFrame (`new`), called only by a gate that must look at rows: over
    # written files, even planning Spark's read of them takes a moment.
    rows: Callable[[], DataFrame]
    columns: Sequence[str]  # the rows' columns
    # Per Dagster key: `_rows`, and the write's `Extras` counted while writing (flags as counts,
    # sums as (sum, count)); None when the write could not count them by key.
    counted: Mapping[str, Mapping[str, Any]] | None
    snapshot: Snapshot | None  # the table as the write read it (audits compare with it)
    # Per `Extras.repeats` name, the rows whose key hash another row has, over the whole write
    # (`WrittenFiles.repeated`; None: not counted).
    repeated: Mapping[str, int | None] | None = None

    @cached_property
    def new(self) -> DataFrame:
        return self.rows()


class BatchCheck(Protocol):
    """An asset's quality gates as a write calls them (`dagster_partlake.gates.GateCheck`)."""

    def extras(self) -> Extras:
        """What the write should count, row by row, while it writes the files."""
        ...

    def __call__(self, batch: Batch) -> None:
        """Check the rows about to be committed; raise to stop the commit."""
        ...


@dataclass(frozen=True)
class WriteTarget:
    """Where and how one output is written."""

    root: str | TableLocation  # the table: a path, or a location with its storage options
    asset_name: str
    kind: ModelKind
    columns: Sequence[DimensionColumn]
    column_types: Mapping[str, DeltaType]
    keys: Sequence[str]
    allow_new_columns: bool
    max_attempts: int
    # scd2: when the snapshot was taken (the run's time window start, else the run's start).
    snapshot_time: dt.datetime | None = None
    # The asset's quality gates, called on the rows about to be committed; raises to stop the
    # commit. None: the asset declares no gates.
    check: BatchCheck | None = None
    # Planned runs (partlake run, the sensor): commit nothing that another run already
    # committed from the same inputs.
    once_per_inputs: bool = False
    # An input was read incrementally (a watermark, the log, a landing folder): the run does not
    # see its partitions' whole input, so a merge never undoes earlier merges.
    incremental_inputs: bool = False
    # Who commits: partlake's writer (Spark's Python workers write the files, delta-rs commits)
    # or Spark's own Delta (`kinds.native`: the replacing kinds only).
    writer: Writer = PARTLAKE_WRITER

    @cached_property
    def location(self) -> TableLocation:
        return as_location(self.root)

    @property
    def dimension_columns(self) -> list[str]:
        return [c.column for c in self.columns]

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.kind.table_partition_by(self.dimension_columns)

    @property
    def decoupled(self) -> bool:
        return self.kind.decoupled(self.dimension_columns)

    @cached_property
    def codec(self) -> KeyCodec | None:
        return KeyCodec(self.columns, self.column_types) if self.columns else None

    def selection(self, keys: Sequence[str]) -> PartitionSelection:
        return selection_for_keys(self.columns, keys, self.column_types, asset_name=self.asset_name)

    def key_of(self, values: Mapping[str, str | None]) -> str:
        """The Dagster key of a table partition's values (one codec per target)."""
        if self.codec is None:
            return WHOLE_TABLE_ID
        return self.codec.key([values[c.column] for c in self.columns]) or WHOLE_TABLE_ID

    @property
    def partition_ids(self) -> list[str]:
        return list(self.keys) or [WHOLE_TABLE_ID]


@dataclass
class WriteSession:
    """One output's write (see the module docstring)."""

    target: WriteTarget
    snapshot: Snapshot | None  # None: the table does not exist yet
    gates_seconds: float = 0.0
    _replaced: list[LiveFile] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, target: WriteTarget) -> WriteSession:
        """A session on the table's latest version (its log read here, once)."""
        snapshot = open_snapshot(target.location, table_name=target.asset_name, must_exist=False)
        if snapshot is not None and target.writer == PARTLAKE_WRITER:
            snapshot.check_writable()  # before any Spark work (the commit checks it again)
        elif snapshot is not None:
            snapshot.check_readable()  # Spark's Delta honours what it writes; partlake reads it
        return cls(target, snapshot)

    @classmethod
    def for_table(
        cls,
        where: str | TableLocation | WriteSession,
        kind: ModelKind,
        *,
        table_name: str | None = None,
        allow_new_columns: bool = False,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> WriteSession:
        """A session writing a table outside a code location (no Dagster partitions): the
        kinds' functions take a path or location as well as a session."""
        if isinstance(where, WriteSession):
            return where
        location = as_location(where)
        target = WriteTarget(
            root=location,
            asset_name=table_name or location.name,
            kind=kind,
            columns=(),
            column_types={},
            keys=(),
            allow_new_columns=allow_new_columns,
            max_attempts=max_attempts,
        )
        return cls.open(target)

    @property
    def location(self) -> TableLocation:
        return self.target.location

    @property
    def name(self) -> str:
        return self.target.asset_name

    @property
    def replaced(self) -> PartitionSelection:
        """The table partitions the run writes (everything for a decoupled table)."""
        if self.target.decoupled:
            return PartitionSelection.everything()
        return self.target.selection([k for k in self.target.keys if k != WHOLE_TABLE_ID])

    def replaced_files(self) -> list[LiveFile]:
        """The live files of the partitions the run writes, on the session's snapshot."""
        if self._replaced is None:
            self._replaced = self.snapshot.live_files(self.replaced) if self.snapshot else []
        return self._replaced

    def last_updated(self, keys: Sequence[str]) -> dict[str, int]:
        """lastUpdated of those run partitions that have files now, as the table's state at the
        session's version has it (`delta.change_rule`: the time of the commit that changed each
        one, whichever writer made it), which is what the planner compares records with."""
        wanted = set(keys)
        times: dict[str, int] = {}
        files = [
            f for f in self.replaced_files() if self.target.key_of(f.partition_values) in wanted
        ]
        if not files or self.snapshot is None:
            return times
        state = _STATES.at_version(self.snapshot.location, self.snapshot.version, name=self.name)
        for f in files:
            key = self.target.key_of(f.partition_values)
            updated = state.time_of(f.partition_values)
            times[key] = max(times.get(key, 0), f.modification_time if updated is None else updated)
        return times

    def records(self, partition_ids: Sequence[str]) -> dict[str, CommitRecord]:
        """The newest record of a replacing write or an append that wrote each of
        `partition_ids` (`records.queries.latest_records_in`, `named`)."""
        if self.snapshot is None:
            return {}
        return latest_records_in(self.snapshot, partition_ids, named=True)

    def schema_of(self, df: DataFrame) -> pa.Schema:
        """The table's schema after writing `df` (`delta.writer.table_schema`)."""
        return table_schema(
            df,
            self.snapshot,
            self.target.partition_by,
            self.name,
            allow_new_columns=self.target.allow_new_columns,
        )

    def write(
        self,
        df: DataFrame,
        *,
        selection: PartitionSelection,
        stats_columns: Sequence[str] = (),
        extras: Extras | None = None,
    ) -> WrittenFiles:
        """Spark writes `df`'s rows as the table's new files (not visible yet); every file must
        lie inside `selection` (`delta.writer.write_inside`).

        Raises:
            SchemaMismatchError: the rows do not fit the table.
            PartitionMismatchError: a row falls outside `selection` (its files are deleted).
        """
        return write_inside(
            df,
            self.location,
            self.snapshot,
            name=self.name,
            partition_by=self.target.partition_by,
            selection=selection,
            allow_new_columns=self.target.allow_new_columns,
            stats_columns=stats_columns,
            extras=extras,
        )

    def rows_by_key(self, written: WrittenFiles) -> dict[str, int]:
        """Rows per run partition key (0 for a key that got none), from the files' facts."""
        rows: dict[str, int] = dict.fromkeys(self.target.partition_ids, 0)
        for f in written.files:
            key = self.target.key_of(f.partition_values)
            rows[key] = rows.get(key, 0) + f.num_records
        return rows

    def commit(
        self,
        actions: Callable[[Snapshot], Actions],
        record: CommitRecord,
        *,
        schema: pa.Schema | None,
        partition_ids: Sequence[str],
        app_transaction: tuple[str, int] | None = None,
        finish: Callable[[CommitRecord], CommitRecord] | None = None,
    ) -> tuple[Committed, CommitRecord]:
        """Commit through the one transaction, with `record` as the commit's payload (`finish`
        completes it once the attempt's actions are known); returns the commit and the record
        as committed (its write id, time and version). The table does not exist yet when the
        session's snapshot is None: the transaction creates it, and the session keeps it."""
        return commit_record(
            self.location,
            self.snapshot,
            actions,
            record,
            name=self.name,
            schema=schema,
            partition_by=self.target.partition_by,
            partition_ids=partition_ids,
            app_transaction=app_transaction,
            max_attempts=self.target.max_attempts,
            finish=finish,
        )
