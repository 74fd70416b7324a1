"""Running a streaming asset's query (`dagster_partlake.incremental.streams`) inside its step.

`stream_input` gives the asset its input as a Spark streaming DataFrame: Spark's file source over
a folder, or `delta.stream_source` over a Delta table's new commits. The asset returns a
streaming DataFrame; `run_stream` starts the query with each micro-batch written through
`kinds.stream.write_batch` in `foreachBatch` (one `append` commit per batch, with the query's
`txn`), its checkpoint under `<table>/_partlake_stream/<query>/`, and

- `available_now`: waits until everything new is processed, then closes the run with a
  record-only commit saying what the run consumed of its source (the planner's record);
- `continuous`: processes a micro-batch every trigger interval until the step is interrupted
  (a run cancelled in the UI sends its worker SIGTERM, Dagster turns it into an interrupt). The
  interrupt only sets a flag here: the query stops once the micro-batch in flight has committed
  (a batch not yet started is refused, so Spark replays it next time), and the interrupt is then
  raised again for Dagster, which marks the run canceled. Nothing is ever half-committed: a
  commit is atomic, and a batch replayed after any stop commits nothing twice.

Each committed batch is logged as a materialization of the partitions it touched, and the run
reports its batches, rows and the latency from each input file's arrival to its batch's commit.
Streams need a classic Spark session (local or a cluster): `foreachBatch` runs here, in the
step's process; a Spark Connect session runs it elsewhere and is refused.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import TYPE_CHECKING

from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.incremental.streams import StreamSpec
from dagster_partlake.kinds.stream import BatchCommit, commit_progress, write_batch
from dagster_partlake.layout import STREAM_DIR
from dagster_partlake.partitions.keys import KeyCodec
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.sources.kafka import KafkaTopic
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    import pyarrow as pa
    from dagster import OutputContext
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

    from dagster_partlake.kinds.write import WriteTarget

POLL_SECONDS = 1  # how often the step looks at the query (and at an interrupt)


@dataclass
class StreamRun:
    """What one run of a streaming query did."""

    query: str  # the query's Delta application id
    batches: list[BatchCommit] = field(default_factory=list)  # committed by this run
    replayed: list[int] = field(default_factory=list)  # batch ids an earlier run had committed
    latencies_ms: list[int] = field(default_factory=list)  # per input file: arrival -> commit
    progress_version: int | None = None  # the closing record-only commit (available_now)
    interrupted: bool = False

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches)


def stream_input(
    spark: SparkSession,
    spec: StreamSpec,
    *,
    root: str | TableLocation,
    table_schema: pa.Schema | None,
    kafka: KafkaTopic | None = None,
) -> DataFrame:
    """The input of a streaming asset: Spark's file source over the folder at `root`
    (`spec.format` set), the new commits of the Delta table at `root` (a path or a location),
    or the new messages of a Kafka topic (`kafka`: Spark's Kafka source, whose rows have `key`,
    `value`, `topic`, `partition`, `offset` and `timestamp`)."""
    location = as_location(root)
    if kafka is not None:
        from dagster_partlake.sources.kafka import stream_options

        _require_classic(spark, kafka.identity)
        return (
            spark.readStream.format("kafka")
            .options(**stream_options(kafka))
            .options(**spec.options)
            .load()
        )
    _require_classic(spark, location.uri)
    if spec.format is not None:
        reader = spark.readStream.format(spec.format).options(**spec.options)
        if spec.schema is not None:
            reader = reader.schema(spec.schema)
        elif spec.format == "parquet":
            reader = reader.schema(_parquet_schema(spark, location))
        return reader.load(location.spark_uri())
    from dagster_partlake.delta.schema import arrow_to_spark
    from dagster_partlake.delta.stream_source import NAME, register, source_options

    assert table_schema is not None
    register(spark)
    return (
        spark.readStream.format(NAME)
        .schema(arrow_to_spark(table_schema))
        .options(**source_options(location))
        .load()
    )


def _parquet_schema(spark: SparkSession, root: TableLocation) -> StructType:
    """A streaming Parquet source needs its schema up front: take it from the files there."""
    try:
        return spark.read.parquet(root.spark_uri()).schema
    except Exception as error:  # Spark: no files to infer from
        raise PartlakeConfigError(
            f"the landing folder {root} has no Parquet file to take the stream's schema from; "
            "add 'schema' (Spark DDL) to partlake/stream, or drop a first file."
        ) from error


def _require_classic(spark: SparkSession, what: str) -> None:
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        raise PartlakeConfigError(
            f"the stream over {what} needs a local or cluster Spark session: foreachBatch runs "
            "in the step's process, which a Spark Connect session cannot do. Give the code "
            "location SparkResource(master=...) instead of remote=... for streaming assets."
        )


@dataclass
class _State:
    """What the query's batches (Spark's callback thread) share with the polling step."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    in_batch: bool = False
    stopping: bool = False
    refused: bool = False  # a batch arrived after the stop: refused, Spark replays it later
    error: BaseException | None = None
    events: queue.Queue[tuple[BatchCommit, list[int]]] = field(default_factory=queue.Queue)


