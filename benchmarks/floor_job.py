"""The floor: one hand-written PySpark job computing the benchmark's tables, no orchestration.

    python -m benchmarks.floor_job SOURCE_DELTA_TABLE OUT_DIR

Same transformations as the assets (definitions.assets), read from the source's live files, each
table written once as Parquet partitioned like the Delta tables. One process, one local Spark.
SOURCE and OUT may be `s3://` URIs (the AWS environment variables name the server and keys):
Spark then reads and writes through `s3a` with the JARs `make install` fetched, as a hand-written
job on S3 would.
Prints its total and, on a line `floor phases: {...}`, the seconds of each phase as JSON: Spark's
start, listing the source's live files, each table (Spark computing and writing it), Spark's stop.
"""

from __future__ import annotations

import json
import sys
import time
from urllib.parse import unquote

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from dagster_partlake.delta.schema import arrow_to_spark
from dagster_partlake.spark.conf import DEFAULT_CONF
from dagster_partlake.spark.jars import local_jars
from dagster_partlake.spark.storage import apply_hadoop, jars_conf, s3a_settings
from dagster_partlake.storage.location import as_location
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

    source_at, out_at = as_location(source), as_location(out)
    conf = dict(DEFAULT_CONF)
    remote = not (source_at.is_local and out_at.is_local)
    if remote:  # s3a: the fetched JARs on the driver's classpath, the endpoint's settings
        conf.update(jars_conf([str(j) for j in local_jars()], "local[*]", conf))
        conf.update(s3a_settings().spark_conf())
    builder = SparkSession.builder.master("local[*]").appName("floor")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if remote:
        apply_hadoop(spark, s3a_settings().secret)
    phase("spark_start")
    table = DeltaTable(source_at.delta_uri, storage_options=source_at.delta_options)
    import pyarrow as pa

    schema = arrow_to_spark(pa.schema(table.schema().to_arrow()))
    files = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    raw = (
        spark.read.schema(schema)
        .option("basePath", source_at.spark_uri())
        .parquet(*(source_at.spark_uri(unquote(f)) for f in files))
    )
    phase("source_files")
    clean_df = clean(raw)
    clean_df.write.mode("overwrite").partitionBy("date", "region").parquet(
        out_at.spark_uri("clean_events")
    )
    phase("clean_events")
    clean_back = spark.read.parquet(out_at.spark_uri("clean_events"))
    daily_df = daily_stats(clean_back)
    daily_df.write.mode("overwrite").partitionBy("date", "region").parquet(
        out_at.spark_uri("daily_region_stats")
    )
    phase("daily_region_stats")
    monthly_df = monthly_stats(spark.read.parquet(out_at.spark_uri("daily_region_stats")))
    monthly_df.write.mode("overwrite").partitionBy("month", "region").parquet(
        out_at.spark_uri("monthly_region_stats")
    )
    phase("monthly_region_stats")
    spark.stop()
    phase("spark_stop")
    print(f"floor job: {time.perf_counter() - started:.1f} s")
    print(f"floor phases: {json.dumps(phases)}")


if __name__ == "__main__":
    main()
