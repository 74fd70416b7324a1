"""PostgreSQL and Kafka sources, side by side with the Spark jobs a user would write by hand.

    .venv/bin/python -m benchmarks.sources [--rows 10000000] [--days 30] [--messages 2000000]
                                           [--repeats 3] [--layout spread|in_order]
                                           [--out benchmarks/out/sources.json]
                                           [--only postgres|kafka|plan ...]

One local Spark session (local[2]) and one Dagster instance in this process serve every run; the
servers (a PostgreSQL cluster, a Kafka broker) run on 127.0.0.1 and are stopped at the end. Each
pair is interleaved, partlake first then the hand-written job, `--repeats` times; the medians and
their ratio are reported (targets, not tests: within 1.15x):

- **PostgreSQL into partitions**: a table of `--rows` orders over `--days` days (an index on the
  date; `--layout spread`, the default, cycles the days row by row, `in_order` fills them day
  after day). partlake: `dagster.materialize` of the `--days` partitions of an asset copying the
  source (`partlake_source(..., postgres=PostgresTable(...))`, a single-run backfill: parallel JDBC
  queries as `read_by="auto"` picks them, by ranges of the primary key when the days are
  spread, a query per day when in order; then partlake's writer and one commit). By hand:
  `spark.read.jdbc(...)` split into as many id ranges, then delta-spark's writer partitioned by
  date. Each into a fresh table; both must hold the same rows (count and sum).
- **Kafka into Delta**: `--messages` JSON messages on a topic of 4 partitions. partlake: an
  `available_now` streaming asset (`KafkaTopic`), each micro-batch committed exactly once. By
  hand: Structured Streaming's Kafka source written by delta-spark (`writeStream.format("delta")`,
  trigger availableNow, partitioned by date). Messages per second of each, from the start of
  the run to its end, into fresh tables; both must hold every message once.
- **A plan with nothing changed over a PostgreSQL source**: the statements the server receives
  (its statement log) and the time of `make_plan` of the code location, `--repeats` plans.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dagster import (
    AssetIn,
    BackfillPolicy,
    DagsterInstance,
    DailyPartitionsDefinition,
    Definitions,
    asset,
    materialize,
)
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    KafkaTopic,
    PostgresTable,
    SparkResource,
    partlake_source,
)

TARGET_RATIO = 1.15
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _table_stats(path: Path, column: str) -> tuple[int, int]:
    table = DeltaTable(str(path)).to_pyarrow_table(columns=[column])
    values = table.column(column).to_pylist()
    return len(values), int(sum(int(v) for v in values))


# -- PostgreSQL -----------------------------------------------------------------------------------


def _load_orders(server: Any, rows: int, days: int, layout: str = "spread") -> float:
    """The orders table: `spread`, the days cycling row by row (every page holds rows of every
    day), or `in_order`, day after day (as a table filled over time)."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(
        host="127.0.0.1", port=server.port, dbname=server.db, user=server.user, autocommit=True
    ) as connection:
        connection.execute("DROP TABLE IF EXISTS orders")
        connection.execute(
            "CREATE TABLE orders (id bigint, order_date date NOT NULL, user_id bigint, "
            "amount bigint)"
        )
        day = "(g %% %s)" if layout == "spread" else "((g - 1) * %s / %s)"
        connection.execute(
            f"INSERT INTO orders SELECT g, date '2024-01-01' + {day}::int, g %% 100003, "
            "g %% 1000 FROM generate_series(1, %s) g",
            (days, rows) if layout == "spread" else (days, rows, rows),
        )
        connection.execute("CREATE INDEX ON orders (order_date)")
        connection.execute("ALTER TABLE orders ADD PRIMARY KEY (id)")
        connection.execute("ANALYZE orders")
    return time.perf_counter() - started


