"""Every asset's settings checked when its code location loads.

Dagster 1.13 has no hook through which an integration sees the assets when `Definitions` load:
resources and IO managers are built without the asset graph (`wrap_resources_for_execution`),
`Definitions` takes no validation callback, and `Definitions.validate_loadable` is meant for
unit tests. Three places do see a partlake code location's assets as it loads, and each checks
every asset's `ModelSpec` (`dagster_partlake.spec.model`):

1. `partlake_asset_checks(assets)` (`freshness.check`), which a partlake code location calls
   with all its assets to declare their checks (`check_assets`). It runs while the module is
   imported, so the error is the module's import error: `dagster dev` shows it as the code
   location's load error, `dagster definitions validate` fails with it, and `partlake plan -m
   MODULE` prints it as `Error: ...`.
2. The invalidation sensor's asset selection (`checked_selection`): `AssetSelection.all()`,
   which checks the whole asset graph when Dagster snapshots the code location (its code
   server at load, `dagster definitions validate`); for a code location with the sensor but
   without `partlake_asset_checks`.
3. `LakeGraph` (`planning.graph`) builds its assets from `graph_specs`: every `partlake`
   command, each sensor tick, the maintenance job and the automation condition plan from it.

A run checks the same spec of its own asset again where none of these ran (`materialize` of a
list of assets): the IO manager reads it through `spec_of` too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from dagster import AssetsDefinition, AssetSpec, SourceAsset

from dagster_partlake.compat import all_assets_checked_at_load
from dagster_partlake.partitions.retention import check_source_rule
from dagster_partlake.spec.model import ModelSpec, check_input, model_spec, spec_of

if TYPE_CHECKING:
    from dagster import AssetSelection

    from dagster_partlake.compat import AssetGraph


def check_assets(assets: Iterable[object]) -> dict[str, ModelSpec]:
    """The specs of the assets, source assets and asset specs among `assets`, by name; edges
    between two of them are checked too (others are skipped, as `Definitions` would take them).

    Raises:
        PartlakeConfigError: naming the first asset whose settings are wrong, and the setting.
    """
    specs: dict[str, ModelSpec] = {}
    for item in assets:
        if isinstance(item, AssetsDefinition):
            for key in item.keys:
                spec = spec_of(item, key)
                specs[spec.name] = spec
        elif isinstance(item, SourceAsset | AssetSpec):
            metadata = item.metadata
            spec = model_spec(
                item.key, metadata=metadata, partitions_def=item.partitions_def, managed=False
            )
            specs[spec.name] = spec
    check_sources(specs)
    check_edges(specs)
    return specs


def graph_specs(asset_graph: AssetGraph) -> dict[str, ModelSpec]:
    """The spec of every asset of a code location's asset graph, by name, edges checked.

    Raises:
        PartlakeConfigError: naming the first asset whose settings are wrong, and the setting.
    """
    specs = {}
    for key in asset_graph.get_all_asset_keys():
        spec = spec_of(asset_graph.get(key).assets_def, key)
        specs[spec.name] = spec
    check_sources(specs)
    check_edges(specs)
    return specs


def check_sources(specs: Mapping[str, ModelSpec]) -> None:
    """Check each source's retention rule (`check_source_rule`): done where a code location
    loads, not where a run parses an upstream its job holds as a stub."""
    for spec in specs.values():
        if not spec.managed:
            check_source_rule(spec.retention, spec.name)


def check_edges(specs: Mapping[str, ModelSpec]) -> None:
    """Check each input whose upstream is among `specs` (`check_input`)."""
    for spec in specs.values():
        for read in spec.inputs:
            upstream = specs.get(read.upstream)
            if upstream is not None:
                check_input(spec, upstream)


def checked_selection() -> AssetSelection:
    """`AssetSelection.all()` whose snapshot checks every asset's settings (hook 2 above)."""
    return all_assets_checked_at_load(graph_specs)
