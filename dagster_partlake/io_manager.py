"""DeltaPartitionIOManager: Spark DataFrames in and out of partitioned Delta tables.

The Dagster side of storage: turns the run's partition keys into table partitions
(`dagster_partlake.partitions`), validates them, and calls the Dagster-free `delta` adapter.
`load_input` reads exactly the upstream partitions Dagster's partition mapping asks for and
remembers which table version it read, so `handle_output` of the same step can record, in the
Delta commit and in the materialization metadata, what the new partitions were computed from.
"""

from __future__ import annotations

import json
import os
from typing import Any

from dagster import (
    AssetKey,
    ConfigurableIOManager,
    InputContext,
    MetadataValue,
    OutputContext,
)
from pydantic import Field

from dagster_partlake.delta.reader import open_table, read_snapshot
from dagster_partlake.delta.schema import delta_types, spark_to_arrow
from dagster_partlake.delta.writer import DEFAULT_MAX_ATTEMPTS, commit_staged, stage_partitions
from dagster_partlake.errors import PartlakeError
from dagster_partlake.partitions import (
    KeyCodec,
    dimension_columns,
    selection_for_keys,
    validate_keys,
)
from dagster_partlake.resource import SparkResource

SCHEMA_MODE_KEY = "schema_mode"
FORMAT_KEY = "partlake/format"  # asset metadata: "delta" (default) or "folder" for sources
PATH_KEY = "partlake/path"  # asset metadata: where a source lives, relative to the root
# Partition id of an unpartitioned table (its commit conflict id and its key in records).
WHOLE_TABLE_ID = "__all__"

# What load_input read, per (run id, step key) and upstream asset, until that step's
# handle_output records it: {"version": table version, "partitions": {key: lastUpdated ms}}.
_consumed: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}


def default_root() -> str:
    """`$PARTLAKE_HOME`, else `.partlake` in the working directory."""
    return os.environ.get("PARTLAKE_HOME") or ".partlake"


def table_path(root: str, asset_key: AssetKey, path: str | None = None) -> str:
    """Where the table of an asset lives: `<root>/warehouse/<asset key path>`, or `<root>/<path>`
    for a source whose metadata `partlake/path` says so."""
    if path:
        return os.path.join(os.path.abspath(root), str(path))
    return os.path.join(os.path.abspath(root), "warehouse", *asset_key.path)


