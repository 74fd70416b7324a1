"""`ModelSpec`: every partlake setting of one asset, parsed once.

SQLMesh declares a model's kind apart from executing it (`model/kind.py`); here one frozen value
holds what an asset's definition metadata, its partitions definition and its inputs' metadata
say: the model kind, the quality gates, the stream, the run guards, the partition columns, each
input's incremental mode and pin, and where a source lives. It is parsed with the parsers of
each concept (`kinds.spec`, `gates.spec`, `incremental.*`, `partitions.keys`), so a setting is
judged by one piece of code whether the code location is loading, the planner is building its
graph or a run is writing. `spec_of` keeps the spec of each `AssetsDefinition` for the life of
the process: the planner (`planning.graph`) and the IO manager read the same parsed values.

Every error is a `PartlakeConfigError` naming the asset and the setting, with the valid values
or the fix.
"""

from __future__ import annotations

import datetime as dt
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from dagster import AssetKey, AssetsDefinition

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.gates.spec import Gates, gates_of
from dagster_partlake.incremental.guards import RunGuards, guards_of
from dagster_partlake.incremental.landing import AFTER_COMMIT_KEY, AfterCommit, after_commit_of
from dagster_partlake.incremental.spec import INCREMENTAL_KEY, Incremental, incremental_of
from dagster_partlake.incremental.streams import StreamSpec, stream_of
from dagster_partlake.kinds.spec import KIND_KEY, ModelKind, model_kind, writer_of
from dagster_partlake.metadata import (
    FORMAT_KEY,
    KAFKA_KEY,
    PARTITION_EXPR_KEY,
    PARTLAKE_WRITER,
    PATH_KEY,
    POSTGRES_KEY,
    ROOT_KEY,
    SCHEMA_MODE_KEY,
    STREAM_KEY,
    TIMESTAMP_KEY,
    VERSION_KEY,
    WRITER_KEY,
    plain,
    plain_metadata,
)
from dagster_partlake.partitions.keys import DimensionColumn, dimension_columns
from dagster_partlake.partitions.retention import RETENTION_KEY, RetentionRule, retention_of
from dagster_partlake.sources.kafka import KafkaTopic
from dagster_partlake.sources.postgres import PostgresTable
from dagster_partlake.spec.settings import check_keys
from dagster_partlake.storage.location import TableLocation, lake_location, table_location

if TYPE_CHECKING:
    from dagster import PartitionsDefinition

FORMATS = ("delta", "folder", "postgres", "kafka")
External = PostgresTable | KafkaTopic


@dataclass(frozen=True)
class InputSpec:
    """How an asset reads one upstream asset."""

    upstream: str  # the upstream asset's name
    input_name: str | None  # the input that reads it (None: a dependency without an input)
    incremental: Incremental | None = None  # its own `partlake/incremental`, else the asset's
    version: int | None = None  # `partlake/version`: the table read at this version
    timestamp: str | dt.datetime | None = None  # `partlake/timestamp`: ... as of this time

    @property
    def pinned(self) -> bool:
        """Whether the input reads a fixed version or time, so never sees its upstream change."""
        return self.version is not None or self.timestamp is not None


class RawInput(NamedTuple):
    """An input as Dagster declares it: what it reads and its `AssetIn` metadata."""

    upstream: AssetKey
    input_name: str | None
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class ModelSpec:
    """Every partlake setting of one asset (a managed asset or a source), parsed."""

    key: AssetKey
    name: str
    managed: bool  # materialized through partlake's IO manager (False: a source)
    partitions_def: PartitionsDefinition | None
    columns: tuple[DimensionColumn, ...]  # `partition_expr` against the partitions definition
    kind: ModelKind
    gates: Gates = Gates()
    stream: StreamSpec | None = None
    guards: RunGuards = RunGuards()
    inputs: tuple[InputSpec, ...] = ()
    allow_new_columns: bool = False  # `schema_mode: "add_columns"`
    is_folder: bool = False  # `partlake/format: "folder"`: Parquet in col=value/ folders
    # A source outside the lake (`partlake/format` "postgres" or "kafka"): its declaration.
    external: External | None = None
    path: str | None = None  # `partlake/path`: a source's location, relative to its lake root
    root: str | None = None  # `partlake/root`: a source's own lake root (None: the lake's)
    after_commit: AfterCommit | None = None  # a landing folder's consumed files
    writer: str | None = None  # `partlake/writer` (None: the IO manager's writer)
    retention: RetentionRule | None = None  # `partlake/retention` (`partitions.retention`)

    @property
    def dimension_columns(self) -> list[str]:
        return [c.column for c in self.columns]

    @property
    def decoupled(self) -> bool:
        """Whether its table's partitions are not its Dagster partitions (`ModelKind`)."""
        return self.kind.decoupled(self.dimension_columns)

    def input(self, upstream: str) -> InputSpec | None:
        """How the asset reads `upstream` (None: it does not)."""
        return next((i for i in self.inputs if i.upstream == upstream), None)

    def location(self, lake: TableLocation) -> TableLocation:
        """Where the asset's table (or a folder source's folder) lives, in a lake whose root is
        `lake`: the one resolution every reader and writer uses (plan, run, sensor, streams,
        incremental inputs, SQL models, the CLI's history, restore and delete).

        A managed asset's table is `<lake>/warehouse/<key path>`. A source's is the same below
        its own `partlake/root` when it sets one (read with the lake's storage options), or
        its `partlake/path` below that root (an absolute path or a URI as it is).
        """
        base = lake_location(self.root, lake.storage_options) if self.root else lake
        return table_location(base, self.key, self.path)


