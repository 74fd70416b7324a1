"""A date x region x product lake for tests/test_dimensions.py (and `partlake -m
tests.dimensions_defs`): sales (source) -> clean_sales (3 dimensions) -> region_sales (date x
region, summed over products) and daily_sales (date, summed over regions and products)."""

from __future__ import annotations

import datetime as dt
import os
import zlib

import pyarrow as pa
import pyarrow.compute as pc
from dagster import (
    AssetIn,
    BackfillPolicy,
    DailyPartitionsDefinition,
    Definitions,
    asset,
    in_process_executor,
)
from deltalake import write_deltalake
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    build_invalidation_sensor,
    partlake_mapping,
    partlake_partitions,
    partlake_source,
)
from dagster_partlake.storage.location import table_path

DAYS = ["2024-01-01", "2024-01-02"]
REGIONS = ["eu", "us"]
PRODUCTS = ["shoes", "hats"]
daily = DailyPartitionsDefinition(start_date=DAYS[0], end_date="2024-01-03")
sales_partitions = partlake_partitions(date=daily, region=REGIONS, product=PRODUCTS)
date_region = partlake_partitions(date=daily, region=REGIONS)

sales = partlake_source("sales", partitions_def=sales_partitions)


@asset(
    partitions_def=sales_partitions, backfill_policy=BackfillPolicy.single_run(), code_version="1"
)
def clean_sales(sales: DataFrame) -> DataFrame:
    return sales.where(F.col("amount") >= 0)


@asset(
    partitions_def=date_region,
    ins={"clean_sales": AssetIn(partition_mapping=partlake_mapping(sales_partitions, date_region))},
    backfill_policy=BackfillPolicy.single_run(),
    code_version="1",
)
def region_sales(clean_sales: DataFrame) -> DataFrame:
    return clean_sales.groupBy("date", "region").agg(
        F.sum("amount").alias("amount"), F.count(F.lit(1)).alias("sales")
    )


@asset(
    partitions_def=daily,
    ins={"clean_sales": AssetIn(partition_mapping=partlake_mapping(sales_partitions, daily))},
    code_version="1",
)
def daily_sales(clean_sales: DataFrame) -> DataFrame:
    return clean_sales.groupBy("date").agg(F.sum("amount").alias("amount"))


spark = SparkResource(master="local[1]")
sensor = build_invalidation_sensor(minimum_interval_seconds=5)
defs = Definitions(
    assets=[sales, clean_sales, region_sales, daily_sales],
    sensors=[sensor],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=in_process_executor,
)


def sales_rows(day: str, region: str, product: str, rows: int = 20, seed: int = 0) -> pa.Table:
    """Deterministic sales of one (date, region, product); a few negative amounts to clean."""
    base = zlib.crc32(f"{day}|{region}|{product}|{seed}".encode())
    amounts = [((base >> (i % 16)) % 1000) - 50 for i in range(rows)]
    return pa.table(
        {
            "sale_id": pa.array([base % 100_000 * 1000 + i for i in range(rows)], pa.int64()),
            "amount": pa.array(amounts, pa.int64()),
            "date": pa.array([dt.date.fromisoformat(day)] * rows, pa.date32()),
            "region": pa.array([region] * rows, pa.string()),
            "product": pa.array([product] * rows, pa.string()),
        }
    )


def write_sales(root: str, day: str, region: str, product: str, seed: int = 0) -> None:
    """Another system writes one partition of `sales` (plain delta-rs)."""
    write_deltalake(
        table_path(root, ["sales"]),
        sales_rows(day, region, product, seed=seed),
        mode="overwrite",
        partition_by=["date", "region", "product"],
        predicate=f"date = '{day}' AND region = '{region}' AND product = '{product}'",
    )


def rewrite_out_of_band(root: str, table: str, day: str, region: str, product: str) -> None:
    """Someone else rewrites one (date, region, product) partition of a managed table."""
    from deltalake import DeltaTable

    path = table_path(root, [table])
    rows = DeltaTable(path).to_pyarrow_table(
        filters=[("date", "=", dt.date.fromisoformat(day)), ("region", "=", region),
                 ("product", "=", product)]
    )  # fmt: skip
    doubled = rows.set_column(
        rows.schema.get_field_index("amount"), "amount", pc.multiply(rows["amount"], 2)
    )
    write_deltalake(
        path,
        doubled,
        mode="overwrite",
        predicate=f"date = '{day}' AND region = '{region}' AND product = '{product}'",
    )


if __name__ == "__main__":  # python -m tests.dimensions_defs: write every source partition
    for d in DAYS:
        for r in REGIONS:
            for p in PRODUCTS:
                write_sales(os.environ["PARTLAKE_HOME"], d, r, p)
