"""An in-order kind's run over several partitions: its units of work, applied one after the other.

A `merge` or `scd2` asset applies its time partitions in order: day D+1 on top of day D. When its
backfill policy allows ranges, one run may hold several of them (`planning.batches` gives it the
later days an old one made stale, as a backfill of one asset applies a range). Each partition
is then its own unit of work: applied in time order (each series, the other dimensions' values,
in its own order), each its own commit with its own record, exactly as consecutive runs of one
partition each would apply them (`kinds.write.write_in_order`).

The asset gives its rows per partition:

- a mapping `{partition key: DataFrame}`, one per key of the run (a SQL model runs its query
  once per partition, `sql.definition`);
- or one DataFrame whose rows carry the table's partition columns (a table partitioned by
  every dimension): split here by those columns. A row outside every partition of the run stops
  the write before anything is committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagster import TimeWindowPartitionsDefinition

from dagster_partlake.delta.selection import DateRanges, PartitionSelection
from dagster_partlake.errors import PartitionMismatchError, PartlakeConfigError
from dagster_partlake.kinds.spec import ORDERED_KINDS
from dagster_partlake.partitions.keys import DimensionColumn, key_dimension_values

if TYPE_CHECKING:
    import datetime as dt

    from pyspark.sql import Column, DataFrame

    from dagster_partlake.kinds.session import WriteTarget

Units = list[tuple[str, "DataFrame"]]


def in_order(target: WriteTarget, output: object) -> bool:
    """Whether the output is written unit by unit: an in-order kind (`merge`, `scd2`) with one
    time dimension, over several partitions or given as a mapping of them."""
    if target.kind.kind not in ORDERED_KINDS or _time_column(target.columns) is None:
        return False
    return isinstance(output, Mapping) or len(target.keys) > 1


def unit_order(target: WriteTarget, keys: Sequence[str]) -> list[str]:
    """The run's keys in the order they apply: by time window start, then by series."""

    def when(key: str) -> tuple[dt.datetime, str]:
        return unit_time(target, key), key

    return sorted(keys, key=when)


def unit_time(target: WriteTarget, key: str) -> dt.datetime:
    """The start of partition `key`'s time window (an scd2 snapshot's time)."""
    column = _time_column(target.columns)
    assert column is not None
    time_def = column.partitions_def
    assert isinstance(time_def, TimeWindowPartitionsDefinition)
    value = key_dimension_values(target.columns, key)[column.name]
    return time_def.time_window_for_partition_key(value).start


def units_of(output: object, target: WriteTarget) -> Units:
    """The run's rows per partition key, in the order they apply.

    Raises:
        PartitionMismatchError: the mapping's keys are not the run's, or a row of a DataFrame
            lies outside every partition of the run.
        PartlakeConfigError: one DataFrame for a table not partitioned by every dimension (its
            rows cannot say their partition), or a mapping value that is not a DataFrame.
    """
    from pyspark.sql import DataFrame

    order = unit_order(target, target.keys)
    if isinstance(output, Mapping):
        return _from_mapping(output, target, order)
    assert isinstance(output, DataFrame)
    if target.decoupled:
        raise PartlakeConfigError(
            f"{target.kind.kind} asset {target.asset_name} got {len(order)} partitions in one run "
            f"({order[0]} ... {order[-1]}) and returned one DataFrame, but its table is not "
            "partitioned by every dimension, so its rows cannot say which partition they belong "
            "to. Return {partition key: DataFrame} with one DataFrame per key of "
            "context.partition_keys (applied in order, each its own commit), or remove its "
            "backfill policy so that each run applies one partition."
        )
    selections = {key: target.selection([key]) for key in order}
    everything = target.selection(order)
    outside = output.where(~selection_filter(everything)).limit(6).collect()
    if outside:
        shown = sorted({_show(row.asDict(), target) for row in outside})
        raise PartitionMismatchError(
            f"rows for table {target.asset_name} fall outside the partitions of this run: "
            f"{', '.join(shown[:5])}{' ...' if len(shown) > 5 else ''}; this run writes "
            f"{everything.describe()}. Filter the DataFrame to context.partition_keys before "
            "returning it. Nothing was committed."
        )
    return [(key, output.where(selection_filter(selections[key]))) for key in order]


def _from_mapping(output: Mapping[Any, Any], target: WriteTarget, order: list[str]) -> Units:
    from pyspark.sql import DataFrame

    given = set(output)
    if given != set(order):
        missing, extra = sorted(set(order) - given), sorted(given - set(order), key=str)
        raise PartitionMismatchError(
            f"asset {target.asset_name} returned DataFrames for the partitions "
            f"{', '.join(map(str, sorted(given, key=str))) or 'none'}, but this run writes "
            f"{', '.join(order)}"
            + (f" (missing: {', '.join(missing)})" if missing else "")
            + (f" (not in this run: {', '.join(map(str, extra))})" if extra else "")
            + ". Return one DataFrame per key of context.partition_keys. Nothing was committed."
        )
    wrong = [k for k in order if not isinstance(output[k], DataFrame)]
    if wrong:
        raise PartlakeConfigError(
            f"asset {target.asset_name} returned {type(output[wrong[0]]).__name__} for "
            f"partition {wrong[0]}; each value of the mapping must be a Spark DataFrame."
        )
    return [(key, output[key]) for key in order]


def selection_filter(selection: PartitionSelection) -> Column:
    """A Spark predicate true for the rows inside `selection` (on its partition columns)."""
    from pyspark.sql import functions as F

    if selection.boxes is None:
        return F.lit(True)
    union = F.lit(False)
    for box in selection.boxes:
        inside = F.lit(True)
        for column, constraint in box.constraints.items():
            if isinstance(constraint, DateRanges):
                ranges = F.lit(False)
                value = F.col(column)
                for start, end in constraint.ranges:
                    ranges = ranges | ((value >= F.lit(start)) & (value < F.lit(end)))
                inside = inside & ranges
            else:
                inside = inside & F.col(column).isin(sorted(constraint))
        union = union | inside
    # A null partition value lies in no box: false, not null, so that `~` finds it outside.
    return F.coalesce(union, F.lit(False))


def _time_column(columns: Sequence[DimensionColumn]) -> DimensionColumn | None:
    timed = [c for c in columns if c.is_time]
    return timed[0] if len(timed) == 1 else None


def _show(row: Mapping[str, Any], target: WriteTarget) -> str:
    return "|".join(f"{c.column}={row.get(c.column)}" for c in target.columns)
