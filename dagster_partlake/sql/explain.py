"""What a run of a SQL model executes, rendered without running it (`partlake sql render`).

The same functions the run uses (`views.view_names`, `views.run_sql`) give the view names and the
query, so the text is the SQL that runs; each view is described by what the run's
`load_input` reads into it: the upstream partitions its partition mapping asks for, or the whole
table. No Spark: partition keys come from the asset graph's mappings
(`dagster_partlake.partitions.mappings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dagster import Definitions

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.partitions.keys import validate_keys
from dagster_partlake.partitions.mappings import key_maps
from dagster_partlake.planning.graph import LakeAsset, LakeGraph
from dagster_partlake.sql.definition import built_model
from dagster_partlake.sql.project import SqlModel
from dagster_partlake.sql.views import run_sql, view_names

if TYPE_CHECKING:
    from dagster import DagsterInstance

MAX_SHOWN = 3


def render_model(
    defs: Definitions,
    asset: str,
    partition_keys: Sequence[str],
    store: DagsterInstance | None = None,
) -> str:
    """The SQL a run of `asset` over `partition_keys` executes, its views described above it.

    Raises:
        PartlakeConfigError: `asset` is no SQL model of the code location, or the partitions
            do not fit it.
        PartitionMismatchError: a key is not one of the asset's partitions.
    """
    graph = LakeGraph(defs)
    found = graph.assets.get(asset)
    model = _model(graph, asset)
    keys = list(partition_keys)
    if found is None or model is None:
        raise PartlakeConfigError(f"unknown asset {asset}")
    if found.partitions_def is None and keys:
        raise PartlakeConfigError(
            f"SQL model {asset} is not partitioned; run `partlake sql render` without --partition."
        )
    if found.partitions_def is not None and not keys:
        raise PartlakeConfigError(
            f"SQL model {asset} is partitioned; choose the run's partition with --partition, "
            "e.g. the first one, "
            f"{found.partitions_def.get_first_partition_key()}."
        )
    validate_keys(found.partitions_def, keys, asset_name=asset, dynamic_partitions_store=store)
    views = view_names(model, keys)
    what = f"partition {', '.join(keys)}" if keys else "the whole table"
    lines = [
        f"-- {asset}, {what}: {model.file.path} (code version {model.code_version})",
        "-- Each table the query reads is a temporary view of what this run reads of it:",
    ]
    for _ref, target in model.upstream:
        parent = graph.assets["/".join(target)]
        lines.append(f"--   {views[target]} = {parent.name}: {_held(graph, found, parent, keys)}")
    return "\n".join(lines) + "\n" + run_sql(model, views)


def _model(graph: LakeGraph, asset: str) -> SqlModel | None:
    found = graph.assets.get(asset)
    models = {
        name: model
        for name, a in graph.assets.items()
        if not a.is_source
        and (model := built_model(graph.asset_graph.get(a.key).assets_def)) is not None
    }
    if found is None or asset not in models:
        raise PartlakeConfigError(
            f"asset {asset} is no SQL model of the code location; its SQL models are "
            f"{', '.join(sorted(models)) or 'none'}."
        )
    return models[asset]


def _held(graph: LakeGraph, child: LakeAsset, parent: LakeAsset, keys: Sequence[str]) -> str:
    """What the view of `parent` holds for a run of `child` over `keys`, in words."""
    if parent.partitions_def is None:
        return "the whole table"
    if parent.decoupled:
        return f"the whole table (kind {parent.kind}: not partitioned by its Dagster partitions)"
    mapping = graph.asset_graph.get_partition_mapping(child.key, parent.key)
    up, _down = key_maps(parent.partitions_def, child.partitions_def, mapping)
    wanted: list[str] = []
    run_keys: list[str | None] = list(keys) or [None]
    for key in run_keys:
        for upstream_key in up(key):
            if upstream_key is not None and upstream_key not in wanted:
                wanted.append(upstream_key)
    if not wanted:
        return "no partition (an empty view)"
    shown = ", ".join(wanted[:MAX_SHOWN])
    if len(wanted) > MAX_SHOWN:
        shown = f"{', '.join(wanted[:2])} ... {wanted[-1]}"
    return f"{len(wanted)} partition(s): {shown}"
