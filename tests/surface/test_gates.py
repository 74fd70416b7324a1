"""Quality gates and run guards as a user declares them: `partlake/constraints` and
`partlake/audits` (severity error and warn) registered as asset checks by
`partlake_asset_checks(assets)`, `partlake/conditions` (skip and fail) and
`partlake/fail_if_no_input`. One code location over a daily orders table, run with `partlake
run` twice: the first orders, then another system rewriting both days and deleting a day of
returns. What each gate and guard did is read from `partlake run`'s lines, the tables (deltalake)
and `partlake plan`; a setting misspelled in another module fails `dagster definitions
validate`, naming the asset and the setting.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_gates"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    partlake_asset_checks,
    partlake_source,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
orders = partlake_source("orders", partitions_def=days)
returns = partlake_source("returns", partitions_def=days)


# One run per day: a day whose gate fails leaves the other day's commit alone.
@dg.asset(
    partitions_def=days,
    metadata={
        "partlake/constraints": [
            {"not_null": ["order_id"]},
            {"unique": ["order_id"]},
            {
                "accepted_values": {"region": ["eu", "us"]},
                "severity": "warn",
                "name": "known_region",
            },
            {"expression": "amount >= 0", "name": "non_negative"},
            {"row_count": {"min": 1}},
        ],
        "partlake/audits": [
            {"row_count_change": {"max_change": 0.5}, "severity": "warn"},
            {"no_partition_emptied": True},
            {"column_sum": {"column": "amount", "max_change": 10}},
            {"column_mean": {"column": "amount", "max_change": 10}},
        ],
    },
)
def clean_orders(orders: DataFrame) -> DataFrame:
    return orders


@dg.asset(
    partitions_def=days,
    metadata={
        "partlake/conditions": [
            {"expression": "orders_rows >= 3", "description": "a full day", "action": "skip"}
        ]
    },
)
def full_days(orders: DataFrame) -> DataFrame:
    return orders.groupBy("date").agg(F.count(F.lit(1)).alias("orders"))


@dg.asset(
    partitions_def=days,
    metadata={
        "partlake/conditions": [
            {
                "expression": "input_rows <= 3",
                "description": "at most three orders a day",
                "action": "fail",
            }
        ]
    },
)
def small_days(orders: DataFrame) -> DataFrame:
    return orders.groupBy("date").agg(F.sum("amount").alias("amount"))


@dg.asset(partitions_def=days, metadata={"partlake/fail_if_no_input": True})
def returned(returns: DataFrame) -> DataFrame:
    return returns


spark = SparkResource(master="local[2]")
assets = [orders, returns, clean_orders, full_days, small_days, returned]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets=assets),
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""
# The same code location with a misspelled constraint.
BAD_MODULE = "shop_gates_bad"
BAD_CODE = """
import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, partlake_asset_checks, partlake_source

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
orders = partlake_source("orders", partitions_def=days)


@dg.asset(partitions_def=days, metadata={"partlake/constraints": [{"not_nul": ["order_id"]}]})
def clean_orders(orders: DataFrame) -> DataFrame:
    return orders


assets = [orders, clean_orders]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    resources={"io_manager": DeltaPartitionIOManager()},
)
"""
DAY1, DAY2 = "2024-01-01", "2024-01-02"


def _orders(day: str, amounts: list[int], regions: list[str] | None = None) -> pa.Table:
    regions = regions or ["eu", "us"] * len(amounts)
    return pa.Table.from_pylist(
        [
            {"date": day, "order_id": f"{day}-{i}", "amount": a, "region": regions[i]}
            for i, a in enumerate(amounts)
        ]
    )


def _table(project: UserProject, asset: str) -> str:
    return str(project.lake / "warehouse" / asset)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The user's project after two `partlake run`s: the first orders and returns, then orders
    rewritten on both days (day 1 shrunk to one order, day 2 with a negative amount) and day
    2's returns deleted."""
    project = UserProject(tmp_path_factory.mktemp("gates"))
    project.write(MODULE, CODE)
    orders, returns = _table(project, "orders"), _table(project, "returns")
    first_orders = [_orders(DAY1, [10, 20, 30, 40]), _orders(DAY2, [5, 6], ["eu", "apac"])]
    write_deltalake(orders, pa.concat_tables(first_orders), partition_by=["date"])
    write_deltalake(
        returns,
        pa.table({"date": [DAY1, DAY2], "order_id": [f"{DAY1}-0", f"{DAY2}-1"]}),
        partition_by=["date"],
    )
    first = project.run("partlake", "run", "-m", MODULE)
    before = {t: _rows(project, t) for t in ("clean_orders", "full_days", "returned")}
    for day, table in ((DAY1, _orders(DAY1, [10])), (DAY2, _orders(DAY2, [5, -6, 7]))):
        write_deltalake(orders, table, mode="overwrite", predicate=f"date = '{day}'")
    DeltaTable(returns).delete(f"date = '{DAY2}'")
    second = project.run("partlake", "run", "-m", MODULE)
    plan = project.ok("partlake", "plan", "-m", MODULE)
    return {"project": project, "first": first, "second": second, "plan": plan, "before": before}


COLUMNS = {
    "clean_orders": ["date", "order_id", "amount"],
    "full_days": ["date", "orders"],
    "small_days": ["date", "amount"],
    "returned": ["date", "order_id"],
}


def _rows(project: UserProject, asset: str) -> list[tuple[Any, ...]]:
    return table_rows(_table(project, asset), COLUMNS[asset])


