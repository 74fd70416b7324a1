"""Example code location and demo: `dagster dev` (via workspace.yaml) or `-m definitions`."""

import warnings

from dagster import BetaWarning, Definitions, in_process_executor

# BackfillPolicy is beta in Dagster 1.13; the example relies on it knowingly.
warnings.filterwarnings("ignore", category=BetaWarning)

from dagster_partlake import DeltaPartitionIOManager, SparkResource, build_invalidation_sensor
from definitions.assets import (  # noqa: E402
    clean_events, daily_region_stats, monthly_region_stats, raw_events
)

spark = SparkResource()

defs = Definitions(
    assets=[raw_events, clean_events, daily_region_stats, monthly_region_stats],
    sensors=[build_invalidation_sensor(minimum_interval_seconds=30)],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    # One process per run, so a run starts at most one local Spark; Spark parallelises inside.
    executor=in_process_executor,
)
