"""The floor: one hand-written PySpark job computing the benchmark's tables, no orchestration.

    python -m benchmarks.floor_job SOURCE_DELTA_TABLE OUT_DIR

Same transformations as the assets (definitions.assets), read from the source's live files, each
table written once as Parquet partitioned like the Delta tables. One process, one local Spark.
Prints its total and, on a line `floor phases: {...}`, the seconds of each phase as JSON: Spark's
start, listing the source's live files, each table (Spark computing and writing it), Spark's stop.
"""

from __future__ import annotations

import json
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
    phases: dict[str, float] = {}
    last = started

    def phase(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        phases[name] = round(now - last, 3)
        last = now

    builder = SparkSession.builder.master("local[*]").appName("floor")
    for key, value in DEFAULT_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    phase("spark_start")
    table = DeltaTable(source)
    import pyarrow as pa

    schema = arrow_to_spark(pa.schema(table.schema().to_arrow()))
    raw = (
        spark.read.schema(schema)
        .option("basePath", "file://" + os.path.abspath(source))
        .parquet(*("file://" + f for f in table.file_uris()))
    )
    phase("source_files")
    clean_df = clean(raw)
    clean_df.write.mode("overwrite").partitionBy("date", "region").parquet(
        f"file://{out}/clean_events"
    )
    phase("clean_events")
    clean_back = spark.read.parquet(f"file://{out}/clean_events")
    daily_df = daily_stats(clean_back)
    daily_df.write.mode("overwrite").partitionBy("date", "region").parquet(
        f"file://{out}/daily_region_stats"
    )
    phase("daily_region_stats")
    monthly_df = monthly_stats(spark.read.parquet(f"file://{out}/daily_region_stats"))
    monthly_df.write.mode("overwrite").partitionBy("month", "region").parquet(
        f"file://{out}/monthly_region_stats"
    )
    phase("monthly_region_stats")
    spark.stop()
    phase("spark_stop")
    print(f"floor job: {time.perf_counter() - started:.1f} s")
    print(f"floor phases: {json.dumps(phases)}")


if __name__ == "__main__":
    main()
