"""`partlake_source`: a table written by another system, as an observable Dagster source asset.

Observing it reports one data version per partition (its lastUpdated, read from the Delta log or,
for a folder of files, from file modification times), so the Dagster UI shows when each source
partition last changed. Assets read it through `DeltaPartitionIOManager` like any other input.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import Any

from dagster import (
    AssetKey,
    BetaWarning,
    DataVersion,
    DataVersionsByPartition,
    PartitionsDefinition,
    SourceAsset,
    observable_source_asset,
)

from dagster_partlake.catalog.config import LakeCatalog
from dagster_partlake.catalog.naming import TABLE_NAME_KEY
from dagster_partlake.delta.state import StateCache
from dagster_partlake.errors import CatalogError, PartlakeConfigError
from dagster_partlake.incremental.landing import AFTER_COMMIT_KEY, AfterCommit, after_commit_of
from dagster_partlake.metadata import FORMAT_KEY, KAFKA_KEY, PATH_KEY, POSTGRES_KEY, ROOT_KEY
from dagster_partlake.partitions.retention import check_source_rule
from dagster_partlake.planning.convert import read_state, to_partition_states
from dagster_partlake.planning.graph import LakeAsset, io_manager_lake
from dagster_partlake.sources.kafka import KafkaTopic
from dagster_partlake.sources.postgres import PostgresTable
from dagster_partlake.spec.model import ModelSpec, model_spec
from dagster_partlake.storage.location import TableLocation, lake_location

_cache = StateCache()


def partlake_source(
    key: str | AssetKey,
    *,
    partitions_def: PartitionsDefinition | None = None,
    folder: bool = False,
    path: str | None = None,
    root: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    io_manager_key: str = "io_manager",
    after_commit: AfterCommit | None = None,
    postgres: PostgresTable | None = None,
    kafka: KafkaTopic | None = None,
    table: str | None = None,
    catalog: LakeCatalog | None = None,
) -> SourceAsset:
    """An observable source asset over a Delta table (default, or by `table` name), a folder of
    Parquet files, a PostgreSQL table or query (`postgres`) or a Kafka topic (`kafka`).

    Args:
        key: asset key; the table is at `<root>/warehouse/<key path>` unless `path` is given.
        partitions_def: the source's partitions (columns as for managed assets, `partition_expr`).
        folder: the source is a folder with `col=value/` sub-folders instead of a Delta table.
        path: location relative to the source's lake root (an absolute path or a URI such as
            `s3://bucket/raw` is used as it is).
        root: the source's own lake root (a path, relative to the working directory, or a
            URI); its table is then `<root>/warehouse/<key path>`, or `<root>/<path>`. Default:
            the `root` of the `DeltaPartitionIOManager` under `io_manager_key`, else
            `$PARTLAKE_HOME`, else `.partlake`. Read with the IO manager's storage options.
        metadata: extra asset metadata (e.g. `partition_expr`).
        group_name, description, io_manager_key: as for any Dagster asset.
        after_commit: a folder whose files are consumed once: after the commit of the run that
            read them, move them to `<folder>/_archive/` ("archive") or delete them ("delete")
            (`dagster_partlake.incremental.landing`).
        postgres: the source is a PostgreSQL table (or query), its partition dimensions in the
            columns `partition_expr` names (`dagster_partlake.sources.postgres`).
        kafka: the source is a Kafka topic, read by a streaming asset (`sources.kafka`).
        table, catalog: the source is the Delta table `catalog`'s metastore (default: partlake's
            own) registers as `table` (`schema.table`), looked up once, now, then planned and
            read as a source at that path; a `CatalogError` if it is not there or not Delta.
    """
    asset_key = AssetKey.from_coercible(key)
    name = asset_key.to_user_string()
    if table is not None:
        elsewhere = folder or path is not None or root is not None or bool(postgres or kafka)
        path, metadata = _by_name(name, table, catalog, metadata, elsewhere=elsewhere)
    full_metadata = _declaration(
        name,
        dict(metadata or {}),
        folder=folder,
        path=path,
        root=root,
        after_commit=after_commit,
        postgres=postgres,
        kafka=kafka,
    )
    # Checked now, as every reader will parse it: the plan, runs, the sensor, the CLI.
    spec = model_spec(
        asset_key, metadata=full_metadata, partitions_def=partitions_def, managed=False
    )
    check_source_rule(spec.retention, name)

    def _observe(context) -> DataVersionsByPartition | DataVersion:  # noqa: ANN001 - Dagster checks it
        lake = io_manager_lake([getattr(context.resources, io_manager_key)])
        return _observed(spec, lake, name=name, partitions_def=partitions_def, folder=folder)

    # Dagster marks observable sources beta; partlake relies on them knowingly, so a user's
    # terminal does not show the warning for a call they did not write.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        return observable_source_asset(
            key=asset_key,
            partitions_def=partitions_def,
            metadata=full_metadata,
            io_manager_key=io_manager_key,
            group_name=group_name,
            description=description,
            required_resource_keys={io_manager_key},
        )(_observe)


def _by_name(
    name: str,
    table: str,
    catalog: LakeCatalog | None,
    metadata: Mapping[str, Any] | None,
    *,
    elsewhere: bool,
) -> tuple[str, dict[str, Any]]:
    """The path and metadata of source `name` declared by `table`'s name (`elsewhere`: it also
    says where it is some other way, which is refused)."""
    if elsewhere:
        raise PartlakeConfigError(
            f"source {name} sets table={table!r} with folder, path, root, postgres or kafka; a "
            "source by name is found through the metastore: give only table=."
        )
    path = _registered_path(name, table, catalog)
    return path, {TABLE_NAME_KEY: table.lower(), **(metadata or {})}


def _registered_path(name: str, table: str, catalog: LakeCatalog | None) -> str:
    """Where the Delta table `table` lives, as its metastore entry says (a local path or an
    object store URI that `TableLocation` reads).

    Raises:
        CatalogError: no such entry, not a Delta table, or the metastore does not answer.
    """
    catalog = catalog or LakeCatalog()

    def say(message: str) -> None:
        print(f"partlake: source {name}: {message}", file=sys.stderr)

    with catalog.connect(start=True, say=say) as metastore:
        entry = metastore.entry(table)
    if entry is None:
        raise CatalogError(
            f"source {name}: no table {table} in the metastore at {catalog.uri}. Check the name "
            f"(`partlake sql-server query 'SHOW TABLES IN {table.partition('.')[0]}'` lists the "
            "schema's tables), or declare the source by path= instead."
        )
    if not entry.is_delta:
        raise CatalogError(
            f"source {name}: {table} in the metastore at {catalog.uri} is a {entry.provider} "
            f"table at {entry.location}, not a Delta table; partlake plans sources from a Delta "
            "log. Declare it another way (folder=True for a folder of Parquet files)."
        )
    return TableLocation.parse(entry.location).uri


def _declaration(
    name: str,
    full_metadata: dict[str, Any],
    *,
    folder: bool,
    path: str | None,
    root: str | None,
    after_commit: AfterCommit | None,
    postgres: PostgresTable | None,
    kafka: KafkaTopic | None,
) -> dict[str, Any]:
    """The source's metadata with what `partlake_source` was given (checked: one kind of
    source, `after_commit` only on a folder)."""
    external = [kind for kind, given in (("postgres", postgres), ("kafka", kafka)) if given]
    if external and (folder or path is not None or root is not None or len(external) > 1):
        raise PartlakeConfigError(
            f"source {name} sets {' and '.join(external)} with folder, path or root; a source "
            "is one of: a Delta table (path/root), a folder (folder=True), a PostgreSQL table "
            "(postgres=...) or a Kafka topic (kafka=...)."
        )
    if postgres is not None:
        full_metadata[FORMAT_KEY] = "postgres"
        full_metadata[POSTGRES_KEY] = postgres.settings()
    if kafka is not None:
        full_metadata[FORMAT_KEY] = "kafka"
        full_metadata[KAFKA_KEY] = kafka.settings()
    if folder:
        full_metadata[FORMAT_KEY] = "folder"
    # An empty path or root is handed on, and refused by the check below, rather than
    # silently meaning the default location.
    if path is not None:
        full_metadata[PATH_KEY] = path
    if root is not None:
        full_metadata[ROOT_KEY] = root
    if after_commit_of(after_commit, asset_name=name) is not None:
        if not folder:
            raise PartlakeConfigError(
                f"source {name} sets after_commit={after_commit!r}, which moves consumed files "
                "of a folder; add folder=True (a Delta table's files belong to its log)."
            )
        full_metadata[AFTER_COMMIT_KEY] = after_commit
    return full_metadata


def _observed(
    spec: ModelSpec,
    lake: TableLocation | None,
    *,
    name: str,
    partitions_def: PartitionsDefinition | None,
    folder: bool,
) -> DataVersionsByPartition | DataVersion:
    """The source's data versions: each partition's lastUpdated (one version if unpartitioned,
    "absent" before it exists), read where the source is declared in `lake` (default: the
    lake of `$PARTLAKE_HOME`)."""
    location = spec.location(lake if lake is not None else lake_location())
    asset = LakeAsset(
        key=spec.key,
        name=name,
        partitions_def=partitions_def,
        columns=spec.columns,
        path=location.uri,
        location=location,
        is_source=True,
        is_folder=folder,
        external=spec.external,
        code_version=None,
        parents=(),
    )
    states = to_partition_states(asset, read_state(asset, _cache))
    if partitions_def is None:
        state = states.get(None)
        return DataVersion(str(state.last_updated) if state else "absent")
    return DataVersionsByPartition(
        {key: DataVersion(str(s.last_updated)) for key, s in states.items() if key}
    )
