"""DeltaPartitionIOManager: Spark DataFrames in and out of partitioned Delta tables.

The Dagster side of storage: turns the run's partition keys into table partitions
(`dagster_partlake.partitions.keys`), validates them, and calls the Dagster-free `delta` adapter.
`load_input` reads exactly the upstream partitions Dagster's partition mapping asks for and
remembers, per step, which table version and partition states it read, so `handle_output` of the
same step can record, in the Delta commit (`CommitRecord`) and in the materialization metadata,
what each new partition was computed from: every output records the inputs of its own upstream
assets (in a multi-asset step, not the other outputs' inputs). An asset's settings (kind, gates,
partition columns, run guards, its inputs' pins and incremental modes) come from its `ModelSpec`
(`dagster_partlake.spec`), parsed once per asset and process, the one the planner reads.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from dagster import (
    AssetKey,
    ConfigurableIOManager,
    DagsterInvariantViolationError,
    InitResourceContext,
    InputContext,
    MetadataValue,
    OutputContext,
)
from pydantic import Field

if TYPE_CHECKING:
    from dagster import AssetsDefinition, DagsterInstance, PartitionsDefinition
    from pyspark.sql import DataFrame

    from dagster_partlake.delta.reader import TableSnapshot
    from dagster_partlake.delta.table import LiveFile
    from dagster_partlake.gates.before_commit import GateCheck
    from dagster_partlake.io_manager.streaming import StreamRun
    from dagster_partlake.kinds.write import KindWrite, WriteTarget

from dagster_partlake.catalog.config import LakeCatalog
from dagster_partlake.delta.defaults import DEFAULT_MAX_ATTEMPTS
from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.delta.schema import delta_types, spark_to_arrow
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.state import StateCache, folder_state
from dagster_partlake.delta.table import table_exists
from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.gates.checks import log_gate_results
from dagster_partlake.gates.spec import Gates
from dagster_partlake.incremental.guards import RunFacts, judge_guards
from dagster_partlake.incremental.landing import ARCHIVE_DIR, AfterCommit, data_files, finish
from dagster_partlake.incremental.spec import Incremental
from dagster_partlake.incremental.streams import STREAM_KEY, StreamSpec
from dagster_partlake.kinds.spec import writer_of
from dagster_partlake.metadata import CATALOG_KEY, REASONS_TAG, SKIPPED_KEY, WRITER_KEY, plain
from dagster_partlake.partitions.keys import (
    DimensionColumn,
    KeyCodec,
    selection_for_keys,
    validate_keys,
)
from dagster_partlake.processes import record_worker, run_committed, run_hooks_done
from dagster_partlake.records.queries import newest_record
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.sources.kafka import KafkaTopic
from dagster_partlake.spark.resource import SparkResource, take_session_starts
from dagster_partlake.spec.model import (
    InputSpec,
    ModelSpec,
    check_input,
    model_spec,
    pin_of,
    spec_of,
)
from dagster_partlake.storage.location import TableLocation, lake_location, table_location
from dagster_partlake.storage.options import redacted


@dataclass(frozen=True)
class _Read:
    """What load_input read of one upstream asset."""

    version: int  # table version
    partitions: dict[str, int]  # partition id -> lastUpdated (ms): what the run consumed
    rows: int | None = None  # rows the input held, where the log or the read counted them
    watermark: Mapping[str, str] | None = None  # an incremental input's high watermark
    # A landing folder consumed once: its place, what to do after the commit, the files read.
    landing: tuple[TableLocation, AfterCommit, tuple[str, ...]] | None = None
    root: str | TableLocation = ""  # where the input lives (a streaming input's folder or table)
    incremental: bool = False  # only what the consumer had not read (`partlake/incremental`)
    # load_input's time: the table's log, the list of the partitions' files, Spark's read plan.
    seconds: float = 0.0


# Per (run id, step key): upstream asset -> what load_input read, kept until the run's teardown
# so that every output of a step records its inputs. Shared by the process's IO managers: an
# input may be loaded by another IO manager than the one writing the output (a source read
# through `partlake_source(io_manager_key=...)`), and the output's commit records it all the same.
_READS: dict[tuple[str, str], dict[str, _Read]] = {}
_READS_LOCK = threading.Lock()


def _committed(context: OutputContext) -> None:
    """Say that an output of the run committed: what the layers above want done then
    (`processes.run_committed`: the next level of a refresh) runs beside the run's next steps."""
    try:
        run = context.step_context.dagster_run
        instance = context.step_context.instance
    except DagsterInvariantViolationError:
        return  # outside a run
    run_committed(run, instance, context.log)


