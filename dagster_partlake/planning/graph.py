"""A code location's assets as partlake sees them: `LakeGraph`.

Read once from the `Definitions` (or a repository's asset graph): per asset its partitions, table
columns, code version, parents, pools, backfill policy and where its table lives (the lake root
comes from the code location's IO manager's `lake_location()`, else `$PARTLAKE_HOME`), and the
planner's view of the graph with each edge's partition mapping as functions
(`dagster_partlake.partitions.mappings`). A long-lived process (the sensor's code server) keeps
one graph, so what is derived from it is computed once: the planner's assets, the existing
partitions of root assets (until a new one appears) and the incremental inputs. What planning
keeps between plans is the `PlanningSession`'s, not the graph's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetKey,
    BackfillPolicy,
    Definitions,
    IdentityPartitionMapping,
    PartitionsDefinition,
)

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.gates.spec import gates_of
from dagster_partlake.incremental.landing import AFTER_COMMIT_KEY
from dagster_partlake.incremental.spec import Incremental, incremental_of
from dagster_partlake.incremental.streams import stream_of
from dagster_partlake.kinds.spec import ORDERED_KINDS, model_kind
from dagster_partlake.metadata import FORMAT_KEY, PATH_KEY, TIMESTAMP_KEY, VERSION_KEY
from dagster_partlake.partitions.keys import (
    DimensionColumn,
    all_keys,
    dimension_columns,
    is_dynamic,
    partitions_horizon,
)
from dagster_partlake.partitions.mappings import key_maps, previous_partition_maps
from dagster_partlake.planning.batches import RunRules
from dagster_partlake.planning.planner import Dependency, Key, PlanAsset
from dagster_partlake.storage.location import TableLocation, lake_location, table_path

if TYPE_CHECKING:
    from dagster import DagsterInstance, RepositoryDefinition

    from dagster_partlake.compat import AssetGraph


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
    backfill_policy: BackfillPolicy | None = None
    kind: str = "partition"  # the model kind (`dagster_partlake.kinds.spec`)
    # The table's partitions are not the Dagster partitions (`ModelKind.decoupled`).
    decoupled: bool = False
    gates: tuple[str, ...] = ()  # names of its quality gates (`dagster_partlake.gates.spec`)
    # A streaming asset's mode (`incremental.streams`): "available_now" runs are planned as one
    # unit, "continuous" ones never (their table is planned as a source); None: no stream.
    stream: str | None = None

    @property
    def is_root(self) -> bool:
        """A managed, partitioned asset without upstream assets: it produces its own data."""
        others = [p for p in self.parents if p != self.name]  # its own earlier partitions aside
        return not self.is_source and not others and self.partitions_def is not None


class LakeGraph:
    """The assets of a code location, with tables and partition mappings resolved."""

    def __init__(
        self,
        defs: Definitions | None = None,
        *,
        root: str | None = None,
        asset_graph: AssetGraph | None = None,
        resources: Mapping[str, object] | None = None,
    ) -> None:
        if defs is None and asset_graph is None:
            raise ValueError("LakeGraph needs defs or asset_graph")
        self.defs = defs
        if asset_graph is None:
            assert defs is not None
            asset_graph = defs.resolve_asset_graph()
        self.asset_graph = asset_graph
        resources = resources if resources is not None else (defs.resources if defs else None)
        self.root = lake_location(root or io_manager_root((resources or {}).values())).uri
        self.assets: dict[str, LakeAsset] = {}
        self._plan_assets: list[PlanAsset] | None = None
        self._root_keys: dict[str, tuple[str, list[Key]]] = {}
        self._incremental: dict[str, dict[str, Incremental]] = {}
        for key in self.asset_graph.get_all_asset_keys():
            node = self.asset_graph.get(key)
            if not (node.is_materializable or node.is_observable or node.is_external):
                continue
            name = key.to_user_string()
            metadata = dict(node.metadata or {})
            is_folder = metadata.get(FORMAT_KEY) == "folder"
            path = table_path(self.root, key, metadata.get(PATH_KEY))
            columns = tuple(dimension_columns(node.partitions_def, metadata, asset_name=name))
            kind = model_kind(
                metadata, partitioned=node.partitions_def is not None, asset_name=name
            )
            self.assets[name] = LakeAsset(
                key=key,
                name=name,
                partitions_def=node.partitions_def,
                columns=columns,
                path=path,
                is_source=not node.is_materializable,
                is_folder=is_folder,
                code_version=node.code_version,
                parents=tuple(
                    p.to_user_string()
                    for p in sorted(node.parent_keys, key=lambda k: tuple(k.path))
                ),
                pools=frozenset(node.pools or ()) if node.is_materializable else frozenset(),
                backfill_policy=node.backfill_policy if node.is_materializable else None,
                kind=kind.kind,
                decoupled=node.is_materializable and kind.decoupled([c.column for c in columns]),
                gates=tuple(g.name for g in gates_of(metadata, asset_name=name, kind=kind.kind).all)
                if node.is_materializable
                else (),
                stream=_stream_mode(metadata, name) if node.is_materializable else None,
            )
        for asset in self.assets.values():
            _check_stream_inputs(asset, self.assets)
        # Dynamic partition keys live in the Dagster instance, so planning needs it only then.
        self.has_dynamic_partitions = any(
            is_dynamic(a.partitions_def) for a in self.assets.values()
        )

    def units(self) -> dict[str, tuple[str, ...]]:
        """Per asset of a multi-asset Dagster cannot subset, all its assets (they can only run
        together)."""
        result: dict[str, tuple[str, ...]] = {}
        for asset in self.assets.values():
            if asset.is_source:
                continue
            assets_def = self.asset_graph.get(asset.key).assets_def
            keys = [k.to_user_string() for k in assets_def.keys]
            if len(keys) > 1 and not assets_def.can_subset:
                result[asset.name] = tuple(k for k in keys if k in self.assets)
        return result

    def run_rules(self, assets: Sequence[PlanAsset]) -> RunRules:
        """How this code location's stale partitions become runs, for the planner's `assets`
        (from `plan_assets`)."""
        return RunRules(
            assets,
            self.partitions_defs(),
            self.policies(),
            self.units(),
            self.cutoff(),
            reads_once=self.reads_once(),
        )

    def reads_once(self) -> set[str]:
        """Managed assets reading an input only once: incrementally, or a landing folder."""
        return {
            name
            for name, a in self.assets.items()
            if not a.is_source
            and (
                self.incremental_inputs(name)
                or any(self._is_landing(p) for p in a.parents if p in self.assets)
            )
        }

    def _is_landing(self, name: str) -> bool:
        metadata = self.asset_graph.get(self.assets[name].key).metadata or {}
        return metadata.get(AFTER_COMMIT_KEY) is not None

    def cutoff(self) -> set[str]:
        """Assets whose recomputed partitions may come out unchanged (kind `tracked`)."""
        return {name for name, a in self.assets.items() if a.kind == "tracked"}

    def partitions_defs(self) -> dict[str, PartitionsDefinition | None]:
        return {name: a.partitions_def for name, a in self.assets.items()}

    def policies(self) -> dict[str, BackfillPolicy | None]:
        return {name: a.backfill_policy for name, a in self.assets.items()}

    def pools(self, select: Iterable[str] | None = None) -> set[str]:
        """Dagster pools of the selected assets (all assets when `select` is None)."""
        names = list(select) if select is not None else list(self.assets)
        return {pool for name in names for pool in self.assets[name].pools}

    def plan_assets(
        self, dynamic_partitions_store: DagsterInstance | None = None
    ) -> list[PlanAsset]:
        """The planner's view of the graph. Built once (its key maps memoize across plans)
        unless a dynamic partitions definition makes the key sets change over time."""
        if self._plan_assets is not None:
            return self._plan_assets
        result = []
        for asset in self.assets.values():
            deps = tuple(
                self._dependency(asset, self.assets[parent], dynamic_partitions_store)
                for parent in asset.parents
                # An input pinned to a version or time never sees its upstream change.
                if parent in self.assets and not _pins(self.input_metadata(asset.name, parent))
            )
            ordered = asset.kind in ORDERED_KINDS and asset.name not in asset.parents
            maps = previous_partition_maps(asset.partitions_def, dynamic_partitions_store)
            if ordered and maps is not None:
                # A merge or scd2 applies its time partitions in order: day D+1 after day D.
                deps += (Dependency(asset.name, *maps, order_only=True),)
            result.append(
                PlanAsset(
                    name=asset.name,
                    deps=deps,
                    code_version=asset.code_version,
                    # A continuous stream keeps running: it is never requested, and what it
                    # wrote feeds its readers as a source's data does.
                    is_source=asset.is_source or asset.stream == "continuous",
                    partitioned=asset.partitions_def is not None,
                    stream=asset.stream == "available_now",
                )
            )
        if not self.has_dynamic_partitions:
            self._plan_assets = result
        return result

    def root_partition_keys(
        self, dynamic_partitions_store: DagsterInstance | None = None
    ) -> dict[str, list[Key]]:
        """Partitions that exist now of the managed assets without upstream assets: each is due
        until written. Recomputed only when the newest partition moved (a new time window
        began, a dynamic partition was added)."""
        result: dict[str, list[Key]] = {}
        for asset in self.assets.values():
            if not asset.is_root:
                continue
            assert asset.partitions_def is not None
            horizon = partitions_horizon(asset.partitions_def, dynamic_partitions_store)
            cached = self._root_keys.get(asset.name)
            if cached is None or cached[0] != horizon:
                keys: list[Key] = list(all_keys(asset.partitions_def, dynamic_partitions_store))
                cached = (horizon, keys)
                self._root_keys[asset.name] = cached
            result[asset.name] = cached[1]
        return result

    def horizon(self, dynamic_partitions_store: DagsterInstance | None = None) -> dict[str, str]:
        """Per root managed asset, what moves when it gains partitions (see
        `partitions_horizon`); the sensor keeps it in its cursor."""
        return {
            asset.name: partitions_horizon(asset.partitions_def, dynamic_partitions_store)
            for asset in self.assets.values()
            if asset.is_root and asset.partitions_def is not None
        }

    def incremental_inputs(self, name: str) -> dict[str, Incremental]:
        """The asset's inputs read incrementally (`incremental.spec`), by upstream."""
        if name not in self._incremental:
            asset = self.assets[name]
            metadata = dict(self.asset_graph.get(asset.key).metadata or {})
            found = {}
            for parent in asset.parents:
                if parent in self.assets and not asset.is_source:
                    how = incremental_of(
                        self.input_metadata(name, parent),
                        metadata,
                        input_name=parent,
                        asset_name=name,
                    )
                    if how is not None:
                        found[parent] = how
            self._incremental[name] = found
        return self._incremental[name]

    def input_metadata(self, child: str, parent: str) -> dict[str, Any]:
        """The `AssetIn` metadata of `child`'s input that reads `parent` ({} if none)."""
        node = self.asset_graph.get(self.assets[child].key)
        assets_def = node.assets_def
        parent_key = self.assets[parent].key
        for input_name, key in assets_def.node_keys_by_input_name.items():
            if key == parent_key:
                return dict(assets_def.node_def.input_def_named(input_name).metadata or {})
        return {}

    def _dependency(
        self, child: LakeAsset, parent: LakeAsset, store: DagsterInstance | None
    ) -> Dependency:
        mapping = self.asset_graph.get_partition_mapping(child.key, parent.key)
        up, down = key_maps(parent.partitions_def, child.partitions_def, mapping, store)
        identity = (
            parent.partitions_def is not None
            and parent.partitions_def == child.partitions_def
            and isinstance(mapping, IdentityPartitionMapping)
        )
        return Dependency(parent.name, up, down, identity=identity)


