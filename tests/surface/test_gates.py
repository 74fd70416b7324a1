"""Quality gates and run guards as a user declares them: `partlake/constraints` and
`partlake/audits` (severity error and warn) registered as asset checks by
`partlake_asset_checks(assets)`, `partlake/conditions` (skip and fail) and
`partlake/fail_if_no_input`. One code location over a daily orders table, run with `partlake
run` twice: the first orders, then another system rewriting both days and deleting a day of
returns; payments (three without a reference one day, a reference paid twice the next) meet
`unique` and `not_null`. What each gate and guard did is read from `partlake run`'s lines, the
tables (deltalake), their folders and `partlake plan`; `dagster asset materialize` of a partition
with gates records their results as the run's checks, its log free of Dagster's "did not yield"
note; a setting misspelled in another module fails `dagster definitions validate`, naming the
asset and the setting.
"""

from __future__ import annotations

import json
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
payments = partlake_source("payments", partitions_def=days)


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


# A payment's reference is unique where it has one.
@dg.asset(partitions_def=days, metadata={"partlake/constraints": [{"unique": ["ref"]}]})
def paid(payments: DataFrame) -> DataFrame:
    return payments


# Every payment needs a reference: no day passes, so no table is ever committed.
@dg.asset(partitions_def=days, metadata={"partlake/constraints": [{"not_null": ["ref"]}]})
def referenced(payments: DataFrame) -> DataFrame:
    return payments


spark = SparkResource(master="local[2]")
assets = [orders, returns, payments, clean_orders, full_days, small_days, returned, paid]
assets += [referenced]
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
# A user's script: the asset check results of the latest run, read from the Dagster instance.
LATEST_CHECKS = """
import json

import dagster as dg

instance = dg.DagsterInstance.get()
run = instance.get_runs(limit=1)[0]
logged = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
results = [record.dagster_event.event_specific_data for record in logged]
print(json.dumps({
    "status": run.status.value,
    "results": sorted([r.asset_key.to_user_string(), r.check_name, r.passed] for r in results),
}))
"""
DAY1, DAY2 = "2024-01-01", "2024-01-02"
# Day 1: three payments without a reference, one with; day 2: a reference twice, one without.
PAYMENTS = [
    *({"date": DAY1, "ref": None, "amount": a} for a in (1, 2, 3)),
    {"date": DAY1, "ref": "p1", "amount": 4},
    *({"date": DAY2, "ref": "p2", "amount": a} for a in (5, 6)),
    {"date": DAY2, "ref": None, "amount": 7},
]


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
    project.write("latest_checks", LATEST_CHECKS)
    orders, returns = _table(project, "orders"), _table(project, "returns")
    first_orders = [_orders(DAY1, [10, 20, 30, 40]), _orders(DAY2, [5, 6], ["eu", "apac"])]
    write_deltalake(orders, pa.concat_tables(first_orders), partition_by=["date"])
    write_deltalake(
        returns,
        pa.table({"date": [DAY1, DAY2], "order_id": [f"{DAY1}-0", f"{DAY2}-1"]}),
        partition_by=["date"],
    )
    write_deltalake(
        _table(project, "payments"), pa.Table.from_pylist(PAYMENTS), partition_by=["date"]
    )
    first = project.run("partlake", "run", "-m", MODULE)
    before = {t: _rows(project, t) for t in ("clean_orders", "full_days", "returned")}
    for day, table in ((DAY1, _orders(DAY1, [10])), (DAY2, _orders(DAY2, [5, -6, 7]))):
        write_deltalake(orders, table, mode="overwrite", predicate=f"date = '{day}'")
    DeltaTable(returns).delete(f"date = '{DAY2}'")
    second = project.run("partlake", "run", "-m", MODULE)
    plan = project.ok("partlake", "plan", "-m", MODULE)
    # Day 1 of clean_orders again, as the UI's Materialize does: its gates pass.
    materialized = project.run(
        "dagster", "asset", "materialize", "-m", MODULE, "--select", "clean_orders",
        "--partition", DAY1,
    )  # fmt: skip
    checks = project.ok("python", "latest_checks.py")
    return {
        "project": project,
        "first": first,
        "second": second,
        "plan": plan,
        "before": before,
        "materialized": materialized,
        "checks": json.loads(checks.splitlines()[-1]),
    }


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
    assert shop["plan"].startswith("5 stale asset partition(s) in 4 asset(s)"), shop["plan"]
    assert "returned: 1 stale (upstream_changed 1)" in shop["plan"], shop["plan"]


def test_unique_ignores_keys_with_a_null_column(shop: dict[str, Any]) -> None:
    """As SQL's UNIQUE: day 1's three payments without a reference are no duplicates (not_null
    is the gate for nulls); day 2's reference paid twice is, and nothing of day 2 is
    committed."""
    project: UserProject = shop["project"]
    first = shop["first"].stdout
    line = _line(first, "paid", DAY1)
    assert line.startswith("[OK] paid 2024-01-01 (missing, 4 rows, "), line
    for out in (first, shop["second"].stdout):
        line = _line(out, "paid", DAY2)
        assert line.startswith("[FAILED]"), line
        assert (
            "constraint unique_ref failed: 2 of 3 rows violate '(ref) unique within the written "
            "partitions'" in line
        ), line
    assert table_rows(_table(project, "paid"), ["date", "ref", "amount"]) == [
        (DAY1, "p1", 4),
        (DAY1, None, 1),
        (DAY1, None, 2),
        (DAY1, None, 3),
    ]


def test_a_refused_write_leaves_no_folder_behind(shop: dict[str, Any]) -> None:
    """A write a gate refuses deletes its files and the folders it made for them: no table
    folder where no table was ever committed, no partition folder the table does not have."""
    project: UserProject = shop["project"]
    first, second = shop["first"].stdout, shop["second"].stdout
    # referenced: every write of both runs refused, each a first write of the table.
    for out in (first, second):
        for day in (DAY1, DAY2):
            line = _line(out, "referenced", day)
            assert line.startswith("[FAILED]"), line
            assert "constraint not_null_ref failed: " in line, line
    table = project.lake / "warehouse" / "referenced"
    assert not table.exists() or not any(table.iterdir()), sorted(table.rglob("*"))
    # paid: day 2 refused again by the second run, into the table day 1's commit made.
    assert _line(second, "paid", DAY2).startswith("[FAILED]")
    assert sorted(p.name for p in (project.lake / "warehouse" / "paid").iterdir()) == [
        "_delta_log",
        f"date={DAY1}",
    ]


def test_dagster_materialize_records_the_gates_without_a_missing_output(
    shop: dict[str, Any],
) -> None:
    """`dagster asset materialize` of a partition with gates: the write's gate results are the
    run's check results, and Dagster does not log that the check step yielded no output."""
    materialized = shop["materialized"]
    out = materialized.stdout + materialized.stderr
    assert materialized.returncode == 0, out[-3000:]
    assert "did not yield or return expected output" not in out, [
        line for line in out.splitlines() if "did not yield" in line
    ]
    gates = [
        "column_mean_amount",
        "column_sum_amount",
        "known_region",
        "no_partition_emptied",
        "non_negative",
        "not_null_order_id",
        "partlake_fresh",
        "row_count",
        "row_count_change",
        "unique_order_id",
    ]
    assert shop["checks"] == {
        "status": "SUCCESS",
        "results": [["clean_orders", name, True] for name in gates],
    }


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
