"""The Declarative Automation example of the docs (README, Freshness: `partlake_stale()`): the
README's two assets, the managed one refreshed by Dagster's automation on `partlake_stale()`,
upstream first. `tests/test_docs_code.py` loads it over the lake its code-location example filled
and evaluates the condition; the docs' automation blocks are fragments of this file."""

import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    partlake_asset_checks,
    partlake_source,
    partlake_stale,
)

regions = dg.StaticPartitionsDefinition(["eu", "us", "apac"])
daily_region = dg.MultiPartitionsDefinition(
    {"date": dg.DailyPartitionsDefinition(start_date="2024-01-01"), "region": regions}
)
raw_events = partlake_source("raw_events", partitions_def=daily_region)


@dg.asset(
    partitions_def=daily_region, backfill_policy=dg.BackfillPolicy.single_run(), code_version="1"
)
def clean_events(raw_events: DataFrame) -> DataFrame:
    return raw_events.where("user_id is not null")


# Stale, not running, and nothing upstream stale or running: a closure refreshes upstream first.
stale_first = (
    partlake_stale()
    & ~dg.AutomationCondition.in_progress()
    & ~dg.AutomationCondition.any_deps_match(
        partlake_stale() | dg.AutomationCondition.in_progress()
    )
)
managed_assets = [clean_events]
automated = [
    a.map_asset_specs(lambda s: s.replace_attributes(automation_condition=stale_first))
    for a in managed_assets
]
# The condition plans the code location, so Dagster must evaluate it in the code server.
automation = dg.AutomationConditionSensorDefinition(
    "partlake_automation", target=dg.AssetSelection.all(), use_user_code_server=True
)
assets = [raw_events, *automated]
spark = SparkResource()
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    sensors=[automation],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
