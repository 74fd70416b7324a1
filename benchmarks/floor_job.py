"""The floor: one hand-written PySpark job computing the benchmark's tables, no orchestration.

    python -m benchmarks.floor_job SOURCE_DELTA_TABLE OUT_DIR

Same transformations as the assets (definitions.assets), read from the source's live files, each
table written once as Parquet partitioned like the Delta tables. One process, one local Spark.
"""

from __future__ import annotations

import os
import sys
import time

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from dagster_partlake.delta.schema import arrow_to_spark
from dagster_partlake.spark.conf import DEFAULT_CONF
from definitions.assets import clean, daily_stats, monthly_stats


def main() -> None:
    source, out = sys.argv[1], sys.argv[2]
    started = time.perf_counter()
    builder = SparkSession.builder.master("local[*]").appName("floor")
    for key, value in DEFAULT_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    table = DeltaTable(source)
    import pyarrow as pa

    schema = arrow_to_spark(pa.schema(table.schema().to_arrow()))
    raw = (
        spark.read.schema(schema)
        .option("basePath", "file://" + os.path.abspath(source))
        .parquet(*("file://" + f for f in table.file_uris()))
    )
    clean_df = clean(raw)
    clean_df.write.mode("overwrite").partitionBy("date", "region").parquet(
        f"file://{out}/clean_events"
    )
    clean_back = spark.read.parquet(f"file://{out}/clean_events")
    daily_df = daily_stats(clean_back)
    daily_df.write.mode("overwrite").partitionBy("date", "region").parquet(
        f"file://{out}/daily_region_stats"
    )
    monthly_df = monthly_stats(spark.read.parquet(f"file://{out}/daily_region_stats"))
    monthly_df.write.mode("overwrite").partitionBy("month", "region").parquet(
        f"file://{out}/monthly_region_stats"
    )
    spark.stop()
    print(f"floor job: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
