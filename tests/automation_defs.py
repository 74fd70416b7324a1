"""The example's lakehouse under Dagster's own Declarative Automation instead of partlake's
sensor: every managed asset refreshes on `partlake_stale()`, upstream first, evaluated by
Dagster's automation sensor in the code server (a custom condition needs it)."""

import os

from dagster import (
    AssetsDefinition,
    AssetSelection,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    in_process_executor,
)

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    partlake_asset_checks,
    partlake_stale,
)
from definitions.assets import clean_events, daily_region_stats, monthly_region_stats, raw_events

# The composition the docs recommend: stale, not running, and nothing upstream still to do.
STALE_FIRST = (
    partlake_stale()
    & ~AutomationCondition.in_progress()
    & ~AutomationCondition.any_deps_match(partlake_stale() | AutomationCondition.in_progress())
)


def automated(assets_def: AssetsDefinition) -> AssetsDefinition:
    return assets_def.map_asset_specs(
        lambda spec: spec.replace_attributes(automation_condition=STALE_FIRST)
    )


ASSETS = [raw_events, *map(automated, [clean_events, daily_region_stats, monthly_region_stats])]
spark = SparkResource(remote=os.environ.get("PARTLAKE_SPARK_REMOTE") or None)

defs = Definitions(
    assets=ASSETS,
    asset_checks=partlake_asset_checks(ASSETS),
    sensors=[
        AutomationConditionSensorDefinition(
            "partlake_automation",
            target=AssetSelection.all(),
            use_user_code_server=True,
            default_status=DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=int(os.environ.get("PARTLAKE_SENSOR_INTERVAL_SECONDS", "30")),
        )
    ],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=in_process_executor,
)