def model_spec(
    key: AssetKey,
    *,
    metadata: Mapping[str, Any] | None,
    partitions_def: PartitionsDefinition | None,
    managed: bool,
    inputs: Sequence[RawInput] = (),
) -> ModelSpec:
    """Parse and check every partlake setting of one asset.

    Args:
        key: the asset's key.
        metadata: its definition metadata.
        partitions_def: its partitions definition (None: unpartitioned).
        managed: whether partlake's IO manager materializes it (False: a source).
        inputs: its inputs, each with its `AssetIn` metadata.

    Raises:
        PartlakeConfigError: a setting is unknown, malformed or does not fit the asset; the
            message names the asset and the setting.
    """
    name = key.to_user_string()
    metadata = plain_metadata(metadata)
    check_keys(metadata, on="asset", owner=f"asset {name}")
    if PARTITION_EXPR_KEY in metadata and partitions_def is None:
        raise PartlakeConfigError(
            f"asset {name} sets {PARTITION_EXPR_KEY}, but it has no partitions_def, so no "
            "partition dimension to store; remove it, or give the asset a partitions_def."
        )
    columns = tuple(dimension_columns(partitions_def, metadata, asset_name=name))
    kind = model_kind(metadata, partitioned=partitions_def is not None, asset_name=name)
    gates = gates_of(metadata, asset_name=name, kind=kind.kind)
    stream = stream_of(metadata, asset_name=name)
    if stream is not None and (kind.kind != "append" or gates):
        raise PartlakeConfigError(
            f"streaming asset {name} is of kind {kind.kind!r}"
            f"{' with quality gates' if kind.kind == 'append' else ''}; a stream appends each "
            f"micro-batch, so remove '{KIND_KEY}' (or set 'append') and its "
            "'partlake/constraints' / 'partlake/audits'."
        )
    is_folder, path, root, after_commit = _location(metadata, name, managed)
    external = _external(metadata, name, managed)
    writer = None
    if WRITER_KEY in metadata:  # checked here; the IO manager's default at the write
        writer = writer_of(metadata, PARTLAKE_WRITER, kind=kind.kind, asset_name=name)
    default = incremental_of(None, metadata, input_name="(every input)", asset_name=name)
    return ModelSpec(
        key=key,
        name=name,
        managed=managed,
        partitions_def=partitions_def,
        columns=columns,
        kind=kind,
        gates=gates,
        stream=stream,
        guards=guards_of(metadata, asset_name=name),
        inputs=tuple(_input(raw, name, default) for raw in inputs),
        allow_new_columns=_schema_mode(metadata, name),
        is_folder=is_folder,
        external=external,
        path=path,
        root=root,
        after_commit=after_commit,
        writer=writer,
        retention=retention_of(
            metadata.get(RETENTION_KEY),
            partitions_def,
            columns,
            asset_name=name,
        ),
    )


def _schema_mode(metadata: Mapping[str, Any], name: str) -> bool:
    value = plain(metadata.get(SCHEMA_MODE_KEY))
    if value not in (None, "add_columns"):
        raise PartlakeConfigError(
            f"asset {name} has {SCHEMA_MODE_KEY} {value!r}; the one mode is 'add_columns' (a "
            "write may add new columns); remove the entry to refuse new columns."
        )
    return value == "add_columns"


