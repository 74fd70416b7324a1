"""`SqlModels`: the Dagster Components front door to SQL models.

A `dg` project declares a models folder in a `defs.yaml`, with its partitions and the IO manager
settings; the component builds the same assets as `sql_assets`, their quality gates as asset
checks, the `DeltaPartitionIOManager` and `SparkResource` they run with and, if asked, the
partlake sensor::

    type: dagster_partlake.SqlModels
    attributes:
      path: models                       # below this defs.yaml's folder
      partitions:                        # name -> "module:attribute" of a PartitionsDefinition
        daily: my_project.partitions:daily
      upstream: [my_project.defs.raw]    # modules (or "module:attribute") of assets models read
      group_name: sql
      io_manager:
        root: /data/lake                 # default: $PARTLAKE_HOME, else .partlake
        spark_master: local[2]
      sensor: true

Python objects are named by import path, as Dagster's own components name them, since a
partitions definition or a partition mapping has no YAML form.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from dagster import (
    AssetsDefinition,
    AssetSpec,
    Definitions,
    PartitionMapping,
    PartitionsDefinition,
    SourceAsset,
)
from dagster.components import Component, ComponentLoadContext, Model, Resolvable
from pydantic import Field

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.freshness.check import partlake_asset_checks
from dagster_partlake.io_manager.manager import DeltaPartitionIOManager
from dagster_partlake.orchestration.sensor import build_invalidation_sensor
from dagster_partlake.spark.resource import SparkResource
from dagster_partlake.sql.definition import sql_assets


class IoManagerSettings(Model):
    """The `DeltaPartitionIOManager` (and its `SparkResource`) the models run with."""

    root: str | None = Field(
        default=None,
        description="Lake root; default: $PARTLAKE_HOME, else '.partlake' in the working "
        "directory.",
    )
    max_commit_attempts: int | None = Field(
        default=None, description="Commit attempts when concurrent writers conflict."
    )
    spark_master: str | None = Field(
        default=None, description="Spark master URL (default: local[*])."
    )
    spark_remote: str | None = Field(
        default=None, description="Spark Connect URL, e.g. sc://127.0.0.1:15002."
    )


class SqlModels(Component, Resolvable, Model):
    """A folder of `.sql` model files as partitioned Dagster assets (see `sql_assets`).

    Example (`defs.yaml`):
        .. code-block:: yaml

            type: dagster_partlake.SqlModels
            attributes:
              path: models
              partitions: {daily: my_project.partitions:daily}
    """

    path: str = Field(description="The models folder, relative to this defs.yaml's folder.")
    partitions: dict[str, str] = Field(
        default_factory=dict,
        description="Names models use in `-- @partitions:` -> 'module:attribute' of a "
        "PartitionsDefinition.",
    )
    mappings: dict[str, str] = Field(
        default_factory=dict,
        description="Names models use in `-- @depends_on:` -> 'module:attribute' of a "
        "PartitionMapping.",
    )
    upstream: list[str] = Field(
        default_factory=list,
        description="The other assets models read: modules (all their assets) or "
        "'module:attribute' (an asset, a source asset, a spec, or a list of them).",
    )
    group_name: str | None = Field(default=None, description="Group of models without @group.")
    pool: str | None = Field(default=None, description="Dagster pool of every model's step.")
    io_manager: IoManagerSettings | None = Field(
        default_factory=IoManagerSettings,
        description="The IO manager (resource 'io_manager') and Spark (resource 'spark') to "
        "provide; null when the project provides them itself.",
    )
    sensor: bool = Field(
        default=False, description="Also provide the partlake sensor (`partlake_sensor`)."
    )

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        upstream = [a for ref in self.upstream for a in _assets(ref)]
        models = sql_assets(
            context.path / self.path,
            partitions={n: _object(r, PartitionsDefinition) for n, r in self.partitions.items()},
            mappings={n: _object(r, PartitionMapping) for n, r in self.mappings.items()},
            upstream=upstream,
            group_name=self.group_name,
            pool=self.pool,
        )
        resources: dict[str, Any] = {}
        if self.io_manager is not None:
            settings = self.io_manager
            spark = SparkResource(
                master=settings.spark_master or "local[*]", remote=settings.spark_remote
            )
            manager: dict[str, Any] = {"spark": spark, "root": settings.root}
            if settings.max_commit_attempts is not None:
                manager["max_commit_attempts"] = settings.max_commit_attempts
            resources = {"spark": spark, "io_manager": DeltaPartitionIOManager(**manager)}
        return Definitions(
            assets=models,
            asset_checks=partlake_asset_checks(models),
            resources=resources,
            sensors=[build_invalidation_sensor()] if self.sensor else [],
        )


def _object(reference: str, expected: type) -> Any:
    value = _import(reference)
    if not isinstance(value, expected):
        raise PartlakeConfigError(
            f"{reference} is a {type(value).__name__}, not a {expected.__name__}; name one with "
            "'module:attribute'."
        )
    return value


def _import(reference: str) -> object:
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise PartlakeConfigError(
            f"cannot import {module_name!r} named in the SqlModels component ({error}); give "
            "'module:attribute' of an importable module."
        ) from error
    if not attribute:
        return module
    if not hasattr(module, attribute):
        raise PartlakeConfigError(f"module {module_name} has no attribute {attribute!r}.")
    return getattr(module, attribute)


def _assets(reference: str) -> list[AssetsDefinition | SourceAsset | AssetSpec]:
    value = _import(reference)
    kinds = (AssetsDefinition, SourceAsset, AssetSpec)
    if isinstance(value, kinds):
        return [value]
    items: Iterable[object] = (
        value if isinstance(value, list | tuple) else vars(value).values()  # a module
    )
    return [item for item in items if isinstance(item, kinds)]