class _Stopped(Exception):
    """Refuses a micro-batch that starts after the stop was asked for."""


def run_stream(
    context: OutputContext,
    df: DataFrame,
    target: WriteTarget,
    spec: StreamSpec,
    record: CommitRecord,
    *,
    source_root: str | TableLocation,
    kafka: tuple[str, KafkaTopic] | None = None,
) -> StreamRun:
    """Run the streaming query of `df` into `target` as `spec` says; see the module docstring.

    Args:
        record: what the run's commits record (run, code version, and what the run consumed of
            its source: only the closing commit of an `available_now` run claims that).
        source_root: the input's folder or table (for the arrival times of its data).
        kafka: (input name, topic) when the input is a Kafka topic: the run's closing commit
            records the offsets the query reached (from its checkpoint), and a run that
            reached no new offset commits nothing.

    Raises:
        PartlakeError: a micro-batch failed (its own error is raised: a partition mismatch,
            a schema change, ...) or the query did; what committed before stays committed.
    """
    _require_classic(df.sparkSession, target.location.uri)
    query_name = spec.query or target.asset_name.replace("/", "__")
    checkpoint = target.location.join(STREAM_DIR, query_name)
    state = _State()
    on_batch = _BatchWriter(
        state=state,
        target=target,
        spec=spec,
        checkpoint=checkpoint,
        query_name=query_name,
        record=replace(record, consumed={}, upstream_versions={}, watermarks={}),
        key_of=_partition_ids(target),
        source_root=source_root,
    )
    result = StreamRun(query="")

    writer = df.writeStream.foreachBatch(on_batch).option(
        "checkpointLocation", checkpoint.spark_uri()
    )
    if spec.continuous:
        writer = writer.trigger(processingTime=spec.trigger_interval)
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    result.query = _app_id(checkpoint, query_name)
    context.log.info(
        f"streaming {target.asset_name} ({spec.mode}) from {source_root}, checkpoint {checkpoint}"
    )
    with _stop_on_interrupt() as interrupted:
        _poll(context, query, state, result, target, interrupted)
    result.interrupted = interrupted.is_set()
    failure = query.exception()
    if failure is not None and not (state.refused and isinstance(state.error, _Stopped)):
        if isinstance(state.error, PartlakeError):
            raise state.error
        raise PartlakeError(
            f"the streaming query of {target.asset_name} failed: {_first_line(failure)}; the "
            "micro-batches committed before stay committed, the failed one is replayed by the "
            "next run (it commits nothing twice)."
        ) from state.error
    if not spec.continuous and not result.interrupted:
        closing = replace(record, stream_query=result.query)
        if kafka is not None:
            name, topic = kafka
            reached = _kafka_offsets(checkpoint, topic.topic)
            if reached is not None:
                closing = replace(closing, consumed={name: {WHOLE_TABLE_ID: reached}})
            if not result.batches and _already_recorded(target, closing):
                context.log.info(f"{target.asset_name}: nothing new on {topic.identity}")
                return result
        result.progress_version = commit_progress(
            target.location, closing, table_name=target.asset_name
        )
    return result


