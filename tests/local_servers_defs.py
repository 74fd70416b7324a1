"""A code location on the three local servers of the Local servers guide
(docs/guides/local-servers.md, whose sessions scripts/docs_sessions.py replays): its lake on the
S3 server, a PostgreSQL table and a Kafka topic as sources. The S3 server's endpoint, region and
keys come from the environment (`s3_server.py env`), the PostgreSQL password from `$PGPASSWORD`.
"""

from __future__ import annotations

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    KafkaTopic,
    PostgresTable,
    SparkResource,
    partlake_asset_checks,
    partlake_source,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")

# The S3 server: AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, AWS_REGION and the keys from the environment.
spark = SparkResource(master="local[2]")
io_manager = DeltaPartitionIOManager(spark=spark, root="s3://lake/shop")

# PostgreSQL: the password from $PGPASSWORD (password_env's default).
orders = partlake_source(
    "orders",
    partitions_def=days,
    postgres=PostgresTable(
        table="public.orders", host="127.0.0.1", port=5433, database="shop", user="partlake"
    ),
    metadata={"partition_expr": "order_date"},
)
# Kafka: the broker's address.
clicks = partlake_source("clicks", kafka=KafkaTopic("clicks", bootstrap_servers="127.0.0.1:9092"))


@dg.asset(partitions_def=days, code_version="1")
def daily_revenue(orders: DataFrame) -> DataFrame:
    return orders.groupBy(F.col("order_date").alias("date")).agg(F.sum("amount").alias("revenue"))


@dg.asset(partitions_def=days, metadata={"partlake/stream": {"mode": "available_now"}})
def click_events(clicks: DataFrame) -> DataFrame:
    event = F.from_json(F.col("value").cast("string"), "id long, day string").alias("e")
    return clicks.select(event).select("e.id", F.col("e.day").alias("date"))


assets = [orders, clicks, daily_revenue, click_events]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    resources={"spark": spark, "io_manager": io_manager},
    executor=dg.in_process_executor,
)
