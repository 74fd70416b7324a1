"""Which partitions of a Delta table a read or write covers, in table terms (columns and values).

Dagster-free: `partitions.keys` translates partition keys into a `PartitionSelection`;
the reader and writer only ever see columns and values. A selection is a union of boxes; a box
constrains each partition column to a set of values or to half-open date ranges. Values are the
strings Delta stores in `partitionValues` (dates as ISO `YYYY-MM-DD`), so a selection can be
checked against the log and against Hive-style folder names without any engine.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# The folder name Hive, Spark and Delta use for a null partition value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class DateRanges:
    """Union of half-open date intervals `[start, end)`, sorted and disjoint."""

    ranges: tuple[tuple[dt.date, dt.date], ...]

    def contains(self, value: dt.date) -> bool:
        return any(start <= value < end for start, end in self.ranges)

    def describe(self) -> str:
        return " or ".join(f"[{s.isoformat()}, {e.isoformat()})" for s, e in self.ranges)


Constraint = frozenset[str] | DateRanges


@dataclass(frozen=True)
class Box:
    """Rows whose partition column values satisfy every constraint at once."""

    constraints: Mapping[str, Constraint]

    def contains(self, values: Mapping[str, str | None]) -> bool:
        for column, constraint in self.constraints.items():
            value = values.get(column)
            if value is None:
                return False
            if isinstance(constraint, DateRanges):
                try:
                    parsed = dt.date.fromisoformat(value[:10])
                except ValueError:
                    return False
                if not constraint.contains(parsed):
                    return False
            elif value not in constraint:
                return False
        return True

    def describe(self) -> str:
        parts = []
        for column, constraint in self.constraints.items():
            if isinstance(constraint, DateRanges):
                parts.append(f"{column} in {constraint.describe()}")
            else:
                shown = sorted(constraint)
                more = f", ... ({len(shown)} values)" if len(shown) > 8 else ""
                parts.append(f"{column} in {{{', '.join(shown[:8])}{more}}}")
        return " and ".join(parts)


@dataclass(frozen=True)
class PartitionSelection:
    """A union of boxes; `everything()` selects a whole table (unpartitioned or all partitions)."""

    boxes: tuple[Box, ...] | None

    @staticmethod
    def everything() -> PartitionSelection:
        return PartitionSelection(boxes=None)

    @staticmethod
    def nothing() -> PartitionSelection:
        return PartitionSelection(boxes=())

    @property
    def is_everything(self) -> bool:
        return self.boxes is None

    def contains(self, values: Mapping[str, str | None]) -> bool:
        if self.boxes is None:
            return True
        return any(box.contains(values) for box in self.boxes)

    def describe(self) -> str:
        if self.boxes is None:
            return "the whole table"
        if not self.boxes:
            return "no partition"
        shown = [box.describe() for box in self.boxes[:5]]
        more = f" or ... ({len(self.boxes)} boxes)" if len(self.boxes) > 5 else ""
        return " or ".join(f"({s})" for s in shown) + more


def format_partition_value(value: object) -> str | None:
    """The string Delta stores in `partitionValues` for a typed value read from the log."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def merge_date_ranges(ranges: Iterable[tuple[dt.date, dt.date]]) -> DateRanges:
    """Sorted, disjoint union of the given half-open ranges (adjacent ranges are joined)."""
    merged: list[list[dt.date]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return DateRanges(tuple((s, e) for s, e in merged))


def table_partition_id(values: Mapping[str, str | None]) -> str:
    """The id of a table partition partlake names when no Dagster key is known (a restore or a
    row delete outside a code location): `col=value/...`, `__all__` for an unpartitioned table."""
    if not values:
        return "__all__"  # `record.WHOLE_TABLE_ID`
    return "/".join(f"{c}={HIVE_NULL if v is None else v}" for c, v in values.items())
