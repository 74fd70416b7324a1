"""`sql_assets`: a folder of `.sql` model files as Dagster assets.

Each model becomes an ordinary `@asset` whose definition metadata holds exactly what a Python
asset would declare (`partlake/kind`, gates, `partlake/incremental`, ...), with one `AssetIn` per
table its query reads, carrying the partition mapping. So the IO manager loads each input as a
DataFrame of exactly the mapped upstream partitions and records what was consumed, and the
planner, the sensor, `partlake run` and the asset checks treat a SQL model like a Python asset
(one model, many front doors). The asset's body registers the inputs as temporary views
(`dagster_partlake.sql.views`) and returns `spark.sql` of the rewritten query.

Partition mappings need no directive in the common cases: the same partitions (identity), time
windows of another size (daily -> monthly, per time dimension of a multi-partition whose other
dimensions are equal), and an unpartitioned side (the whole upstream table). Anything else is
`-- @depends_on: table (name)` with `name` from `mappings=`, or the built-in `all` / `identity`.

A `merge` or `scd2` model with a time dimension applies its partitions in order and takes a range
in one run (`BackfillPolicy.single_run()`: the later days an old one made stale run together,
`planning.batches`). Such a run executes the query once per partition, in order, each time on
exactly the upstream partitions that partition maps to (its inputs' rows filtered by their
partition columns; a whole-table input as it is), and returns `{partition key: DataFrame}`: the
IO manager applies them one after the other, each its own commit (`kinds.units`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from dagster import (
    AllPartitionMapping,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    AutomationCondition,
    BackfillPolicy,
    BetaWarning,
    CodeReferencesMetadataValue,
    DimensionPartitionMapping,
    IdentityPartitionMapping,
    LocalFileCodeReference,
    MetadataValue,
    MultiPartitionMapping,
    MultiPartitionsDefinition,
    PartitionMapping,
    PartitionsDefinition,
    SourceAsset,
    TableColumn,
    TableColumnDep,
    TableColumnLineage,
    TableSchema,
    TimeWindowPartitionMapping,
    TimeWindowPartitionsDefinition,
    asset,
)

from dagster_partlake.errors import SqlModelError
from dagster_partlake.incremental.landing import AFTER_COMMIT_KEY
from dagster_partlake.incremental.spec import INCREMENTAL_KEY
from dagster_partlake.kinds.spec import ORDERED_KINDS, model_kind
from dagster_partlake.metadata import SQL_PATH_KEY
from dagster_partlake.partitions.keys import dimension_columns, selection_for_keys
from dagster_partlake.partitions.mappings import key_maps
from dagster_partlake.sql.lineage import ColumnLineage, Key, column_lineage
from dagster_partlake.sql.project import SqlModel, load_models
from dagster_partlake.sql.views import run_sql, view_names

if TYPE_CHECKING:
    from dagster import AssetExecutionContext
    from pyspark.sql import DataFrame, SparkSession

Upstream = AssetsDefinition | SourceAsset | AssetSpec
COLUMN_LINEAGE_KEY = "dagster/column_lineage"
COLUMN_SCHEMA_KEY = "dagster/column_schema"
_BUILTIN: dict[str, PartitionMapping] = {
    "all": AllPartitionMapping(),
    "identity": IdentityPartitionMapping(),
}
# Time windows of another size: the upstream windows inside the downstream one that exist.
# (Dagster marks the argument beta; partlake chose it, so its warning would only be noise in
# every code location with SQL models.)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", BetaWarning)
    _WINDOWS = TimeWindowPartitionMapping(allow_nonexistent_upstream_partitions=True)
# Asset key -> the model it was built from, for `partlake sql render` in the same process.
_BUILT: dict[AssetKey, SqlModel] = {}


class _Options(TypedDict):
    """What `sql_assets` sets on every model's asset."""

    group_name: str | None
    pool: str | None
    io_manager_key: str
    automation_condition: AutomationCondition | None


