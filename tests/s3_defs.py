"""A small code location for the S3 tests (tests/test_s3_lake.py): one table `parts`, partitioned
by the static keys of `$S3_TEST_PARTS` (comma-separated), its rows tagged with `$S3_TEST_TAG`,
read by `part_totals` (a fault drill names a file in `$S3_TEST_STARTED` that `parts` creates
when it starts, and makes it wait `$S3_TEST_SLEEP` seconds; `$S3_TEST_FILES` files per partition,
default 1, give compaction something to do); the lake at `$PARTLAKE_LAKE_ROOT`
(an `s3://` URI), the credentials and the endpoint from the standard AWS environment
variables."""

import os
import time
from pathlib import Path

from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    Definitions,
    StaticPartitionsDefinition,
    asset,
    in_process_executor,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource

PARTS = StaticPartitionsDefinition(os.environ.get("S3_TEST_PARTS", "p1,p2").split(","))
ROWS = 3


@asset(
    partitions_def=PARTS,
    metadata={"partition_expr": "part"},
    backfill_policy=BackfillPolicy.single_run(),
    code_version="1",
)
def parts(context: AssetExecutionContext, spark: SparkResource) -> DataFrame:
    """ROWS rows per partition of the run, tagged with the writer's `$S3_TEST_TAG`."""
    tag = os.environ.get("S3_TEST_TAG", "a")
    if os.environ.get("S3_TEST_STARTED"):
        Path(os.environ["S3_TEST_STARTED"]).touch()
    time.sleep(float(os.environ.get("S3_TEST_SLEEP", "0")))
    rows = [(key, n, tag) for key in context.partition_keys for n in range(ROWS)]
    frame = spark.spark_session.createDataFrame(rows, "part string, n int, tag string")
    files = int(os.environ.get("S3_TEST_FILES", "1"))
    # Each Spark task writes its own file of each partition it holds (rows dealt round-robin).
    return frame.repartition(files) if files > 1 else frame


@asset(
    partitions_def=PARTS,
    metadata={"partition_expr": "part"},
    backfill_policy=BackfillPolicy.single_run(),
    code_version="1",
)
def part_totals(parts: DataFrame) -> DataFrame:
    return parts.groupBy("part").agg(F.sum("n").alias("total"))


spark = SparkResource(master="local[1]")
defs = Definitions(
    assets=[parts, part_totals],
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(
            spark=spark, root=os.environ.get("PARTLAKE_LAKE_ROOT")
        ),
    },
    executor=in_process_executor,
)
