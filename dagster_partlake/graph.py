"""The Dagster side of planning: the asset graph, partition mappings and stored state as plain data.

`LakeGraph` reads a code location's `Definitions` once (assets, partitions, code versions,
partition mappings, where each table lives). `gather_plan_input` turns it plus storage into the
planner's `PlanInput`. Partition mappings become key -> keys functions; identity, time-window
(e.g. daily -> monthly) and multi-dimensional mappings built from those are computed directly,
any other mapping goes through Dagster's own `PartitionMapping` API, memoized per key.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from dagster import (
    AssetKey,
    Definitions,
    IdentityPartitionMapping,
    MultiPartitionMapping,
    MultiPartitionsDefinition,
    PartitionMapping,
    PartitionsDefinition,
    TimeWindowPartitionMapping,
    TimeWindowPartitionsDefinition,
)

from dagster_partlake.delta.state import StateCache, TableState, folder_state
from dagster_partlake.errors import PartlakeConfigError, TableUnreadableError
from dagster_partlake.io_manager import (
    FORMAT_KEY,
    PATH_KEY,
    WHOLE_TABLE_ID,
    DeltaPartitionIOManager,
    default_root,
    table_path,
)
from dagster_partlake.partitions import DimensionColumn, KeyCodec, dimension_columns
from dagster_partlake.planner import (
    Dependency,
    Key,
    PartitionState,
    PlanAsset,
    PlanInput,
    Record,
)


@dataclass(frozen=True)
class LakeAsset:
    key: AssetKey
    name: str
    partitions_def: PartitionsDefinition | None
    columns: tuple[DimensionColumn, ...]
    path: str
    is_source: bool
    is_folder: bool
    code_version: str | None
    parents: tuple[str, ...]
    pools: frozenset[str] = frozenset()  # Dagster concurrency pools of its steps


class LakeGraph:
    """The assets of a code location, with tables and partition mappings resolved."""

    def __init__(
        self,
        defs: Definitions | None = None,
        *,
        root: str | None = None,
        asset_graph: Any = None,
        resources: Mapping[str, Any] | None = None,
    ) -> None:
        if defs is None and asset_graph is None:
            raise ValueError("LakeGraph needs defs or asset_graph")
        self.defs = defs
        self.asset_graph = asset_graph if asset_graph is not None else defs.resolve_asset_graph()
        resources = resources if resources is not None else (defs.resources if defs else None)
        self.root = os.path.abspath(root or _io_manager_root(resources) or default_root())
        self.assets: dict[str, LakeAsset] = {}
        self._plan_assets: list[PlanAsset] | None = None
        self._root_keys: dict[str, tuple[str, list[Key]]] = {}
        # Per asset: (table version, partition states, records) of the last conversion.
        self.converted: dict[str, tuple[int, dict[Key, PartitionState], dict[Key, Record]]] = {}
        for key in self.asset_graph.get_all_asset_keys():
            node = self.asset_graph.get(key)
            if not (node.is_materializable or node.is_observable or node.is_external):
                continue
            name = key.to_user_string()
            metadata = dict(node.metadata or {})
            is_folder = metadata.get(FORMAT_KEY) == "folder"
            path = table_path(self.root, key, metadata.get(PATH_KEY))
            self.assets[name] = LakeAsset(
                key=key,
                name=name,
                partitions_def=node.partitions_def,
                columns=tuple(dimension_columns(node.partitions_def, metadata, asset_name=name)),
                path=path,
                is_source=not node.is_materializable,
                is_folder=is_folder,
                code_version=node.code_version,
                parents=tuple(
                    p.to_user_string() for p in sorted(node.parent_keys, key=lambda k: k.path)
                ),
                pools=frozenset(node.pools or ()) if node.is_materializable else frozenset(),
            )
        # Dynamic partition keys live in the Dagster instance, so planning needs it only then.
        self.has_dynamic_partitions = any(
            _is_dynamic(a.partitions_def) for a in self.assets.values()
        )

    def plan_assets(self, dynamic_partitions_store: Any = None) -> list[PlanAsset]:
        """The planner's view of the graph. Built once (its key maps memoize across plans)
        unless a dynamic partitions definition makes the key sets change over time."""
        if self._plan_assets is not None:
            return self._plan_assets
        result = []
        for asset in self.assets.values():
            deps = tuple(
                self._dependency(asset, self.assets[parent], dynamic_partitions_store)
                for parent in asset.parents
                if parent in self.assets
            )
            result.append(
                PlanAsset(
                    name=asset.name,
                    deps=deps,
                    code_version=asset.code_version,
                    is_source=asset.is_source,
                    partitioned=asset.partitions_def is not None,
                )
            )
        if not self.has_dynamic_partitions:
            self._plan_assets = result
        return result

    def root_partition_keys(self, dynamic_partitions_store: Any = None) -> dict[str, list[Key]]:
        """Partitions that exist now of the managed assets without upstream assets: each is due
        until written. Recomputed only when the newest partition moved (a new time window
        began, a dynamic partition was added)."""
        result: dict[str, list[Key]] = {}
        for asset in self.assets.values():
            if asset.is_source or asset.parents or asset.partitions_def is None:
                continue
            horizon = partitions_horizon(asset.partitions_def, dynamic_partitions_store)
            cached = self._root_keys.get(asset.name)
            if cached is None or cached[0] != horizon:
                cached = (horizon, _all_keys(asset.partitions_def, dynamic_partitions_store))
                self._root_keys[asset.name] = cached
            result[asset.name] = cached[1]
        return result

    def horizon(self, dynamic_partitions_store: Any = None) -> dict[str, str]:
        """Per root managed asset, what moves when it gains partitions (see
        `partitions_horizon`); the sensor keeps it in its cursor."""
        return {
            asset.name: partitions_horizon(asset.partitions_def, dynamic_partitions_store)
            for asset in self.assets.values()
            if not asset.is_source and not asset.parents and asset.partitions_def is not None
        }

    def _dependency(self, child: LakeAsset, parent: LakeAsset, store: Any) -> Dependency:
        mapping = self.asset_graph.get_partition_mapping(child.key, parent.key)
        up, down = key_maps(parent.partitions_def, child.partitions_def, mapping, store)
        identity = (
            parent.partitions_def is not None
            and parent.partitions_def == child.partitions_def
            and isinstance(mapping, IdentityPartitionMapping)
        )
        return Dependency(parent.name, up, down, identity=identity)


def _is_dynamic(partitions_def: PartitionsDefinition | None) -> bool:
    from dagster import DynamicPartitionsDefinition

    if isinstance(partitions_def, MultiPartitionsDefinition):
        return any(_is_dynamic(d.partitions_def) for d in partitions_def.partitions_defs)
    return isinstance(partitions_def, DynamicPartitionsDefinition)


def partitions_horizon(partitions_def: PartitionsDefinition, store: Any = None) -> str:
    """A short text that changes whenever the set of existing partitions grows: the newest time
    window of each time dimension and the dynamic keys of each dynamic dimension."""
    from dagster import DynamicPartitionsDefinition

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
            keys = _all_keys(dim, store) if store is not None or dim.name is None else []
            digest = hashlib.sha1("\n".join(keys).encode()).hexdigest()[:12]
            parts.append(f"{len(keys)}:{digest}")
    return "|".join(parts)


def _io_manager_root(resources: Mapping[str, Any] | None) -> str | None:
    for resource in (resources or {}).values():
        if isinstance(resource, DeltaPartitionIOManager):
            return resource.root or default_root()
    return None


def key_maps(
    upstream: PartitionsDefinition | None,
    downstream: PartitionsDefinition | None,
    mapping: PartitionMapping,
    store: Any = None,
) -> tuple[Callable[[Key], Iterable[Key]], Callable[[Key], Iterable[Key]]]:
    """(downstream key -> upstream keys, upstream key -> downstream keys) for one edge."""
    if upstream is None and downstream is None:
        return (lambda _k: [None]), (lambda _k: [None])
    if downstream is None:
        assert upstream is not None
        every = _all_keys(upstream, store)
        return (lambda _k: every), (lambda _k: [None])
    if upstream is None:
        every = _all_keys(downstream, store)
        return (lambda _k: [None]), (lambda _k: every)
    direct = _direct_maps(upstream, downstream, mapping)
    if direct is not None:
        return direct
    return _dagster_maps(upstream, downstream, mapping, store)


def _all_keys(partitions_def: PartitionsDefinition, store: Any) -> list[Key]:
    from dagster._core.definitions.partitions.context import partition_loading_context

    with partition_loading_context(dynamic_partitions_store=store):
        if not isinstance(partitions_def, MultiPartitionsDefinition):
            return list(partitions_def.get_partition_keys())
        # The product of the dimensions' keys, joined like Dagster's multi keys (alphabetical
        # dimension order), without building a MultiPartitionKey object per key.
        dims = sorted(partitions_def.partitions_defs, key=lambda d: d.name)
        per_dim = [d.partitions_def.get_partition_keys() for d in dims]
        return ["|".join(combo) for combo in itertools.product(*per_dim)]


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
    if isinstance(mapping, IdentityPartitionMapping) or (
        upstream == downstream and not isinstance(mapping, TimeWindowPartitionMapping)
    ):
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
    return None


def _time_maps(
    upstream: TimeWindowPartitionsDefinition, downstream: TimeWindowPartitionsDefinition
) -> tuple[OneToMany, OneToMany]:
    def covering(source: TimeWindowPartitionsDefinition, target: TimeWindowPartitionsDefinition):
        @cache
        def keys(key: str) -> list[str]:
            window = source.time_window_for_partition_key(key)
            inside = list(target.get_partition_keys_in_time_window(window))
            if inside:
                return inside
            # A coarser target: the one window that contains this one.
            try:
                containing = target.get_partition_key_for_timestamp(window.start.timestamp())
            except Exception:
                return []
            return [containing] if target.has_partition_key(containing) else []

        return keys

    return covering(downstream, upstream), covering(upstream, downstream)


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
    elif upstream == downstream:
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
    up_order, down_order = sorted(up_dims), sorted(down_dims)

    @cache
    def upstream_keys(key: Key) -> tuple[Key, ...]:
        if key is None:
            return ()
        down_values = dict(zip(down_order, key.split("|"), strict=True))
        options = [per_dim[u][1](down_values[per_dim[u][0]]) for u in up_order]
        return tuple("|".join(combo) for combo in itertools.product(*options))

    @cache
    def downstream_keys(key: Key) -> tuple[Key, ...]:
        if key is None:
            return ()
        up_values = dict(zip(up_order, key.split("|"), strict=True))
        by_down = {per_dim[u][0]: per_dim[u][2](up_values[u]) for u in up_order}
        return tuple(
            "|".join(combo) for combo in itertools.product(*(by_down[d] for d in down_order))
        )

    return upstream_keys, downstream_keys


def _dagster_maps(
    upstream: PartitionsDefinition,
    downstream: PartitionsDefinition,
    mapping: PartitionMapping,
    store: Any,
) -> tuple[Callable[[Key], Iterable[Key]], Callable[[Key], Iterable[Key]]]:
    from dagster._core.definitions.partitions.context import partition_loading_context

    @cache
    def upstream_keys(key: Key) -> tuple[Key, ...]:
        with partition_loading_context(dynamic_partitions_store=store):
            subset = downstream.empty_subset().with_partition_keys([key])
            result = mapping.get_upstream_mapped_partitions_result_for_partitions(
                subset, downstream, upstream
            )
            return tuple(result.partitions_subset.get_partition_keys())

    @cache
    def downstream_keys(key: Key) -> tuple[Key, ...]:
        with partition_loading_context(dynamic_partitions_store=store):
            subset = upstream.empty_subset().with_partition_keys([key])
            result = mapping.get_downstream_partitions_for_partitions(subset, upstream, downstream)
            return tuple(result.get_partition_keys())

    return upstream_keys, downstream_keys


def read_state(asset: LakeAsset, cache: StateCache) -> TableState | None:
    """The asset's table (or folder) state now.

    Raises:
        TableUnreadableError: the table's Delta log cannot be read.
    """
    if asset.is_folder:
        return folder_state(asset.path, [c.column for c in asset.columns])
    return cache.sync(asset.path, with_commits=not asset.is_source, name=asset.name)


def to_partition_states(asset: LakeAsset, state: TableState | None) -> dict[Key, PartitionState]:
    """lastUpdated per Dagster partition key (values outside the partitions are ignored)."""
    if state is None:
        return {}
    if not asset.columns:
        newest = max(state.last_updated.values(), default=None)
        return {} if newest is None else {None: PartitionState(newest, state.version)}
    order = [
        state.partition_by.index(c.column) for c in asset.columns if c.column in state.partition_by
    ]
    if len(order) != len(asset.columns):
        raise PartlakeConfigError(
            f"table of asset {asset.name} at {asset.path} is partitioned by "
            f"({', '.join(state.partition_by) or 'nothing'}), but the asset's partitions are "
            f"stored in ({', '.join(c.column for c in asset.columns)}); fix partition_expr or "
            "the table."
        )
    codec = KeyCodec(asset.columns, state.column_types)
    result: dict[Key, PartitionState] = {}
    for values, last_updated in state.last_updated.items():
        key = codec.key([values[i] for i in order])
        if key is None:
            continue
        previous = result.get(key)
        if previous is None or last_updated > previous.last_updated:
            result[key] = PartitionState(last_updated, state.touched_in.get(values))
    return result


def to_records(asset: LakeAsset, state: TableState | None) -> dict[Key, Record]:
    """The last partlake write of each partition, from the table's commit infos."""
    records: dict[Key, Record] = {}
    if state is None:
        return records
    for commit in state.commits:  # oldest first: later writes replace earlier ones
        if "commit_time_ms" not in commit:
            continue  # written before partlake recorded what it consumed: treat as unknown
        keys: Sequence[str] = commit.get("partition_keys") or [WHOLE_TABLE_ID]
        empty = set(commit.get("empty_partition_keys") or [])
        consumed = {
            upstream: {_key(k): int(v) for k, v in partitions.items()}
            for upstream, partitions in (commit.get("consumed") or {}).items()
        }
        for raw in keys:
            key = _key(raw)
            records[key] = Record(
                code_version=commit.get("code_version"),
                written_last_updated=None if raw in empty else int(commit["commit_time_ms"]),
                consumed=consumed,
                run_id=commit.get("run_id"),
            )
    return records