def _forget_reads(run_id: str) -> None:
    with _READS_LOCK:
        for key in [k for k in _READS if k[0] == run_id]:
            del _READS[key]


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
            "Lake root; tables live at <root>/warehouse/<asset key path>. "
            "Default: $PARTLAKE_HOME, else '.partlake' in the working directory."
        ),
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Options of the object store the lake lives on, as delta-rs names them "
            "(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, "
            "AWS_ALLOW_HTTP, AZURE_STORAGE_ACCOUNT_NAME, ...); the standard environment variables "
            "supply what is not given. Never logged or recorded."
        ),
    )
    max_commit_attempts: int = Field(
        default=DEFAULT_MAX_ATTEMPTS,
        ge=1,
        description="Commit attempts when concurrent writers conflict, before failing the step.",
    )
    writer: Literal["partlake", "delta-spark"] = Field(
        default="partlake",
        description=(
            "Who commits each write: 'partlake' (Spark's Python workers write the files, "
            "delta-rs commits; no Delta JARs needed) or 'delta-spark' (Spark's own Delta "
            "writes and commits, for the kinds partition and table, on local tables; needs the "
            "Delta JARs on the Spark session). An asset's metadata 'partlake/writer' overrides it."
        ),
    )

    catalog: LakeCatalog | None = Field(
        default=None,
        description=(
            "A Hive metastore to register every table in as <schema>.<table> on its first "
            "commit, its schema kept up to date (`dagster_partlake.LakeCatalog`); None: tables "
            "are known by their location only."
        ),
    )

    def setup_for_execution(self, context: InitResourceContext) -> None:
        run = context.dagster_run
        if run is None or context.instance is None:
            return
        # The run's worker names itself on the run, so run monitoring's health check
        # (`MonitoredRunLauncher`) knows which process to ask about.
        record_worker(context.instance, run)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        run = context.dagster_run
        if run is not None:
            _forget_reads(run.run_id)
            # What its commits asked for is done before the run ends.
            run_hooks_done(run.run_id)

    def __repr_args__(self) -> Any:
        # Secrets never reach a repr, and so no log line or error message that shows one.
        for name, value in super().__repr_args__():
            yield name, (redacted(value) if name == "storage_options" else value)

    def lake_location(self) -> TableLocation:
        """The lake root, with the IO manager's storage options."""
        return lake_location(self.root, self.storage_options)

    def table_location(self, asset_key: AssetKey, path: str | None = None) -> TableLocation:
        """Where a managed asset's table lives (`path`: a source's `partlake/path`; a source's
        reads resolve its whole declaration through `location_of`)."""
        return table_location(self.lake_location(), asset_key, path)

    def location_of(self, spec: ModelSpec) -> TableLocation:
        """Where the asset of `spec` lives in this IO manager's lake (`ModelSpec.location`:
        a source's `partlake/root` and `partlake/path` included)."""
        return spec.location(self.lake_location())

    def table_root(self, asset_key: AssetKey) -> str:
        """The asset's table, as a path (a local lake) or a URI."""
        return self.table_location(asset_key).uri

    # Spark, delta-rs and the readers and writers are imported where a step needs them: loading
    # the code location (as a no-op `partlake run` does) must not.

    def handle_output(
        self, context: OutputContext, obj: DataFrame | Mapping[str, DataFrame] | None
    ) -> None:
        """Write the output: a DataFrame, or for an in-order kind (`merge`, `scd2`) over several
        partitions `{partition key: DataFrame}`, applied one partition after the other
        (`dagster_partlake.kinds.units`)."""
        from pyspark.sql import DataFrame

        from dagster_partlake.kinds.units import in_order

        entered = time.perf_counter()
        if obj is None and context.dagster_type.is_nothing:
            return
        first = next(iter(obj.values()), None) if isinstance(obj, Mapping) else obj
        if not isinstance(first, DataFrame):
            raise PartlakeError(
                f"asset {context.asset_key.to_user_string()} returned "
                f"{type(first if isinstance(obj, Mapping) else obj).__name__}"
                f"{' in a mapping' if isinstance(obj, Mapping) else ''}; DeltaPartitionIOManager "
                "stores Spark DataFrames, so return one (spark.createDataFrame(...) for local "
                "data), or for a merge or scd2 run of several partitions one per partition key."
            )
        if isinstance(obj, DataFrame) and obj.isStreaming:
            self._handle_stream(context, obj)
            return
        target = self._target(context, first)
        ordered = in_order(target, obj)
        if isinstance(obj, Mapping) and not ordered:
            raise PartlakeConfigError(
                f"asset {target.asset_name} ({target.kind.kind}) returned a mapping of "
                "DataFrames; only a merge or scd2 asset with a time dimension applies its "
                "partitions one by one. Return one DataFrame."
            )
        reads = self._inputs_of(context)
        reads = {**self._dependencies_read(context, target, reads), **reads}
        incremental = any(r.incremental or r.landing is not None for r in reads.values())
        target = replace(target, incremental_inputs=incremental)
        if ordered and incremental and len(target.keys) > 1:
            raise PartlakeConfigError(
                f"{target.kind.kind} asset {target.asset_name} got {len(target.keys)} partitions "
                "in one run and reads an input only once (incrementally, or a landing folder): "
                "each partition's commit would record what the whole run read. Remove its "
                "backfill policy so that each run applies one partition. Nothing was committed."
            )
        upstream_versions = {name: read.version for name, read in reads.items()}
        record = CommitRecord(
            asset_key=target.asset_name,
            partition_keys=tuple(target.keys),
            code_version=_code_version(context),
            run_id=context.run_id,
            # lastUpdated of every upstream partition read: what the planner compares with.
            consumed={name: read.partitions for name, read in reads.items()},
            upstream_versions=upstream_versions,
            watermarks={n: r.watermark for n, r in reads.items() if r.watermark is not None},
            consumed_files={n: r.landing[2] for n, r in reads.items() if r.landing},
        )
        skip = self._skip(context, first, list(target.keys), reads)
        started = time.perf_counter()
        written = self._write(
            context, obj if obj is not None else first, target, record, skip=skip, ordered=ordered
        )
        write_seconds = time.perf_counter() - started
        _after_write(context, target, written, reads)
        catalog_metadata = self._register(
            context, target.root, committed=written.commit is not None
        )
        timings = _Timings(
            write=write_seconds,
            spark_start=take_session_starts(),
            read=sum(read.seconds for read in reads.values()),
            output=time.perf_counter() - entered,
        )
        metadata = _output_metadata(context, target, written, record, timings)
        if skip is not None:
            # What `partlake run`'s line and the UI show of a run its guards skipped.
            metadata[SKIPPED_KEY] = MetadataValue.text(skip)
        context.add_output_metadata({**metadata, **catalog_metadata})
        _committed(context)

    def _register(
        self, context: OutputContext, root: str | TableLocation, *, committed: bool
    ) -> dict[str, Any]:
        """Once a commit landed: the table registered under its catalog name (a warning, never
        a failure, when that cannot be done); the name as the output's `dagster/table_name`."""
        if self.catalog is None:
            return {}
        from dagster_partlake.catalog.naming import TABLE_NAME_KEY
        from dagster_partlake.catalog.register import after_commit

        explicit = context.definition_metadata.get(TABLE_NAME_KEY)
        explicit = plain(explicit) if explicit is not None else None
        name = self.catalog.table_name(
            context.asset_key.path, explicit if isinstance(explicit, str) else None
        )
        metadata: dict[str, Any] = {TABLE_NAME_KEY: MetadataValue.text(name)}
        if committed:
            location = (
                root if isinstance(root, TableLocation) else self.table_location(context.asset_key)
            )
            done = after_commit(
                self.catalog, name, location, context.log.warning, say=context.log.info
            )
            if done is not None:
                context.log.info(f"catalog: {done.describe()}, {done.seconds * 1000:.0f} ms")
                metadata[CATALOG_KEY] = MetadataValue.text(done.outcome)
        return metadata

    def _write(
        self,
        context: OutputContext,
        obj: DataFrame | Mapping[str, DataFrame],
        target: WriteTarget,
        record: CommitRecord,
        *,
        skip: str | None,
        ordered: bool,
    ) -> KindWrite:
        """The output's commit(s): one write, or an in-order kind's partitions one by one."""
        from pyspark.sql import DataFrame

        from dagster_partlake.kinds.units import units_of
        from dagster_partlake.kinds.write import write_in_order, write_output

        with self.spark.server_errors():
            if not ordered:
                assert isinstance(obj, DataFrame)
                return write_output(obj, target, record, skip=skip)
            gates = _output_spec(context).gates
            return write_in_order(
                units_of(obj, target),
                replace(target, check=None),
                record,
                skip=skip,
                check_for=lambda unit: _gate_check(context, unit, gates) if gates else None,
            )

    def _target(self, context: OutputContext, obj: DataFrame) -> WriteTarget:
        """Where and how the output is written, its partition keys validated first.

        Raises:
            PartitionMismatchError: a partition key is not one of the asset's.
            PartlakeConfigError: the asset's kind, gates or partition columns are misdeclared.
        """
        from dagster_partlake.kinds.write import WriteTarget

        asset_name = context.asset_key.to_user_string()
        partitions_def = context.asset_partitions_def if context.has_asset_partitions else None
        keys = _output_partition_keys(context) if partitions_def is not None else []
        validate_keys(
            partitions_def, keys, asset_name=asset_name, dynamic_partitions_store=_instance(context)
        )
        spec = _output_spec(context)
        kind = spec.kind
        target = WriteTarget(
            root=self.location_of(spec),
            asset_name=asset_name,
            kind=kind,
            columns=list(spec.columns) if partitions_def is not None else [],
            column_types=delta_types(spark_to_arrow(obj.schema)),
            keys=keys,
            allow_new_columns=spec.allow_new_columns,
            max_attempts=self.max_commit_attempts,
            snapshot_time=_snapshot_time(context) if kind.kind == "scd2" else None,
            # A run partlake planned writes only what no other run wrote from the same inputs
            # (two `partlake run`s on one stale plan); a run a user starts always writes.
            once_per_inputs=REASONS_TAG in _run_tags(context),
            writer=writer_of(
                _writer_setting(spec), self.writer, kind=kind.kind, asset_name=asset_name
            ),
        )
        gates = spec.gates
        return replace(target, check=_gate_check(context, target, gates)) if gates else target

    def _handle_stream(self, context: OutputContext, obj: DataFrame) -> None:
        """A streaming asset's output: run its query (`io_manager.streaming`), each micro-batch
        one exactly-once commit, and report the run's batches, rows and latencies."""
        from dagster_partlake.io_manager.streaming import run_stream

        asset_name = context.asset_key.to_user_string()
        model = _output_spec(context)
        spec = model.stream
        if spec is None:
            raise PartlakeConfigError(
                f"asset {asset_name} returned a streaming DataFrame but does not declare "
                f"'{STREAM_KEY}'; add metadata {{'{STREAM_KEY}': {{'mode': 'available_now'}}}} "
                "(its input is then read as a stream), or return a batch DataFrame."
            )
        # A stream appends: the delta-spark writer (the asset's or the IO manager's) is refused.
        writer_of(_writer_setting(model), self.writer, kind="append", asset_name=asset_name)
        target = self._stream_target(context, obj, model)
        reads = self._inputs_of(context)
        record = CommitRecord(
            asset_key=asset_name,
            partition_keys=(),
            code_version=_code_version(context),
            run_id=context.run_id,
            consumed={name: read.partitions for name, read in reads.items()},
            upstream_versions={name: read.version for name, read in reads.items()},
        )
        source = next(iter(reads.values()), None)
        upstream = next((i.upstream for i in model.inputs if i.upstream in reads), None)
        kafka = _kafka_of(context, upstream)
        run = run_stream(
            context,
            obj,
            target,
            spec,
            record,
            source_root=source.root if source else "",
            kafka=(upstream, kafka) if upstream is not None and kafka is not None else None,
        )
        context.add_output_metadata(_stream_metadata(context, target, spec, run))

    def _stream_target(
        self, context: OutputContext, obj: DataFrame, spec: ModelSpec
    ) -> WriteTarget:
        """A streaming asset's table; its spec says it appends, without gates."""
        from dagster_partlake.kinds.write import WriteTarget

        return WriteTarget(
            root=self.location_of(spec),
            asset_name=spec.name,
            kind=spec.kind,
            columns=list(spec.columns),
            column_types=delta_types(spark_to_arrow(obj.schema)),
            keys=[],
            allow_new_columns=spec.allow_new_columns,
            max_attempts=self.max_commit_attempts,
        )

    def _load_stream(
        self, context: InputContext, consumer: ModelSpec, upstream: ModelSpec
    ) -> DataFrame:
        """A streaming asset's input as a streaming DataFrame; what the source holds now is
        what the run consumes (its closing commit records it for the planner)."""
        from dagster_partlake.delta.reader import open_table
        from dagster_partlake.io_manager.streaming import stream_input

        spec = consumer.stream
        assert spec is not None
        check_input(consumer, upstream)
        asset_name = upstream.name
        columns = list(upstream.columns)
        is_folder = upstream.is_folder
        location = self.location_of(upstream)
        spark = self.spark.spark_session
        if isinstance(upstream.external, KafkaTopic):
            from dagster_partlake.sources.kafka import topic_state

            topic = upstream.external
            state = topic_state(topic, source=asset_name)
            ends = [t for _, t in state.last_updated.items() if t] if state else []
            # What the run consumed is known once its query has run (`run_stream`): the
            # checkpoint's offsets replace these.
            consumed = {WHOLE_TABLE_ID: ends[0]} if ends else {}
            self._remember(context, asset_name, _Read(-1, consumed))
            return stream_input(spark, spec, root=location, table_schema=None, kafka=topic)
        if is_folder:
            if location.is_local:  # Spark's file source needs the folder; a store has none
                os.makedirs(location.path, exist_ok=True)
            state = folder_state(location, [c.column for c in columns])
            types = {c.column: "string" for c in columns}
            codec = KeyCodec(columns, types)
            partitions = {
                codec.key(list(values)) or WHOLE_TABLE_ID: t
                for values, t in (state.last_updated.items() if state else [])
                if t is not None
            }
            self._remember(context, asset_name, _Read(-1, partitions, root=location))
            return stream_input(spark, spec, root=location, table_schema=None)
        snapshot = open_table(location, table_name=asset_name)
        version = snapshot.table.version()
        partitions = _lastupdated(
            snapshot, version, snapshot.live_files(PartitionSelection.everything()), columns
        )
        self._remember(context, asset_name, _Read(version, partitions, root=location))
        return stream_input(spark, spec, root=location, table_schema=snapshot.schema)

    def load_input(self, context: InputContext) -> DataFrame | None:
        started = time.perf_counter()
        df = self._load_input(context)
        step = context.step_context
        reads = _READS.get((step.run_id, step.step.key), {})
        name = context.asset_key.to_user_string()
        if name in reads:
            reads[name] = replace(reads[name], seconds=time.perf_counter() - started)
        return df

    def _load_input(self, context: InputContext) -> DataFrame | None:
        from dagster_partlake.delta.reader import open_table, read_snapshot

        asset_key = context.asset_key
        asset_name = asset_key.to_user_string()
        consumer = _consumer(context)
        upstream = _upstream_spec(context)
        if consumer is not None and consumer.stream is not None:
            return self._load_stream(context, consumer, upstream)
        partitions_def = context.asset_partitions_def if context.has_asset_partitions else None
        keys = list(context.asset_partition_keys) if partitions_def is not None else []
        columns = list(upstream.columns) if partitions_def is not None else []
        if upstream.is_folder:
            return self._load_folder(context, upstream, columns, keys)
        if upstream.external is not None:
            return self._load_postgres(context, upstream, columns, keys)
        location = self.location_of(upstream)
        if _reads_itself(context) and (
            (partitions_def is not None and not keys) or not table_exists(location)
        ):
            # A self-dependency's first partition: there is no earlier partition to read.
            context.log.info(f"no earlier partition of {asset_name} to read: the input is None")
            return None
        read = _input_spec(context, consumer, asset_name)
        snapshot = open_table(
            location,
            table_name=asset_name,
            version=read.version,
            timestamp=read.timestamp,
        )
        if context.upstream_output is not None and upstream.kind.decoupled(
            [c.column for c in columns]
        ):
            return self._load_decoupled(context, asset_name, snapshot, keys)
        selection = selection_for_keys(columns, keys, snapshot.column_types, asset_name=asset_name)
        incremental = read.incremental if consumer is not None and not read.pinned else None
        if incremental is not None and consumer is not None:
            return self._load_incremental(
                context, snapshot, selection, columns, incremental, consumer
            )
        with self.spark.server_errors():
            result = read_snapshot(self.spark.spark_session, snapshot, selection)
        rows = sum(f.num_records or 0 for f in result.files)
        partitions = _lastupdated(snapshot, result.version, result.files, columns)
        self._remember(context, asset_name, _Read(result.version, partitions, rows))
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

    def _load_postgres(
        self,
        context: InputContext,
        upstream: ModelSpec,
        columns: list[DimensionColumn],
        keys: list[str],
    ) -> DataFrame:
        """Exactly the partitions of a PostgreSQL source the run needs, through Spark's JDBC
        source, consumed at the stamps they had before their rows were read."""
        from dagster_partlake.sources.postgres import PostgresTable, read_partitions, table_state

        table = upstream.external
        assert isinstance(table, PostgresTable)  # a topic is read by streams alone (spec)
        names = [c.column for c in columns]
        state = table_state(table, names, source=upstream.name)
        types = dict(state.column_types) if state else {n: "string" for n in names}
        selection = selection_for_keys(columns, keys, types, asset_name=upstream.name)
        values = [
            v
            for v, _ in (state.last_updated.items() if state else [])
            if selection.contains(dict(zip(names, v, strict=True)))
        ]
        with self.spark.server_errors():
            read = read_partitions(
                self.spark.spark_session, table, names, values, source=upstream.name
            )
        codec = KeyCodec(columns, types)
        partitions: dict[str, int] = {}
        for found, stamp in read.stamps.items():
            key = codec.key(list(found)) or WHOLE_TABLE_ID
            partitions[key] = max(partitions.get(key, 0), stamp)
        self._remember(context, upstream.name, _Read(-1, partitions))
        context.log.info(
            f"read {upstream.name} from PostgreSQL {table.address}: {len(values)} partition(s) "
            f"in {read.queries} parallel quer{'y' if read.queries == 1 else 'ies'}"
        )
        return read.df

    def _load_decoupled(
        self, context: InputContext, asset_name: str, snapshot: TableSnapshot, keys: list[str]
    ) -> DataFrame:
        """An upstream whose table partitions are not its Dagster partitions: the whole table,
        consumed as the lastUpdated its writes gave the partitions read."""
        from dagster_partlake.delta.reader import read_snapshot

        result = read_snapshot(self.spark.spark_session, snapshot, PartitionSelection.everything())
        wanted = keys or [WHOLE_TABLE_ID]
        records = snapshot.latest_payloads(wanted)
        partitions = {
            pid: updated
            for pid, record in records.items()
            if (updated := record.written_last_updated(pid)) is not None
        }
        rows = sum(f.num_records or 0 for f in result.files)
        self._remember(context, asset_name, _Read(result.version, partitions, rows))
        context.log.info(
            f"read all of {asset_name} (its table is not partitioned by its Dagster partitions): "
            f"version {result.version}, {result.num_files} file(s)"
        )
        return result.df

    def _load_incremental(
        self,
        context: InputContext,
        snapshot: TableSnapshot,
        selection: PartitionSelection,
        columns: list[DimensionColumn],
        incremental: Incremental,
        consumer: ModelSpec,
    ) -> DataFrame:
        """Only what the consuming asset has not read yet (`dagster_partlake.incremental.spec`)."""
        from dagster_partlake.incremental.reads import read_incremental

        read = read_incremental(
            self.spark.spark_session,
            snapshot,
            selection,
            incremental,
            consumer_root=self.location_of(consumer),
            consumer=consumer.name,
        )
        version = snapshot.table.version()
        partitions = _lastupdated(snapshot, version, read.state, columns)
        self._remember(
            context,
            snapshot.name,
            _Read(version, partitions, read.rows, read.watermark, incremental=True),
        )
        context.log.info(f"read incrementally (version {version}): {read.description}")
        return read.df

    def _skip(
        self, context: OutputContext, obj: DataFrame, keys: list[str], reads: dict[str, _Read]
    ) -> str | None:
        """Why the run guards say this run writes nothing (None: write)."""
        facts = RunFacts(
            partition_keys=keys,
            input_rows={n: r.rows for n, r in reads.items() if r.rows is not None},
            watermarks={
                n: (r.watermark or {}).get("value") for n, r in reads.items() if r.watermark
            },
            run_tags=_run_tags(context),
        )
        spec = _output_spec(context)
        condition = judge_guards(obj.sparkSession, spec.guards, facts, spec.name)
        if condition is None:
            return None
        context.log.info(f"run condition '{condition.description}' does not hold: skipped")
        return condition.description

    def _dependencies_read(
        self, context: OutputContext, target: WriteTarget, reads: Mapping[str, _Read]
    ) -> dict[str, _Read]:
        """The upstream assets the output depends on without loading them (`deps=[...]`): each
        as its table was when the run started, for the partitions the output's map to.

        Dagster loads no input for such a dependency, so no read says what the output was
        computed from; the run's start is the latest state it can have seen, so a change
        during the run is seen by the next plan, never missed.
        """
        from dagster_partlake.delta.snapshot import open_snapshot

        parents = _parents(context)
        missing = sorted((parents or set()) - set(reads) - {target.asset_name})
        if not missing:
            return {}
        try:
            layer = context.step_context.job_def.asset_layer
            record = context.step_context.instance.get_run_record_by_id(context.run_id)
        except DagsterInvariantViolationError:
            return {}
        started = record.start_time if record is not None and record.start_time else time.time()
        found: dict[str, _Read] = {}
        for name in missing:
            key = AssetKey.from_user_string(name)
            if not layer.has(key):
                continue
            spec = spec_of(layer.get(key).assets_def, key)
            if spec.is_folder or spec.external is not None:
                continue  # read by the asset itself through no table of this lake's
            location = self.location_of(spec)
            try:
                snapshot = open_snapshot(
                    location,
                    table_name=name,
                    timestamp=dt.datetime.fromtimestamp(started, dt.UTC),
                    must_exist=False,
                )
            except PartlakeError:
                snapshot = None  # no version that old: not there yet when the run started
            if snapshot is None:
                found[name] = _Read(-1, {})
                continue
            state = _STATES.at_version(location, snapshot.version, name=name)
            wanted = _mapped_keys(layer.asset_graph, context.asset_key, key, target.keys)
            codec = KeyCodec(list(spec.columns), state.column_types)
            partitions: dict[str, int] = {}
            for values, updated in state.last_updated.items():
                if updated is None:
                    continue
                by_column = dict(zip(state.partition_by, values, strict=True))
                pid = codec.key([by_column.get(c.column) for c in spec.columns]) or WHOLE_TABLE_ID
                if wanted is None or pid in wanted:
                    partitions[pid] = max(partitions.get(pid, 0), updated)
            found[name] = _Read(snapshot.version, partitions)
        return found

    def _remember(self, context: InputContext, asset_name: str, read: _Read) -> None:
        step = context.step_context
        with _READS_LOCK:
            _READS.setdefault((step.run_id, step.step.key), {})[asset_name] = read

    def _inputs_of(self, context: OutputContext) -> dict[str, _Read]:
        """What this step read of the output asset's own upstream assets."""
        reads = _READS.get((context.run_id, context.step_key), {})
        if not reads:
            return {}
        parents = _parents(context)
        return {name: read for name, read in reads.items() if parents is None or name in parents}

    def _load_folder(
        self,
        context: InputContext,
        upstream: ModelSpec,
        columns: list[DimensionColumn],
        keys: list[str],
    ) -> DataFrame:
        asset_name = upstream.name
        root = self.location_of(upstream)
        # Folder partition values are strings: time windows match their keys.
        types = {c.column: "string" for c in columns}
        selection = selection_for_keys(columns, keys, types, asset_name=asset_name)
        mode = upstream.after_commit
        consumer = _consumer(context)
        if mode is not None and consumer is not None:
            return self._load_landing(context, asset_name, root, columns, selection, mode, consumer)
        dirs, chosen = _folder_partitions(root, columns, selection)
        if not dirs:
            raise PartlakeError(
                f"source folder {root} has no files for the partitions read by this run "
                f"({', '.join(keys[:5])}); write them first."
            )
        codec = KeyCodec(columns, types)
        partitions = {
            codec.key(list(values)) or WHOLE_TABLE_ID: updated for values, updated in chosen.items()
        }
        self._remember(context, asset_name, _Read(-1, partitions))
        return self._read_folder(root, dirs, columns)

    def _load_landing(
        self,
        context: InputContext,
        asset_name: str,
        root: TableLocation,
        columns: list[DimensionColumn],
        selection: PartitionSelection,
        mode: AfterCommit,
        consumer: ModelSpec,
    ) -> DataFrame:
        """The files of a landing folder no commit of the consumer has read yet."""
        consumer_root = self.location_of(consumer)
        previous = newest_record(consumer_root) if table_exists(consumer_root) else None
        # Files a run that died after its commit left behind: read by that run, never again.
        pending = set(previous.consumed_files.get(asset_name, ())) if previous else set()
        dirs, _ = _folder_partitions(root, columns, selection)
        files = tuple(f for f in data_files(root, dirs) if f not in pending)
        left = [f for f in sorted(pending) if root.store.head(f) is not None]
        archive = root.join(ARCHIVE_DIR)
        # The schema, for a run with nothing new: from a file it reads, a pending or an
        # archived one (read now, before any of them moves).
        base, schema_from = root, [*files, *left]
        if not schema_from:
            base, schema_from = archive, data_files(archive, [""])
        if not schema_from:
            raise PartlakeError(
                f"landing folder {root} has no new files to read (and no archived one to take "
                "the schema from); write new files first. The planner does not plan such a run."
            )
        df = self._read_folder(base, schema_from[:1], columns)
        if finish(root, left, mode):
            context.log.info(f"{mode}d {len(left)} file(s) of {asset_name} an earlier run read")
        # Consumed files leave the folder: an empty folder is what "nothing new" looks like.
        self._remember(context, asset_name, _Read(-1, {}, landing=(root, mode, files)))
        context.log.info(f"read {len(files)} new file(s) of landing folder {asset_name}")
        if not files:
            return self.spark.spark_session.createDataFrame([], df.schema)
        return self._read_folder(root, list(files), columns)

    def _read_folder(
        self, root: TableLocation, paths: list[str], columns: list[DimensionColumn]
    ) -> DataFrame:
        """Spark reads `paths` (folders or files, relative to `root`), partition columns as
        text."""
        spark = self.spark.spark_session
        df = spark.read.option("basePath", root.spark_uri()).parquet(*root.spark_uris(paths))
        for c in columns:  # folder names are text; keep them as strings, like the keys
            df = df.withColumn(c.column, df[c.column].cast("string"))
        return df


