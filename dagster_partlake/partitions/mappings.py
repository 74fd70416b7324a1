"""Partition mappings as plain functions: for one edge of the asset graph, downstream key ->
upstream keys it reads, and upstream key -> downstream keys that read it.

Identity, time-window (e.g. daily -> monthly, offsets 0), static and multi-dimensional mappings
built from those are computed directly and memoized per key; any other mapping goes through
Dagster's own `PartitionMapping` API, memoized per key too. An unpartitioned side maps to every
key of the other side.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING

from dagster import (
    IdentityPartitionMapping,
    MultiPartitionMapping,
    MultiPartitionsDefinition,
    PartitionMapping,
    PartitionsDefinition,
    StaticPartitionMapping,
    TimeWindow,
    TimeWindowPartitionMapping,
    TimeWindowPartitionsDefinition,
)

from dagster_partlake.columnar.interner import Key
from dagster_partlake.compat import partition_loading_context
from dagster_partlake.partitions.keys import all_keys, key_dimensions, key_values, multi_key

if TYPE_CHECKING:
    from dagster import DagsterInstance


def key_maps(
    upstream: PartitionsDefinition | None,
    downstream: PartitionsDefinition | None,
    mapping: PartitionMapping,
    store: DagsterInstance | None = None,
) -> tuple[Callable[[Key], Iterable[Key]], Callable[[Key], Iterable[Key]]]:
    """(downstream key -> upstream keys, upstream key -> downstream keys) for one edge."""
    if upstream is None and downstream is None:
        return (lambda _k: [None]), (lambda _k: [None])
    if downstream is None:
        assert upstream is not None
        every = all_keys(upstream, store)
        return (lambda _k: every), (lambda _k: [None])
    if upstream is None:
        every = all_keys(downstream, store)
        return (lambda _k: [None]), (lambda _k: every)
    direct = _direct_maps(upstream, downstream, mapping)
    if direct is not None:
        return direct
    return _dagster_maps(upstream, downstream, mapping, store)


OneToMany = Callable[[str], list[str]]


def _direct_maps(
    upstream: PartitionsDefinition, downstream: PartitionsDefinition, mapping: PartitionMapping
) -> tuple[Callable[[Key], Iterable[Key]], Callable[[Key], Iterable[Key]]] | None:
    if isinstance(upstream, MultiPartitionsDefinition) and isinstance(
        downstream, MultiPartitionsDefinition
    ):
        return _multi_maps(upstream, downstream, mapping)
    pair = _dimension_maps(upstream, downstream, mapping)
    if pair is None:
        return None
    up, down = pair
    return (lambda k: up(k) if k is not None else []), (lambda k: down(k) if k is not None else [])


def _dimension_maps(
    upstream: PartitionsDefinition, downstream: PartitionsDefinition, mapping: PartitionMapping
) -> tuple[OneToMany, OneToMany] | None:
    if isinstance(mapping, IdentityPartitionMapping):
        if upstream != downstream:
            return None
        return (lambda k: [k]), (lambda k: [k])
    if (
        isinstance(mapping, TimeWindowPartitionMapping)
        and mapping.start_offset == 0
        and mapping.end_offset == 0
        and isinstance(upstream, TimeWindowPartitionsDefinition)
        and isinstance(downstream, TimeWindowPartitionsDefinition)
    ):
        return _time_maps(upstream, downstream)
    if isinstance(mapping, StaticPartitionMapping):
        return _static_maps(mapping)
    return None


def _static_maps(mapping: StaticPartitionMapping) -> tuple[OneToMany, OneToMany]:
    """A static mapping's dict and its inverse (e.g. 'eu/shoes' -> 'eu' of a combined
    dimension mapped to one of its parts, `partitions.dimensions.partlake_mapping`)."""
    down: dict[str, list[str]] = {}
    up: dict[str, list[str]] = {}
    for key, targets in mapping.downstream_partition_keys_by_upstream_partition_key.items():
        down[key] = sorted({targets} if isinstance(targets, str) else set(targets))
        for target in down[key]:
            up.setdefault(target, []).append(key)
    return (lambda k: up.get(k, [])), (lambda k: down.get(k, []))


def _time_maps(
    upstream: TimeWindowPartitionsDefinition, downstream: TimeWindowPartitionsDefinition
) -> tuple[OneToMany, OneToMany]:
    def covering(source: TimeWindowPartitionsDefinition, target: TimeWindowPartitionsDefinition):
        span = _span(target)

        @cache
        def keys(key: str) -> list[str]:
            window = source.time_window_for_partition_key(key)
            start, end = max(window.start, span.start), min(window.end, span.end)
            if start < end:
                inside = list(target.get_partition_keys_in_time_window(TimeWindow(start, end)))
                if inside:
                    return inside
            # A coarser target: the one window that contains this one.
            containing = target.get_partition_key_for_timestamp(window.start.timestamp())
            return [containing] if target.has_partition_key(containing) else []

        return keys

    return covering(downstream, upstream), covering(upstream, downstream)


def _span(partitions_def: TimeWindowPartitionsDefinition) -> TimeWindow:
    """From the start of the definition's first window to the end of the last window its end
    date allows (far in the future without one).

    Dagster's `get_partition_keys_in_time_window` ignores both, so a month of a daily definition
    ending 2024-03-03 held all 31 days. The span is fixed, while the last partition that exists
    moves with the clock (no end date, or one still ahead): the maps are memoized across plans,
    so they clip to what can ever exist, not to what exists now.
    """
    end = partitions_def.end
    if end is None:
        return TimeWindow(partitions_def.start, datetime.max.replace(tzinfo=UTC))
    # The window holding the end date starts where the last whole one ends.
    holding = partitions_def.get_partition_key_for_timestamp(end.timestamp())
    last_end = partitions_def.time_window_for_partition_key(holding).start
    return TimeWindow(partitions_def.start, last_end)


def _multi_maps(
    upstream: MultiPartitionsDefinition,
    downstream: MultiPartitionsDefinition,
    mapping: PartitionMapping,
) -> tuple[Callable[[Key], Iterable[Key]], Callable[[Key], Iterable[Key]]] | None:
    up_dims = {d.name: d.partitions_def for d in upstream.partitions_defs}
    down_dims = {d.name: d.partitions_def for d in downstream.partitions_defs}
    if isinstance(mapping, MultiPartitionMapping):
        pairs = {
            up_name: (dim.dimension_name, dim.partition_mapping)
            for up_name, dim in mapping.downstream_mappings_by_upstream_dimension.items()
        }
    elif isinstance(mapping, IdentityPartitionMapping) and upstream == downstream:
        pairs = {name: (name, IdentityPartitionMapping()) for name in up_dims}
    else:
        return None
    if sorted(pairs) != sorted(up_dims) or sorted(d for d, _ in pairs.values()) != sorted(
        down_dims
    ):
        return None
    per_dim: dict[str, tuple[str, OneToMany, OneToMany]] = {}
    for up_name, (down_name, dim_mapping) in pairs.items():
        maps = _dimension_maps(up_dims[up_name], down_dims[down_name], dim_mapping)
        if maps is None:
            return None
        per_dim[up_name] = (down_name, *maps)
    up_order, down_order = key_dimensions(upstream), key_dimensions(downstream)

    @cache
    def upstream_keys(key: Key) -> tuple[Key, ...]:
        if key is None:
            return ()
        down_values = dict(zip(down_order, key_values(key), strict=True))
        options = [per_dim[u][1](down_values[per_dim[u][0]]) for u in up_order]
        return tuple(multi_key(combo) for combo in itertools.product(*options))

    @cache
    def downstream_keys(key: Key) -> tuple[Key, ...]:
        if key is None:
            return ()
        up_values = dict(zip(up_order, key_values(key), strict=True))
        by_down = {per_dim[u][0]: per_dim[u][2](up_values[u]) for u in up_order}
        return tuple(
            multi_key(combo) for combo in itertools.product(*(by_down[d] for d in down_order))
        )

    return upstream_keys, downstream_keys


def _dagster_maps(
    upstream: PartitionsDefinition,
    downstream: PartitionsDefinition,
    mapping: PartitionMapping,
    store: DagsterInstance | None,
) -> tuple[Callable[[Key], Iterable[Key]], Callable[[Key], Iterable[Key]]]:
    @cache
    def upstream_keys(key: Key) -> tuple[Key, ...]:
        if key is None:
            return ()
        with partition_loading_context(store):
            subset = downstream.empty_subset().with_partition_keys([key])
            result = mapping.get_upstream_mapped_partitions_result_for_partitions(
                subset, downstream, upstream
            )
            return tuple(result.partitions_subset.get_partition_keys())

    @cache
    def downstream_keys(key: Key) -> tuple[Key, ...]:
        if key is None:
            return ()
        with partition_loading_context(store):
            subset = upstream.empty_subset().with_partition_keys([key])
            result = mapping.get_downstream_partitions_for_partitions(subset, upstream, downstream)
            return tuple(result.get_partition_keys())

    return upstream_keys, downstream_keys


def previous_partition_maps(
    partitions_def: PartitionsDefinition | None, store: DagsterInstance | None = None
) -> tuple[Callable[[Key], Iterable[Key]], Callable[[Key], Iterable[Key]]] | None:
    """(key -> the previous time partition, key -> the next one) of a definition with a time
    dimension (other dimensions unchanged); None without one."""
    time_def: PartitionsDefinition
    position: int | None
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        time_def, position = partitions_def, None
    elif isinstance(partitions_def, MultiPartitionsDefinition):
        dims = {d.name: d.partitions_def for d in partitions_def.partitions_defs}
        timed = [n for n, d in dims.items() if isinstance(d, TimeWindowPartitionsDefinition)]
        if not timed:
            return None
        time_def, position = dims[timed[0]], key_dimensions(partitions_def).index(timed[0])
    else:
        return None
    keys = list(all_keys(time_def, store))
    index = {k: i for i, k in enumerate(keys)}

    def shifted(step: int) -> Callable[[Key], Iterable[Key]]:
        @cache
        def maps(key: Key) -> tuple[Key, ...]:
            if key is None:
                return ()
            values = key_values(key) if position is not None else [key]
            i = index.get(values[position or 0])
            if i is None or not 0 <= i + step < len(keys):
                return ()
            values[position or 0] = keys[i + step]
            return (multi_key(values) if position is not None else values[0],)

        return maps

    return shifted(-1), shifted(1)
