"""Dagster partition keys <-> table partition columns and values. Pure: no Spark, no storage.

Each partition dimension of an asset is stored in one table column, named like the dimension
unless the asset's `partition_expr` metadata says otherwise (a string for a single dimension, a
dict `{dimension: column}` for multi-partitions; the name follows Dagster's database IO managers).
Static and dynamic dimensions store the key itself. A time-window dimension stored in a `date`
column covers the dates inside its window (a monthly key covers its first day..last day, so a
monthly table holds the month's first day and a daily table each day); stored in a `string`
column it holds the key itself (e.g. '2024-01-02').

A combined dimension (`partitions.dimensions.partlake_partitions`: Dagster stops at two
dimensions, so static dimensions beyond that share one) is named by its parts joined with "/"
(`region/product`), and each of its keys joins one value per part the same way (`eu/shoes`).
Each part is a table column of its own (named like the part, or as `partition_expr` says for
that part), so a date x region x product asset has the three partition columns date, region and
product, and its key `2024-01-02|eu/shoes` holds the partition (date=2024-01-02, region=eu,
product=shoes).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster import (
    DynamicPartitionsDefinition,
    MultiPartitionsDefinition,
    PartitionsDefinition,
    StaticPartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from dagster_partlake.compat import partition_loading_context
from dagster_partlake.delta.selection import (
    Box,
    Constraint,
    PartitionSelection,
    merge_date_ranges,
)
from dagster_partlake.errors import PartitionMismatchError, PartlakeConfigError
from dagster_partlake.metadata import PARTITION_EXPR_KEY, plain

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from dagster import DagsterInstance

    from dagster_partlake.delta.schema import DeltaType

# Dagster joins a multi-partition key's values with "|", in alphabetical order of the dimension
# names (not definition order): date x region -> '2024-01-02|eu'.
_SEPARATOR = "|"
# A combined dimension joins its parts' names and values with "/": 'region/product', 'eu/shoes'.
COMBINED = "/"


def combined_parts(name: str, partitions_def: PartitionsDefinition) -> tuple[str, ...] | None:
    """The parts of a combined static dimension ('region/product' -> ('region', 'product')), or
    None for a dimension of its own. A static dimension is combined when its name and every key
    have the same number (two or more) of non-empty '/'-separated parts."""
    if COMBINED not in name or not isinstance(partitions_def, StaticPartitionsDefinition):
        return None
    parts = tuple(name.split(COMBINED))
    if not all(parts):
        return None
    for key in partitions_def.get_partition_keys():
        values = key.split(COMBINED)
        if len(values) != len(parts) or not all(values):
            return None
    return parts


def key_dimensions(partitions_def: MultiPartitionsDefinition) -> list[str]:
    """The dimension names in the order their values appear in a multi-partition key."""
    return sorted(d.name for d in partitions_def.partitions_defs)


def multi_key(values: Sequence[str]) -> str:
    """The multi-partition key of values given in `key_dimensions` order."""
    return _SEPARATOR.join(values)


def key_values(key: str) -> list[str]:
    """The values of a multi-partition key, in `key_dimensions` order."""
    return key.split(_SEPARATOR)


def all_keys(
    partitions_def: PartitionsDefinition, store: DagsterInstance | None = None
) -> list[str]:
    """Every partition key that exists now (dynamic keys from `store`, a Dagster instance)."""
    with partition_loading_context(store):
        if not isinstance(partitions_def, MultiPartitionsDefinition):
            return list(partitions_def.get_partition_keys())
        # The product of the dimensions' keys, without building Dagster's MultiPartitionKey
        # objects (seconds at tens of thousands of keys).
        dims = {d.name: d.partitions_def for d in partitions_def.partitions_defs}
        per_dim = [dims[name].get_partition_keys() for name in key_dimensions(partitions_def)]
        return [multi_key(combo) for combo in itertools.product(*per_dim)]


def is_dynamic(partitions_def: PartitionsDefinition | None) -> bool:
    """Whether any dimension is dynamic (its keys live in the Dagster instance)."""
    if isinstance(partitions_def, MultiPartitionsDefinition):
        return any(is_dynamic(d.partitions_def) for d in partitions_def.partitions_defs)
    return isinstance(partitions_def, DynamicPartitionsDefinition)


def partitions_horizon(
    partitions_def: PartitionsDefinition, store: DagsterInstance | None = None
) -> str:
    """A short text that changes whenever the set of existing partitions grows: the newest time
    window of each time dimension and the dynamic keys of each dynamic dimension."""
    dims = (
        [d.partitions_def for d in partitions_def.partitions_defs]
        if isinstance(partitions_def, MultiPartitionsDefinition)
        else [partitions_def]
    )
    parts = []
    for dim in dims:
        if isinstance(dim, TimeWindowPartitionsDefinition):
            parts.append(dim.get_last_partition_key() or "")
        elif isinstance(dim, DynamicPartitionsDefinition):
            keys = all_keys(dim, store) if store is not None else []
            digest = hashlib.sha1("\n".join(keys).encode()).hexdigest()[:12]
            parts.append(f"{len(keys)}:{digest}")
    return ";".join(parts)


@dataclass(frozen=True)
class DimensionColumn:
    """One partition dimension (or one part of a combined dimension) and the table column that
    stores it."""

    dimension: str  # Dagster dimension name; for a single-dimension asset, the column name
    column: str
    partitions_def: PartitionsDefinition
    # A part of a combined dimension ('region/product'): its position and its name ('product').
    part: int | None = None
    part_name: str | None = None

    @property
    def is_time(self) -> bool:
        return isinstance(self.partitions_def, TimeWindowPartitionsDefinition)

    @property
    def name(self) -> str:
        """The dimension this column stores, as a user names it ('product', not
        'region/product')."""
        return self.part_name or self.dimension

    def value_of(self, dimension_key: str) -> str:
        """This column's value in its dimension's key ('shoes' of 'eu/shoes')."""
        return dimension_key if self.part is None else dimension_key.split(COMBINED)[self.part]


def dimension_columns(
    partitions_def: PartitionsDefinition | None,
    metadata: Mapping[str, Any] | None,
    *,
    asset_name: str,
) -> list[DimensionColumn]:
    """The partition columns of an asset's table, in folder order (definition order).

    Raises:
        PartlakeConfigError: `partition_expr` does not fit the partitions definition.
    """
    if partitions_def is None:
        return []
    # A source's metadata reaches code wrapped by Dagster (`JsonMetadataValue`, ...).
    expr = plain((metadata or {}).get(PARTITION_EXPR_KEY))
    if isinstance(partitions_def, MultiPartitionsDefinition):
        return _multi_columns(partitions_def, expr, asset_name)
    if expr is not None and not isinstance(expr, str):
        raise PartlakeConfigError(
            f"metadata partition_expr of asset {asset_name} is {expr!r}; a single-dimension "
            "asset needs the column name as a string."
        )
    column = expr or _default_column(partitions_def)
    return [DimensionColumn(column, column, partitions_def)]


def _multi_columns(
    partitions_def: MultiPartitionsDefinition, expr: object, asset_name: str
) -> list[DimensionColumn]:
    """One column per dimension, and per part of a combined dimension."""
    dims = [(d.name, d.partitions_def) for d in partitions_def.partitions_defs]
    parts = {name: combined_parts(name, dim) for name, dim in dims}
    names = [p for name, _ in dims for p in (parts[name] or (name,))]
    if expr is not None and not isinstance(expr, Mapping):
        raise PartlakeConfigError(
            f"metadata partition_expr of asset {asset_name} is {expr!r}; a multi-partitioned "
            f"asset needs a dict from dimension to column, e.g. {{'{names[0]}': 'my_column'}}."
        )
    columns = dict(expr or {})
    unknown = sorted(set(columns) - set(names))
    if unknown:
        raise PartlakeConfigError(
            f"metadata partition_expr of asset {asset_name} names unknown dimension(s) "
            f"{', '.join(unknown)}; its dimensions are {', '.join(names)}."
        )
    found = []
    for name, dim in dims:
        own = parts[name]
        if own is None:
            found.append(DimensionColumn(name, str(columns.get(name, name)), dim))
            continue
        found.extend(
            DimensionColumn(name, str(columns.get(part, part)), dim, part=i, part_name=part)
            for i, part in enumerate(own)
        )
    clashing = sorted({c.column for c in found if [x.column for x in found].count(c.column) > 1})
    if clashing:
        raise PartlakeConfigError(
            f"asset {asset_name} stores several partition dimensions in column(s) "
            f"{', '.join(clashing)}; give each dimension its own column in partition_expr."
        )
    return found


def _default_column(partitions_def: PartitionsDefinition) -> str:
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return "date"
    if isinstance(partitions_def, DynamicPartitionsDefinition) and partitions_def.name:
        return partitions_def.name
    return "partition"


def selection_for_keys(
    columns: Sequence[DimensionColumn],
    keys: Sequence[str],
    column_types: Mapping[str, DeltaType],
    *,
    asset_name: str,
) -> PartitionSelection:
    """The table partitions that hold the given partition keys.

    Args:
        columns: from `dimension_columns`; empty for an unpartitioned asset.
        keys: partition keys of the asset (already validated).
        column_types: Delta type of each table column (from the data or the table schema).
        asset_name: used in error messages.

    Raises:
        PartlakeConfigError: a partition column is missing or has a type that cannot hold it.
    """
    if not columns:
        return PartitionSelection.everything()
    for col in columns:
        if col.column not in column_types:
            raise PartlakeConfigError(
                f"asset {asset_name} stores partition dimension '{col.dimension}' in column "
                f"'{col.column}', which its data does not have (columns: "
                f"{', '.join(column_types)}); add the column or set metadata partition_expr."
            )
        kind = column_types[col.column]
        allowed = ("date", "string") if col.is_time else ("string",)
        if kind not in allowed:
            raise PartlakeConfigError(
                f"column '{col.column}' of asset {asset_name} is {kind}, but partition dimension "
                f"'{col.dimension}' needs a {' or '.join(allowed)} column; cast it in the asset."
            )
    split = [_split_key(columns, key) for key in dict.fromkeys(keys)]
    per_column = [sorted({values[i] for values in split}) for i in range(len(columns))]
    if len(split) == _product(len(v) for v in per_column):
        # The usual case (one key, or a Dagster partition range): one box.
        whole = {
            c.column: _constraint(c, v, column_types)
            for c, v in zip(columns, per_column, strict=True)
        }
        return PartitionSelection((Box(whole),))
    # Irregular key sets: one box per combination of non-time values.
    time_index = next((i for i, c in enumerate(columns) if c.is_time), None)
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for values in split:
        rest = tuple(v for i, v in enumerate(values) if i != time_index)
        groups[rest].append(values[time_index] if time_index is not None else "")
    boxes = []
    for rest, time_values in sorted(groups.items()):
        constraints: dict[str, Constraint] = {}
        others = iter(rest)
        for i, col in enumerate(columns):
            if i == time_index:
                constraints[col.column] = _constraint(col, time_values, column_types)
            else:
                constraints[col.column] = frozenset({next(others)})
        boxes.append(Box(constraints))
    return PartitionSelection(tuple(boxes))


def _split_key(columns: Sequence[DimensionColumn], key: str) -> tuple[str, ...]:
    if len(columns) == 1:
        return (key,)
    names = sorted({c.dimension for c in columns})
    by_dimension = dict(zip(names, key_values(key), strict=True))
    return tuple(c.value_of(by_dimension[c.dimension]) for c in columns)


def key_dimension_values(columns: Sequence[DimensionColumn], key: str) -> dict[str, str]:
    """Every dimension's value in a partition key, parts of combined dimensions apart:
    '2024-01-02|eu/shoes' -> {'date': '2024-01-02', 'region': 'eu', 'product': 'shoes'}."""
    return {c.name: value for c, value in zip(columns, _split_key(columns, key), strict=True)}


def _constraint(
    column: DimensionColumn, values: Sequence[str], column_types: Mapping[str, DeltaType]
) -> Constraint:
    if column.is_time and column_types[column.column] == "date":
        time_def = column.partitions_def
        assert isinstance(time_def, TimeWindowPartitionsDefinition)
        return merge_date_ranges(_date_range(time_def, key, column.column) for key in values)
    return frozenset(values)


def _date_range(
    time_def: TimeWindowPartitionsDefinition, key: str, column: str
) -> tuple[dt.date, dt.date]:
    window = time_def.time_window_for_partition_key(key)
    start, end = window.start, window.end
    if start.time() != dt.time(0) or end.time() != dt.time(0):
        raise PartlakeConfigError(
            f"partition '{key}' is the window {start.isoformat()}..{end.isoformat()}, which does "
            f"not cover whole days, so it cannot be stored in date column '{column}'; store it in "
            "a string column (the partition key) instead."
        )
    return start.date(), end.date()


def _product(sizes: Iterable[int]) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


def validate_keys(
    partitions_def: PartitionsDefinition | None,
    keys: Sequence[str],
    *,
    asset_name: str,
    dynamic_partitions_store: DagsterInstance | None = None,
) -> None:
    """Raise PartitionMismatchError if any key is not a partition of the asset."""
    if partitions_def is None:
        if keys:
            raise PartitionMismatchError(
                f"asset {asset_name} is not partitioned, but partition key(s) "
                f"{', '.join(map(repr, keys[:3]))} were given; run it without a partition."
            )
        return
    with partition_loading_context(dynamic_partitions_store):
        valid = partitions_def.filter_valid_partition_keys(set(keys))
    invalid = [key for key in keys if key not in valid]
    if invalid:
        shown = ", ".join(repr(k) for k in invalid[:3])
        raise PartitionMismatchError(
            f"partition key {shown} is not in the partitions of asset {asset_name} "
            f"({describe_partitions(partitions_def)})."
        )


def describe_partitions(partitions_def: PartitionsDefinition) -> str:
    """Short human description, e.g. 'date: daily from 2024-01-01; region: eu, us, apac'."""
    if isinstance(partitions_def, MultiPartitionsDefinition):
        return "; ".join(
            f"{d.name}: {describe_partitions(d.partitions_def)}"
            for d in partitions_def.partitions_defs
        )
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        cadence = {
            "0 0 * * *": "daily",
            "0 * * * *": "hourly",
            "0 0 1 * *": "monthly",
            "0 0 * * 0": "weekly",
        }.get(partitions_def.cron_schedule, f"cron '{partitions_def.cron_schedule}'")
        start = partitions_def.start.strftime(partitions_def.fmt)
        end = f" to {partitions_def.end.strftime(partitions_def.fmt)}" if partitions_def.end else ""
        return f"{cadence} from {start}{end}"
    if isinstance(partitions_def, StaticPartitionsDefinition):
        keys = partitions_def.get_partition_keys()
        more = f", ... ({len(keys)} keys)" if len(keys) > 10 else ""
        return ", ".join(keys[:10]) + more
    if isinstance(partitions_def, DynamicPartitionsDefinition):
        return f"dynamic partitions '{partitions_def.name}'"
    return type(partitions_def).__name__


def _daily_utc_days(partitions_def: PartitionsDefinition) -> bool:
    """Daily windows from midnight UTC keyed by their date: a date column's value is its key."""
    return (
        isinstance(partitions_def, TimeWindowPartitionsDefinition)
        and partitions_def.cron_schedule == "0 0 * * *"
        and str(partitions_def.timezone) == "UTC"
        and partitions_def.fmt == "%Y-%m-%d"
    )