def _folder_partitions(
    root: TableLocation, columns: list[DimensionColumn], selection: PartitionSelection
) -> tuple[list[str], dict[tuple[str | None, ...], int]]:
    """The partition folders (relative to `root`) of the folder source at `root` in
    `selection`, and their lastUpdated."""
    state = folder_state(root, [c.column for c in columns])
    if state is None:
        raise PartlakeError(f"source folder {root} does not exist; write the source data first.")
    chosen = {
        values: updated
        for values, updated in state.last_updated.items()
        if updated is not None
        and selection.contains(dict(zip(state.partition_by, values, strict=True)))
    }
    dirs = [
        "/".join(f"{c}={v}" for c, v in zip(state.partition_by, values, strict=True))
        for values in chosen
    ]
    return dirs, chosen


def _lastupdated(
    snapshot: TableSnapshot, version: int, files: Iterable[LiveFile], columns: list[DimensionColumn]
) -> dict[str, int]:
    """Partition id -> lastUpdated (ms) of the partitions of the files read, as the table's
    state at the version read has it (`dagster_partlake.delta.change_rule`: the time of the
    commit that changed each one), so that the planner compares like with like."""
    from dagster_partlake.delta.partition_text import normalized

    state = _STATES.at_version(snapshot.location, version, name=snapshot.name)
    codec = KeyCodec(columns, snapshot.column_types)
    spelled: list[dict[str | None, str | None]] = [{} for _ in state.partition_by]
    partitions: dict[str, int] = {}
    for f in files:
        raw = [f.partition_values.get(c) for c in state.partition_by]
        for value, known, column in zip(raw, spelled, state.partition_by, strict=True):
            if value not in known:
                kind = state.column_types.get(column, "string")
                known[value] = normalized([value], kind)[0]
        values = tuple(known[v] for v, known in zip(raw, spelled, strict=True))
        updated = state.last_updated.get(values)
        if updated is None:
            raise PartlakeError(
                f"partition {values} of {snapshot.name} holds a file read at version {version} "
                "but is not in partlake's state of that version (its log reader and delta-rs "
                "disagree); please report this with the table's _delta_log folder."
            )
        key = codec.key([f.partition_values[c.column] for c in columns]) if columns else None
        key = key or WHOLE_TABLE_ID
        partitions[key] = max(partitions.get(key, 0), updated)
    return partitions