def _location(
    metadata: Mapping[str, Any], name: str, managed: bool
) -> tuple[bool, str | None, str | None, AfterCommit | None]:
    """(is_folder, path, root, after_commit) of a source; a managed asset has none of them."""
    fmt = metadata.get(FORMAT_KEY, "delta")
    if fmt not in FORMATS:
        raise PartlakeConfigError(
            f"asset {name} has {FORMAT_KEY} {fmt!r}; use 'delta' (the default), 'folder' "
            "(Parquet files in col=value/ folders), 'postgres' or 'kafka' (partlake_source("
            "..., postgres=PostgresTable(...)) or kafka=KafkaTopic(...))."
        )
    path, root = metadata.get(PATH_KEY), metadata.get(ROOT_KEY)
    if path is not None and (not isinstance(path, str) or not path):
        raise PartlakeConfigError(
            f"asset {name} has {PATH_KEY} {path!r}; give the source's location as a string, "
            "relative to the lake root (or absolute)."
        )
    if root is not None and (not isinstance(root, str) or not root):
        raise PartlakeConfigError(
            f"asset {name} has {ROOT_KEY} {root!r}; give the source's lake root as a string: "
            "a path (relative to the working directory) or a URI such as 's3://bucket/lake'."
        )
    located = (
        (FORMAT_KEY, fmt if fmt != "delta" else None),
        (PATH_KEY, path),
        (ROOT_KEY, root),
    )
    for key, value in located:
        if managed and value is not None:
            raise PartlakeConfigError(
                f"asset {name} sets {key} {value!r}, but it is materialized by partlake, which "
                "keeps its Delta table at <root>/warehouse/<asset key path>; remove it (it "
                "describes a source written by another system: partlake_source(..., "
                "folder=True, path=...))."
            )
    after_commit = after_commit_of(metadata.get(AFTER_COMMIT_KEY), asset_name=name)
    if after_commit is not None and fmt != "folder":
        raise PartlakeConfigError(
            f"source {name} sets {AFTER_COMMIT_KEY}, which moves consumed files of a folder; "
            f"set {FORMAT_KEY} 'folder' (partlake_source(..., folder=True)), or remove it."
        )
    return fmt == "folder", path, root, after_commit


def _external(metadata: Mapping[str, Any], name: str, managed: bool) -> External | None:
    """The declaration of a PostgreSQL or Kafka source (None: a Delta table or a folder)."""
    fmt = metadata.get(FORMAT_KEY, "delta")
    for kind, key in (("postgres", POSTGRES_KEY), ("kafka", KAFKA_KEY)):
        settings = metadata.get(key)
        if settings is not None and fmt != kind:
            raise PartlakeConfigError(
                f"asset {name} sets {key} but {FORMAT_KEY} is {fmt!r}; declare it with "
                f"partlake_source(..., {kind}=...), which sets both."
            )
        if fmt == kind:
            if managed:
                raise PartlakeConfigError(
                    f"asset {name} is materialized by partlake, so it cannot be a {kind} "
                    f"source; declare the {kind} source with partlake_source(..., {kind}=...) "
                    "and read it from the asset."
                )
            if not isinstance(settings, Mapping):
                raise PartlakeConfigError(
                    f"source {name} has {FORMAT_KEY} {kind!r} without {key}; declare it with "
                    f"partlake_source(..., {kind}=...)."
                )
            declared = PostgresTable if kind == "postgres" else KafkaTopic
            return declared.from_settings(settings, source=name)
    return None


def _input(raw: RawInput, name: str, default: Incremental | None) -> InputSpec:
    upstream = raw.upstream.to_user_string()
    input_name = raw.input_name or upstream
    metadata = plain_metadata(raw.metadata)
    check_keys(metadata, on="input", owner=f"input {input_name} of asset {name}")
    version, timestamp = pin_of(metadata, input_name=input_name, asset_name=name)
    incremental = (
        incremental_of(metadata, None, input_name=input_name, asset_name=name)
        if INCREMENTAL_KEY in metadata
        else default
    )
    return InputSpec(upstream, raw.input_name, incremental, version, timestamp)


def pin_of(
    metadata: Mapping[str, Any], *, input_name: str, asset_name: str
) -> tuple[int | None, str | dt.datetime | None]:
    """The (version, timestamp) an input pins its upstream table to with its `AssetIn`
    metadata `partlake/version` or `partlake/timestamp` (neither: (None, None), the latest).

    Raises:
        PartlakeConfigError: both are set, or either is malformed.
    """
    version, timestamp = plain(metadata.get(VERSION_KEY)), plain(metadata.get(TIMESTAMP_KEY))
    where = f"input {input_name} of asset {asset_name}"
    if version is not None and timestamp is not None:
        raise PartlakeConfigError(
            f"the {where} pins both {VERSION_KEY} and {TIMESTAMP_KEY}; keep one."
        )
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 0
    ):
        raise PartlakeConfigError(
            f"{VERSION_KEY} of {where} is {version!r}; it must be a Delta table version, an "
            "integer >= 0."
        )
    if timestamp is not None and not isinstance(timestamp, (str, dt.datetime)):
        raise PartlakeConfigError(
            f"{TIMESTAMP_KEY} of {where} is {timestamp!r}; it must be an ISO 8601 string such "
            "as '2024-01-02T00:00:00Z' or a datetime."
        )
    if isinstance(timestamp, str):
        try:
            dt.datetime.fromisoformat(timestamp)
        except ValueError as error:
            raise PartlakeConfigError(
                f"{TIMESTAMP_KEY} of {where} is {timestamp!r}, not ISO 8601; write it like "
                "'2024-01-02T00:00:00Z'."
            ) from error
    return version, timestamp


