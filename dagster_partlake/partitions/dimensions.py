"""Any number of partition dimensions on Dagster, which stops at two (dagster-io/dagster #14228,
#21177, #26489), and the partition mappings between them.

`partlake_partitions(date=DailyPartitionsDefinition(...), region=[...], product=[...])` gives a
partitions definition Dagster accepts: one or two dimensions as Dagster has them, more by
combining the static dimensions into one whose name and keys join the parts with "/"
(`region/product`, keys `eu/shoes`, `eu/hats`, ...), next to the time (or dynamic) dimension.
The table still gets one partition column per dimension (`partitions.keys`), and partlake's
planner, sensor and CLI name every dimension.

`partlake_mapping(upstream, downstream)` builds the Dagster `PartitionMapping` between two such
definitions that keeps the dimensions both have and drops (aggregates over) or fans out over the
others, e.g. date x region x product -> date x region, summed over products.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dagster import (
    BetaWarning,
    DimensionPartitionMapping,
    DynamicPartitionsDefinition,
    IdentityPartitionMapping,
    MultiPartitionMapping,
    MultiPartitionsDefinition,
    MultiToSingleDimensionPartitionMapping,
    PartitionMapping,
    PartitionsDefinition,
    StaticPartitionMapping,
    StaticPartitionsDefinition,
    TimeWindowPartitionMapping,
    TimeWindowPartitionsDefinition,
)

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.partitions.keys import COMBINED, combined_parts

# Characters a value of a multi-partition dimension cannot hold (Dagster's rule) or a part of a
# combined one (its separator).
_FORBIDDEN = set("|,[]") | {COMBINED}


def partlake_partitions(
    **dimensions: PartitionsDefinition | Sequence[str],
) -> PartitionsDefinition:
    """A partitions definition with any number of dimensions, in a form Dagster accepts.

    One dimension is returned as is; two become a `MultiPartitionsDefinition`, exactly as
    Dagster's own. With more, the static dimensions (given as definitions or as lists of keys)
    are combined into one dimension named by their names joined with "/" whose keys join one
    value of each ("eu/shoes"); a time or dynamic dimension stays a dimension of its own. Each
    dimension still gets its own table column.

    Example:
        .. code-block:: python

            sales_partitions = partlake_partitions(
                date=DailyPartitionsDefinition(start_date="2024-01-01"),
                region=["eu", "us"],
                product=["shoes", "hats"],
            )  # keys like '2024-01-02|eu/shoes'

    Raises:
        PartlakeConfigError: no dimension, a value holding "/", "|", "," or brackets, or more
            than one dimension that is not static (only static dimensions can be combined).
    """
    if not dimensions:
        raise PartlakeConfigError(
            "partlake_partitions needs at least one dimension, e.g. "
            "partlake_partitions(date=DailyPartitionsDefinition(start_date='2024-01-01'))."
        )
    defs = {name: _definition(name, value) for name, value in dimensions.items()}
    if len(defs) == 1:
        return next(iter(defs.values()))
    if len(defs) == 2:
        return MultiPartitionsDefinition(defs)
    static = {n: d for n, d in defs.items() if isinstance(d, StaticPartitionsDefinition)}
    own = {n: d for n, d in defs.items() if n not in static}
    if len(own) > 1:
        raise PartlakeConfigError(
            f"partlake_partitions got {len(defs)} dimensions of which {', '.join(own)} are not "
            "static; Dagster allows two dimensions and only static ones can be combined into "
            "one, so keep at most one time or dynamic dimension."
        )
    if not own:  # every dimension static: the first stays apart, the others share one
        first = next(iter(static))
        own = {first: static.pop(first)}
    for name, definition in static.items():
        _check_values(name, definition.get_partition_keys())
    combined_name = COMBINED.join(static)
    keys = [
        COMBINED.join(values)
        for values in itertools.product(*(d.get_partition_keys() for d in static.values()))
    ]
    return MultiPartitionsDefinition({**own, combined_name: StaticPartitionsDefinition(keys)})


def _definition(name: str, value: PartitionsDefinition | Sequence[str]) -> PartitionsDefinition:
    if COMBINED in name or not name:
        raise PartlakeConfigError(
            f"partition dimension name {name!r} is empty or holds '{COMBINED}', which joins the "
            "names of combined dimensions; choose another name."
        )
    if isinstance(value, PartitionsDefinition):
        if isinstance(value, MultiPartitionsDefinition):
            raise PartlakeConfigError(
                f"dimension {name} of partlake_partitions is itself multi-dimensional; give its "
                "dimensions to partlake_partitions one by one."
            )
        return value
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise PartlakeConfigError(
            f"dimension {name} of partlake_partitions is {value!r}; give a partitions definition "
            "or a list of keys (strings), e.g. ['eu', 'us']."
        )
    return StaticPartitionsDefinition(list(value))


def _check_values(name: str, keys: Sequence[str]) -> None:
    bad = [k for k in keys if _FORBIDDEN & set(k)]
    if bad:
        raise PartlakeConfigError(
            f"dimension {name} has key(s) {', '.join(map(repr, bad[:3]))} holding one of "
            f"{' '.join(sorted(_FORBIDDEN))}; a combined dimension joins its parts' values with "
            f"'{COMBINED}', so rename those keys."
        )


@dataclass(frozen=True)
class _Dimension:
    """One Dagster dimension: its name, definition, and the parts it stands for."""

    name: str
    definition: PartitionsDefinition
    parts: tuple[str, ...]

    @property
    def kind(self) -> str:
        if isinstance(self.definition, TimeWindowPartitionsDefinition):
            return "time"
        if isinstance(self.definition, DynamicPartitionsDefinition):
            return "dynamic"
        return "static"


def _dimensions(partitions_def: PartitionsDefinition, name: str | None) -> list[_Dimension]:
    if isinstance(partitions_def, MultiPartitionsDefinition):
        return [
            _Dimension(
                d.name, d.partitions_def, combined_parts(d.name, d.partitions_def) or (d.name,)
            )
            for d in partitions_def.partitions_defs
        ]
    label = name or "<single>"
    return [_Dimension(label, partitions_def, (label,))]


def partlake_mapping(
    upstream: PartitionsDefinition,
    downstream: PartitionsDefinition,
    **mappings: PartitionMapping,
) -> PartitionMapping:
    """The Dagster partition mapping from `upstream` to `downstream` (both as made by
    `partlake_partitions`, or any Dagster definition) that keeps the dimensions both have and
    drops or fans out over the others: date x region x product -> date x region reads, for
    (2024-01-02, eu), the partitions of every product of 2024-01-02|eu.

    Time dimensions map with `IdentityPartitionMapping` when their definitions are equal and
    `TimeWindowPartitionMapping()` otherwise (daily -> monthly); pass a mapping for a dimension
    by its downstream name to choose another, e.g. `date=TimeWindowPartitionMapping(
    start_offset=-1, end_offset=-1)`. Static dimensions (parts of combined ones included) map
    by equal values of the parts both sides have.

    Example:
        .. code-block:: python

            @asset(
                partitions_def=date_region,
                ins={"sales": AssetIn(partition_mapping=partlake_mapping(sales_partitions,
                                                                         date_region))},
            )
            def region_sales(sales): ...

    Raises:
        PartlakeConfigError: the two definitions share no dimension to map by, or one
            definition has a dimension the other cannot map to.
    """
    if upstream == downstream and not mappings:
        return IdentityPartitionMapping()
    with warnings.catch_warnings():
        # Dagster marks its multi-dimensional mappings beta; this function chose them, not the
        # caller, so their warning would only be noise in every code location using it.
        warnings.simplefilter("ignore", BetaWarning)
        return _mapping(upstream, downstream, mappings)


def _mapping(
    upstream: PartitionsDefinition,
    downstream: PartitionsDefinition,
    mappings: Mapping[str, PartitionMapping],
) -> PartitionMapping:
    up_multi = isinstance(upstream, MultiPartitionsDefinition)
    down_multi = isinstance(downstream, MultiPartitionsDefinition)
    if up_multi and down_multi:
        return _multi_mapping(upstream, downstream, mappings)
    if up_multi or down_multi:
        multi, single = (upstream, downstream) if up_multi else (downstream, upstream)
        return _multi_to_single(multi, single)
    if isinstance(upstream, TimeWindowPartitionsDefinition) and isinstance(
        downstream, TimeWindowPartitionsDefinition
    ):
        return next(iter(mappings.values()), None) or TimeWindowPartitionMapping()
    raise PartlakeConfigError(
        "partlake_mapping maps between definitions made by partlake_partitions (or Dagster's "
        f"multi-partitions); got {type(upstream).__name__} -> {type(downstream).__name__}: use "
        "a Dagster partition mapping for those."
    )


def _multi_to_single(
    multi: PartitionsDefinition, single: PartitionsDefinition
) -> MultiToSingleDimensionPartitionMapping:
    for dimension in _dimensions(multi, None):
        if dimension.definition == single:
            return MultiToSingleDimensionPartitionMapping(partition_dimension_name=dimension.name)
    raise PartlakeConfigError(
        f"the single-dimension definition {single} is none of the dimensions of "
        f"{_describe(multi)}; map to (or from) a definition that shares one of its dimensions."
    )


def _multi_mapping(
    upstream: PartitionsDefinition,
    downstream: PartitionsDefinition,
    mappings: Mapping[str, PartitionMapping],
) -> MultiPartitionMapping:
    ups, downs = _dimensions(upstream, None), _dimensions(downstream, None)
    chosen: dict[str, DimensionPartitionMapping] = {}
    used: set[str] = set()
    for up in ups:
        down = _counterpart(up, downs, used)
        if down is None:
            continue  # dropped: every downstream partition reads all of its values
        used.add(down.name)
        mapping = mappings.get(down.name) or _dimension_mapping(up, down)
        chosen[up.name] = DimensionPartitionMapping(down.name, mapping)
    missing = [d.name for d in downs if d.name not in used]
    if missing or not chosen:
        raise PartlakeConfigError(
            f"partlake_mapping cannot map {_describe(upstream)} to {_describe(downstream)}: "
            f"no upstream dimension maps to {', '.join(missing) or 'any downstream dimension'}; "
            "both need a time dimension in common, or static dimensions with a part in common."
        )
    return MultiPartitionMapping(chosen)


def _counterpart(up: _Dimension, downs: list[_Dimension], used: set[str]) -> _Dimension | None:
    free = [d for d in downs if d.name not in used]
    same = [d for d in free if d.name == up.name]
    if same:
        return same[0]
    if up.kind == "time":
        return next((d for d in free if d.kind == "time"), None)
    if up.kind == "static":
        return next((d for d in free if d.kind == "static" and set(d.parts) & set(up.parts)), None)
    return None


def _dimension_mapping(up: _Dimension, down: _Dimension) -> PartitionMapping:
    if up.definition == down.definition and up.parts == down.parts:
        return IdentityPartitionMapping()
    if up.kind == "time" and down.kind == "time":
        return TimeWindowPartitionMapping()
    if up.kind != "static" or down.kind != "static":
        raise PartlakeConfigError(
            f"partlake_mapping cannot map dimension {up.name} to {down.name}: a dynamic dimension "
            "maps only to the same dynamic dimension."
        )
    shared = [p for p in down.parts if p in up.parts]

    def values(dimension: _Dimension, key: str) -> tuple[str, ...]:
        by_part = dict(zip(dimension.parts, key.split(COMBINED), strict=True))
        return tuple(by_part[p] for p in shared)

    downstream_keys: dict[tuple[str, ...], list[str]] = {}
    for key in down.definition.get_partition_keys():
        downstream_keys.setdefault(values(down, key), []).append(key)
    return StaticPartitionMapping(
        {
            key: downstream_keys.get(values(up, key), [])
            for key in up.definition.get_partition_keys()
        }
    )


def _describe(partitions_def: PartitionsDefinition) -> str:
    names = [p for d in _dimensions(partitions_def, None) for p in d.parts]
    return " x ".join(names)