# Table states at the versions runs read (`_lastupdated`): one per process, like the planner's.
_STATES = StateCache()


def _partitions_def_of(context: InputContext | OutputContext) -> PartitionsDefinition | None:
    """The asset's partitions definition, whether or not the run targets partitions (a
    streaming run targets none: its micro-batches write whichever partitions their rows are
    in)."""
    try:
        return context.asset_partitions_def
    except DagsterInvariantViolationError:
        return None


def _stream_metadata(
    context: OutputContext, target: WriteTarget, spec: StreamSpec, run: StreamRun
) -> dict[str, Any]:
    """The materialization metadata of a streaming run: its batches, rows and latencies."""
    latencies = sorted(run.latencies_ms)
    metadata: dict[str, Any] = {
        "dagster/row_count": MetadataValue.int(run.rows),
        "partlake/path": MetadataValue.path(target.location.uri),
        "partlake/run_id": MetadataValue.text(context.run_id),
        "partlake/kind": MetadataValue.text("append"),
        "partlake/stream_mode": MetadataValue.text(spec.mode),
        "partlake/stream_query": MetadataValue.text(run.query),
        "partlake/stream_batches": MetadataValue.int(len(run.batches)),
        "partlake/stream_batch_ids": MetadataValue.json([b.batch_id for b in run.batches]),
        "partlake/stream_replayed_batches": MetadataValue.json(run.replayed),
        "partlake/stream_partitions": MetadataValue.int(
            len({k for b in run.batches for k in b.partitions})
        ),
    }
    if latencies:
        metadata["partlake/stream_latency_ms_mean"] = MetadataValue.int(
            int(sum(latencies) / len(latencies))
        )
        metadata["partlake/stream_latency_ms_max"] = MetadataValue.int(latencies[-1])
    versions = [b.version for b in run.batches if b.version is not None]
    if run.progress_version is not None:
        versions.append(run.progress_version)
    if versions:
        metadata["partlake/table_version"] = MetadataValue.int(max(versions))
    return metadata


