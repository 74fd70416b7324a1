"""SQL models as a user writes them: a `dg` project whose `defs.yaml` declares a models folder
(`SqlModels`, every field) next to a folder of models built in Python with `sql_assets` (every
argument), both reading a daily orders source. One code location (`shop_sql.definitions`, a
`@dg.definitions` function as `dg` projects have), checked with `dg check defs` and `dg list
defs`, run with `partlake run`; then another system rewrites a day of orders and exactly the
closure runs again, which Dagster's own automation sees through `partlake_stale()` set on the
models by `automation_condition=`. Rows read back with deltalake; the plan is empty after each
run.
"""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_sql.definitions"
FILES = {
    "pyproject.toml": """
        [project]
        name = "shop_sql"
        version = "0.1.0"
        requires-python = ">=3.11"

        [tool.dg]
        directory_type = "project"

        [tool.dg.project]
        root_module = "shop_sql"
    """,
    "shop_sql/__init__.py": "",
    "shop_sql/partitions.py": """
        import dagster as dg

        days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
        months = dg.MonthlyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
        day_before = dg.TimeWindowPartitionMapping(
            start_offset=-1, end_offset=-1, allow_nonexistent_upstream_partitions=True
        )
    """,
    "shop_sql/defs/raw/assets.py": """
        from dagster_partlake import partlake_source
        from shop_sql.partitions import days

        raw_orders = partlake_source("raw_orders", partitions_def=days)
    """,
    # The Dagster Components front door: a models folder and everything it needs.
    "shop_sql/defs/models/defs.yaml": """
        type: dagster_partlake.SqlModels
        attributes:
          path: models
          partitions:
            daily: shop_sql.partitions:days
          mappings:
            before: shop_sql.partitions:day_before
          upstream: [shop_sql.defs.raw.assets]
          group_name: components
          pool: sql_models
          io_manager:
            root: {component_lake}
            spark_master: local[2]
          sensor: true
    """,
    "shop_sql/defs/models/models/cmp/orders_before.sql": """
        -- @partitions: daily
        -- @depends_on: raw_orders (before)
        select date_add(date, 1) as date, count(*) as orders_before
        from raw_orders
        group by date
    """,
    "shop_sql/defs/models/models/cmp/totals.sql": """
        -- @description: Orders and revenue over all days.
        select count(*) as orders, sum(amount) as revenue from raw_orders
    """,
    # The same models built in Python, into the lake of another IO manager.
    "shop_sql/sql/staging/orders.sql": """
        -- @partitions: daily
        -- @constraint: not_null(order_id)
        select order_id, amount, date from raw_orders where amount > 0
    """,
    "shop_sql/sql/marts/monthly_revenue.sql": """
        -- @partitions: monthly
        select trunc(date, 'MM') as date, sum(amount) as revenue, count(*) as orders
        from staging.orders
        group by trunc(date, 'MM')
    """,
    "shop_sql/sql/marts/revenue_before.sql": """
        -- @partitions: daily
        -- @depends_on: staging.orders (before)
        select date_add(date, 1) as date, sum(amount) as revenue_before
        from staging.orders
        group by date
    """,
    "shop_sql/definitions.py": """
        from pathlib import Path

        import dagster as dg

        from dagster_partlake import (
            POOL,
            DeltaPartitionIOManager,
            SparkResource,
            partlake_asset_checks,
            partlake_stale,
            sql_assets,
        )
        from shop_sql.defs.raw.assets import raw_orders
        from shop_sql.partitions import day_before, days, months


        @dg.definitions
        def defs() -> dg.Definitions:
            components = dg.load_from_defs_folder(path_within_project=Path(__file__).parent.parent)
            models = sql_assets(
                Path(__file__).parent / "sql",
                partitions={"daily": days, "monthly": months},
                mappings={"before": day_before},
                upstream=[raw_orders],
                group_name="sql",
                pool=POOL,
                io_manager_key="sql_io",
                automation_condition=partlake_stale(),
            )
            spark = SparkResource(master="local[2]")
            return dg.Definitions.merge(
                components,
                dg.Definitions(
                    assets=models,
                    asset_checks=partlake_asset_checks(models),
                    resources={"sql_io": DeltaPartitionIOManager(spark=spark)},
                ),
            )
    """,
}
# A user's script: what Dagster's automation would request now (its public test API).
AUTOMATION = """
import json

import dagster as dg

from shop_sql.definitions import defs

loaded = defs()
result = dg.evaluate_automation_conditions(defs=loaded, instance=dg.DagsterInstance.get())
requested = sorted(
    [key.to_user_string(), partition]
    for key in loaded.resolve_all_asset_keys()
    for partition in result.get_requested_partitions(key)
)
print(json.dumps(requested))
"""
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
D1, D2, D3 = (dt.date.fromisoformat(d) for d in DAYS)


