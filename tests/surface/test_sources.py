"""`partlake_source` as a user declares it, on local disk: a Delta table at a `path` relative to
the lake and at an absolute one, under a `root` of its own, with `partition_expr` naming its
columns (a dict and a string), a landing folder consumed once (`folder`, `after_commit`), a
source on a second IO manager (`io_manager_key`), `group_name` and `description`. One code
location, run as users run it: `partlake plan`, `partlake run`, `dagster asset materialize`,
`dagster definitions validate`; then another system rewrites one source partition and exactly
its closure runs again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_sources"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    build_invalidation_sensor,
    partlake_asset_checks,
    partlake_source,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
regions = dg.StaticPartitionsDefinition(["eu", "us"])
daily_region = dg.MultiPartitionsDefinition({"date": days, "region": regions})
one_run = dg.BackfillPolicy.single_run()

# A table below the lake root, at a path of its own.
orders = partlake_source(
    "orders",
    partitions_def=daily_region,
    path="landing/orders",
    group_name="shop",
    description="Orders, written by the shop's exporter",
)
# A table anywhere (an absolute path).
refunds = partlake_source("refunds", partitions_def=days, path="{refunds_path}")
# A table of another lake, its date column named `day`.
stock = partlake_source(
    "stock",
    partitions_def=daily_region,
    root="{other_lake}",
    metadata={"partition_expr": {"date": "day"}},
)
# One dimension, its column named by a string.
visits = partlake_source("visits", partitions_def=days, metadata={"partition_expr": "visit_date"})
# A landing folder of Parquet files, each file read once, then archived.
drops = partlake_source("drops", partitions_def=days, folder=True, after_commit="archive")
# A table of a lake another IO manager keeps.
partners = partlake_source("partners", partitions_def=days, io_manager_key="partner_io")
# A typo: nothing is at this path.
ghost = partlake_source("ghost", partitions_def=days, path="nowhere/ghost")


@dg.asset(partitions_def=daily_region, backfill_policy=one_run, group_name="shop")
def order_lines(orders: DataFrame) -> DataFrame:
    return orders.where("qty > 0")


@dg.asset(partitions_def=days, backfill_policy=one_run)
def refund_totals(refunds: DataFrame) -> DataFrame:
    return refunds.groupBy("date").sum("amount").withColumnRenamed("sum(amount)", "amount")


@dg.asset(
    partitions_def=daily_region,
    backfill_policy=one_run,
    metadata={"partition_expr": {"date": "day"}},
)
def stock_levels(stock: DataFrame) -> DataFrame:
    return stock


@dg.asset(partitions_def=days, backfill_policy=one_run, metadata={"partition_expr": "visit_date"})
def visit_counts(visits: DataFrame) -> DataFrame:
    return visits.groupBy("visit_date").count()


@dg.asset(partitions_def=days)
def dropped(drops: DataFrame) -> DataFrame:
    return drops


@dg.asset(partitions_def=days, backfill_policy=one_run)
def partner_copy(partners: DataFrame) -> DataFrame:
    return partners


@dg.asset(partitions_def=days, backfill_policy=one_run)
def ghost_copy(ghost: DataFrame) -> DataFrame:
    return ghost


spark = SparkResource(master="local[2]")
assets = [orders, refunds, stock, visits, drops, partners, ghost]
assets += [order_lines, refund_totals, stock_levels, visit_counts, dropped, partner_copy]
assets += [ghost_copy]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    sensors=[build_invalidation_sensor("shop_refresh")],
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(spark=spark),
        "partner_io": DeltaPartitionIOManager(spark=spark, root="{partner_lake}"),
    },
    executor=dg.in_process_executor,
)
"""
DAYS = ["2024-01-01", "2024-01-02"]


def _write(where: Path, rows: list[dict[str, Any]], partition_by: list[str]) -> None:
    """Another system's write of a whole table."""
    write_deltalake(
        str(where), pa.Table.from_pylist(rows), partition_by=partition_by, mode="overwrite"
    )


def _orders(seed: int = 0) -> list[dict[str, Any]]:
    return [
        {"date": d, "region": r, "order_id": i, "qty": (i + seed) % 3}
        for d in DAYS
        for r in ("eu", "us")
        for i in range(6)
    ]