def _step_assets(context: InputContext) -> AssetsDefinition | None:
    """The AssetsDefinition of the step reading this input (None outside a run)."""
    try:
        job = context.step_context.job_def
        handle = context.step_context.node_handle
    except DagsterInvariantViolationError:
        return None
    return job.asset_layer.get_assets_def_for_node(handle)


def _consumer(context: InputContext) -> ModelSpec | None:
    """The spec of the asset the step writes from this input (None outside a run)."""
    assets_def = _step_assets(context)
    if assets_def is None:
        return None
    for key, spec in assets_def.specs_by_key.items():
        if any(dep.asset_key == context.asset_key for dep in spec.deps):
            return spec_of(assets_def, key)
    return None


def _after_write(
    context: OutputContext, target: WriteTarget, written: KindWrite, reads: Mapping[str, _Read]
) -> None:
    """Once the commit landed: the landing folders' consumed files moved, and what the write
    did not do said on the step's log."""
    for name, read in reads.items():
        if read.landing is not None:
            # Only now that the commit naming them landed (`incremental.landing`).
            folder, mode, files = read.landing
            moved = finish(folder, files, mode)
            context.log.info(f"{name}: {mode}d {moved} consumed file(s) of {folder}")
    if written.already_written_by is not None:
        context.log.info(
            f"{target.asset_name}: run {written.already_written_by} already committed "
            f"{', '.join(target.keys) or 'the table'} from the same upstream versions and "
            "code version; nothing committed again."
        )
    elif written.commit is None:
        context.log.info(
            f"{target.asset_name}: this run's append already landed in version "
            f"{written.record.table_version}; nothing added again."
        )
    if written.note is not None:
        (context.log.warning if written.warning else context.log.info)(written.note)