def _key(raw: str) -> Key:
    return None if raw == WHOLE_TABLE_ID else raw


def gather_plan_input(
    graph: LakeGraph, cache: StateCache, *, dynamic_partitions_store: Any = None
) -> tuple[PlanInput, dict[str, TableState | None]]:
    """Planner input for the whole graph, and the raw table states it was built from (tables
    that could not be read are left out of both and named in `PlanInput.unreadable`)."""
    raw: dict[str, TableState | None] = {}
    unreadable: dict[str, str] = {}
    for name, asset in graph.assets.items():
        try:
            raw[name] = read_state(asset, cache)
        except TableUnreadableError as error:
            unreadable[name] = str(error)
    states: dict[str, dict[Key, PartitionState]] = {}
    records: dict[str, dict[Key, Record]] = {}
    for name, state in raw.items():
        asset = graph.assets[name]
        version = state.version if state is not None else -1
        cached = graph.converted.get(name)
        if cached is None or cached[0] != version:
            # Converting values to keys and commits to records is the costly part of a plan at
            # many partitions; a table whose version did not move keeps its conversion.
            cached = (
                version,
                to_partition_states(asset, state),
                {} if asset.is_source else to_records(asset, state),
            )
            graph.converted[name] = cached
        states[name] = cached[1]
        if not asset.is_source:
            records[name] = cached[2]
    plan_input = PlanInput(
        graph.plan_assets(dynamic_partitions_store),
        states,
        records,
        partition_keys=graph.root_partition_keys(dynamic_partitions_store),
        unreadable=unreadable,
    )
    return plan_input, raw