def _drop(folder: Path, day: str, name: str, n: int) -> None:
    """A Parquet file landing in the folder source's `date=` folder."""
    import pyarrow.parquet as pq

    target = folder / f"date={day}"
    target.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"n": list(range(n))}), target / name)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The user's project with every source written, after its first `partlake run`."""
    project = UserProject(tmp_path_factory.mktemp("sources"))
    places = {
        "refunds_path": project.root / "elsewhere" / "refunds",
        "other_lake": project.root / "warehouse-b",
        "partner_lake": project.root / "partner-lake",
    }
    project.write(MODULE, CODE, **places)
    lake = project.lake
    _write(lake / "landing" / "orders", _orders(), ["date", "region"])
    refunds = [{"date": d, "amount": 10 * k} for d in DAYS for k in range(3)]
    _write(places["refunds_path"], refunds, ["date"])
    stock = [{"day": d, "region": r, "sku": "a", "level": 5} for d in DAYS for r in ("eu", "us")]
    _write(places["other_lake"] / "warehouse" / "stock", stock, ["day", "region"])
    visits = [{"visit_date": d, "user": u} for d in DAYS for u in range(4)]
    _write(lake / "warehouse" / "visits", visits, ["visit_date"])
    for day in DAYS:
        _drop(lake / "warehouse" / "drops", day, "part-0.parquet", 3)
    _write(
        places["partner_lake"] / "warehouse" / "partners",
        [{"date": "2024-01-01", "p": 1}],
        ["date"],
    )
    plan = project.run("partlake", "plan", "-m", MODULE)
    run = project.run("partlake", "run", "-m", MODULE)
    for done in (plan, run):
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The sensor's tick once everything is fresh but what reads the missing source.
    tick = project.run("dagster", "sensor", "preview", "-m", MODULE, "shop_refresh")
    return {
        "project": project,
        "places": places,
        "plan": plan.stdout,
        "plan_err": plan.stderr,
        "run": run.stdout,
        "run_err": run.stderr,
        "tick": tick,
    }


