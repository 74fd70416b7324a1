"""SQL models: a folder of `.sql` files with directives, as partitioned Dagster assets.

A front door to the assets Python declares (one model, many front doors): `parse` reads a file
(directives, sqlglot tree, table references); `directives` maps the directives onto the metadata
a Python asset declares; `project` validates a whole folder (keys, references, cycles) and orders
it; `views` rewrites a query to read per-run temporary views; `lineage` derives column-level
lineage; `definition` builds the assets (`sql_assets`) and runs a model; `explain` renders what a
run of a model executes (`partlake sql render`); `component` is the Dagster Components front door
(`SqlModels`, for a `dg` project's `defs.yaml`). The layer just below the CLI: may import
everything but `cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.sql.component import SqlModels
    from dagster_partlake.sql.definition import default_mapping, sql_assets
    from dagster_partlake.sql.project import SqlModel, lint_folder, load_models

__all__ = [
    "SqlModel",
    "SqlModels",
    "default_mapping",
    "lint_folder",
    "load_models",
    "sql_assets",
]

_LAZY = {
    "SqlModels": "dagster_partlake.sql.component",
    "default_mapping": "dagster_partlake.sql.definition",
    "sql_assets": "dagster_partlake.sql.definition",
    "SqlModel": "dagster_partlake.sql.project",
    "lint_folder": "dagster_partlake.sql.project",
    "load_models": "dagster_partlake.sql.project",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