def _kafka_offsets(checkpoint: TableLocation, topic: str) -> int | None:
    """The sum of the end offsets of `topic` the query's newest batch reached (its checkpoint's
    newest offsets file), None before its first batch."""
    from dagster_partlake.sources.kafka import checkpoint_offsets

    names = [e.name for e in checkpoint.store.list_folder("offsets") if e.name.isdigit()]
    if not names:
        return None
    return checkpoint_offsets(_text(checkpoint, f"offsets/{max(names, key=int)}"), topic)


def _already_recorded(target: WriteTarget, closing: CommitRecord) -> bool:
    """Whether the table's newest commit already says the run's stream consumed this much."""
    from dagster_partlake.delta.table import table_exists
    from dagster_partlake.records.queries import newest_record

    if not table_exists(target.location):
        return False
    newest = newest_record(target.location)
    return newest is not None and dict(newest.consumed) == dict(closing.consumed)


@dataclass(frozen=True)
class _BatchWriter:
    """The `foreachBatch` function: one exactly-once commit per micro-batch (it runs in Spark's
    callback thread; what it committed reaches the step through `state.events`)."""

    state: _State
    target: WriteTarget
    spec: StreamSpec
    checkpoint: TableLocation
    query_name: str
    record: CommitRecord  # a batch commit's record: what the run consumed is not claimed here
    key_of: Callable[[Mapping[str, str | None]], str | None]
    source_root: str | TableLocation

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        state = self.state
        with state.lock:
            if state.stopping:
                state.refused = True
                raise _Stopped(f"micro-batch {batch_id} refused: the query is stopping")
            state.in_batch = True
        try:
            commit = write_batch(
                batch,
                self.target.location,
                app_id=_app_id(self.checkpoint, self.query_name),
                batch_id=batch_id,
                partition_by=self.target.partition_by,
                partition_id=self.key_of,
                record=self.record,
                allow_new_columns=self.target.allow_new_columns,
                table_name=self.target.asset_name,
                max_attempts=self.target.max_attempts,
            )
            arrivals = _arrivals(self.checkpoint, batch_id, self.spec, self.source_root)
            state.events.put((commit, arrivals))
        except BaseException as error:
            state.error = error
            raise
        finally:
            with state.lock:
                state.in_batch = False


def _poll(
    context: OutputContext,
    query: StreamingQuery,
    state: _State,
    result: StreamRun,
    target: WriteTarget,
    interrupted: threading.Event,
) -> None:
    """Wait for the query, logging each batch it commits; on an interrupt, stop it once the
    batch in flight has committed."""
    while True:
        done = query.awaitTermination(POLL_SECONDS)
        _drain(context, state, result, target)
        if done:
            return
        if interrupted.is_set():
            context.log.info(f"{target.asset_name}: stopping after the micro-batch in flight")
            with state.lock:
                state.stopping = True
            while True:
                with state.lock:
                    if not state.in_batch:
                        break
                time.sleep(0.05)
            query.stop()
            _drain(context, state, result, target)
            return


def _drain(context: OutputContext, state: _State, result: StreamRun, target: WriteTarget) -> None:
    """Log the batches committed since the last look (from the step's own thread)."""
    from dagster import AssetMaterialization, MetadataValue

    while True:
        try:
            commit, arrivals = state.events.get_nowait()
        except queue.Empty:
            return
        if commit.version is None:
            result.replayed.append(commit.batch_id)
            context.log.info(
                f"{target.asset_name}: micro-batch {commit.batch_id} was committed by an earlier "
                "run; nothing committed again"
            )
            continue
        result.batches.append(commit)
        if commit.commit_time_ms is not None:
            result.latencies_ms.extend(max(0, commit.commit_time_ms - t) for t in arrivals)
        context.log.info(
            f"{target.asset_name}: micro-batch {commit.batch_id} committed as version "
            f"{commit.version}: {commit.rows} row(s) in {len(commit.partitions)} partition(s)"
        )
        for key in commit.partitions:
            context.log_event(
                AssetMaterialization(
                    asset_key=context.asset_key,
                    partition=None if key == WHOLE_TABLE_ID or not target.columns else key,
                    metadata={
                        "partlake/stream_batch": MetadataValue.int(commit.batch_id),
                        "partlake/table_version": MetadataValue.int(commit.version),
                        "dagster/row_count": MetadataValue.int(commit.rows_by_partition[key]),
                    },
                )
            )