def _check_stream_inputs(asset: LakeAsset, assets: Mapping[str, LakeAsset]) -> None:
    """A partitioned streaming asset runs without a partition key (its batches write whatever
    partitions their rows are in), and Dagster cannot start such a run of an asset whose input
    is partitioned: refuse it here, where the fix can be named.

    Raises:
        PartlakeConfigError: naming the asset, its partitioned input and the fix.
    """
    if asset.stream is None or asset.partitions_def is None:
        return
    for parent in asset.parents:
        if parent in assets and assets[parent].partitions_def is not None:
            raise PartlakeConfigError(
                f"streaming asset {asset.name} is partitioned and reads the partitioned asset "
                f"{parent}; Dagster runs a partitioned asset without a partition key only when "
                f"its inputs are unpartitioned. Drop {asset.name}'s partitions_def and keep its "
                f"table partitioned with metadata 'partlake/partition_by', or read {parent}'s "
                "table through an unpartitioned partlake_source(..., path=...)."
            )


def _stream_mode(metadata: Mapping[str, Any], name: str) -> str | None:
    spec = stream_of(metadata, asset_name=name)
    return spec.mode if spec is not None else None


def _pins(metadata: Mapping[str, object]) -> bool:
    return metadata.get(VERSION_KEY) is not None or metadata.get(TIMESTAMP_KEY) is not None