def sql_assets(
    path: str | Path,
    *,
    partitions: Mapping[str, PartitionsDefinition] | None = None,
    mappings: Mapping[str, PartitionMapping] | None = None,
    upstream: Sequence[Upstream] = (),
    group_name: str | None = None,
    pool: str | None = None,
    io_manager_key: str = "io_manager",
    automation_condition: AutomationCondition | None = None,
) -> list[AssetsDefinition]:
    """One Dagster asset per `.sql` file under `path` (`staging/orders.sql` -> `staging/orders`).

    Args:
        path: the models folder.
        partitions: the partitions definitions models may name in `-- @partitions: name`.
        mappings: partition mappings models may name in `-- @depends_on: table (name)`.
        upstream: the other assets (Python assets, `partlake_source`s, specs) models may read;
            their partitions choose the default mappings.
        group_name: the group of models without `-- @group`.
        pool: the Dagster pool of every model's step (as `dagster_partlake.POOL`).
        io_manager_key: the `DeltaPartitionIOManager` of the models (and of their inputs).
        automation_condition: set on every model.

    Returns:
        The models' assets, upstream models first.

    Raises:
        SqlModelError: the first problem of the folder, naming the file and line; nothing is
            returned.

    Example:
        .. code-block:: python

            models = sql_assets("my_project/models", partitions={"daily": daily},
                                upstream=[raw_orders], group_name="sql")
            defs = Definitions(assets=[raw_orders, *models],
                               asset_checks=partlake_asset_checks([raw_orders, *models]), ...)
    """
    partitions = dict(partitions or {})
    mappings = dict(mappings or {})
    others = _upstream_specs(upstream)
    models = load_models(path, partitions=partitions, mappings=mappings, upstream=list(others))
    partitions_of: dict[Key, PartitionsDefinition | None] = {
        k: s.partitions_def for k, s in others.items()
    }
    metadata_of: dict[Key, Mapping[str, Any]] = {k: dict(s.metadata) for k, s in others.items()}
    columns_of: dict[Key, list[str]] = {
        k: cols for k, s in others.items() if (cols := _schema_columns(s.metadata)) is not None
    }
    built = []
    for model in models:
        own = partitions[model.spec.partitions] if model.spec.partitions else None
        partitions_of[model.key] = own
        metadata_of[model.key] = dict(model.spec.metadata)
        lineage, outputs = column_lineage(model, columns_of)
        if outputs is not None:
            columns_of[model.key] = outputs
        ins = {
            ref.input_name: AssetIn(
                key=AssetKey(list(target)),
                partition_mapping=_mapping(model, ref.line, target, partitions_of, own, mappings),
            )
            for ref, target in model.upstream
        }
        options = _Options(
            group_name=group_name,
            pool=pool,
            io_manager_key=io_manager_key,
            automation_condition=automation_condition,
        )
        inputs = {
            target: _Input(partitions_of.get(target), metadata_of.get(target, {}))
            for _ref, target in model.upstream
        }
        assets_def = _asset(model, own, ins, lineage, options, inputs)
        _BUILT[assets_def.key] = model
        built.append(assets_def)
    return built


def built_model(assets_def: AssetsDefinition) -> SqlModel | None:
    """The model an asset was built from by `sql_assets` in this process (None: not a model)."""
    model = _BUILT.get(assets_def.key)
    if model is None or assets_def.specs_by_key[assets_def.key].code_version != (
        model.code_version
    ):
        return None
    return model


def _upstream_specs(upstream: Sequence[Upstream]) -> dict[Key, AssetSpec]:
    specs: dict[Key, AssetSpec] = {}
    for item in upstream:
        if isinstance(item, AssetsDefinition):
            for spec in item.specs:
                specs[tuple(spec.key.path)] = spec
        elif isinstance(item, SourceAsset):
            specs[tuple(item.key.path)] = AssetSpec(
                item.key, partitions_def=item.partitions_def, metadata=item.metadata
            )
        elif isinstance(item, AssetSpec):
            specs[tuple(item.key.path)] = item
        else:
            raise TypeError(
                f"sql_assets(upstream=...) takes assets, source assets and asset specs, got "
                f"{type(item).__name__}"
            )
    return specs


def _schema_columns(metadata: Mapping[str, Any]) -> list[str] | None:
    schema = metadata.get(COLUMN_SCHEMA_KEY)
    schema = getattr(schema, "schema", schema)
    if isinstance(schema, TableSchema):
        return [c.name for c in schema.columns]
    return None


