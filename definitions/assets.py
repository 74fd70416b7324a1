"""The example lakehouse: raw_events (source) -> clean_events -> daily_region_stats -> monthly."""


from dagster import (
    AssetIn,
    BackfillPolicy,
    DimensionPartitionMapping,
    IdentityPartitionMapping,
    MultiPartitionMapping,
    TimeWindowPartitionMapping,
    asset,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake.sources import partlake_source
from definitions.partitions import daily_region, monthly_region

raw_events = partlake_source(
    "raw_events",
    partitions_def=daily_region,
    group_name="lakehouse",
    description="Source events, written by an upstream system (python -m definitions.ingest).",
)


@asset(
    partitions_def=daily_region,
    backfill_policy=BackfillPolicy.single_run(),
    code_version="1",
    group_name="lakehouse",
)
def clean_events(raw_events: DataFrame) -> DataFrame:
    """raw_events without rows lacking a user, one row per event_id, non-negative amounts."""
    return (
        raw_events.where(F.col("user_id").isNotNull())
        .dropDuplicates(["event_id", "date", "region"])
        .withColumn("amount", F.greatest(F.col("amount"), F.lit(0).cast("decimal(10,2)")))
        .withColumn("event_type", F.lower(F.col("event_type")))
    )


@asset(
    partitions_def=daily_region,
    backfill_policy=BackfillPolicy.single_run(),
    code_version="1",
    group_name="lakehouse",
)
def daily_region_stats(clean_events: DataFrame) -> DataFrame:
    """Per day and region: events, distinct users, purchases and revenue."""
    return clean_events.groupBy("date", "region").agg(
        F.count(F.lit(1)).alias("events"),
        F.countDistinct("user_id").alias("users"),
        F.sum(F.when(F.col("event_type") == "purchase", 1).otherwise(0)).alias("purchases"),
        F.sum(F.when(F.col("event_type") == "purchase", F.col("amount"))).alias("revenue"),
    )


@asset(
    partitions_def=monthly_region,
    backfill_policy=BackfillPolicy.single_run(),
    code_version="1",
    group_name="lakehouse",
    ins={
        "daily_region_stats": AssetIn(
            partition_mapping=MultiPartitionMapping(
                {
                    "date": DimensionPartitionMapping("month", TimeWindowPartitionMapping()),
                    "region": DimensionPartitionMapping("region", IdentityPartitionMapping()),
                }
            )
        )
    },
    metadata={"partition_expr": {"month": "month", "region": "region"}},
)
def monthly_region_stats(daily_region_stats: DataFrame) -> DataFrame:
    """Per month (its first day) and region: totals over the month's daily partitions."""
    return daily_region_stats.groupBy(
        F.trunc("date", "month").alias("month"), F.col("region")
    ).agg(
        F.sum("events").alias("events"),
        F.sum("purchases").alias("purchases"),
        F.sum("revenue").alias("revenue"),
        F.count(F.lit(1)).alias("days"),
    )