def postgres_pair(
    server: Any, work: Path, rows: int, days: int, repeats: int, layout: str = "spread"
) -> dict[str, Any]:
    """partlake's read of `days` partitions against the hand-written JDBC job."""
    load_seconds = _load_orders(server, rows, days, layout)
    end = dt.date(2024, 1, 1) + dt.timedelta(days=days)
    daily = DailyPartitionsDefinition(start_date="2024-01-01", end_date=end.isoformat())
    keys = daily.get_partition_keys()
    table = PostgresTable(
        table="public.orders", port=server.port, database=server.db, user=server.user
    )
    orders = partlake_source(
        "orders", partitions_def=daily, postgres=table, metadata={"partition_expr": "order_date"}
    )

    @asset(
        partitions_def=daily,
        backfill_policy=BackfillPolicy.single_run(),
        metadata={"partition_expr": "order_date"},
    )
    def order_copy(orders: DataFrame) -> DataFrame:
        return orders

    spark_resource = SparkResource(master="local[2]")
    spark = spark_resource.spark_session
    instance = DagsterInstance.ephemeral()
    url = table.jdbc_url()
    partlake_seconds: list[float] = []
    by_hand_seconds: list[float] = []
    checks: list[tuple[int, int]] = []
    for repeat in range(repeats):
        root = work / f"pg-{repeat}"
        io = DeltaPartitionIOManager(spark=spark_resource, root=str(root))
        started = time.perf_counter()
        result = materialize(
            [orders, order_copy],
            selection=[order_copy.key],
            resources={"io_manager": io},
            instance=instance,
            # One run of every day (the backfill policy's single run), as `partlake run` makes.
            tags={
                "dagster/asset_partition_range_start": keys[0],
                "dagster/asset_partition_range_end": keys[-1],
            },
        )
        partlake_seconds.append(time.perf_counter() - started)
        assert result.success
        checks.append(_table_stats(root / "warehouse" / "order_copy", "amount"))
        target = work / f"pg-hand-{repeat}"
        started = time.perf_counter()
        df = spark.read.jdbc(
            url,
            "public.orders",
            column="id",
            lowerBound=1,
            upperBound=rows,
            numPartitions=days,
            properties={
                "user": server.user,
                "driver": "org.postgresql.Driver",
                "fetchsize": "10000",
            },
        )
        df.write.format("delta").partitionBy("order_date").mode("overwrite").save(str(target))
        by_hand_seconds.append(time.perf_counter() - started)
        checks.append(_table_stats(target, "amount"))
    assert len(set(checks)) == 1, f"the tables differ: {checks}"
    partlake, by_hand = _median(partlake_seconds), _median(by_hand_seconds)
    return {
        "rows": rows,
        "days": days,
        "layout": layout,
        "load_seconds": round(load_seconds, 1),
        "partlake_seconds": [round(s, 3) for s in partlake_seconds],
        "by_hand_seconds": [round(s, 3) for s in by_hand_seconds],
        "partlake_median": partlake,
        "by_hand_median": by_hand,
        "ratio": round(partlake / by_hand, 3),
        "target_ratio": TARGET_RATIO,
        "rows_checked": checks[0][0],
    }


def plan_cost(server: Any, work: Path, days: int, repeats: int) -> dict[str, Any]:
    """Statements and time of plans of a code location over the source, nothing changed."""
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession

    daily = DailyPartitionsDefinition(start_date="2024-01-01")
    table = PostgresTable(
        table="public.orders", port=server.port, database=server.db, user=server.user
    )
    orders = partlake_source(
        "orders", partitions_def=daily, postgres=table, metadata={"partition_expr": "order_date"}
    )

    @asset(partitions_def=daily, metadata={"partition_expr": "order_date"})
    def order_copy(orders: DataFrame) -> DataFrame:
        return orders

    defs = Definitions(
        assets=[orders, order_copy],
        resources={"io_manager": DeltaPartitionIOManager(root=str(work / "plan"))},
    )
    session = PlanningSession(LakeGraph(defs), StateCache())
    session.plan()  # the first: reads the stamps (and installs them if needed)
    log = Path(server.data) / "server.log"
    start = len(log.read_bytes())
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        session.plan()
        seconds.append(time.perf_counter() - started)
    sent = [
        line
        for line in log.read_text(errors="replace")[start:].splitlines()
        if line.startswith("partlake: LOG:  ") and ("statement:" in line or "execute" in line)
    ]
    return {
        "plans": repeats,
        "statements": len(sent),
        "statements_per_plan": len(sent) / repeats,
        "plan_seconds_median": _median(seconds),
        "statement": sent[0].split("LOG:  ", 1)[1][:200] if sent else None,
    }


# -- Kafka ----------------------------------------------------------------------------------------


def _produce(broker: Any, topic: str, messages: int, days: int) -> float:
    from confluent_kafka import Producer

    started = time.perf_counter()
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50, "log_level": 0}
    )
    for i in range(messages):
        day = f"2024-01-{1 + i % days:02d}"
        value = f'{{"id":{i},"day":"{day}","amount":{i % 1000}}}'
        while True:
            try:
                producer.produce(topic, key=str(i), value=value)
                break
            except BufferError:  # the client's queue is full: let it deliver, then go on
                producer.poll(0.5)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(600)
    return time.perf_counter() - started