def check_input(consumer: ModelSpec, upstream: ModelSpec) -> None:
    """What can only be judged with both ends of an edge: a streaming asset and its input.

    A partitioned streaming asset runs without a partition key (its batches write whatever
    partitions their rows are in), and Dagster cannot start such a run of an asset whose input
    is partitioned; a stream reads a folder's files with a format, a Delta table's commits
    without one.

    Raises:
        PartlakeConfigError: naming the asset, its input and the fix.
    """
    stream = consumer.stream
    if consumer.managed and isinstance(upstream.external, KafkaTopic) and stream is None:
        raise PartlakeConfigError(
            f"asset {consumer.name} reads the Kafka topic source {upstream.name}; a topic is "
            f"read by a streaming asset: add metadata {{'{STREAM_KEY}': {{}}}} to "
            f"{consumer.name} (its micro-batches are committed exactly once)."
        )
    if stream is None or not consumer.managed or upstream.name == consumer.name:
        return
    if isinstance(upstream.external, PostgresTable):
        raise PartlakeConfigError(
            f"streaming asset {consumer.name} reads the PostgreSQL source {upstream.name}; a "
            "table is read in batches of partitions: remove partlake/stream (each run reads "
            "exactly the partitions it needs)."
        )
    if consumer.partitions_def is not None and upstream.partitions_def is not None:
        raise PartlakeConfigError(
            f"streaming asset {consumer.name} is partitioned and reads the partitioned asset "
            f"{upstream.name}; Dagster runs a partitioned asset without a partition key only "
            f"when its inputs are unpartitioned. Drop {consumer.name}'s partitions_def and keep "
            f"its table partitioned with metadata 'partlake/partition_by', or read "
            f"{upstream.name}'s table through an unpartitioned partlake_source(..., path=...)."
        )
    if isinstance(upstream.external, KafkaTopic):
        if stream.format is not None:
            raise PartlakeConfigError(
                f"{STREAM_KEY} of asset {consumer.name}: the stream input {upstream.name} is a "
                "Kafka topic, whose messages have no file format; remove 'format' (parse the "
                "message value in the asset, e.g. F.from_json(F.col('value').cast('string'), "
                "schema))."
            )
        return
    if upstream.is_folder != (stream.format is not None):
        fix = (
            "set 'format' to json, csv or parquet."
            if upstream.is_folder
            else "remove 'format' (a table's new commits are read from its log)."
        )
        raise PartlakeConfigError(
            f"{STREAM_KEY} of asset {consumer.name}: the stream input {upstream.name} is a "
            f"{'folder of files' if upstream.is_folder else 'Delta table'}, but "
            f"{STREAM_KEY} {'gives no' if upstream.is_folder else 'gives a'} format; {fix}"
        )


# Per AssetsDefinition (Dagster's objects live as long as their code location), its specs by
# key. A weak map: a test building definitions in a loop does not keep them alive.
_SPECS: weakref.WeakKeyDictionary[AssetsDefinition, dict[AssetKey, ModelSpec]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()


def spec_of(assets_def: AssetsDefinition, key: AssetKey) -> ModelSpec:
    """The spec of asset `key` of `assets_def`, parsed on first use and kept.

    Raises:
        PartlakeConfigError: as `model_spec`.
    """
    with _LOCK:
        found = _SPECS.get(assets_def, {}).get(key)
    if found is not None:
        return found
    asset_spec = assets_def.specs_by_key[key]
    spec = model_spec(
        key,
        metadata=asset_spec.metadata,
        partitions_def=asset_spec.partitions_def,
        managed=assets_def.is_materializable,
        inputs=raw_inputs(assets_def, key) if assets_def.is_materializable else (),
    )
    with _LOCK:
        _SPECS.setdefault(assets_def, {})[key] = spec
    return spec


def raw_inputs(assets_def: AssetsDefinition, key: AssetKey) -> list[RawInput]:
    """The upstream assets of `key` with the metadata of the inputs that read them (a
    dependency without an input has none), in dependency order."""
    by_upstream: dict[AssetKey, tuple[str | None, Mapping[str, Any]]] = {}
    for name, upstream in assets_def.node_keys_by_input_name.items():
        input_def = assets_def.node_def.input_def_named(name)
        by_upstream.setdefault(upstream, (name, dict(input_def.metadata or {})))
    return [
        RawInput(dep.asset_key, *by_upstream.get(dep.asset_key, (None, {})))
        for dep in assets_def.specs_by_key[key].deps
    ]
