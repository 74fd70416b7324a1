"""More than two partition dimensions (`partitions.dimensions`): definitions Dagster accepts, one
table column per dimension, mappings that drop or keep dimensions, and a date x region x
product lake written, planned, refreshed after an out-of-band rewrite of one partition (exactly
its closure, through a 3 -> 2 and a 3 -> 1 mapping), by the planner, the sensor and the CLI."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
)

from dagster_partlake import partlake_mapping, partlake_partitions
from dagster_partlake.errors import PartitionMismatchError, PartlakeConfigError
from dagster_partlake.partitions.keys import (
    KeyCodec,
    dimension_columns,
    key_dimension_values,
    selection_for_keys,
    validate_keys,
)
from dagster_partlake.partitions.mappings import _dagster_maps, key_maps
from tests.conftest import cli_env, delta_rows, run_partlake, sensor_tick

DAILY = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
TYPES = {"date": "date", "region": "string", "product": "string", "channel": "string"}


def three() -> MultiPartitionsDefinition:
    return partlake_partitions(date=DAILY, region=["eu", "us"], product=["shoes", "hats"])


def test_one_or_two_dimensions_are_dagsters_own() -> None:
    assert partlake_partitions(date=DAILY) is DAILY
    two = partlake_partitions(date=DAILY, region=["eu", "us"])
    assert two == MultiPartitionsDefinition(
        {"date": DAILY, "region": StaticPartitionsDefinition(["eu", "us"])}
    )
    assert [c.column for c in dimension_columns(two, None, asset_name="a")] == ["date", "region"]


def test_static_dimensions_beyond_two_share_one_dimension_but_keep_their_columns() -> None:
    sales = three()
    assert [d.name for d in sales.partitions_defs] == ["date", "region/product"]
    assert sales.get_partition_keys()[:4] == [
        "2024-01-01|eu/shoes",
        "2024-01-01|eu/hats",
        "2024-01-01|us/shoes",
        "2024-01-01|us/hats",
    ]
    columns = dimension_columns(sales, None, asset_name="sales")
    assert [(c.column, c.name) for c in columns] == [
        ("date", "date"),
        ("region", "region"),
        ("product", "product"),
    ]
    renamed = dimension_columns(
        sales, {"partition_expr": {"product": "sku_group"}}, asset_name="sales"
    )
    assert [c.column for c in renamed] == ["date", "region", "sku_group"]
    codec = KeyCodec(columns, TYPES)
    assert codec.key(["2024-01-02", "us", "hats"]) == "2024-01-02|us/hats"
    assert codec.key(["2024-01-02", "us", "socks"]) is None
    assert key_dimension_values(columns, "2024-01-02|us/hats") == {
        "date": "2024-01-02",
        "region": "us",
        "product": "hats",
    }
    box = selection_for_keys(columns, ["2024-01-02|us/hats"], TYPES, asset_name="sales")
    assert box.contains({"date": "2024-01-02", "region": "us", "product": "hats"})
    assert not box.contains({"date": "2024-01-02", "region": "us", "product": "shoes"})
    # Four static dimensions, no time: the first stays apart, the rest share one.
    four = partlake_partitions(a=["1", "2"], b=["x"], c=["p", "q"], d=["m"])
    assert [d.name for d in four.partitions_defs] == ["a", "b/c/d"]
    assert len(four.get_partition_keys()) == 4
    validate_keys(sales, ["2024-01-03|eu/shoes"], asset_name="sales")
    with pytest.raises(PartitionMismatchError, match="region/product: eu/shoes, eu/hats"):
        validate_keys(sales, ["2024-01-03|eu/socks"], asset_name="sales")


@pytest.mark.parametrize(
    ("dimensions", "message"),
    [
        ({}, "needs at least one dimension"),
        ({"date": DAILY, "region": ["eu/west"], "product": ["a"]}, "holding one of"),
        (
            {"date": DAILY, "shop": DynamicPartitionsDefinition(name="shops"), "x": ["a"]},
            "date, shop are not static",
        ),
        ({"date": DAILY, "region": "eu", "product": ["a"]}, "give a partitions definition"),
        ({"region/product": ["a"], "date": DAILY, "x": ["b"]}, "holds '/'"),
    ],
)
def test_bad_dimensions_are_refused(dimensions, message) -> None:
    with pytest.raises(PartlakeConfigError, match=message):
        partlake_partitions(**dimensions)


def test_partition_expr_must_name_a_dimension_or_part() -> None:
    with pytest.raises(PartlakeConfigError, match="its dimensions are date, region, product"):
        dimension_columns(three(), {"partition_expr": {"regions": "r"}}, asset_name="sales")
    with pytest.raises(PartlakeConfigError, match="several partition dimensions in column"):
        dimension_columns(three(), {"partition_expr": {"product": "region"}}, asset_name="sales")


def _both_ways(upstream, downstream, mapping, down_key, up_key) -> tuple[list, list]:
    """Downstream key -> upstream keys and upstream key -> downstream keys, partlake's direct
    maps checked against Dagster's own answer for the same mapping."""
    up, down = key_maps(upstream, downstream, mapping)
    ref_up, ref_down = _dagster_maps(upstream, downstream, mapping, None)
    found = sorted(up(down_key)), sorted(down(up_key))
    assert found == (sorted(ref_up(down_key)), sorted(ref_down(up_key)))
    return found