def _orders(day: str, amounts: list[int]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"date": dt.date.fromisoformat(day), "order_id": f"{day}-{i}", "amount": a}
            for i, a in enumerate(amounts)
        ]
    )


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The dg project after its first `partlake run`, then day 2 of orders rewritten by
    another system, Dagster's automation evaluated, and `partlake run` again."""
    project = UserProject(tmp_path_factory.mktemp("sql"))
    component_lake = project.root / "component-lake"
    for name, text in FILES.items():
        target = project.code / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            textwrap.dedent(text).lstrip().replace("{component_lake}", str(component_lake)),
            encoding="utf-8",
        )
    project.write("automation_check", AUTOMATION)
    raw = str(component_lake / "warehouse" / "raw_orders")
    write_deltalake(
        raw, pa.concat_tables([_orders(d, [10, 20, -5]) for d in DAYS]), partition_by=["date"]
    )
    checked = project.run("dg", "check", "defs")
    listed = json.loads(project.ok("dg", "list", "defs", "--json"))
    first = project.ok("partlake", "run", "-m", MODULE)
    rows = {name: _rows(project, component_lake, name) for name in TABLES}

    write_deltalake(
        raw, _orders(DAYS[1], [10, 20, 30, -1]), mode="overwrite", predicate=f"date = '{D2}'"
    )
    requested = json.loads(project.ok("python", "automation_check.py").splitlines()[-1])
    render = project.ok(
        "partlake", "sql", "render", "-m", MODULE, "marts/revenue_before", "--partition", DAYS[2]
    )
    monthly = project.ok(
        "partlake", "sql", "render", "-m", MODULE, "marts/monthly_revenue", "--partition", DAYS[0]
    )
    second = project.ok("partlake", "run", "-m", MODULE)
    project.assert_fresh(MODULE)
    return {
        "project": project,
        "lake": component_lake,
        "checked": checked,
        "listed": listed,
        "first": first,
        "rows": rows,
        "requested": requested,
        "render": render,
        "monthly": monthly,
        "second": second,
    }


TABLES = {
    "staging/orders": ["date", "order_id", "amount"],
    "marts/monthly_revenue": ["date", "revenue", "orders"],
    "marts/revenue_before": ["date", "revenue_before"],
    "cmp/orders_before": ["date", "orders_before"],
    "cmp/totals": ["orders", "revenue"],
}


def _rows(project: UserProject, component_lake: Path, name: str) -> list[tuple[Any, ...]]:
    lake = component_lake if name.startswith("cmp/") else project.lake
    return table_rows(lake / "warehouse" / name, TABLES[name])


def _ran(out: str) -> list[tuple[str, str]]:
    lines = outcome_lines(out)
    assert all(line.startswith("[OK]") for line in lines), out
    return sorted((line.split()[1], line.split()[2]) for line in lines)


