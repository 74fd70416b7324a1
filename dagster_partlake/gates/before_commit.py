"""`GateCheck`: an asset's gates on one write, run on the batch before its commit.

The IO manager builds one per output that declares gates and hands it to the write
(`WriteTarget.check`); the write calls it on the rows it is about to commit: the staged files, or
for `merge` and `scd2` the incoming batch. Audits compare with the partitions the write replaces,
read here from the table (counts from the log, sums and means from their files). Every result
goes to `on_results` (the IO manager logs them as asset check evaluations) before a failed gate of
severity error raises `GateFailedError`: the write then commits nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.reader import open_table, read_snapshot
from dagster_partlake.delta.record import WHOLE_TABLE_ID
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.table import live_files, table_exists
from dagster_partlake.gates.evaluate import GateInput, KeyOf, evaluate, while_writing
from dagster_partlake.gates.spec import GateFailedError, GateResult, Gates

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass(frozen=True)
class GateCheck:
    """The gates of one write, with what they compare against."""

    gates: Gates
    asset_name: str
    root: str  # the asset's table
    keys: Sequence[str]  # the Dagster partition keys written
    partition_columns: Sequence[str]  # the columns of the Dagster partitions
    replaced: PartitionSelection  # the table partitions the write replaces (audits read them)
    key_of: KeyOf  # partition column values -> Dagster key
    on_results: Callable[[Sequence[GateResult]], None] | None = None

    def while_writing(self) -> Sequence[Column]:
        """The row constraints' violation counts, for the write to compute as it stages."""
        return while_writing(self.gates)

    def __call__(
        self,
        new: DataFrame,
        observed: Mapping[str, Any] | None = None,
        rows: Mapping[str, int] | None = None,
    ) -> None:
        """Evaluate the gates on `new`, the rows about to be committed; `observed` holds
        `while_writing`'s values over those rows, `rows` their count per partition key.

        Raises:
            GateFailedError: a gate of severity error failed.
            PartlakeConfigError: a gate names a column the data lacks or a bad expression.
        """
        old, old_rows = self._old(new)
        keys = list(self.keys) or [WHOLE_TABLE_ID]
        by = list(self.partition_columns)
        if not set(by) <= set(new.columns):
            # A batch without the partition columns (a decoupled merge): one group for the run.
            by = []
        whole = keys[0] if len(keys) == 1 else WHOLE_TABLE_ID
        results = evaluate(
            self.gates,
            GateInput(
                asset_name=self.asset_name,
                new=new,
                partition_columns=by,
                keys=keys,
                key_of=self.key_of if by else (lambda _values: whole),
                old=old,
                old_rows=old_rows,
                observed=observed,
                # The staged files' counts are keyed by Dagster key (the table's one key when it
                # is unpartitioned), not by the run's one group of a decoupled batch.
                rows=rows if by or not self.partition_columns else None,
            ),
        )
        if self.on_results is not None:
            self.on_results(results)
        failed = [r for r in results if r.blocks]
        if failed:
            raise GateFailedError(self.asset_name, failed)

    def _old(self, new: DataFrame) -> tuple[DataFrame | None, dict[str, int] | None]:
        """The replaced partitions' rows (only for sum and mean audits) and row counts."""
        if not self.gates.audits or not table_exists(self.root):
            return None, None
        snapshot = open_table(self.root, table_name=self.asset_name)
        old_rows: dict[str, int] = {}
        for f in live_files(snapshot.table, self.replaced):
            key = self.key_of(f.partition_values)
            old_rows[key] = old_rows.get(key, 0) + (f.num_records or 0)
        old = None
        if any(g.type in ("column_sum", "column_mean") for g in self.gates.audits):
            old = read_snapshot(new.sparkSession, snapshot, self.replaced).df
        return old, old_rows
