"""Model specs: every partlake setting of an asset, parsed once and checked at load.

`settings` lists every metadata key partlake reads (where it goes, its type, what is checked)
and refuses unknown ones; `model` parses an asset's settings into a frozen `ModelSpec` with the
parsers of each concept; `load` checks every asset of a code location when it loads
(`partlake_asset_checks`, the sensor's asset selection, `LakeGraph`). Between the IO manager,
which reads the specs, and `gates/` | `incremental/`, whose parsers it calls: may import those
and every layer below them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.spec.load import check_assets, checked_selection, graph_specs
    from dagster_partlake.spec.model import InputSpec, ModelSpec, model_spec, spec_of
    from dagster_partlake.spec.settings import SETTINGS, Setting, check_keys

__all__ = [
    "SETTINGS",
    "InputSpec",
    "ModelSpec",
    "Setting",
    "check_assets",
    "check_keys",
    "checked_selection",
    "graph_specs",
    "model_spec",
    "spec_of",
]

_LAZY = {
    "SETTINGS": "dagster_partlake.spec.settings",
    "Setting": "dagster_partlake.spec.settings",
    "check_keys": "dagster_partlake.spec.settings",
    "InputSpec": "dagster_partlake.spec.model",
    "ModelSpec": "dagster_partlake.spec.model",
    "model_spec": "dagster_partlake.spec.model",
    "spec_of": "dagster_partlake.spec.model",
    "check_assets": "dagster_partlake.spec.load",
    "checked_selection": "dagster_partlake.spec.load",
    "graph_specs": "dagster_partlake.spec.load",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