@dataclass(frozen=True)
class _Input:
    """A table a model reads, as a run needs it to take one partition's rows of it."""

    partitions_def: PartitionsDefinition | None
    metadata: Mapping[str, Any]  # the upstream asset's (its partition columns, its kind)


def _asset(
    model: SqlModel,
    partitions_def: PartitionsDefinition | None,
    ins: dict[str, AssetIn],
    lineage: ColumnLineage,
    options: _Options,
    inputs: Mapping[Key, _Input],
) -> AssetsDefinition:
    spec = model.spec
    metadata: dict[str, Any] = {
        **spec.metadata,
        SQL_PATH_KEY: str(Path(model.file.path).resolve()),
        "dagster/code_references": CodeReferencesMetadataValue(
            code_references=[
                LocalFileCodeReference(
                    file_path=str(Path(model.file.path).resolve()), line_number=1
                )
            ]
        ),
    }
    if lineage:
        metadata[COLUMN_LINEAGE_KEY] = lineage_value(lineage)
    kind = model_kind(spec.metadata, partitioned=partitions_def is not None, asset_name=model.name)
    names = {ref.input_name: target for ref, target in model.upstream}
    decorator = asset(
        key=AssetKey(list(model.key)),
        ins=ins,
        partitions_def=partitions_def,
        metadata=metadata,
        code_version=model.code_version,
        description=_description(model),
        group_name=spec.group or options["group_name"],
        owners=list(spec.owners) or None,
        tags=spec.tags or None,
        kinds={"sql", "spark"},
        pool=options["pool"],
        io_manager_key=options["io_manager_key"],
        automation_condition=options["automation_condition"],
        # Kinds that replace partitions take a range in one run, and so do merge and scd2 over
        # a time dimension, applying its partitions one after the other; append, merge and scd2
        # without a time dimension or reading an input once (incrementally, a landing folder:
        # each commit records what its whole run read), one partition per run.
        backfill_policy=BackfillPolicy.single_run()
        if partitions_def is not None
        and (
            kind.kind in ("partition", "tracked")
            or (_in_order(kind.kind, partitions_def) and not _reads_once(model, inputs))
        )
        else None,
        required_resource_keys=None if model.upstream else {"spark"},
    )
    return decorator(_compute(model, names, inputs))


def _in_order(kind: str, partitions_def: PartitionsDefinition | None) -> bool:
    """A kind that applies its partitions in order, over exactly one time dimension."""
    if kind not in ORDERED_KINDS or partitions_def is None:
        return False
    dims = (
        [d.partitions_def for d in partitions_def.partitions_defs]
        if isinstance(partitions_def, MultiPartitionsDefinition)
        else [partitions_def]
    )
    return sum(isinstance(d, TimeWindowPartitionsDefinition) for d in dims) == 1


def _reads_once(model: SqlModel, inputs: Mapping[Key, _Input]) -> bool:
    """Whether the model reads an input only once: incrementally, or a landing folder."""
    return INCREMENTAL_KEY in model.spec.metadata or any(
        AFTER_COMMIT_KEY in i.metadata for i in inputs.values()
    )


def _compute(
    model: SqlModel, names: Mapping[str, Key], upstream: Mapping[Key, _Input]
) -> Callable[..., DataFrame | dict[str, DataFrame]]:
    # Dagster reads these annotations at definition time: no string (TYPE_CHECKING) types here,
    # and no pyspark import while the code location loads.
    def compute(context, **inputs: Any) -> Any:  # noqa: ANN001 - Dagster checks it
        frames = {names[name]: df for name, df in inputs.items()}
        return execute(context, model, frames, upstream)

    compute.__name__ = "__".join(model.key)
    return compute