def _kafka_of(context: OutputContext, upstream: str | None) -> KafkaTopic | None:
    """The Kafka topic a streaming asset reads, if its input is one."""
    if upstream is None:
        return None
    try:
        layer = context.step_context.job_def.asset_layer
    except DagsterInvariantViolationError:
        return None
    key = AssetKey.from_user_string(upstream)
    if not layer.has(key):
        return None
    external = spec_of(layer.get(key).assets_def, key).external
    return external if isinstance(external, KafkaTopic) else None


def _writer_setting(spec: ModelSpec) -> dict[str, str]:
    """The asset's own `partlake/writer`, as metadata for `kinds.spec.writer_of`."""
    return {WRITER_KEY: spec.writer} if spec.writer is not None else {}


def _output_spec(context: OutputContext) -> ModelSpec:
    """The spec of the output's asset: the one the code location parsed (`spec_of`), else,
    outside a run, parsed from the context."""
    try:
        assets_def = context.step_context.job_def.asset_layer.get(context.asset_key).assets_def
    except DagsterInvariantViolationError:
        return model_spec(
            context.asset_key,
            metadata=context.definition_metadata,
            partitions_def=_partitions_def_of(context),
            managed=True,
        )
    return spec_of(assets_def, context.asset_key)


def _upstream_spec(context: InputContext) -> ModelSpec:
    """The spec of the asset an input reads: the code location's, else parsed from what the
    context says of the upstream output."""
    try:
        layer = context.step_context.job_def.asset_layer
        if layer.has(context.asset_key):
            return spec_of(layer.get(context.asset_key).assets_def, context.asset_key)
    except DagsterInvariantViolationError:
        pass
    upstream = context.upstream_output
    return model_spec(
        context.asset_key,
        metadata=upstream.definition_metadata if upstream is not None else {},
        partitions_def=_partitions_def_of(context),
        managed=False,
    )


