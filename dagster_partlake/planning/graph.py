"""A code location's assets as partlake sees them: `LakeGraph`.

Read once from the `Definitions` (or a repository's asset graph): per asset its partitions, table
columns, code version, parents, pools, backfill policy and where its table lives (its
`TableLocation`: the lake root and its storage options come from the code location's IO
manager's `lake_location()`, else `$PARTLAKE_HOME`), and the
planner's view of the graph with each edge's partition mapping as functions
(`dagster_partlake.partitions.mappings`). A long-lived process (the sensor's code server) keeps
one graph, so what is derived from it is computed once: every asset's settings (its `ModelSpec`,
`dagster_partlake.spec`, checked here as everywhere the code location loads, and the same spec
the IO manager reads), the planner's assets and the existing partitions of root assets (until a
new one appears). What planning
keeps between plans is the `PlanningSession`'s, not the graph's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetKey,
    BackfillPolicy,
    Definitions,
    IdentityPartitionMapping,
    PartitionsDefinition,
)

from dagster_partlake.incremental.spec import Incremental
from dagster_partlake.kinds.spec import ORDERED_KINDS
from dagster_partlake.partitions.keys import (
    DimensionColumn,
    all_keys,
    is_dynamic,
    partitions_horizon,
)
from dagster_partlake.partitions.mappings import key_maps, previous_partition_maps
from dagster_partlake.planning.batches import RunRules
from dagster_partlake.planning.definition import Dependency, Key, PlanAsset
from dagster_partlake.spec.load import graph_specs
from dagster_partlake.spec.model import External, ModelSpec
from dagster_partlake.storage.location import (
    TableLocation,
    as_location,
    lake_location,
)

# The resource key of an asset's IO manager when it names none (Dagster's default).
DEFAULT_IO_MANAGER_KEY = "io_manager"

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
    # Where its table (or folder) lives, with the lake's storage options; `path` is its URI.
    location: TableLocation = field(default=None, compare=False)  # type: ignore[assignment]
    # A source outside the lake (a PostgreSQL table, a Kafka topic): its declaration, read by
    # `planning.convert.read_state` instead of a table at `location`.
    external: External | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.location is None:
            object.__setattr__(self, "location", as_location(self.path))

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
        root: str | TableLocation | None = None,
        asset_graph: AssetGraph | None = None,
        resources: Mapping[str, object] | None = None,
        io_manager_key: str = DEFAULT_IO_MANAGER_KEY,
    ) -> None:
        if defs is None and asset_graph is None:
            raise ValueError("LakeGraph needs defs or asset_graph")
        self.defs = defs
        if asset_graph is None:
            assert defs is not None
            asset_graph = defs.resolve_asset_graph()
        self.asset_graph = asset_graph
        resources = resources if resources is not None else (defs.resources if defs else None)
        self._resources = dict(resources or {})
        configured = self._io_manager_lake(io_manager_key) or io_manager_lake(
            self._resources.values()
        )
        # The lake: `root` (a location keeps its options; a path or URI gets the IO manager's
        # storage options), else the IO manager's, else the default. With `root` every asset
        # lives there; else each in the lake of the IO manager that reads or writes it.
        self._one_lake = root is not None
        self.lake = (
            root
            if isinstance(root, TableLocation)
            else lake_location(
                root or configured, configured.storage_options if configured else None
            )
        )
        self.root = self.lake.uri
        self.assets: dict[str, LakeAsset] = {}
        self._plan_assets: list[PlanAsset] | None = None
        self._root_keys: dict[str, tuple[str, list[Key]]] = {}
        # Every asset's settings, parsed once and checked (`dagster_partlake.spec`): the IO
        # manager reads the same specs.
        self.specs = graph_specs(self.asset_graph)
        for name, spec in self.specs.items():
            self.assets[name] = self._lake_asset(spec)
        # Dynamic partition keys live in the Dagster instance, so planning needs it only then.
        self.has_dynamic_partitions = any(
            is_dynamic(a.partitions_def) for a in self.assets.values()
        )

    def _io_manager_lake(self, key: str, node: Any = None) -> TableLocation | None:
        """The lake of the IO manager under resource key `key`: the code location's resource,
        else (a graph read without the Definitions) as `node`'s assets definition configures
        it; None when it keeps no lake or names no root."""
        resource = self._resources.get(key)
        if resource is not None:
            return io_manager_lake([resource])
        if node is not None:
            # This asset's own IO manager: one that names no root keeps the default lake.
            return _configured_lake(node.assets_def.resource_defs.get(key), unnamed_is_default=True)
        return assets_lake(self.asset_graph, key)

    def _lake_asset(self, spec: ModelSpec) -> LakeAsset:
        node = self.asset_graph.get(spec.key)
        managed = spec.managed
        lake = self.lake
        if not self._one_lake:
            # Where its IO manager keeps it: a source read by another IO manager lives in that
            # one's lake (`partlake_source(io_manager_key=...)`), as the run reads it.
            key = node.assets_def.get_io_manager_key_for_asset_key(spec.key)
            if key != DEFAULT_IO_MANAGER_KEY:
                lake = self._io_manager_lake(key, node) or lake
        location = spec.location(lake)
        return LakeAsset(
            key=spec.key,
            name=spec.name,
            partitions_def=spec.partitions_def,
            columns=spec.columns,
            path=location.uri,
            location=location,
            is_source=not managed,
            is_folder=spec.is_folder,
            external=spec.external,
            code_version=node.code_version,
            parents=tuple(
                p.to_user_string() for p in sorted(node.parent_keys, key=lambda k: tuple(k.path))
            ),
            pools=frozenset(node.pools or ()) if managed else frozenset(),
            backfill_policy=node.backfill_policy if managed else None,
            kind=spec.kind.kind,
            decoupled=managed and spec.decoupled,
            gates=tuple(g.name for g in spec.gates.all) if managed else (),
            stream=spec.stream.mode if managed and spec.stream is not None else None,
        )

    def downstream(self, name: str) -> list[str]:
        """The managed assets reading `name`, directly or through others (in no set order)."""
        found: set[str] = set()
        frontier = [name]
        while frontier:
            current = frontier.pop()
            for other, asset in self.assets.items():
                if current in asset.parents and other not in found and other != name:
                    found.add(other)
                    frontier.append(other)
        return [n for n in self.assets if n in found and not self.assets[n].is_source]

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

    def run_rules(
        self,
        assets: Sequence[PlanAsset],
        dynamic_partitions_store: DagsterInstance | None = None,
    ) -> RunRules:
        """How this code location's stale partitions become runs, for the planner's `assets`
        (from `plan_assets` with the same `dynamic_partitions_store`)."""
        return RunRules(
            assets,
            self.partitions_defs(),
            self.policies(),
            self.units(),
            self.cutoff(),
            reads_once=self.reads_once(),
            dynamic_partitions_store=dynamic_partitions_store,
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
        return self.specs[name].after_commit is not None

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
                if parent in self.assets and not _pinned(self.specs[asset.name], parent)
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
        asset = self.assets[name]
        if asset.is_source:
            return {}
        return {
            read.upstream: read.incremental
            for read in self.specs[name].inputs
            if read.upstream in self.assets and read.incremental is not None
        }

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


def _pinned(spec: ModelSpec, parent: str) -> bool:
    read = spec.input(parent)
    return read is not None and read.pinned


def repository_root(repository: RepositoryDefinition, io_manager_key: str) -> str | None:
    """The lake root configured on the code location's IO manager under `io_manager_key`, read
    from its resource definition (what a sensor sees of it without initializing the resource on
    every tick)."""
    lake = repository_lake(repository, io_manager_key)
    return lake.uri if lake is not None else None


def repository_lake(repository: RepositoryDefinition, io_manager_key: str) -> TableLocation | None:
    """`repository_root` as a location, with the IO manager's storage options."""
    return _configured_lake(repository.get_top_level_resources().get(io_manager_key))