def execute(
    context: AssetExecutionContext,
    model: SqlModel,
    frames: Mapping[Key, DataFrame],
    upstream: Mapping[Key, _Input] | None = None,
) -> DataFrame | dict[str, DataFrame]:
    """Register the inputs as views, run the rewritten query, and describe the result; for an
    in-order model over several partitions, once per partition on its own rows of the inputs
    (`upstream`: what each input is), as `{partition key: DataFrame}`."""
    keys = (
        list(context.partition_keys)
        if context.has_partition_key_range or (context.has_partition_key)
        else []
    )
    partitions_def = context.assets_def.partitions_def
    kind = model_kind(
        model.spec.metadata, partitioned=partitions_def is not None, asset_name=model.name
    )
    if upstream is None or len(keys) < 2 or not _in_order(kind.kind, partitions_def):
        result, sql = _query(context, model, frames, keys)
        _add_metadata(context, model, frames, result, sql)
        return result
    results: dict[str, DataFrame] = {}
    queries: list[str] = []
    for key in keys:
        unit = {t: _unit_rows(context, t, df, upstream[t], key) for t, df in frames.items()}
        results[key], sql = _query(context, model, unit, [key])
        queries.append(sql)
    note = f"-- run once per partition ({len(keys)}), applied in order; for {keys[0]}:\n"
    _add_metadata(context, model, frames, results[keys[0]], note + queries[0])
    return results


def _unit_rows(
    context: AssetExecutionContext, target: Key, df: DataFrame, upstream: _Input, key: str
) -> DataFrame:
    """What the run's partition `key` reads of input `target`: its rows in the upstream
    partitions `key` maps to (all of them for an unpartitioned input, or one whose table is not
    partitioned by its partitions: a partition of one run reads it whole too)."""
    from dagster_partlake.delta.schema import delta_types, spark_to_arrow
    from dagster_partlake.kinds.units import selection_filter

    own = context.assets_def.partitions_def
    if upstream.partitions_def is None or own is None:
        return df
    name = ".".join(target)
    columns = dimension_columns(upstream.partitions_def, upstream.metadata, asset_name=name)
    kind = model_kind(upstream.metadata, partitioned=True, asset_name=name)
    if kind.decoupled([c.column for c in columns]):
        return df
    upstream_key = AssetKey(list(target))
    mapping = context.assets_def.infer_partition_mapping(
        context.assets_def.key, upstream_key, upstream.partitions_def
    )
    up, _ = key_maps(upstream.partitions_def, own, mapping, context.instance)
    keys = [k for k in up(key) if k is not None]
    types = delta_types(spark_to_arrow(df.schema))
    return df.where(selection_filter(selection_for_keys(columns, keys, types, asset_name=name)))


def _query(
    context: AssetExecutionContext,
    model: SqlModel,
    frames: Mapping[Key, DataFrame],
    keys: list[str],
) -> tuple[DataFrame, str]:
    """The model's query on `frames` (registered as the views of `keys`), and its SQL."""
    views = view_names(model, keys)
    spark = _session(context, frames)
    for target, df in frames.items():
        df.createOrReplaceTempView(views[target])
    sql = run_sql(model, views)
    context.log.info(
        f"{model.file.path}: the query run for {', '.join(keys) or 'the table'}:\n{sql}"
    )
    try:
        result = spark.sql(sql)
    except Exception as error:  # pyspark's AnalysisException and ParseException, classic or Connect
        if type(error).__name__ not in ("AnalysisException", "ParseException"):
            raise
        raise SqlModelError(
            model.file.path,
            model.file.line,
            f"Spark cannot run model {model.file.reference}: {str(error).splitlines()[0]} (see the "
            f"query with `partlake sql render -m <module> {model.name}`).",
        ) from error
    finally:
        if not type(spark).__module__.startswith("pyspark.sql.connect"):
            # Classic Spark analysed the query in spark.sql, resolving the views into the plan
            # (PySpark drops the views of spark.sql(query, df=...) the same way); a Connect
            # session resolves them only when the plan runs, so there they stay until it ends.
            for view in views.values():
                spark.catalog.dropTempView(view)
    return result, sql


def _add_metadata(
    context: AssetExecutionContext,
    model: SqlModel,
    frames: Mapping[Key, DataFrame],
    result: DataFrame,
    sql: str,
) -> None:
    """The output's metadata: the SQL run, the result's schema, the column lineage."""
    lineage, _ = column_lineage(model, {k: df.columns for k, df in frames.items()})
    metadata: dict[str, Any] = {
        "partlake/sql": MetadataValue.md(f"```sql\n{sql}\n```"),
        COLUMN_SCHEMA_KEY: MetadataValue.table_schema(
            TableSchema(
                columns=[TableColumn(f.name, f.dataType.simpleString()) for f in result.schema]
            )
        ),
    }
    if lineage:
        metadata[COLUMN_LINEAGE_KEY] = lineage_value(lineage)
    context.add_output_metadata(metadata)


