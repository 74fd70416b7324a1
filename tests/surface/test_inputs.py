"""What a run reads, as a user declares it: incremental inputs (`partlake/incremental` on the
asset, the Delta log, and on an input, a watermark column), inputs pinned to a version or a time
of their upstream (`partlake/version`, `partlake/timestamp`), a streaming asset over a landing
folder (`partlake/stream`, `available_now`) and partitions of three dimensions
(`partlake_partitions`) read through `partlake_mapping` (with a dimension's own mapping). One
code location, run with `partlake run` twice: the first data, then other systems appending,
rewriting, landing a file and replacing one (date, region, product) partition. Rows read back
with deltalake; the plan is empty after each run.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_inputs"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    model_kind_metadata,
    partlake_asset_checks,
    partlake_mapping,
    partlake_partitions,
    partlake_source,
)

# Incremental inputs: an append-only event log, a change feed rewritten whole by its exporter.
events = partlake_source("events")
changes = partlake_source("changes")


@dg.asset(metadata={**model_kind_metadata("append"), "partlake/incremental": "log"})
def event_copy(events: DataFrame) -> DataFrame:
    return events


@dg.asset(
    ins={"changes": dg.AssetIn(metadata={"partlake/incremental": {"column": "updated_at"}})},
    metadata=model_kind_metadata("append"),
)
def change_log(changes: DataFrame) -> DataFrame:
    return changes


# Inputs pinned to a version and to a time of their upstream.
prices = partlake_source("prices")


@dg.asset(ins={"prices": dg.AssetIn(metadata={"partlake/version": 0})})
def launch_prices(prices: DataFrame) -> DataFrame:
    return prices


@dg.asset(ins={"prices": dg.AssetIn(metadata={"partlake/timestamp": "{pinned_time}"})})
def audited_prices(prices: DataFrame) -> DataFrame:
    return prices


@dg.asset
def current_prices(prices: DataFrame) -> DataFrame:
    return prices


# A stream of JSON files landing in a folder, and a daily asset reading its table.
days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
landing = partlake_source("landing", folder=True)


@dg.asset(
    partitions_def=days,
    metadata={
        "partlake/stream": {
            "mode": "available_now",
            "format": "json",
            "schema": "click_id long, page string, ts timestamp",
        }
    },
)
def clicks(landing: DataFrame) -> DataFrame:
    return landing.withColumn("date", F.to_date("ts"))


@dg.asset(partitions_def=days)
def daily_clicks(clicks: DataFrame) -> DataFrame:
    return clicks.groupBy("date").agg(F.count(F.lit(1)).alias("clicks"))


# Three dimensions: date x region x product, and what reads them by date x region.
sales_partitions = partlake_partitions(date=days, region=["eu", "us"], product=["shoes", "hats"])
date_region = partlake_partitions(date=days, region=["eu", "us"])
sales = partlake_source("sales", partitions_def=sales_partitions)


one_run = dg.BackfillPolicy.single_run()


@dg.asset(partitions_def=sales_partitions, backfill_policy=one_run)
def clean_sales(sales: DataFrame) -> DataFrame:
    return sales.where(F.col("amount") >= 0)


@dg.asset(
    partitions_def=date_region,
    backfill_policy=one_run,
    ins={
        "clean_sales": dg.AssetIn(
            partition_mapping=partlake_mapping(sales_partitions, date_region)
        )
    },
)
def region_sales(clean_sales: DataFrame) -> DataFrame:
    return clean_sales.groupBy("date", "region").agg(F.sum("amount").alias("amount"))


# Each (date, region) reads the products of the day before.
day_before = dg.TimeWindowPartitionMapping(
    start_offset=-1, end_offset=-1, allow_nonexistent_upstream_partitions=True
)


@dg.asset(
    partitions_def=date_region,
    ins={
        "clean_sales": dg.AssetIn(
            partition_mapping=partlake_mapping(
                upstream=sales_partitions, downstream=date_region, date=day_before
            )
        )
    },
)
def sales_day_before(context: dg.AssetExecutionContext, clean_sales: DataFrame) -> DataFrame:
    key = context.partition_key.keys_by_dimension
    total = clean_sales.agg(F.coalesce(F.sum("amount"), F.lit(0)).alias("amount_before"))
    return total.select(
        F.lit(key["date"]).alias("date"),
        F.lit(key["region"]).alias("region"),
        "amount_before",
    )


spark = SparkResource(master="local[2]")
assets = [events, changes, event_copy, change_log, prices, launch_prices, audited_prices]
assets += [current_prices, landing, clicks, daily_clicks, sales, clean_sales, region_sales]
assets += [sales_day_before]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""
DAY1, DAY2 = "2024-01-01", "2024-01-02"


def _table(project: UserProject, asset: str) -> str:
    return str(project.lake / "warehouse" / asset)


def _land(folder: Path, name: str, clicks: list[tuple[int, str, str]]) -> None:
    """A JSON file landing whole (written aside, then renamed in)."""
    folder.mkdir(parents=True, exist_ok=True)
    aside = folder / f".{name}"
    aside.write_text(
        "".join(json.dumps({"click_id": i, "page": p, "ts": t}) + "\n" for i, p, t in clicks)
    )
    aside.rename(folder / name)


def _sales(day: str, seed: int = 0) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"date": day, "region": r, "product": p, "sale_id": i, "amount": 10 * (i + 1) + seed}
            for r in ("eu", "us")
            for p in ("shoes", "hats")
            for i in range(2)
        ]
    )


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The user's project after two `partlake run`s: the first data, then events appended,
    the change feed rewritten whole with two newer changes, a new price, a file landed and one
    (date, region, product) partition of sales replaced."""
    project = UserProject(tmp_path_factory.mktemp("inputs"))
    events, changes = _table(project, "events"), _table(project, "changes")
    write_deltalake(events, pa.table({"event_id": [1, 2, 3]}))
    write_deltalake(changes, pa.Table.from_pylist(CHANGES))
    prices = _table(project, "prices")
    write_deltalake(prices, pa.table({"sku": ["a"], "price": [100]}))
    time.sleep(1.5)
    write_deltalake(prices, pa.table({"sku": ["a"], "price": [110]}), mode="overwrite")
    v0 = next(c["timestamp"] for c in DeltaTable(prices).history() if c["version"] == 0)
    pinned = dt.datetime.fromtimestamp((v0 + 500) / 1000, dt.UTC).isoformat()
    landing = project.lake / "warehouse" / "landing"
    _land(landing, "a.json", [(1, "home", f"{DAY1}T10:00:00"), (2, "cart", f"{DAY2}T11:00:00")])
    sales = _table(project, "sales")
    write_deltalake(
        sales,
        pa.concat_tables([_sales(DAY1), _sales(DAY2)]),
        partition_by=["date", "region", "product"],
    )
    project.write(MODULE, CODE, pinned_time=pinned)
    first = project.ok("partlake", "run", "-m", MODULE)
    before = {a: _rows(project, a) for a in ("event_copy", "change_log", "daily_clicks")}

    write_deltalake(events, pa.table({"event_id": [4, 5]}), mode="append")
    write_deltalake(changes, pa.Table.from_pylist(CHANGES + NEWER), mode="overwrite")
    write_deltalake(prices, pa.table({"sku": ["a"], "price": [120]}), mode="overwrite")
    _land(landing, "b.json", [(3, "home", f"{DAY2}T12:00:00")])
    write_deltalake(
        sales,
        _sales(DAY1, seed=5)
        .filter(pc.field("region") == "eu")
        .filter(pc.field("product") == "shoes"),
        mode="overwrite",
        predicate=f"date = '{DAY1}' AND region = 'eu' AND product = 'shoes'",
    )
    plan = project.ok("partlake", "plan", "-m", MODULE)
    second = project.ok("partlake", "run", "-m", MODULE)
    project.assert_fresh(MODULE)
    return {
        "project": project,
        "first": first,
        "plan": plan,
        "second": second,
        "before": before,
    }