def assets_root(asset_graph: AssetGraph, io_manager_key: str = "io_manager") -> str | None:
    """The lake root of the IO manager bound to the graph's assets under `io_manager_key`
    (what an automation condition sees of the code location)."""
    lake = assets_lake(asset_graph, io_manager_key)
    return lake.uri if lake is not None else None


def assets_lake(
    asset_graph: AssetGraph, io_manager_key: str = "io_manager"
) -> TableLocation | None:
    """`assets_root` as a location, with the IO manager's storage options."""
    for key in asset_graph.get_all_asset_keys():
        node = asset_graph.get(key)
        if not node.is_materializable:
            continue
        lake = _configured_lake(node.assets_def.resource_defs.get(io_manager_key))
        if lake is not None:
            return lake
    return None


def _configured_lake(
    definition: object, *, unnamed_is_default: bool = False
) -> TableLocation | None:
    """The lake a resource definition is configured with, when it stores a lake (an IO manager
    with a `lake_location`, such as `DeltaPartitionIOManager`) and names its root; with
    `unnamed_is_default`, the default lake when it names none."""
    resource_cls = getattr(definition, "configurable_resource_cls", None)
    if definition is None or not callable(getattr(resource_cls, "lake_location", None)):
        return None
    field = definition.config_schema.as_field()  # type: ignore[attr-defined]
    config = field.default_value if field.default_provided else {}
    root, options = config.get("root"), config.get("storage_options") or {}
    if isinstance(root, str):
        return lake_location(root, options)
    return lake_location(None, options) if unnamed_is_default else None


def io_manager_lake(resources: Iterable[object]) -> TableLocation | None:
    """The lake of the first resource that stores one (`lake_location()`), preferring one that
    names its root, with that resource's storage options (None: no such resource)."""
    stores = [r for r in resources if callable(getattr(r, "lake_location", None))]
    stores.sort(key=lambda r: getattr(r, "root", None) is None)
    for resource in stores:
        lake = resource.lake_location()  # type: ignore[attr-defined]
        if isinstance(lake, TableLocation):
            return lake
    return None
