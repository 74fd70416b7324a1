"""The example's model kinds (group `models`), over a daily export of users (`definitions.exports`).

    user_exports (source) ─┬─ users              merge on user_id: the current users
                           ├─ users_history      scd2 on user_id: every version of every user
                           ├─ user_export_log    append: every export row ever received
                           └─ plan_counts        tracked: users per plan and day
                                ├─ plan_mix      table: the share of each plan over all days
                                └─ user_days     running total of user-days, reading its own
                                                 previous day (a self-dependency)

Rewrite an export with the same rows and `partlake run -m definitions`: users,
users_history, user_export_log and plan_counts run again, plan_counts comes out unchanged, and
plan_mix is not run.
"""

import warnings

from dagster import (
    AssetIn,
    BetaWarning,
    DailyPartitionsDefinition,
    TimeWindowPartitionMapping,
    asset,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

warnings.filterwarnings("ignore", category=BetaWarning)

from dagster_partlake import model_kind_metadata, partlake_source  # noqa: E402

# Not definitions.exports: it imports pyarrow, which a no-op `partlake run` must not load.
from definitions.partitions import EXPORTS_END, EXPORTS_START  # noqa: E402

daily = DailyPartitionsDefinition(start_date=EXPORTS_START, end_date=EXPORTS_END)
GROUP = "models"

user_exports = partlake_source(
    "user_exports",
    partitions_def=daily,
    group_name=GROUP,
    description="Every user on each day (python -m definitions.exports --date ...).",
)


@asset(
    partitions_def=daily,
    code_version="1",
    group_name=GROUP,
    metadata=model_kind_metadata("merge", unique_key=["user_id"], partition_by=[]),
)
def users(user_exports: DataFrame) -> DataFrame:
    """The current users: each day's export upserted on user_id."""
    return user_exports.select("user_id", "name", "plan")


@asset(
    partitions_def=daily,
    code_version="1",
    group_name=GROUP,
    metadata=model_kind_metadata("scd2", unique_key=["user_id"]),
)
def users_history(user_exports: DataFrame) -> DataFrame:
    """Every version of every user (valid_from, valid_to, is_current), one export per day."""
    return user_exports.select("user_id", "name", "plan")


@asset(
    partitions_def=daily,
    code_version="1",
    group_name=GROUP,
    metadata=model_kind_metadata("append", partition_by=[]),
)
def user_export_log(context, user_exports: DataFrame) -> DataFrame:
    """Every export row received, with the run that received it."""
    return user_exports.withColumn("received_by", F.lit(context.run_id))


@asset(
    partitions_def=daily,
    code_version="1",
    group_name=GROUP,
    metadata=model_kind_metadata("tracked"),
)
def plan_counts(user_exports: DataFrame) -> DataFrame:
    """Users per plan and day; a day whose counts did not change is not rewritten."""
    return user_exports.groupBy("date", "plan").agg(F.count(F.lit(1)).alias("users"))


@asset(code_version="1", group_name=GROUP, ins={"plan_counts": AssetIn()})
def plan_mix(plan_counts: DataFrame) -> DataFrame:
    """Each plan's share of user-days over all days."""
    total = plan_counts.agg(F.sum("users").alias("total"))
    return (
        plan_counts.groupBy("plan")
        .agg(F.sum("users").alias("user_days"))
        .crossJoin(total)
        .select("plan", "user_days", (F.col("user_days") / F.col("total")).alias("share"))
    )


@asset(
    partitions_def=daily,
    code_version="1",
    group_name=GROUP,
    ins={
        "user_days": AssetIn(
            partition_mapping=TimeWindowPartitionMapping(
                start_offset=-1, end_offset=-1, allow_nonexistent_upstream_partitions=True
            )
        )
    },
)
def user_days(plan_counts: DataFrame, user_days: DataFrame | None) -> DataFrame:
    """User-days since the first export: the day's users plus the previous day's total."""
    today = plan_counts.groupBy("date").agg(F.sum("users").alias("users"))
    if user_days is None:  # the first day has no previous day
        return today.select("date", F.col("users").alias("total"))
    before = user_days.agg(F.coalesce(F.max("total"), F.lit(0)).alias("before"))
    return today.crossJoin(before).select("date", (F.col("users") + F.col("before")).alias("total"))


# Incremental inputs (group `feeds`, written by `python -m definitions.feeds`).
FEEDS = "feeds"

user_changes = partlake_source(
    "user_changes",
    group_name=FEEDS,
    description="A change feed of user plans that only grows (python -m definitions.feeds).",
)


@asset(
    code_version="1",
    group_name=FEEDS,
    ins={"user_changes": AssetIn(metadata={"partlake/incremental": {"column": "updated_at"}})},
    metadata=model_kind_metadata("merge", unique_key=["user_id"]),
)
def user_plans(user_changes: DataFrame) -> DataFrame:
    """Each user's current plan: the changes since the last run (by updated_at) upserted."""
    return user_changes.select("user_id", "plan", "updated_at")


payment_files = partlake_source(
    "payment_files",
    folder=True,
    after_commit="archive",
    group_name=FEEDS,
    description="A landing folder of payment files (python -m definitions.feeds payments).",
)


@asset(
    code_version="1",
    group_name=FEEDS,
    metadata={
        **model_kind_metadata("append"),
        "partlake/constraints": [{"not_null": ["payment_id", "user_id"]}],
    },
)
def payments(payment_files: DataFrame) -> DataFrame:
    """Every payment, each landed file read once (then moved to payment_files/_archive/)."""
    return payment_files.select("payment_id", "user_id", "amount_cents")


MODEL_ASSETS = [
    user_exports,
    users,
    users_history,
    user_export_log,
    plan_counts,
    plan_mix,
    user_days,
    user_changes,
    user_plans,
    payment_files,
    payments,
]
