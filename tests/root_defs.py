"""A code location whose managed assets produce their own data (no upstream assets).

`orders` pulls orders per day x shop from "an API" (generated here); `order_stats` reads it. The
first day is three days ago, so the lake has a handful of partitions that exist now.
`store_catalog` has dynamic partitions: every registered store is due until written.
"""

import datetime as dt

from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    DailyPartitionsDefinition,
    Definitions,
    DynamicPartitionsDefinition,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    asset,
    in_process_executor,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, build_invalidation_sensor

START = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=3)).isoformat()
daily_shop = MultiPartitionsDefinition(
    {
        "date": DailyPartitionsDefinition(start_date=START),
        "shop": StaticPartitionsDefinition(["s1", "s2"]),
    }
)
stores = DynamicPartitionsDefinition(name="stores")


@asset(partitions_def=daily_shop, backfill_policy=BackfillPolicy.single_run(), code_version="1")
def orders(context: AssetExecutionContext, spark: SparkResource) -> DataFrame:
    """Three orders per day and shop of the run's partitions."""
    rows = []
    for key in context.partition_keys:
        day, shop = key.split("|")
        rows.extend((dt.date.fromisoformat(day), shop, n, 10.0 * n) for n in range(1, 4))
    return spark.spark_session.createDataFrame(rows, "date date, shop string, n int, amount double")


@asset(partitions_def=daily_shop, backfill_policy=BackfillPolicy.single_run(), code_version="1")
def order_stats(orders: DataFrame) -> DataFrame:
    return orders.groupBy("date", "shop").agg(F.sum("amount").alias("revenue"))


@asset(partitions_def=stores, code_version="1")
def store_catalog(context: AssetExecutionContext, spark: SparkResource) -> DataFrame:
    return spark.spark_session.createDataFrame(
        [(context.partition_key, "open")], "stores string, status string"
    )


spark = SparkResource(master="local[2]")
defs = Definitions(
    assets=[orders, order_stats, store_catalog],
    sensors=[build_invalidation_sensor("roots", minimum_interval_seconds=1, max_runs_in_flight=5)],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=in_process_executor,
)