class DeltaPartitionIOManager(ConfigurableIOManager):
    """Stores each asset as a Delta table and replaces exactly the partitions of each run.

    Outputs and inputs are Spark DataFrames. Partition dimensions are table columns (same name,
    or asset metadata `partition_expr`); metadata `schema_mode: "add_columns"` lets a write add
    new columns.

    Example:
        .. code-block:: python

            from dagster import Definitions
            from dagster_partlake import DeltaPartitionIOManager, SparkResource

            spark = SparkResource()
            defs = Definitions(
                assets=[...],
                resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
            )
    """

    spark: SparkResource = Field(
        default_factory=SparkResource,
        description="Spark used to read and write tables; the local default if not given.",
    )
    root: str | None = Field(
        default=None,
        description=(
            "Lakehouse root; tables live at <root>/warehouse/<asset key path>. "
            "Default: $PARTLAKE_HOME, else '.partlake' in the working directory."
        ),
    )
    max_commit_attempts: int = Field(
        default=DEFAULT_MAX_ATTEMPTS,
        description="Commit attempts when concurrent writers conflict, before failing the step.",
    )

    def table_root(self, asset_key: AssetKey) -> str:
        return table_path(self.root or default_root(), asset_key)

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        from pyspark.sql import DataFrame

        asset_name = context.asset_key.to_user_string()
        if obj is None and context.dagster_type.is_nothing:
            return
        if not isinstance(obj, DataFrame):
            raise PartlakeError(
                f"asset {asset_name} returned {type(obj).__name__}; DeltaPartitionIOManager "
                "stores Spark DataFrames, so return one (spark.createDataFrame(...) for local "
                "data)."
            )
        partitions_def = context.asset_partitions_def if context.has_asset_partitions else None
        keys = _output_partition_keys(context) if partitions_def is not None else []
        validate_keys(
            partitions_def,
            keys,
            asset_name=asset_name,
            dynamic_partitions_store=_instance(context),
        )
        definition_metadata = context.definition_metadata or {}
        columns = dimension_columns(partitions_def, definition_metadata, asset_name=asset_name)
        column_types = delta_types(spark_to_arrow(obj.schema))
        selection = selection_for_keys(columns, keys, column_types, asset_name=asset_name)
        consumed = _consumed.pop((context.run_id, context.step_key), {})
        code_version = _code_version(context)
        staged = stage_partitions(
            obj,
            self.table_root(context.asset_key),
            partition_by=[c.column for c in columns],
            selection=selection,
            partition_ids=keys or [WHOLE_TABLE_ID],
            allow_new_columns=definition_metadata.get(SCHEMA_MODE_KEY) == "add_columns",
            table_name=asset_name,
        )
        codec = KeyCodec(columns, column_types)
        rows_by_key: dict[str, int] = dict.fromkeys(keys or [WHOLE_TABLE_ID], 0)
        for f in staged.files:
            key = codec.key([f.partition_values[c.column] for c in columns]) if columns else None
            rows_by_key[key or WHOLE_TABLE_ID] = rows_by_key.get(key or WHOLE_TABLE_ID, 0) + (
                f.num_records
            )
        result = commit_staged(
            staged,
            metadata={
                "run_id": context.run_id,
                "asset_key": asset_name,
                "partition_keys": keys,
                "code_version": code_version,
                "upstream_versions": {name: c["version"] for name, c in consumed.items()},
                # lastUpdated of every upstream partition read: what the planner compares with.
                "consumed": {name: c["partitions"] for name, c in consumed.items()},
                "rows_by_partition": rows_by_key,
                "empty_partition_keys": [k for k, n in rows_by_key.items() if n == 0],
            },
            max_attempts=self.max_commit_attempts,
        )
        context.add_output_metadata(
            {
                "dagster/row_count": MetadataValue.int(result.num_records),
                "partlake/table_version": MetadataValue.int(result.version),
                "partlake/path": MetadataValue.path(self.table_root(context.asset_key)),
                "partlake/run_id": MetadataValue.text(context.run_id),
                "partlake/partition_count": MetadataValue.int(len(keys)),
                "partlake/code_version": MetadataValue.text(code_version or ""),
                "partlake/upstream_versions": MetadataValue.json(
                    {name: c["version"] for name, c in consumed.items()}
                ),
                "partlake/files_added": MetadataValue.int(result.files_added),
                "partlake/files_removed": MetadataValue.int(result.files_removed),
                "partlake/commit_attempts": MetadataValue.int(result.attempts),
            }
        )

    def load_input(self, context: InputContext) -> Any:
        asset_key = context.asset_key
        asset_name = asset_key.to_user_string()
        partitions_def = context.asset_partitions_def if context.has_asset_partitions else None
        keys = list(context.asset_partition_keys) if partitions_def is not None else []
        upstream_metadata = (
            context.upstream_output.definition_metadata if context.upstream_output else {}
        )
        columns = dimension_columns(partitions_def, upstream_metadata, asset_name=asset_name)
        if upstream_metadata.get(FORMAT_KEY) == "folder":
            return self._load_folder(context, asset_name, columns, keys, upstream_metadata)
        snapshot = open_table(self.table_root(asset_key), table_name=asset_name)
        selection = selection_for_keys(columns, keys, snapshot.column_types, asset_name=asset_name)
        result = read_snapshot(self.spark.spark_session, snapshot, selection)
        codec = KeyCodec(columns, snapshot.column_types)
        partitions: dict[str, int] = {}
        for f in result.files:
            key = codec.key([f.partition_values[c.column] for c in columns]) if columns else None
            key = key or WHOLE_TABLE_ID
            partitions[key] = max(partitions.get(key, 0), f.modification_time)
        step = context.step_context
        _consumed.setdefault((step.run_id, step.step.key), {})[asset_name] = {
            "version": result.version,
            "partitions": partitions,
        }
        summary = {
            "partlake/table_version": result.version,
            "partlake/files_read": result.num_files,
            "partlake/partition_count": len(keys),
        }
        if len(keys) <= 1:
            context.add_input_metadata(summary)
        else:
            # Dagster 1.13 cannot attach input metadata to several partitions at once.
            context.log.info(f"read {asset_name}: {json.dumps(summary)}")
        return result.df

    def _load_folder(
        self,
        context: InputContext,
        asset_name: str,
        columns: list[Any],
        keys: list[str],
        metadata: Any,
    ) -> Any:
        root = table_path(self.root or default_root(), context.asset_key, metadata.get(PATH_KEY))
        # Folder partition values are strings: time windows match their keys.
        types = {c.column: "string" for c in columns}
        selection = selection_for_keys(columns, keys, types, asset_name=asset_name)
        dirs, chosen = _folder_partitions(root, columns, selection)
        spark = self.spark.spark_session
        if not dirs:
            raise PartlakeError(
                f"source folder {root} has no files for the partitions read by this run "
                f"({', '.join(keys[:5])}); write them first."
            )
        codec = KeyCodec(columns, types)
        step = context.step_context
        _consumed.setdefault((step.run_id, step.step.key), {})[asset_name] = {
            "version": -1,
            "partitions": {
                codec.key(list(values)) or WHOLE_TABLE_ID: updated
                for values, updated in chosen.items()
            },
        }
        df = spark.read.option("basePath", "file://" + root).parquet(*("file://" + d for d in dirs))
        for c in columns:  # folder names are text; keep them as strings, like the keys
            df = df.withColumn(c.column, df[c.column].cast("string"))
        return df


def _folder_partitions(
    root: str, columns: list[Any], selection: Any
) -> tuple[list[str], dict[tuple[str | None, ...], int]]:
    from dagster_partlake.delta.state import folder_state

    state = folder_state(root, [c.column for c in columns])
    if state is None:
        raise PartlakeError(f"source folder {root} does not exist; write the source data first.")
    chosen = {
        values: updated
        for values, updated in state.last_updated.items()
        if selection.contains(dict(zip(state.partition_by, values, strict=True)))
    }
    dirs = [
        os.path.join(root, *(f"{c}={v}" for c, v in zip(state.partition_by, values, strict=True)))
        for values in chosen
    ]
    return dirs, chosen


def _output_partition_keys(context: OutputContext) -> list[str]:
    try:
        return list(context.asset_partition_keys)
    except ValueError:
        # Dagster could not parse the key (e.g. '2024-13-01'); validate_keys explains it.
        return [context.partition_key]


def _instance(context: OutputContext) -> Any:
    try:
        return context.step_context.instance
    except Exception:  # direct invocation outside a run has no instance
        return None


def _code_version(context: OutputContext) -> str | None:
    try:
        return context.asset_spec.code_version
    except Exception:
        return context.version