def _session(context: AssetExecutionContext, frames: Mapping[Key, DataFrame]) -> SparkSession:
    for df in frames.values():
        return df.sparkSession
    return context.resources.spark.spark_session


def lineage_value(lineage: ColumnLineage) -> MetadataValue:
    """Dagster's `dagster/column_lineage` value of a model's column lineage."""
    return MetadataValue.column_lineage(
        TableColumnLineage(
            deps_by_column={
                column: [TableColumnDep(AssetKey(list(key)), name) for key, name in deps]
                for column, deps in lineage.items()
            }
        )
    )


def _description(model: SqlModel) -> str:
    """The `@description` text, then the model's SQL as the UI shows it."""
    body = re.sub(r"\A(\s*--[^\n]*\n)*", "", model.file.text).strip()
    text = f"```sql\n{body}\n```"
    return f"{model.spec.description}\n\n{text}" if model.spec.description else text


def _mapping(
    model: SqlModel,
    line: int,
    target: Key,
    partitions_of: Mapping[Key, PartitionsDefinition | None],
    own: PartitionsDefinition | None,
    mappings: Mapping[str, PartitionMapping],
) -> PartitionMapping | None:
    """The input's partition mapping: the named one, else the default (None: Dagster's)."""
    name = next(
        (d.mapping for d in model.spec.depends_on if d.table.lower() == ".".join(target).lower()),
        None,
    )
    if name is not None:
        return mappings[name] if name in mappings else _BUILTIN[name]
    upstream = partitions_of.get(target)
    found = default_mapping(upstream, own)
    if found is False:
        raise model.file.error(
            line,
            f"model {model.file.reference} ({_describe(own)}) reads {'.'.join(target)} "
            f"({_describe(upstream)}), and no default mapping fits: declare it with "
            f"`-- @depends_on: {'.'.join(target)} (name)` and pass the mapping as "
            "sql_assets(mappings={'name': ...}) (or use the built-in 'all').",
        )
    return found


def default_mapping(
    upstream: PartitionsDefinition | None, downstream: PartitionsDefinition | None
) -> PartitionMapping | None | Literal[False]:
    """The mapping the common cases need: None (Dagster's default does it: identity, an
    unpartitioned side), time windows of another size (`TimeWindowPartitionMapping`, or a
    `MultiPartitionMapping` with it and the other dimensions equal), or False (no default
    fits). A window maps to those of its upstream windows that exist: a month of a daily
    upstream that starts or ends within it reads the days it has, as the planner plans it
    (Dagster's own default refuses such a month)."""
    if upstream is None or downstream is None or upstream == downstream:
        return None
    if isinstance(upstream, TimeWindowPartitionsDefinition) and isinstance(
        downstream, TimeWindowPartitionsDefinition
    ):
        return _WINDOWS
    if not (
        isinstance(upstream, MultiPartitionsDefinition)
        and isinstance(downstream, MultiPartitionsDefinition)
    ):
        return False
    down = {d.name: d.partitions_def for d in downstream.partitions_defs}
    up = {d.name: d.partitions_def for d in upstream.partitions_defs}
    down_time = [n for n, p in down.items() if isinstance(p, TimeWindowPartitionsDefinition)]
    result: dict[str, DimensionPartitionMapping] = {}
    for name, definition in up.items():
        if name in down and down[name] == definition:
            result[name] = DimensionPartitionMapping(name, IdentityPartitionMapping())
        elif isinstance(definition, TimeWindowPartitionsDefinition) and len(down_time) == 1:
            result[name] = DimensionPartitionMapping(down_time[0], _WINDOWS)
        else:
            return False
    used = {m.dimension_name for m in result.values()}
    if used != set(down):
        return False
    return MultiPartitionMapping(result)


def _describe(partitions_def: PartitionsDefinition | None) -> str:
    if partitions_def is None:
        return "unpartitioned"
    if isinstance(partitions_def, MultiPartitionsDefinition):
        dims = ", ".join(
            f"{d.name}: {type(d.partitions_def).__name__.replace('PartitionsDefinition', '')}"
            for d in partitions_def.partitions_defs
        )
        return f"partitions {dims}"
    return f"partitions {type(partitions_def).__name__.replace('PartitionsDefinition', '')}"