def test_mappings_that_drop_keep_or_add_dimensions() -> None:
    sales = three()
    date_region = partlake_partitions(date=DAILY, region=["eu", "us"])
    # 3 -> 2: date x region summed over products.
    assert _both_ways(
        sales,
        date_region,
        partlake_mapping(sales, date_region),
        "2024-01-02|eu",
        "2024-01-02|eu/hats",
    ) == (["2024-01-02|eu/hats", "2024-01-02|eu/shoes"], ["2024-01-02|eu"])
    # 3 -> 2 keeping another part: date x product summed over regions.
    date_product = partlake_partitions(date=DAILY, product=["shoes", "hats"])
    assert _both_ways(
        sales,
        date_product,
        partlake_mapping(sales, date_product),
        "2024-01-02|hats",
        "2024-01-02|us/hats",
    ) == (["2024-01-02|eu/hats", "2024-01-02|us/hats"], ["2024-01-02|hats"])
    # 3 -> 1: the day, summed over everything else.
    up, _ = key_maps(sales, DAILY, partlake_mapping(sales, DAILY))
    assert len(list(up("2024-01-02"))) == 4
    # 2 -> 3: each product of a region reads the region's partition (fan out).
    assert _both_ways(
        date_region,
        sales,
        partlake_mapping(date_region, sales),
        "2024-01-02|us/shoes",
        "2024-01-02|us",
    ) == (["2024-01-02|us"], ["2024-01-02|us/hats", "2024-01-02|us/shoes"])
    # 3 -> 3 with a coarser time dimension: monthly x region x product.
    monthly = MonthlyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
    monthly_sales = partlake_partitions(
        month=monthly, region=["eu", "us"], product=["shoes", "hats"]
    )
    up, down = key_maps(sales, monthly_sales, partlake_mapping(sales, monthly_sales))
    assert list(down("2024-01-02|eu/hats")) == ["2024-01-01|eu/hats"]
    with pytest.raises(PartlakeConfigError, match="cannot map"):
        partlake_mapping(date_region, partlake_partitions(date=DAILY, channel=["web", "shop"]))


@pytest.mark.spark
def test_a_three_dimension_lake_is_planned_and_refreshed_exactly(
    spark, lake: Path, instance, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.orchestration.runner import refresh
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan
    from tests import dimensions_defs as lake_defs

    for day in lake_defs.DAYS:
        for region in lake_defs.REGIONS:
            for product in lake_defs.PRODUCTS:
                lake_defs.write_sales(str(lake), day, region, product)
    graph = LakeGraph(lake_defs.defs)
    outcomes = refresh(graph, instance)
    assert outcomes and all(o.ok for o in outcomes)
    assert {(o.asset, o.partition) for o in outcomes if o.asset == "clean_sales"} == {
        ("clean_sales", k) for k in lake_defs.sales_partitions.get_partition_keys()
    }
    clean = str(lake / "warehouse" / "clean_sales")
    from deltalake import DeltaTable

    assert DeltaTable(clean).metadata().partition_columns == ["date", "region", "product"]
    assert not make_plan(graph, StateCache()).plan

    lake_defs.rewrite_out_of_band(str(lake), "clean_sales", "2024-01-02", "eu", "shoes")
    stale = sorted(
        (i.asset, i.partition, i.reason) for i in make_plan(graph, StateCache()).plan.items
    )
    assert stale == [
        ("clean_sales", "2024-01-02|eu/shoes", "out_of_band"),
        ("daily_sales", "2024-01-02", "upstream_changed"),
        ("region_sales", "2024-01-02|eu", "upstream_changed"),
    ]

    env = cli_env(tmp_path, lake)
    proc = run_partlake("plan", "-m", "tests.dimensions_defs", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    items = {i["asset"]: i for i in json.loads(proc.stdout)}
    assert items["clean_sales"]["dimensions"] == {
        "date": "2024-01-02",
        "region": "eu",
        "product": "shoes",
    }
    assert items["region_sales"]["dimensions"] == {"date": "2024-01-02", "region": "eu"}
    assert items["daily_sales"]["dimensions"] == {"date": "2024-01-02"}
    text = run_partlake("plan", "-m", "tests.dimensions_defs", env=env).stdout
    print(text)
    assert "clean_sales (date|region/product): 1 stale (out_of_band 1)" in text
    assert "region_sales: 1 stale (upstream_changed 1)" in text

    requests, _cursor, _skip = sensor_tick(lake_defs.defs, instance, lake_defs.sensor, None)
    # The sensor requests the upstream run alone: one run of the one rewritten partition; the
    # two aggregates reading it are requested by the first tick after it has ended.
    [first] = requests
    assert (first.asset_selection, first.partition_key) == (
        [AssetKey("clean_sales")],
        "2024-01-02|eu/shoes",
    )
    assert first.tags["partlake/partitions"] == "2024-01-02|eu/shoes"
    assert "partlake/waits_for" not in first.tags

    outcomes = refresh(graph, instance)
    assert sorted((o.asset, o.partition) for o in outcomes) == [
        ("clean_sales", "2024-01-02|eu/shoes"),
        ("daily_sales", "2024-01-02"),
        ("region_sales", "2024-01-02|eu"),
    ]
    assert all(o.ok for o in outcomes)
    assert not make_plan(graph, StateCache()).plan
    # The aggregates follow the source again, product by product summed per region.
    rows = delta_rows(clean, ["date", "region", "amount"])
    totals: dict[tuple, int] = {}
    for day, region, amount in rows:
        totals[(day, region)] = totals.get((day, region), 0) + amount
    region_rows = delta_rows(lake / "warehouse" / "region_sales", ["date", "region", "amount"])
    assert {(d, r): a for d, r, a in region_rows} == totals
    assert totals[(dt.date(2024, 1, 2), "eu")] == sum(
        v for v in lake_defs.sales_rows("2024-01-02", "eu", "shoes")["amount"].to_pylist() if v >= 0
    ) + sum(
        v for v in lake_defs.sales_rows("2024-01-02", "eu", "hats")["amount"].to_pylist() if v >= 0
    )
