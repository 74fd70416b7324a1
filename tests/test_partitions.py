"""Partition keys -> table selections: pure, no Spark."""

from __future__ import annotations

import datetime as dt

import pytest
from dagster import (
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    HourlyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
)

from dagster_partlake.delta.selection import Box, DateRanges, PartitionSelection
from dagster_partlake.errors import PartitionMismatchError, PartlakeConfigError
from dagster_partlake.partitions.keys import (
    describe_partitions,
    dimension_columns,
    selection_for_keys,
    validate_keys,
)

DAILY_REGION = MultiPartitionsDefinition(
    {
        "date": DailyPartitionsDefinition(start_date="2024-01-01"),
        "region": StaticPartitionsDefinition(["eu", "us", "apac"]),
    }
)
TYPES = {"date": "date", "region": "string", "v": "long"}


def d(day: int) -> dt.date:
    return dt.date(2024, 1, day)


def test_multi_partition_range_is_one_box() -> None:
    cols = dimension_columns(DAILY_REGION, {}, asset_name="a")
    assert [c.column for c in cols] == ["date", "region"]
    keys = [f"2024-01-0{day}|{r}" for day in (2, 3, 4) for r in ("eu", "us")]
    sel = selection_for_keys(cols, keys, TYPES, asset_name="a")
    assert sel == PartitionSelection(
        (Box({"date": DateRanges(((d(2), d(5)),)), "region": frozenset({"eu", "us"})}),)
    )
    assert sel.contains({"date": "2024-01-04", "region": "us"})
    assert not sel.contains({"date": "2024-01-05", "region": "us"})
    assert not sel.contains({"date": "2024-01-02", "region": "apac"})
    assert not sel.contains({"date": None, "region": "eu"})


def test_irregular_key_set_selects_exactly_those_partitions() -> None:
    cols = dimension_columns(DAILY_REGION, {}, asset_name="a")
    sel = selection_for_keys(cols, ["2024-01-02|eu", "2024-01-05|us"], TYPES, asset_name="a")
    inside = [("2024-01-02", "eu"), ("2024-01-05", "us")]
    outside = [("2024-01-02", "us"), ("2024-01-05", "eu"), ("2024-01-03", "eu")]
    for date, region in inside:
        assert sel.contains({"date": date, "region": region})
    for date, region in outside:
        assert not sel.contains({"date": date, "region": region})


def test_monthly_key_covers_its_days_in_a_date_column() -> None:
    monthly = MonthlyPartitionsDefinition(start_date="2024-01", fmt="%Y-%m")
    cols = dimension_columns(monthly, {"partition_expr": "month"}, asset_name="m")
    sel = selection_for_keys(cols, ["2024-02"], {"month": "date"}, asset_name="m")
    assert sel.contains({"month": "2024-02-01"})
    assert sel.contains({"month": "2024-02-29"})
    assert not sel.contains({"month": "2024-03-01"})


def test_time_window_in_string_column_uses_the_key() -> None:
    daily = DailyPartitionsDefinition(start_date="2024-01-01")
    cols = dimension_columns(daily, {"partition_expr": "day"}, asset_name="a")
    sel = selection_for_keys(cols, ["2024-01-02"], {"day": "string"}, asset_name="a")
    assert sel.contains({"day": "2024-01-02"}) and not sel.contains({"day": "2024-01-03"})


def test_partition_expr_maps_dimensions_to_columns() -> None:
    cols = dimension_columns(
        DAILY_REGION, {"partition_expr": {"date": "event_date"}}, asset_name="a"
    )
    assert [(c.dimension, c.column) for c in cols] == [("date", "event_date"), ("region", "region")]
    with pytest.raises(PartlakeConfigError, match="unknown dimension.*day"):
        dimension_columns(DAILY_REGION, {"partition_expr": {"day": "x"}}, asset_name="a")
    with pytest.raises(PartlakeConfigError, match="needs a dict"):
        dimension_columns(DAILY_REGION, {"partition_expr": "x"}, asset_name="a")


def test_default_columns_for_single_dimension_kinds() -> None:
    assert dimension_columns(None, {}, asset_name="a") == []
    daily = DailyPartitionsDefinition(start_date="2024-01-01")
    assert dimension_columns(daily, {}, asset_name="a")[0].column == "date"
    static = StaticPartitionsDefinition(["x"])
    assert dimension_columns(static, {}, asset_name="a")[0].column == "partition"
    dynamic = DynamicPartitionsDefinition(name="customer")
    assert dimension_columns(dynamic, {}, asset_name="a")[0].column == "customer"


def test_missing_or_mistyped_partition_column_is_explained() -> None:
    cols = dimension_columns(DAILY_REGION, {}, asset_name="a")
    with pytest.raises(PartlakeConfigError, match="column 'region'.*does not have"):
        selection_for_keys(cols, ["2024-01-02|eu"], {"date": "date"}, asset_name="a")
    with pytest.raises(PartlakeConfigError, match="column 'date' of asset a is long"):
        selection_for_keys(
            cols, ["2024-01-02|eu"], {"date": "long", "region": "string"}, asset_name="a"
        )


def test_hourly_windows_cannot_be_stored_in_a_date_column() -> None:
    hourly = HourlyPartitionsDefinition(start_date="2024-01-01-00:00")
    cols = dimension_columns(hourly, {}, asset_name="h")
    with pytest.raises(PartlakeConfigError, match="does not cover whole days"):
        selection_for_keys(cols, ["2024-01-01-05:00"], {"date": "date"}, asset_name="h")


def test_unknown_partition_key_names_the_valid_ones() -> None:
    with pytest.raises(
        PartitionMismatchError,
        match=r"'2024-13-01\|eu' is not in the partitions of asset clean_events "
        r"\(date: daily from 2024-01-01; region: eu, us, apac\)",
    ):
        validate_keys(DAILY_REGION, ["2024-01-02|eu", "2024-13-01|eu"], asset_name="clean_events")
    validate_keys(DAILY_REGION, ["2024-01-02|eu"], asset_name="clean_events")
    with pytest.raises(PartitionMismatchError, match="not partitioned"):
        validate_keys(None, ["x"], asset_name="plain")


def test_describe_partitions() -> None:
    assert describe_partitions(MonthlyPartitionsDefinition(start_date="2024-01", fmt="%Y-%m")) == (
        "monthly from 2024-01"
    )
    assert describe_partitions(DynamicPartitionsDefinition(name="c")) == "dynamic partitions 'c'"
