"""The example lakehouse: raw_events (source) -> clean_events -> daily_region_stats -> monthly.

`build_lakehouse` makes the chain for any daily x region / monthly x region partitions (the
benchmarks use more regions); the module-level assets are the example's.
"""

from dagster import (
    AssetIn,
    AssetsDefinition,
    BackfillPolicy,
    DimensionPartitionMapping,
    IdentityPartitionMapping,
    MultiPartitionMapping,
    MultiPartitionsDefinition,
    SourceAsset,
    TimeWindowPartitionMapping,
    asset,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import POOL, partlake_source
from definitions.partitions import daily_region, monthly_region


def clean(raw_events: DataFrame) -> DataFrame:
    """raw_events without rows lacking a user, one row per event_id, non-negative amounts."""
    return (
        raw_events.where(F.col("user_id").isNotNull())
        .dropDuplicates(["event_id", "date", "region"])
        .withColumn("amount", F.greatest(F.col("amount"), F.lit(0).cast("decimal(10,2)")))
        .withColumn("event_type", F.lower(F.col("event_type")))
    )


def daily_stats(clean_events: DataFrame) -> DataFrame:
    """Per day and region: events, distinct users, purchases and revenue."""
    return clean_events.groupBy("date", "region").agg(
        F.count(F.lit(1)).alias("events"),
        F.countDistinct("user_id").alias("users"),
        F.sum(F.when(F.col("event_type") == "purchase", 1).otherwise(0)).alias("purchases"),
        F.sum(F.when(F.col("event_type") == "purchase", F.col("amount"))).alias("revenue"),
    )


def monthly_stats(daily_region_stats: DataFrame) -> DataFrame:
    """Per month (its first day) and region: totals over the month's daily partitions."""
    return daily_region_stats.groupBy(F.trunc("date", "month").alias("month"), F.col("region")).agg(
        F.sum("events").alias("events"),
        F.sum("purchases").alias("purchases"),
        F.sum("revenue").alias("revenue"),
        F.count(F.lit(1)).alias("days"),
    )


def build_lakehouse(
    daily: MultiPartitionsDefinition, monthly: MultiPartitionsDefinition
) -> list[SourceAsset | AssetsDefinition]:
    """The source and the three managed assets over the given partitions."""
    raw_events = partlake_source(
        "raw_events",
        partitions_def=daily,
        group_name="lakehouse",
        description="Source events, written by an upstream system (python -m definitions.ingest).",
        # Partition retention (docs: Partition retention): the lake keeps the last 30 days of
        # raw events, counted back from the newest day present (the demo's 2024 days stay).
        # Older days are retired: never read, never rebuilt; clean_events forgets them too.
        metadata={"partlake/retention": {"keep_last": 30}},
    )
    common = {
        "backfill_policy": BackfillPolicy.single_run(),
        # Every step claims a slot of this Dagster pool: the instance's limit for it caps
        # partition runs from the sensor, the UI and `partlake run` together.
        "pool": POOL,
        "code_version": "1",
        "group_name": "lakehouse",
    }

    regions = daily.get_partitions_def_for_dimension("region").get_partition_keys()

    # Quality gates, checked on the staged files before each commit (docs: Quality gates):
    # a violation commits nothing and fails the step; each gate is an asset check in the UI.
    @asset(
        partitions_def=daily,
        metadata={
            "partlake/constraints": [
                {"not_null": ["user_id", "event_id"]},
                {"unique": ["event_id"]},
                {"accepted_values": {"region": list(regions)}},
                {"expression": "amount >= 0", "name": "non_negative"},
                {"row_count": {"min": 1}},
            ],
            # Retired with the raw events it reads, and removed by `partlake maintain
            # --retention` (or the maintenance job); the stats below keep their history.
            "partlake/retention": {"cascade": True},
        },
        **common,
    )
    def clean_events(raw_events: DataFrame) -> DataFrame:
        """raw_events without rows lacking a user, one row per event_id, non-negative amounts."""
        return clean(raw_events)

    @asset(
        partitions_def=daily,
        metadata={
            # Audits compare each new partition with the one it replaces, before the commit.
            "partlake/audits": [
                {"no_partition_emptied": True},
                {"column_sum": {"column": "revenue", "max_change": 0.5}, "severity": "warn"},
            ]
        },
        **common,
    )
    def daily_region_stats(clean_events: DataFrame) -> DataFrame:
        """Per day and region: events, distinct users, purchases and revenue."""
        return daily_stats(clean_events)

    @asset(
        partitions_def=monthly,
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
        **common,
    )
    def monthly_region_stats(daily_region_stats: DataFrame) -> DataFrame:
        """Per month (its first day) and region: totals over the month's daily partitions."""
        return monthly_stats(daily_region_stats)

    return [raw_events, clean_events, daily_region_stats, monthly_region_stats]


raw_events, clean_events, daily_region_stats, monthly_region_stats = build_lakehouse(
    daily_region, monthly_region
)