def _line(out: str, asset: str, partition: str) -> str:
    found = [line for line in outcome_lines(out) if line.split()[1:3] == [asset, partition]]
    assert len(found) == 1, out
    return found[0]


@covers(
    "setting partlake/constraints",
    "partlake_asset_checks",
    "partlake_asset_checks(assets=)",
)
def test_constraints_stop_a_bad_batch_or_warn(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    first, second = shop["first"].stdout, shop["second"].stdout
    # severity warn: committed, and the [OK] line says which gate warned.
    line = _line(first, "clean_orders", DAY2)
    assert line.startswith("[OK] clean_orders 2024-01-02 (missing, 2 rows, warn: constraint "), line
    assert "known_region warned: 1 of 2 rows violate 'region in ('eu', 'us')'" in line, line
    assert (DAY2, f"{DAY2}-1", 6) in shop["before"]["clean_orders"]
    # severity error: nothing committed, the step fails naming the gate and the row.
    line = _line(second, "clean_orders", DAY2)
    assert line.startswith("[FAILED]"), line
    assert "constraint non_negative failed: 1 of 3 rows violate 'amount >= 0'" in line, line
    assert "amount: -6" in line, line
    assert [r for r in _rows(project, "clean_orders") if r[0] == DAY2] == [
        (DAY2, f"{DAY2}-0", 5),
        (DAY2, f"{DAY2}-1", 6),
    ]
    assert (
        "2024-01-02  upstream_changed  because orders[2024-01-02]  last run failed: "
        "non_negative" in shop["plan"]
    ), shop["plan"]
    # partlake_asset_checks(assets=...) declared one check per gate, and partlake_fresh.
    listed = project.ok(
        "python",
        "-c",
        f"import {MODULE} as m; "
        "print(sorted(k.name for k in m.defs.resolve_asset_graph().asset_check_keys "
        "if k.asset_key.path == ['clean_orders']))",
    )
    assert listed.splitlines()[-1] == str(
        sorted(
            [
                "not_null_order_id",
                "unique_order_id",
                "known_region",
                "non_negative",
                "row_count",
                "row_count_change",
                "no_partition_emptied",
                "column_sum_amount",
                "column_mean_amount",
                "partlake_fresh",
            ]
        )
    )


@covers("setting partlake/audits")
def test_audits_compare_a_partition_with_what_it_replaces(shop: dict[str, Any]) -> None:
    """Day 1 went from 4 orders to 1: row_count_change (max 50 %, warn) warns and commits;
    the other audits hold."""
    line = _line(shop["second"].stdout, "clean_orders", DAY1)
    assert line.startswith(
        "[OK] clean_orders 2024-01-01 (upstream_changed, 1 rows, warn: audit "
        "row_count_change warned"
    ), line
    assert "no_partition_emptied" not in line and "column_" not in line, line
    assert [r for r in _rows(shop["project"], "clean_orders") if r[0] == DAY1] == [
        (DAY1, f"{DAY1}-0", 10)
    ]


@covers("setting partlake/conditions")
def test_run_conditions_skip_or_fail_a_write(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    first, second = shop["first"].stdout, shop["second"].stdout
    # skip: day 2 had 2 orders; the run succeeds, writes nothing, says why.
    line = _line(first, "full_days", DAY2)
    assert line.startswith(
        "[OK] full_days 2024-01-02 (missing, 0 rows, skipped: 'a full day' does not hold, "
    ), line
    assert shop["before"]["full_days"] == [(DAY1, 4)]
    # Day 1 shrank to one order: skipped, its earlier rows stay; day 2 grew to three: written.
    assert "skipped: 'a full day' does not hold" in _line(second, "full_days", DAY1)
    assert _rows(project, "full_days") == [(DAY1, 4), (DAY2, 3)]
    # fail: day 1 had 4 orders; nothing written, the run fails with the description.
    line = _line(first, "small_days", DAY1)
    assert line.startswith("[FAILED]"), line
    assert (
        "run condition 'at most three orders a day' (input_rows <= 3) does not hold; nothing "
        "was written." in line
    ), line
    # Once day 1 held one order, it ran.
    assert _rows(project, "small_days") == [(DAY1, 10), (DAY2, 6)]


@covers("setting partlake/fail_if_no_input")
def test_a_run_with_only_empty_inputs_fails(shop: dict[str, Any]) -> None:
    line = _line(shop["second"].stdout, "returned", DAY2)
    assert line.startswith("[FAILED]"), line
    assert "returned read no rows (returns: 0) and declares partlake/fail_if_no_input" in line
    assert _rows(shop["project"], "returned") == shop["before"]["returned"]
    # What is left: exactly the partitions a gate or guard refused, and nothing else.
    assert shop["plan"].startswith("2 stale asset partition(s) in 2 asset(s)"), shop["plan"]
    assert "returned: 1 stale (upstream_changed 1)" in shop["plan"], shop["plan"]


@covers("partlake_asset_checks(assets=)")
def test_a_misspelled_gate_fails_the_code_location_s_validation(shop: dict[str, Any]) -> None:
    """`partlake_asset_checks(assets)` checks every asset's settings as the module loads."""
    project: UserProject = shop["project"]
    project.write(BAD_MODULE, BAD_CODE)
    validated = project.run("dagster", "definitions", "validate", "-m", BAD_MODULE)
    out = validated.stdout + validated.stderr
    assert validated.returncode != 0, out
    assert (
        "partlake/constraints entry {'not_nul': ['order_id']} of asset clean_orders must "
        "name exactly one of" in out
    ), out[-3000:]