def kafka_pair(broker: Any, work: Path, messages: int, days: int, repeats: int) -> dict[str, Any]:
    """partlake's streaming asset against the hand-written Structured Streaming job."""
    produce_seconds = 0.0
    partlake_rates: list[float] = []
    by_hand_rates: list[float] = []
    spark_resource = SparkResource(master="local[2]")
    spark = spark_resource.spark_session
    instance = DagsterInstance.ephemeral()
    schema = "id long, day string, amount long"
    daily = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
    for repeat in range(repeats):
        topic = f"events_{repeat}"
        broker.create_topic(topic, partitions=4)
        produce_seconds += _produce(broker, topic, messages, days)
        topic_source = KafkaTopic(topic, bootstrap_servers=broker.bootstrap_servers)
        source = partlake_source(f"events_{repeat}", kafka=topic_source)

        @asset(
            name=f"events_table_{repeat}",
            partitions_def=daily,
            metadata={"partlake/stream": {"mode": "available_now"}},
            ins={"messages": AssetIn(key=source.key)},
        )
        def stream(messages: DataFrame) -> DataFrame:
            parsed = F.from_json(F.col("value").cast("string"), schema).alias("e")
            return messages.select(parsed).select("e.id", F.col("e.day").alias("date"), "e.amount")

        root = work / f"kafka-{repeat}"
        io = DeltaPartitionIOManager(spark=spark_resource, root=str(root))
        started = time.perf_counter()
        result = materialize(
            [source, stream],
            selection=[stream.key],
            resources={"io_manager": io},
            instance=instance,
        )
        partlake_rates.append(messages / (time.perf_counter() - started))
        assert result.success
        count, total = _table_stats(root / "warehouse" / f"events_table_{repeat}", "id")
        assert count == messages and total == messages * (messages - 1) // 2, (count, total)

        target = work / f"kafka-hand-{repeat}"
        started = time.perf_counter()
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        parsed = F.from_json(F.col("value").cast("string"), schema).alias("e")
        query = (
            reader.select(parsed)
            .select("e.id", F.col("e.day").alias("date"), "e.amount")
            .writeStream.format("delta")
            .partitionBy("date")
            .option("checkpointLocation", str(work / f"kafka-hand-checkpoint-{repeat}"))
            .trigger(availableNow=True)
            .start(str(target))
        )
        query.awaitTermination()
        by_hand_rates.append(messages / (time.perf_counter() - started))
        count, total = _table_stats(target, "id")
        assert count == messages and total == messages * (messages - 1) // 2, (count, total)
    partlake, by_hand = _median(partlake_rates), _median(by_hand_rates)
    return {
        "messages": messages,
        "topic_partitions": 4,
        "produce_seconds": round(produce_seconds, 1),
        "partlake_messages_per_second": [round(r) for r in partlake_rates],
        "by_hand_messages_per_second": [round(r) for r in by_hand_rates],
        "partlake_median": partlake,
        "by_hand_median": by_hand,
        "ratio_by_hand_over_partlake": round(by_hand / partlake, 3),
        "target_ratio": TARGET_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sources", description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--layout",
        choices=["spread", "in_order"],
        default="spread",
        help="the orders' days cycling row by row, or day after day",
    )
    parser.add_argument("--only", choices=["postgres", "kafka", "plan"], action="append")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "sources.json")
    args = parser.parse_args(argv)
    from tests.servers import kafka_broker, postgres_server

    only = set(args.only or ["postgres", "kafka", "plan"])
    work = Path(tempfile.mkdtemp(prefix="partlake-bench-sources-"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        if only & {"postgres", "plan"}:
            with postgres_server(
                settings=["log_statement=all", "log_line_prefix='%a: '"]
            ) as server:
                os.environ["PGUSER"] = server.user
                if "postgres" in only:
                    report["postgres"] = postgres_pair(
                        server, work, args.rows, args.days, args.repeats, args.layout
                    )
                    print(json.dumps(report["postgres"]), flush=True)
                else:
                    _load_orders(server, args.rows, args.days, args.layout)
                if "plan" in only:
                    report["plan"] = plan_cost(server, work, args.days, max(args.repeats, 5))
                    print(json.dumps(report["plan"]), flush=True)
        if "kafka" in only:
            with kafka_broker(work / "broker") as broker:
                report["kafka"] = kafka_pair(
                    broker, work, args.messages, min(args.days, 30), args.repeats
                )
                print(json.dumps(report["kafka"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["load_average"] = os.getloadavg()
    if args.only and args.out.exists():
        # A partial run (--only) replaces its sections of the last report and keeps the others.
        earlier = json.loads(args.out.read_text())
        report = {
            **earlier,
            **report,
            "sections_started": {
                **earlier.get("sections_started", {}),
                **{k: report["started"] for k in only},
            },
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
