"""`GateCheck`: an asset's gates on one write, run on the batch before its commit.

The IO manager builds one per output that declares gates and hands it to the write
(`WriteTarget.check`); the write calls it on the rows it is about to commit (`kinds.Batch`): the
written files with what the write job counted for the gates (`extras`), or for `merge` and
`scd2` the incoming batch. Audits compare with the partitions the write replaces, as the write's
snapshot of the table holds them (counts from the log, sums and means from their files). Every
result goes to `on_results` (the IO manager logs them as asset check evaluations) before a failed
gate of
severity error raises `GateFailedError`: the write then commits nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from dagster_partlake.delta.files import Extras
from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.delta.reader import read_files
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.gates.evaluate import GateInput, KeyOf, evaluate, extras, repeats
from dagster_partlake.gates.spec import GateFailedError, GateResult, Gates
from dagster_partlake.kinds.session import Batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class GateCheck:
    """The gates of one write, with what they compare against."""

    gates: Gates
    asset_name: str
    keys: Sequence[str]  # the Dagster partition keys written
    partition_columns: Sequence[str]  # the columns of the Dagster partitions
    replaced: PartitionSelection  # the table partitions the write replaces (audits read them)
    key_of: KeyOf  # partition column values -> Dagster key
    on_results: Callable[[Sequence[GateResult]], None] | None = None

    def extras(self) -> Extras:
        """What the write counts for the gates while it writes the rows."""
        return self._extras

    @cached_property
    def _extras(self) -> Extras:
        # Made once per write (its Spark expressions cost a few hundredths of a second): the
        # write asks for them, and so does the check of what the write counted.
        flags, sums = extras(self.gates)
        return Extras(flags=flags, sums=sums, repeats=repeats(self.gates))

    def __call__(self, batch: Batch) -> None:
        """Evaluate the gates on the rows about to be committed.

        Raises:
            GateFailedError: a gate of severity error failed.
            PartlakeConfigError: a gate names a column the data lacks or a bad expression.
        """
        old, old_rows = self._old(batch)
        keys = list(self.keys) or [WHOLE_TABLE_ID]
        by = list(self.partition_columns)
        if not set(by) <= set(batch.columns):
            # A batch without the partition columns (a decoupled merge): one group for the run.
            by = []
        whole = keys[0] if len(keys) == 1 else WHOLE_TABLE_ID
        results = evaluate(
            self.gates,
            GateInput(
                asset_name=self.asset_name,
                new=lambda: batch.new,
                partition_columns=by,
                keys=keys,
                key_of=self.key_of if by else (lambda _values: whole),
                old=old,
                old_rows=old_rows,
                counted=batch.counted,
                repeated=batch.repeated,
            ),
        )
        if self.on_results is not None:
            self.on_results(results)
        failed = [r for r in results if r.blocks]
        if failed:
            raise GateFailedError(self.asset_name, failed)

    def _old(self, batch: Batch) -> tuple[DataFrame | None, dict[str, int] | None]:
        """The replaced partitions' rows (only for sum and mean audits) and row counts."""
        snapshot = batch.snapshot
        if not self.gates.audits or snapshot is None:
            return None, None
        replaced = snapshot.live_files(self.replaced)
        old_rows: dict[str, int] = {}
        for f in replaced:
            key = self.key_of(f.partition_values)
            old_rows[key] = old_rows.get(key, 0) + (f.num_records or 0)
        old = None
        if any(g.type in ("column_sum", "column_mean") for g in self.gates.audits):
            old = read_files(batch.new.sparkSession, snapshot, replaced).df
        return old, old_rows
