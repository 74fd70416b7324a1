"""A code location whose step can be held inside its pool slot, for the dead-run tests.

`held` has three partitions and claims a slot of the Dagster pool `partlake` per step. With
`PARTLAKE_TEST_HOLD_DIR` set, a step writes `<dir>/<pid>.<partition>.started` once it runs (it
holds its slot then) and waits until `<dir>/release` exists; without it, it writes at once. The
lake's Spark session is the IO manager's own, created on the first write, so a process killed
inside the step never started a JVM.
"""

import os
import time
from pathlib import Path

from dagster import AssetExecutionContext, Definitions, StaticPartitionsDefinition, asset
from pyspark.sql import DataFrame

from dagster_partlake import POOL, DeltaPartitionIOManager, SparkResource

HOLD_ENV = "PARTLAKE_TEST_HOLD_DIR"
SPARK = SparkResource(
    master="local[1]",
    spark_conf={"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "512m"},
)


@asset(partitions_def=StaticPartitionsDefinition(["a", "b", "c"]), pool=POOL, code_version="1")
def held(context: AssetExecutionContext) -> DataFrame:
    hold = os.environ.get(HOLD_ENV)
    if hold:
        Path(hold, f"{os.getpid()}.{context.partition_key}.started").touch()
        while not Path(hold, "release").exists():
            time.sleep(0.2)
    return SPARK.spark_session.createDataFrame(
        [(context.partition_key, 1)], "partition string, n int"
    )


@asset(code_version="1")
def quiet() -> DataFrame:
    """Unpartitioned, outside the pool: once written, `partlake run --select quiet` is a no-op."""
    return SPARK.spark_session.createDataFrame([(1,)], "n int")


defs = Definitions(
    assets=[held, quiet], resources={"io_manager": DeltaPartitionIOManager(spark=SPARK)}
)
