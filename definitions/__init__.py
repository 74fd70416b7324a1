"""Example code location and demo: `dagster dev` (via workspace.yaml) or `-m definitions`."""

import os
import warnings
from pathlib import Path

from dagster import BetaWarning, Definitions, ScheduleDefinition, in_process_executor

# BackfillPolicy is beta in Dagster 1.13; the example relies on it knowingly.
warnings.filterwarnings("ignore", category=BetaWarning)

from dagster_partlake import (  # noqa: E402
    POOL,
    DeltaPartitionIOManager,
    SparkResource,
    build_invalidation_sensor,
    build_maintenance_job,
    partlake_asset_checks,
    sql_assets,
)
from dagster_partlake.catalog.config import catalog_from_env  # noqa: E402
from definitions.assets import (  # noqa: E402
    clean_events,
    daily_region_stats,
    monthly_region_stats,
    raw_events,
)
from definitions.lake import lake_root  # noqa: E402
from definitions.models import MODEL_ASSETS  # noqa: E402
from definitions.partitions import daily_region, monthly_region  # noqa: E402
from definitions.sources import source_assets  # noqa: E402

LAKEHOUSE = [raw_events, clean_events, daily_region_stats, monthly_region_stats]

# The SQL models of definitions/sql/ (group `sql`): staging/events, marts/user_activity and
# marts/monthly_region_summary, reading the lakehouse tables above.
SQL_MODELS = sql_assets(
    Path(__file__).parent / "sql",  # every .sql file below it
    partitions={"daily_region": daily_region, "monthly_region": monthly_region},
    upstream=LAKEHOUSE,
    group_name="sql",
    pool=POOL,
)

# Local Spark by default; PARTLAKE_SPARK_REMOTE=sc://127.0.0.1:15002 (see `partlake spark start`)
# or PARTLAKE_SPARK_MASTER=spark://127.0.0.1:7077 share one Spark between all runs.
spark = SparkResource(
    master=os.environ.get("PARTLAKE_SPARK_MASTER") or "local[*]",
    remote=os.environ.get("PARTLAKE_SPARK_REMOTE") or None,
    # How long a call waits for a Spark Connect server that does not answer.
    connect_wait_seconds=int(os.environ.get("PARTLAKE_SPARK_CONNECT_WAIT_SECONDS", "60")),
)

# The lake: $PARTLAKE_LAKE_ROOT (an object store URI for `make demo-s3`), else $PARTLAKE_HOME on
# local disk; an object store's endpoint and keys come from the AWS environment variables.
# Tables by name: PARTLAKE_CATALOG=own (as `make demo` sets it) registers every table in
# partlake's own Hive metastore (lake.raw_events, lake.daily_region_stats, marts.user_activity,
# ...); a thrift:// URI names another metastore; unset, tables are known by location only.
catalog = catalog_from_env()
io_manager = DeltaPartitionIOManager(spark=spark, root=lake_root(), catalog=catalog)

# Compact, vacuum and checkpoint every managed table each night: nothing becomes stale.
maintenance = build_maintenance_job()

ASSETS = [*LAKEHOUSE, *MODEL_ASSETS, *SQL_MODELS]
if catalog is not None:
    ASSETS = catalog.named(ASSETS)  # each asset's catalog name as its dagster/table_name
# The PostgreSQL and Kafka sources (group `sources`) when their servers are named
# (`make demo-sources`: definitions.sources).
ASSETS += source_assets()

# `runs` (default) or `backfill` (see the sensor below).
_SENSOR_REFRESH = "backfill" if os.environ.get("PARTLAKE_SENSOR_REFRESH") == "backfill" else "runs"

defs = Definitions(
    # The lakehouse group, the model kinds over a daily user export (group `models`), the
    # incremental inputs (group `feeds`) and the SQL models (group `sql`).
    assets=ASSETS,
    # The quality gates declared in the assets' metadata, as asset checks the UI lists; every
    # asset's partlake settings are checked first, so a bad one fails this code location's load.
    asset_checks=partlake_asset_checks(ASSETS),
    # The intervals are environment knobs so a demo or a test can tick faster than production;
    # PARTLAKE_SENSOR_REFRESH=backfill makes each refresh one Dagster asset backfill instead of
    # runs requested level by level (slower: docs, Operating the daemon).
    sensors=[
        build_invalidation_sensor(
            minimum_interval_seconds=int(os.environ.get("PARTLAKE_SENSOR_INTERVAL_SECONDS", "2")),
            retry_base_seconds=int(os.environ.get("PARTLAKE_SENSOR_RETRY_SECONDS", "60")),
            refresh="backfill"
            if os.environ.get("PARTLAKE_SENSOR_REFRESH") == "backfill"
            else "runs",
        )
    ],
    jobs=[maintenance],
    schedules=[
        ScheduleDefinition(
            name="partlake_nightly_maintenance",
            job=maintenance,
            cron_schedule="0 3 * * *",
            description="Nightly table maintenance (compact, vacuum, checkpoint).",
        )
    ],
    resources={"spark": spark, "io_manager": io_manager},
    # One process per run, so a run starts at most one local Spark; Spark parallelises inside.
    executor=in_process_executor,
)