def _input_spec(context: InputContext, consumer: ModelSpec | None, asset_name: str) -> InputSpec:
    """How the step reads this input: its consumer's spec of it, else its own metadata."""
    found = consumer.input(asset_name) if consumer is not None else None
    if found is not None:
        return found
    version, timestamp = pin_of(
        context.definition_metadata or {}, input_name=asset_name, asset_name="this step"
    )
    return InputSpec(asset_name, None, version=version, timestamp=timestamp)


def _run_tags(context: OutputContext) -> dict[str, str]:
    try:
        return dict(context.step_context.dagster_run.tags)
    except DagsterInvariantViolationError:
        return {}


def _output_partition_keys(context: OutputContext) -> list[str]:
    try:
        return list(context.asset_partition_keys)
    except ValueError:
        # Dagster could not parse the key (e.g. '2024-13-01'); validate_keys explains it.
        return [context.partition_key]


def _parents(context: OutputContext) -> set[str] | None:
    """Names of the output asset's upstream assets (None if Dagster cannot tell, outside a run:
    then every input counts)."""
    if not context.has_asset_key:
        return None
    try:
        job = context.step_context.job_def
    except DagsterInvariantViolationError:
        return None
    node = job.asset_layer.get(context.asset_key)
    return {key.to_user_string() for key in node.parent_keys}


def _mapped_keys(
    asset_graph: Any, child: AssetKey, parent: AssetKey, keys: Iterable[str]
) -> set[str] | None:
    """The parent's partition keys the child's `keys` map to (None: all of them, the parent
    being unpartitioned or the child's keys none)."""
    keys = [k for k in keys if k != WHOLE_TABLE_ID]
    if not keys or asset_graph.get(parent).partitions_def is None:
        return None
    mapped: set[str] = set()
    for key in keys:
        result = asset_graph.get_parent_partition_keys_for_child(key, parent, child)
        mapped.update(result.partitions_subset.get_partition_keys())
    return mapped


def _reads_itself(context: InputContext) -> bool:
    """Whether the input is an earlier partition of the asset the step writes."""
    assets_def = _step_assets(context)
    return assets_def is not None and context.asset_key in assets_def.keys