class KeyCodec:
    """Table partition values -> the Dagster partition key holding them, memoized per value.

    Values are Delta partition strings in column order (`dimension_columns`). A date in a
    time-window dimension maps to the window containing it (2024-01-17 in a monthly table ->
    '2024-01'). Returns None for values outside every partition (e.g. before the start date).
    """

    def __init__(
        self, columns: Sequence[DimensionColumn], column_types: Mapping[str, DeltaType]
    ) -> None:
        self.columns = list(columns)
        self._is_date = [column_types.get(c.column) == "date" for c in columns]
        self._static = [
            frozenset(c.value_of(k) for k in c.partitions_def.get_partition_keys())
            if isinstance(c.partitions_def, StaticPartitionsDefinition)
            else None
            for c in columns
        ]
        # Per dimension (alphabetical, as in multi keys), its columns in part order.
        names = sorted({c.dimension for c in columns})
        self._groups = [
            sorted(
                (i for i, c in enumerate(columns) if c.dimension == name),
                key=lambda i: columns[i].part or 0,
            )
            for name in names
        ]
        # A combined dimension's keys: not every combination of its parts' values need be one.
        self._combined = [
            frozenset(columns[group[0]].partitions_def.get_partition_keys())
            if columns[group[0]].part is not None
            else None
            for group in self._groups
        ]
        self._cache: list[dict[str | None, str | None]] = [{} for _ in columns]
        # Per time dimension, its partition keys, once known (`_know_windows`); and whether a
        # value that is one of them is its own key (`_dimension_key` would give it back).
        self._windows: list[frozenset[str] | None] = [None for _ in columns]
        self._same_key = [
            not self._is_date[i] or _daily_utc_days(c.partitions_def) for i, c in enumerate(columns)
        ]

    def key(self, values: Sequence[str | None]) -> str | None:
        if not self.columns:
            return None
        parts = []
        for i in range(len(self.columns)):
            part = self._dimension_key(i, values[i])
            if part is None:
                return None
            parts.append(part)
        return self._joined(parts)

    def _joined(self, parts: Sequence[str]) -> str | None:
        """The key of the dimension keys of one partition's columns (column order)."""
        if len(parts) == 1:
            return parts[0]
        keys = []
        for group, combined in zip(self._groups, self._combined, strict=True):
            key = COMBINED.join(parts[i] for i in group)
            if combined is not None and key not in combined:
                return None
            keys.append(key)
        return multi_key(keys)

    def keys(self, columns: Sequence[Sequence[str | None]]) -> list[str | None]:
        """`key(values)` of every row of `columns` (one sequence of values per column, in
        column order), a dimension value at a time: each distinct value of a column is mapped
        once, not once per row (a million partitions have ten thousand days)."""
        if not self.columns:
            return []
        parts: list[list[str | None]] = []
        for index, column in enumerate(columns):
            distinct = list(dict.fromkeys(column))
            self._know_windows(index, len(distinct))
            mapped = {v: self._dimension_key(index, v) for v in distinct}
            parts.append([mapped[v] for v in column])
        if len(parts) == 1:
            return parts[0]
        if all(len(g) == 1 for g in self._groups) and all(c is None for c in self._combined):
            # One column per dimension: the key joins them in dimension order.
            ordered = [parts[g[0]] for g in self._groups]
            join = _SEPARATOR.join
            return [None if None in row else join(row) for row in zip(*ordered, strict=True)]
        joined = self._joined
        return [None if None in row else joined(row) for row in zip(*parts, strict=True)]

    def key_words(
        self, columns: Sequence[tuple[npt.NDArray[np.int32], Sequence[str | None]]]
    ) -> tuple[list[tuple[npt.NDArray[np.int32], list[str | None]]], npt.NDArray[np.bool_]] | None:
        """`keys` of rows given column-wise as codes into each column's words, without a string
        per row: per dimension (in key order) its key as codes into a list of dimension keys,
        and which rows are inside the partitions. None where a key is not its dimensions' keys
        joined by `|` (a combined dimension, a dimension key holding `|`): use `keys`."""
        import numpy as np

        if not self.columns or any(len(g) != 1 for g in self._groups):
            return None
        if any(c is not None for c in self._combined):
            return None
        parts = []
        inside = np.ones(len(columns[0][0]) if columns else 0, bool)
        for group in self._groups:
            index = group[0]
            codes, words = columns[index]
            seen = np.zeros(len(words), bool)  # codes index `words`: no sort of the rows
            seen[codes] = True
            used = np.flatnonzero(seen)
            local = (np.cumsum(seen) - 1)[codes]
            self._know_windows(index, len(used))
            mapped = [self._dimension_key(index, words[c]) for c in used.tolist()]
            if any(k is not None and _SEPARATOR in k for k in mapped):
                return None
            codes_of_keys: npt.NDArray[np.int32] = local.reshape(-1).astype(np.int32)
            inside &= ~np.array([k is None for k in mapped], bool)[codes_of_keys]
            parts.append((codes_of_keys, mapped))
        return parts, inside

    def _know_windows(self, index: int, distinct: int) -> None:
        """Before mapping many values of a time dimension, learn its partition keys at once:
        Dagster's per-key lookups cost about a millisecond each (cron iteration), listing every
        key costs about 20 microseconds per key. Only where the listing is not much longer than
        the values to map."""
        column = self.columns[index]
        if not column.is_time or self._windows[index] is not None or distinct < 1000:
            return
        time_def = column.partitions_def
        assert isinstance(time_def, TimeWindowPartitionsDefinition)
        if time_def.get_num_partitions() <= 4 * distinct:
            self._windows[index] = frozenset(time_def.get_partition_keys())

    def _dimension_key(self, index: int, value: str | None) -> str | None:
        cache = self._cache[index]
        if value in cache:
            return cache[value]
        windows = self._windows[index]
        if windows is not None and value in windows and self._same_key[index]:
            # A value that is itself a partition key of the dimension is its own key: a key
            # string column, or a date column of daily UTC windows keyed '%Y-%m-%d'.
            cache[value] = value
            return value
        column = self.columns[index]
        static = self._static[index]
        result: str | None = value
        if value is None:
            result = None
        elif static is not None:
            result = value if value in static else None
        elif column.is_time:
            time_def = column.partitions_def
            assert isinstance(time_def, TimeWindowPartitionsDefinition)
            key: str | None = value
            if self._is_date[index]:
                try:
                    day = dt.datetime.combine(
                        dt.date.fromisoformat(value), dt.time(0), tzinfo=dt.UTC
                    )
                    key = time_def.get_partition_key_for_timestamp(day.timestamp())
                except ValueError:
                    key = None
            result = key if key is not None and time_def.has_partition_key(key) else None
        cache[value] = result
        return result
