"""Code location for benchmarks/backfill.py: the example's asset chain over more regions.

Regions come from BENCH_REGIONS (a count, default 8: r0..r7); Spark from PARTLAKE_SPARK_REMOTE /
PARTLAKE_SPARK_MASTER like the example; who commits from BENCH_WRITER ("partlake", the default,
or "delta-spark": benchmarks/native_writer.py).
"""

import os
import warnings

from dagster import (
    BetaWarning,
    DailyPartitionsDefinition,
    Definitions,
    MonthlyPartitionsDefinition,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    in_process_executor,
)

from dagster_partlake import DeltaPartitionIOManager, SparkResource
from definitions.assets import build_lakehouse
from definitions.lake import lake_root

warnings.filterwarnings("ignore", category=BetaWarning)

REGIONS = [f"r{i}" for i in range(int(os.environ.get("BENCH_REGIONS", "8")))]
START = "2024-01-01"

regions = StaticPartitionsDefinition(REGIONS)
daily = MultiPartitionsDefinition(
    {"date": DailyPartitionsDefinition(start_date=START), "region": regions}
)
monthly = MultiPartitionsDefinition(
    {"month": MonthlyPartitionsDefinition(start_date="2024-01", fmt="%Y-%m"), "region": regions}
)

spark = SparkResource(
    master=os.environ.get("PARTLAKE_SPARK_MASTER") or "local[*]",
    remote=os.environ.get("PARTLAKE_SPARK_REMOTE") or None,
)
defs = Definitions(
    assets=build_lakehouse(daily, monthly),
    # $PARTLAKE_LAKE_ROOT puts the lake on an object store (benchmarks/backfill_s3.py);
    # $BENCH_WRITER picks the writer (benchmarks/native_writer.py).
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(
            spark=spark,
            root=lake_root(),
            writer=os.environ.get("BENCH_WRITER", "partlake"),  # type: ignore[arg-type]
        ),
    },
    executor=in_process_executor,
)