def repository_root(repository: RepositoryDefinition, io_manager_key: str) -> str | None:
    """The lake root configured on the code location's IO manager under `io_manager_key`, read
    from its resource definition (what a sensor sees of it without initializing the resource on
    every tick)."""
    lake = _configured_lake(repository.get_top_level_resources().get(io_manager_key))
    return lake.uri if lake is not None else None


def assets_root(asset_graph: AssetGraph, io_manager_key: str = "io_manager") -> str | None:
    """The lake root of the IO manager bound to the graph's assets under `io_manager_key`
    (what an automation condition sees of the code location)."""
    for key in asset_graph.get_all_asset_keys():
        node = asset_graph.get(key)
        if not node.is_materializable:
            continue
        lake = _configured_lake(node.assets_def.resource_defs.get(io_manager_key))
        if lake is not None:
            return lake.uri
    return None


def _configured_lake(definition: object) -> TableLocation | None:
    """The lake a resource definition is configured with, when it stores a lake (an IO manager
    with a `lake_location`, such as `DeltaPartitionIOManager`) and names its root."""
    resource_cls = getattr(definition, "configurable_resource_cls", None)
    if definition is None or not callable(getattr(resource_cls, "lake_location", None)):
        return None
    field = definition.config_schema.as_field()  # type: ignore[attr-defined]
    config = field.default_value if field.default_provided else {}
    root, options = config.get("root"), config.get("storage_options") or {}
    return lake_location(root, options) if isinstance(root, str) else None


def io_manager_root(resources: Iterable[object]) -> str | None:
    """The lake root of the first resource among a code location's resources that stores a
    lake (`lake_location()`), if it names one."""
    for resource in resources:
        located = getattr(resource, "lake_location", None)
        if callable(located) and getattr(resource, "root", None) is not None:
            return located().uri
    return None
