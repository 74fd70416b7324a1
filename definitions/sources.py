"""The example's sources outside the lake (group `sources`): a shop's PostgreSQL table and a
Kafka topic of page views, each feeding a small daily asset.

They join the code location when their servers are named, so that the rest of the example plans
and runs without them: `$PARTLAKE_DEMO_POSTGRES` (`host:port/database`, the login from `$PGUSER`
and `$PGPASSWORD`) and `$PARTLAKE_DEMO_KAFKA` (the broker's `host:port`). `make demo-sources`
starts both servers on 127.0.0.1, sets them, and plays a change in each
(`scripts/demo_sources.sh`, `python -m definitions.source_data`).

- `shop_orders` (PostgreSQL table `public.shop_orders`, daily x region in `order_date` and
  `region`) -> `order_revenue`: revenue per day and region;
- `page_views` (Kafka topic, JSON messages) -> `page_view_events` (a stream, partitioned by the
  view's day) -> `daily_page_views`: views per day.
"""

from __future__ import annotations

import os

from dagster import AssetsDefinition, BackfillPolicy, DailyPartitionsDefinition, SourceAsset, asset
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import KafkaTopic, PostgresTable, partlake_source
from dagster_partlake.orchestration.pools import POOL
from definitions.partitions import START_DATE, daily_region

POSTGRES_ENV = "PARTLAKE_DEMO_POSTGRES"
KAFKA_ENV = "PARTLAKE_DEMO_KAFKA"
ORDERS_TABLE = "public.shop_orders"
TOPIC = "page_views"
VIEW = "view_id long, user_id long, page string, ts timestamp"
daily = DailyPartitionsDefinition(start_date=START_DATE)


def postgres_assets(server: str) -> list[SourceAsset | AssetsDefinition]:
    """`shop_orders` on the PostgreSQL server `host:port/database`, and what reads it."""
    address, _, database = server.partition("/")
    host, _, port = address.partition(":")
    shop_orders = partlake_source(
        "shop_orders",
        partitions_def=daily_region,
        postgres=PostgresTable(
            table=ORDERS_TABLE, host=host, port=int(port or 5432), database=database or None
        ),
        metadata={"partition_expr": {"date": "order_date"}},
        group_name="sources",
        description="Orders in the shop's PostgreSQL database, changed by the shop",
    )

    @asset(
        partitions_def=daily_region,
        backfill_policy=BackfillPolicy.single_run(),
        metadata={"partition_expr": {"date": "order_date"}},
        group_name="sources",
        code_version="1",
        pool=POOL,
    )
    def order_revenue(shop_orders: DataFrame) -> DataFrame:
        """Orders and revenue per day and region."""
        return shop_orders.groupBy("order_date", "region").agg(
            F.count(F.lit(1)).alias("orders"),
            F.sum("amount").cast("decimal(12,2)").alias("revenue"),
        )

    return [shop_orders, order_revenue]


def kafka_assets(servers: str) -> list[SourceAsset | AssetsDefinition]:
    """`page_views` on the Kafka broker `servers`, its stream and what reads it."""
    page_views = partlake_source(
        "page_views",
        kafka=KafkaTopic(TOPIC, bootstrap_servers=servers),
        group_name="sources",
        description="Page views the web servers send to Kafka",
    )

    @asset(
        partitions_def=daily,
        metadata={"partlake/stream": {"mode": "available_now"}},
        group_name="sources",
        code_version="1",
    )
    def page_view_events(page_views: DataFrame) -> DataFrame:
        """Each page view once, in its day's partition."""
        view = F.from_json(F.col("value").cast("string"), VIEW).alias("v")
        return page_views.select(view).select("v.*").withColumn("date", F.to_date("ts"))

    @asset(
        partitions_def=daily,
        backfill_policy=BackfillPolicy.single_run(),
        group_name="sources",
        code_version="1",
        pool=POOL,
    )
    def daily_page_views(page_view_events: DataFrame) -> DataFrame:
        """Views and viewers per day."""
        return page_view_events.groupBy("date").agg(
            F.count(F.lit(1)).alias("views"), F.countDistinct("user_id").alias("viewers")
        )

    return [page_views, page_view_events, daily_page_views]


def source_assets() -> list[SourceAsset | AssetsDefinition]:
    """The sources whose servers the environment names (none: an empty list)."""
    found: list[SourceAsset | AssetsDefinition] = []
    if os.environ.get(POSTGRES_ENV):
        found += postgres_assets(os.environ[POSTGRES_ENV])
    if os.environ.get(KAFKA_ENV):
        found += kafka_assets(os.environ[KAFKA_ENV])
    return found