CHANGES = [
    {"user_id": 1, "plan": "free", "updated_at": 1},
    {"user_id": 2, "plan": "pro", "updated_at": 2},
]
NEWER = [
    {"user_id": 3, "plan": "pro", "updated_at": 3},
    {"user_id": 1, "plan": "pro", "updated_at": 4},
]
COLUMNS = {
    "event_copy": ["event_id"],
    "change_log": ["user_id", "plan", "updated_at"],
    "launch_prices": ["sku", "price"],
    "audited_prices": ["sku", "price"],
    "current_prices": ["sku", "price"],
    "clicks": ["date", "click_id", "page"],
    "daily_clicks": ["date", "clicks"],
    "region_sales": ["date", "region", "amount"],
    "sales_day_before": ["date", "region", "amount_before"],
}


def _rows(project: UserProject, asset: str) -> list[tuple[Any, ...]]:
    return table_rows(_table(project, asset), COLUMNS[asset])


def _ran(out: str) -> list[tuple[str, str]]:
    lines = outcome_lines(out)
    assert all(line.startswith("[OK]") for line in lines), out
    return sorted((line.split()[1], line.split()[2]) for line in lines)


@covers("setting partlake/incremental")
def test_incremental_inputs_read_only_what_is_new(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    # The first run: every partition of every asset (the stream's downstream planned after it).
    assert len(_ran(shop["first"])) == 24, shop["first"]
    # The plan names what each run will read.
    assert "because events[versions 1..1]" in shop["plan"], shop["plan"]
    assert "because changes[updated_at > 2]" in shop["plan"], shop["plan"]
    # On the asset, from the Delta log: each event appended once.
    assert shop["before"]["event_copy"] == [(1,), (2,), (3,)]
    assert _rows(project, "event_copy") == [(1,), (2,), (3,), (4,), (5,)]
    # On the input, by a watermark column: only the changes after the last one read, though
    # the exporter rewrote the whole table.
    assert shop["before"]["change_log"] == [(1, "free", 1), (2, "pro", 2)]
    assert _rows(project, "change_log") == [
        (1, "free", 1),
        (1, "pro", 4),
        (2, "pro", 2),
        (3, "pro", 3),
    ]


@covers("setting partlake/version", "setting partlake/timestamp")
def test_pinned_inputs_read_their_version_and_stay_fresh(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    assert _rows(project, "launch_prices") == [("a", 100)]  # version 0
    assert _rows(project, "audited_prices") == [("a", 100)]  # the version at the pinned time
    assert _rows(project, "current_prices") == [("a", 120)]
    # A new price made only the unpinned reader stale.
    ran = {asset for asset, _ in _ran(shop["second"])}
    assert "current_prices" in ran
    assert not ran & {"launch_prices", "audited_prices"}, ran


@covers("setting partlake/stream")
def test_a_stream_processes_each_landed_file_once(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    d1, d2 = dt.date.fromisoformat(DAY1), dt.date.fromisoformat(DAY2)
    assert _rows(project, "clicks") == [(d1, 1, "home"), (d2, 2, "cart"), (d2, 3, "home")]
    assert shop["before"]["daily_clicks"] == [(d1, 1), (d2, 1)]
    assert _rows(project, "daily_clicks") == [(d1, 1), (d2, 2)]
    assert (
        "New data from stream(s): 1 more stale asset partition(s) in 1 run(s)..." in shop["second"]
    ), shop["second"]


@covers(
    "partlake_partitions",
    "partlake_partitions(dimensions=)",
    "partlake_mapping",
    "partlake_mapping(upstream=)",
    "partlake_mapping(downstream=)",
    "partlake_mapping(mappings=)",
)
def test_three_dimensions_map_to_two(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    clean = DeltaTable(_table(project, "clean_sales"))
    assert clean.metadata().partition_columns == ["date", "region", "product"]
    d1, d2, d3 = DAY1, DAY2, "2024-01-03"
    # Each (date, region) sums both products; day 1 eu shoes was replaced (15 + 25).
    assert _rows(project, "region_sales") == [
        (d1, "eu", 70),
        (d1, "us", 60),
        (d2, "eu", 60),
        (d2, "us", 60),
    ]
    # date=day_before: each (date, region) reads the products of the day before.
    assert _rows(project, "sales_day_before") == [
        (d2, "eu", 70),
        (d2, "us", 60),
        (d3, "eu", 60),
        (d3, "us", 60),
    ]
    # The replaced partition refreshed exactly its closure, and the other inputs' readers.
    assert _ran(shop["second"]) == [
        ("change_log", "-"),
        ("clean_sales", "2024-01-01|eu/shoes"),
        ("clicks", "-"),
        ("current_prices", "-"),
        ("daily_clicks", "2024-01-02"),
        ("event_copy", "-"),
        ("region_sales", "2024-01-01|eu"),
        ("sales_day_before", "2024-01-02|eu"),
    ]
