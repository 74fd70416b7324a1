"""A Kafka topic as a source of a streaming asset.

Declared with `KafkaTopic` (`partlake_source(..., kafka=KafkaTopic(topic="clicks"))`) and read by
an asset with `partlake/stream` metadata: Spark Structured Streaming's Kafka source, each
micro-batch committed to the asset's Delta table exactly once like any stream
(`io_manager.streaming`), the offsets it read kept in the query's checkpoint and, summed, in the
run's closing commit. The asset partitions its table by a value of the messages (an event's
date), so what reads it goes stale exactly where new messages landed.

The planner's state of a topic is one number: the sum over its partitions of their end offsets
(a new message moves it; retention and compaction never lower it), read from the broker by one
metadata request and one offsets request per partition. A stream run is due when it differs
from what the stream's last run consumed.

Broker settings come from the declaration (`options`: Kafka client settings such as
`security.protocol`; give secrets through `options_env`, the names of environment variables
holding them, never in code or metadata).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.delta.state import VALUES, TableState
from dagster_partlake.errors import PartlakeConfigError, SourceError
from dagster_partlake.metadata import KAFKA_KEY
from dagster_partlake.sources.declared import from_settings

BOOTSTRAP_ENV = "PARTLAKE_KAFKA_BOOTSTRAP_SERVERS"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class KafkaTopic:
    """Where a Kafka source is and how Spark reads it.

    Example:
        .. code-block:: python

            clicks = partlake_source("clicks", kafka=KafkaTopic("clicks"))

            @dg.asset(partitions_def=daily, metadata={"partlake/stream": {}})
            def click_events(clicks: DataFrame) -> DataFrame:  # a streaming DataFrame
                parsed = F.from_json(F.col("value").cast("string"), "user long, ts timestamp")
                return clicks.select(parsed.alias("e")).select("e.*").withColumn(
                    "date", F.to_date("ts")
                )

    Args:
        topic: the topic's name.
        bootstrap_servers: `host:port[,host:port]`; default `$PARTLAKE_KAFKA_BOOTSTRAP_SERVERS`,
            else 127.0.0.1:9092.
        options: Kafka client settings (`security.protocol`, `sasl.mechanism`, ...) for the
            planner's client and Spark's (which gets them prefixed `kafka.`).
        options_env: client settings whose values are read from environment variables
            (setting -> variable name), for secrets such as `sasl.jaas.config`.
        starting_offsets: where a stream's first run starts: `earliest` (every message the
            topic keeps) or `latest` (only what arrives from then on).
    """

    topic: str
    bootstrap_servers: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    options_env: Mapping[str, str] = field(default_factory=dict)
    starting_offsets: Literal["earliest", "latest"] = "earliest"

    def __post_init__(self) -> None:
        if not self.topic or not isinstance(self.topic, str):
            raise PartlakeConfigError("KafkaTopic needs the topic's name: KafkaTopic('clicks').")
        if self.starting_offsets not in ("earliest", "latest"):
            raise PartlakeConfigError(
                f"KafkaTopic({self.topic!r}) has starting_offsets {self.starting_offsets!r}; use "
                "'earliest' or 'latest'."
            )

    def settings(self) -> dict[str, Any]:
        """What the asset's metadata keeps (no secret: `options_env` names variables)."""
        return {
            "topic": self.topic,
            "bootstrap_servers": self.bootstrap_servers,
            "options": dict(self.options),
            "options_env": dict(self.options_env),
            "starting_offsets": self.starting_offsets,
        }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *, source: str) -> KafkaTopic:
        """The declaration kept in a source's metadata.

        Raises:
            PartlakeConfigError: an unknown or malformed entry.
        """
        return from_settings(cls, settings, source=source, key=KAFKA_KEY)

    @property
    def servers(self) -> str:
        return self.bootstrap_servers or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP

    @property
    def identity(self) -> str:
        return f"kafka://{self.servers}/{self.topic}"

    def client_settings(self) -> dict[str, str]:
        """The Kafka client settings in effect, secrets read from their variables."""
        found = {k: str(v) for k, v in self.options.items()}
        for setting, variable in self.options_env.items():
            value = os.environ.get(variable)
            if value is None:
                raise PartlakeConfigError(
                    f"KafkaTopic({self.topic!r}) reads {setting} from ${variable}, which is not "
                    "set."
                )
            found[setting] = value
        return found