@covers(
    "sql_assets",
    "sql_assets(path=)",
    "sql_assets(partitions=)",
    "sql_assets(mappings=)",
    "sql_assets(upstream=)",
    "sql_assets(io_manager_key=)",
    "sql_assets(pool=)",
)
def test_sql_assets_build_models_that_run_like_python_assets(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    # pool=POOL: the models' steps are in the pool partlake (the components' in theirs).
    assert shop["first"].splitlines()[0] == (
        "Running 9 stale asset partition(s) in 5 run(s). Executing up to 2 run(s) at a time; "
        "Dagster pool partlake (limit 2), sql_models (limit 2) caps steps across runs."
    )
    # io_manager_key="sql_io": the models' tables are in that IO manager's lake ($PARTLAKE_HOME).
    rows = shop["rows"]
    assert rows["staging/orders"] == [
        (day, f"{day}-{i}", amount) for day in (D1, D2, D3) for i, amount in ((0, 10), (1, 20))
    ]
    # partitions={"monthly": ...}: a month reads its days (those the daily upstream has).
    assert rows["marts/monthly_revenue"] == [(D1, 90, 6)]
    # mappings={"before": ...}: each day reads the day before.
    assert rows["marts/revenue_before"] == [(D2, 30), (D3, 30)]
    # After day 2 was rewritten: exactly its closure ran again.
    assert _rows(project, shop["lake"], "staging/orders")[2:5] == [
        (D2, f"{D2}-0", 10),
        (D2, f"{D2}-1", 20),
        (D2, f"{D2}-2", 30),
    ]
    assert _rows(project, shop["lake"], "marts/monthly_revenue") == [(D1, 120, 7)]
    assert _rows(project, shop["lake"], "marts/revenue_before") == [(D2, 30), (D3, 60)]
    assert _ran(shop["second"]) == [
        ("cmp/orders_before", DAYS[2]),
        ("cmp/totals", "-"),
        ("marts/monthly_revenue", DAYS[0]),
        ("marts/revenue_before", DAYS[2]),
        ("staging/orders", DAYS[1]),
    ]


@covers("sql_assets(group_name=)", "sql_assets(automation_condition=)")
def test_models_carry_their_group_and_dagster_s_automation_sees_what_is_stale(
    shop: dict[str, Any],
) -> None:
    assets = {a["asset_key"]: a for a in shop["listed"]["assets"]}
    for key in ("staging/orders", "marts/monthly_revenue", "marts/revenue_before"):
        assert assets[key]["group_name"] == "sql", assets[key]
        assert assets[key]["automation_condition"]["label"] == "partlake_stale", assets[key]
    # automation_condition=partlake_stale(): after the rewrite of day 2, Dagster's automation
    # requests exactly the models' stale partitions.
    assert shop["requested"] == [
        ["marts/monthly_revenue", DAYS[0]],
        ["marts/revenue_before", DAYS[2]],
        ["staging/orders", DAYS[1]],
    ]


@covers("setting partlake/sql_path")
def test_each_model_knows_its_file(shop: dict[str, Any]) -> None:
    """`partlake sql render` finds the model's file through its `partlake/sql_path`."""
    first = shop["render"].splitlines()[0]
    assert first.startswith(
        f"-- marts/revenue_before, partition {DAYS[2]}: shop_sql/sql/marts/revenue_before.sql "
        "(code version "
    ), first
    assert f"staging/orders: 1 partition(s): {DAYS[1]}" in shop["render"], shop["render"]
    listed = {a["asset_key"]: a for a in shop["listed"]["assets"]}
    assert listed["marts/revenue_before"]["source"] == "shop_sql/sql/marts/revenue_before.sql:1"


@covers(
    "SqlModels",
    "SqlModels(path=)",
    "SqlModels(partitions=)",
    "SqlModels(mappings=)",
    "SqlModels(upstream=)",
    "SqlModels(group_name=)",
    "SqlModels(pool=)",
    "SqlModels(io_manager=)",
    "SqlModels(sensor=)",
)
def test_a_defs_yaml_declares_models_with_all_they_need(shop: dict[str, Any]) -> None:
    checked, listed = shop["checked"], shop["listed"]
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "All definitions loaded successfully." in checked.stdout + checked.stderr
    assets = {a["asset_key"]: a for a in listed["assets"]}
    # path, upstream, group_name
    for key in ("cmp/orders_before", "cmp/totals"):
        assert assets[key]["group_name"] == "components", assets[key]
        assert assets[key]["dependency_keys"] == ["raw_orders"], assets[key]
    # sensor: true; io_manager: the IO manager and Spark it provides.
    # (Dagster adds its own automation sensor for the models' automation_condition.)
    assert [s["name"] for s in listed["sensors"]] == [
        "default_automation_condition_sensor",
        "partlake_invalidation",
    ]
    assert {r["name"] for r in listed["resources"]} == {"io_manager", "spark", "sql_io"}
    # io_manager.root: the component's tables are in its lake; partitions and mappings:
    # each day counts the orders of the day before; pool: the header above names it.
    assert shop["rows"]["cmp/orders_before"] == [(D2, 3), (D3, 3)]
    assert shop["rows"]["cmp/totals"] == [(9, 75)]
    project: UserProject = shop["project"]
    assert _rows(project, shop["lake"], "cmp/orders_before") == [(D2, 3), (D3, 4)]
    assert _rows(project, shop["lake"], "cmp/totals") == [(10, 109)]


def test_a_month_reads_only_the_days_its_daily_upstream_has(shop: dict[str, Any]) -> None:
    """January over a daily definition ending 2024-01-03: the view of staging/orders holds the
    three days that exist, not the month's 31."""
    monthly = shop["monthly"]
    assert monthly.splitlines()[0].startswith(
        f"-- marts/monthly_revenue, partition {DAYS[0]}: shop_sql/sql/marts/monthly_revenue.sql "
    ), monthly
    assert f"staging/orders: 3 partition(s): {', '.join(DAYS)}" in monthly, monthly