@covers(
    "partlake_source",
    "partlake_source(key=)",
    "partlake_source(partitions_def=)",
    "partlake_source(path=)",
    "setting partlake/path",
    "partlake_source(root=)",
    "setting partlake/root",
    "partlake_source(metadata=)",
    "setting partition_expr",
    "partlake_source(io_manager_key=)",
    "DeltaPartitionIOManager(root=)",
)
def test_every_source_is_read_where_it_is_declared(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    warehouse = project.lake / "warehouse"
    assert "order_lines: 4 stale (missing 4)" in shop["plan"], shop["plan"]
    lines = outcome_lines(shop["run"])
    assert lines and all(line.startswith("[OK]") for line in lines), shop["run"]
    assert len(lines) == 4 + 2 + 4 + 2 + 2 + 1, lines
    # path (relative to the lake root): the rows the source holds, filtered.
    assert table_rows(warehouse / "order_lines", ["date", "region", "order_id"]) == sorted(
        (o["date"], o["region"], o["order_id"]) for o in _orders() if o["qty"] > 0
    )
    # path (absolute)
    assert table_rows(warehouse / "refund_totals", ["date", "amount"]) == [
        ("2024-01-01", 30),
        ("2024-01-02", 30),
    ]
    # root (another lake), its date column named by partition_expr
    assert len(table_rows(warehouse / "stock_levels", ["day", "region"])) == 4
    # partition_expr as a string
    assert table_rows(warehouse / "visit_counts", ["visit_date", "count"]) == [
        ("2024-01-01", 4),
        ("2024-01-02", 4),
    ]
    # io_manager_key: the source is in the partner IO manager's lake, read by the default one.
    assert table_rows(warehouse / "partner_copy", ["date", "p"]) == [("2024-01-01", 1)]
    project.assert_fresh(MODULE)


@covers(
    "partlake_source(folder=)",
    "setting partlake/format",
    "partlake_source(after_commit=)",
    "setting partlake/after_commit",
)
def test_a_landing_folder_is_read_once_and_archived(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    folder = project.lake / "warehouse" / "drops"
    assert table_rows(project.lake / "warehouse" / "dropped", ["date", "n"]) == sorted(
        (d, n) for d in DAYS for n in range(3)
    )
    assert not list(folder.glob("date=*/*.parquet")), "consumed files stay in the folder"
    assert len(list((folder / "_archive").rglob("*.parquet"))) == 2


@covers("partlake_source(group_name=)", "partlake_source(description=)")
def test_group_and_description_reach_dagster(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    validated = project.run("dagster", "definitions", "validate", "-m", MODULE)
    assert validated.returncode == 0, validated.stderr[-3000:]
    assert "Validation successful" in validated.stdout + validated.stderr
    listed = project.ok(
        "python",
        "-c",
        "import json, shop_sources as m; "
        "node = m.defs.resolve_asset_graph().get(m.orders.key); "
        "print(json.dumps([node.group_name, node.description]))",
    )
    assert json.loads(listed.splitlines()[-1]) == ["shop", "Orders, written by the shop's exporter"]


def test_a_source_with_no_table_is_said_once_by_plan_run_and_the_sensor(
    shop: dict[str, Any],
) -> None:
    """A source whose `path=` holds nothing (a typo): `partlake plan`, `partlake run` and the
    sensor's tick each say once that there is no table there, naming what reads it."""
    project: UserProject = shop["project"]
    where = project.lake / "nowhere" / "ghost"
    said = (
        f"source ghost: no table at {where}; what reads it (ghost_copy) has nothing of it to "
        "plan until one is written there."
    )
    for err in (shop["plan_err"], shop["run_err"]):
        assert err.count("source ghost: no table at") == 1, err[-3000:]
        assert said in err, err[-3000:]
    assert "ghost" not in shop["plan"] + shop["run"]  # stdout: the plan and the lines only
    tick = shop["tick"]
    assert tick.returncode == 0, tick.stderr[-3000:]
    log = tick.stdout + tick.stderr
    assert log.count("source ghost: no table at") == 1, log[-3000:]
    assert said in log, log[-3000:]
    # Said as well when a no-op is answered from the last plan, without planning again.
    for _ in range(2):
        again = project.run("partlake", "plan", "-m", MODULE)
        assert again.stderr.count("source ghost: no table at") == 1, again.stderr[-3000:]
    assert not where.exists()  # nothing was created where the source is declared


def test_an_empty_source_path_is_refused_at_load(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    project.write(
        "empty_path",
        """
        import dagster as dg
        from dagster_partlake import partlake_source

        defs = dg.Definitions(assets=[partlake_source("ghost", path="")])
        """,
    )
    done = project.run("partlake", "plan", "-m", "empty_path")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Error: asset ghost has partlake/path ''" in done.stdout + done.stderr


def test_a_rewritten_source_partition_refreshes_exactly_its_closure(shop: dict[str, Any]) -> None:
    """Another system rewrites orders 2024-01-02|eu: the plan names order_lines there alone,
    `dagster asset materialize` of that partition reads the source's path, and the plan is
    empty again."""
    project: UserProject = shop["project"]
    rewritten = [o for o in _orders(seed=1) if (o["date"], o["region"]) == ("2024-01-02", "eu")]
    write_deltalake(
        str(project.lake / "landing" / "orders"),
        pa.Table.from_pylist(rewritten),
        partition_by=["date", "region"],
        mode="overwrite",
        predicate="date = '2024-01-02' AND region = 'eu'",
    )
    plan = project.ok("partlake", "plan", "-m", MODULE)
    assert "order_lines: 1 stale (upstream_changed 1)" in plan, plan
    assert "2024-01-02|eu  upstream_changed  because orders[2024-01-02|eu]" in plan, plan
    assert "1 stale asset partition(s) in 1 asset(s)" in plan, plan
    project.ok(
        "dagster", "asset", "materialize", "-m", MODULE, "--select", "order_lines",
        "--partition", "2024-01-02|eu",
    )  # fmt: skip
    expected = [o for o in _orders() if (o["date"], o["region"]) != ("2024-01-02", "eu")]
    expected += rewritten
    assert table_rows(
        project.lake / "warehouse" / "order_lines", ["date", "region", "order_id"]
    ) == sorted((o["date"], o["region"], o["order_id"]) for o in expected if o["qty"] > 0)
    project.assert_fresh(MODULE)