@contextmanager
def _stop_on_interrupt() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while the query runs (instead of Dagster's handler,
    which would raise inside a call to Spark); the signal is raised again afterwards, so Dagster
    sees the interrupt it would have seen."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return

    def flag(_signo: int, _frame: FrameType | None) -> None:
        event.set()

    previous = {s: signal.signal(s, flag) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield event
    finally:
        for signo, handler in previous.items():
            signal.signal(signo, handler)
        if event.is_set():
            signal.raise_signal(signal.SIGINT)


def _partition_ids(target: WriteTarget) -> Callable[[Mapping[str, str | None]], str | None]:
    """A touched table partition's id: its Dagster partition key (None: outside the asset's
    partitions), or the whole table's when the table is not partitioned by them."""
    if not target.columns or target.decoupled:
        return lambda _values: WHOLE_TABLE_ID
    codec = KeyCodec(target.columns, target.column_types)
    columns = [c.column for c in target.columns]
    return lambda values: codec.key([values.get(c) for c in columns])


def _text(checkpoint: TableLocation, name: str) -> str:
    """A file of the query's checkpoint (Spark writes it there, on disk or an object store).

    Raises:
        OSError: it is not there, or cannot be read.
    """
    return checkpoint.store.read(name).decode("utf-8")


def _app_id(checkpoint: TableLocation, query_name: str) -> str:
    """The query's Delta application id: its name and the id Spark keeps in the checkpoint, so a
    query started afresh (its checkpoint removed) does not take its batch ids for old ones."""
    try:
        query_id = json.loads(_text(checkpoint, "metadata").splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError):
        query_id = "new"
    return f"partlake-stream:{query_name}:{query_id}"


def _arrivals(
    checkpoint: TableLocation, batch_id: int, spec: StreamSpec, source_root: str | TableLocation
) -> list[int]:
    """When each input file of the batch arrived (ms): a file's modification time (Spark's
    file source log in the checkpoint), or the commit time of a streamed table's file."""
    if spec.format is not None:
        return _file_source_times(checkpoint, batch_id)
    end = _offset_version(checkpoint, f"offsets/{batch_id}")
    start = _offset_version(checkpoint, f"offsets/{batch_id - 1}") if batch_id else -1
    if end is None or start is None:
        return []
    from dagster_partlake.delta.stream_source import START
    from dagster_partlake.delta.table import commit_actions

    if start == START:
        return []  # the first batch reads the table as it was: no arrival to measure
    times: list[int] = []
    for version in range(start + 1, end + 1):
        try:
            _, adds, _ = commit_actions(source_root, version)
        except FileNotFoundError:
            continue
        times.extend(int(a.get("modificationTime") or 0) for a in adds)
    return times


def _file_source_times(checkpoint: TableLocation, batch_id: int) -> list[int]:
    for name in (str(batch_id), f"{batch_id}.compact"):
        try:
            # The first line is the log's version.
            lines = _text(checkpoint, f"sources/0/{name}").splitlines()[1:]
        except OSError:
            continue
        entries = [json.loads(line) for line in lines if line.strip()]
        return [int(e["timestamp"]) for e in entries if e.get("batchId", batch_id) == batch_id]
    return []


def _offset_version(checkpoint: TableLocation, name: str) -> int | None:
    try:
        return int(json.loads(_text(checkpoint, name).splitlines()[-1])["version"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