def stream_options(topic: KafkaTopic) -> dict[str, str]:
    """The options of Spark's Kafka source for the topic (`spark.readStream.format("kafka")`)."""
    return {
        "kafka.bootstrap.servers": topic.servers,
        "subscribe": topic.topic,
        "startingOffsets": topic.starting_offsets,
        # A message retention deleted before the stream read it is an error, not a silent gap.
        "failOnDataLoss": "true",
        **{f"kafka.{k}": v for k, v in topic.client_settings().items()},
    }


def end_offsets(topic: KafkaTopic, *, source: str) -> dict[int, int]:
    """Per partition of the topic, its end offset (the next message's), from the broker.

    Raises:
        SourceError: the broker does not answer in time, or the topic does not exist.
    """
    try:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
    except ImportError as error:  # pragma: no cover - an install without the extra
        raise PartlakeConfigError(
            "Kafka sources need confluent-kafka: pip install 'dagster-partlake[kafka]'."
        ) from error
    consumer = Consumer(
        {
            "bootstrap.servers": topic.servers,
            "group.id": "partlake-planner",
            "enable.auto.commit": False,
            "socket.timeout.ms": int(TIMEOUT_SECONDS * 1000),
            "log_level": 0,  # librdkafka's own lines would go to stderr
            **topic.client_settings(),
        }
    )
    try:
        try:
            metadata = consumer.list_topics(topic.topic, timeout=TIMEOUT_SECONDS)
        except KafkaException as error:
            raise SourceError(
                f"source {source}: the Kafka broker {topic.servers} did not answer in "
                f"{TIMEOUT_SECONDS:.0f} s ({error.args[0]}); start it or fix "
                f"KafkaTopic(bootstrap_servers=...) / ${BOOTSTRAP_ENV}."
            ) from None
        found = metadata.topics.get(topic.topic)
        if found is None or found.error is not None or not found.partitions:
            raise SourceError(
                f"source {source}: topic {topic.topic} does not exist on the Kafka broker "
                f"{topic.servers}; create it, or fix KafkaTopic(topic=...)."
            )
        offsets = {}
        for partition in sorted(found.partitions):
            try:
                _low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic.topic, partition), timeout=TIMEOUT_SECONDS
                )
            except KafkaException as error:
                raise SourceError(
                    f"source {source}: the Kafka broker {topic.servers} did not give the end of "
                    f"{topic.topic}[{partition}] ({error.args[0]})."
                ) from None
            offsets[partition] = int(high)
        return offsets
    finally:
        consumer.close()


def topic_state(topic: KafkaTopic, *, source: str) -> TableState | None:
    """The topic as the planner sees it: one unpartitioned state whose lastUpdated is the sum of
    its partitions' end offsets (None: no message yet)."""
    total = sum(end_offsets(topic, source=source).values())
    if total == 0:
        return None
    return TableState(
        root=topic.identity,
        version=total,
        partition_by=(),
        column_types={},
        last_updated=IntMap.build(VALUES, [((), total)]),
    )


def checkpoint_offsets(text: str, topic: str) -> int | None:
    """The sum of the end offsets of `topic` in a streaming checkpoint's offsets file (its
    last line is the Kafka source's offsets: `{"topic": {"0": 12, "1": 7}}`), None if absent."""
    try:
        offsets = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    found = offsets.get(topic) if isinstance(offsets, dict) else None
    if not isinstance(found, dict):
        return None
    return sum(int(v) for v in found.values())