def _instance(context: OutputContext) -> DagsterInstance | None:
    try:
        return context.step_context.instance
    except DagsterInvariantViolationError:  # direct invocation outside a run has no instance
        return None


def _snapshot_time(context: OutputContext) -> dt.datetime:
    """When an scd2 snapshot was taken: its time window's start, else when the run started."""
    if context.has_asset_partitions:
        try:
            return context.asset_partitions_time_window.start
        except (ValueError, DagsterInvariantViolationError):
            pass  # no time dimension
    try:
        run = context.step_context.instance.get_run_record_by_id(context.run_id)
        if run is not None and run.start_time is not None:
            return dt.datetime.fromtimestamp(run.start_time, dt.UTC)
    except DagsterInvariantViolationError:
        pass
    return dt.datetime.now(dt.UTC)


def _code_version(context: OutputContext) -> str | None:
    try:
        return context.asset_spec.code_version
    except DagsterInvariantViolationError:
        return context.version


def _gate_check(context: OutputContext, target: WriteTarget, gates: Gates) -> GateCheck:
    """The write's quality gates; their results go into the step as asset check evaluations."""
    from dagster_partlake.gates.before_commit import GateCheck

    return GateCheck(
        gates=gates,
        asset_name=target.asset_name,
        keys=target.keys,
        partition_columns=target.dimension_columns,
        # A table not partitioned by its Dagster partitions (a decoupled merge) has no
        # partitions of the run to select; audits, which read them, are refused on such kinds.
        replaced=PartitionSelection.everything()
        if target.decoupled
        else target.selection([k for k in target.keys if k != WHOLE_TABLE_ID]),
        key_of=target.key_of,
        on_results=lambda results: log_gate_results(context, results, target.keys),
    )


@dataclass(frozen=True)
class _Timings:
    """Where an output's time went, for its materialization metadata."""

    write: float  # Spark computing and staging the output, the gates, the commit
    spark_start: float  # starting this process's Spark session, if this step started it
    read: float  # load_input of the output's upstream assets (`_Read.seconds`)
    output: float  # handle_output up to its metadata: the write and what comes before and after


def _output_metadata(
    context: OutputContext,
    target: WriteTarget,
    written: KindWrite,
    record: CommitRecord,
    timings: _Timings,
) -> dict[str, Any]:
    """The materialization metadata of one written output. Dagster shows a run's metadata on
    each of its partitions, so a run of several partitions names its totals as the batch's
    (`partlake/batch_rows`, ...); each partition's own rows and lastUpdated are on its
    partlake_fresh result. Timings are the run's, in seconds: `partlake/output_seconds` (the IO
    manager's handling of the output up to this metadata: its partition keys, the DataFrame's
    schema, the write), of which `partlake/write_seconds` (Spark's job, the gates, the commit),
    of which `partlake/stage_seconds` (Spark computing the rows and writing the files, which
    returns their facts), `partlake/staged_files_seconds` (those facts made the files' list),
    `partlake/gates_seconds` and `partlake/commit_seconds` (the transaction; its
    `partlake/publish_seconds` is 0 since files are written where they live); besides the
    output, `partlake/read_seconds` (loading the upstream partitions: their log, their files'
    list, Spark's read plan) and `partlake/spark_start_seconds` where this step started the
    run's Spark session."""
    result = written.commit
    counts: dict[str, int] = {
        "dagster/row_count": result.num_records
        if result
        else written.metrics.get("rows_inserted", 0),
        "partlake/partition_count": len(target.keys),
        **{f"partlake/{k}": v for k, v in written.metrics.items()},
    }
    if result is not None:
        counts["partlake/files_added"] = result.files_added
        counts["partlake/files_removed"] = result.files_removed
    if target.kind.kind == "tracked":
        counts["partlake/partitions_unchanged"] = len(written.unchanged_partitions)
    batch = len(target.keys) > 1
    metadata: dict[str, Any] = {
        (_batch_name(name) if batch else name): MetadataValue.int(value)
        for name, value in counts.items()
    }
    metadata.update(
        {
            "partlake/table_version": MetadataValue.int(
                result.version if result else written.record.table_version or 0
            ),
            "partlake/path": MetadataValue.path(target.location.uri),
            "partlake/run_id": MetadataValue.text(context.run_id),
            "partlake/code_version": MetadataValue.text(record.code_version or ""),
            "partlake/upstream_versions": MetadataValue.json(dict(record.upstream_versions)),
            "partlake/kind": MetadataValue.text(target.kind.kind),
            "partlake/writer": MetadataValue.text(target.writer),
        }
    )
    seconds = {"partlake/output_seconds": timings.output, "partlake/write_seconds": timings.write}
    if result is not None:
        metadata["partlake/commit_attempts"] = MetadataValue.int(result.attempts)
        seconds["partlake/commit_seconds"] = result.commit_seconds
        seconds["partlake/publish_seconds"] = result.publish_seconds
        if result.staged.spark or result.staged.listing:  # a merge or scd2 writes its own way
            seconds["partlake/stage_seconds"] = result.staged.spark
            seconds["partlake/staged_files_seconds"] = result.staged.listing
    if written.gates_seconds:
        seconds["partlake/gates_seconds"] = written.gates_seconds
    if timings.read:
        seconds["partlake/read_seconds"] = timings.read
    if timings.spark_start:
        seconds["partlake/spark_start_seconds"] = timings.spark_start
    metadata.update({k: MetadataValue.float(round(v, 3)) for k, v in seconds.items()})
    if written.already_written_by is not None:
        metadata["partlake/already_written_by"] = MetadataValue.text(written.already_written_by)
    return metadata


def _batch_name(name: str) -> str:
    """`dagster/row_count` -> `partlake/batch_rows`, `partlake/rows_deleted` ->
    `partlake/batch_rows_deleted`: a figure of the whole run, not of one partition."""
    special = {
        "dagster/row_count": "partlake/batch_rows",
        "partlake/partition_count": "partlake/batch_partitions",
    }
    return special.get(name) or name.replace("partlake/", "partlake/batch_", 1)
