"""A PostgreSQL table as a partitioned source, end to end: a user's code location reads it into a
daily table and daily totals with the real `partlake` commands; each kind of change in the
database makes exactly its closure stale, what changes no row makes nothing stale, the server
receives each partition's predicate, a large partition is read by parallel range queries, and a
wrong password or a stopped server is one line naming the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_PASSWORD, postgres_connection
from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli, pytest.mark.postgres]

MODULE = "shop_db"
COLUMNS = ["id", "order_date", "region", "amount"]
CODE = """
import dagster as dg
from pyspark.sql import DataFrame, functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    PostgresTable,
    SparkResource,
    partlake_asset_checks,
    partlake_source,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-06")
regions = dg.StaticPartitionsDefinition(["eu", "us"])
daily_region = dg.MultiPartitionsDefinition({"date": days, "region": regions})

orders = partlake_source(
    "orders",
    partitions_def=daily_region,
    # The password comes from $SHOP_DB_PASSWORD, the server from the arguments.
    postgres=PostgresTable(
        table="public.orders",
        port={port},
        database="{database}",
        user="{user}",
        password_env="SHOP_DB_PASSWORD",
        split_column="id",
        split_rows=150,
        # By partition while the rows are unanalyzed; by ranges of id once ANALYZE finds
        # every day's rows spread over the table.
        read_by="auto",
    ),
    metadata={"partition_expr": {"date": "order_date"}},
)
# A query (read whole by each plan), its password in the code.
big_orders = partlake_source(
    "big_orders",
    partitions_def=days,
    postgres=PostgresTable(
        query="SELECT id, order_date, amount FROM orders WHERE amount > 1000",
        host="127.0.0.1",
        port={port},
        database="{database}",
        user="{user}",
        password="{password}",
        fetch_size=500,
    ),
    metadata={"partition_expr": "order_date"},
)


@dg.asset(
    partitions_def=daily_region,
    backfill_policy=dg.BackfillPolicy.single_run(),
    metadata={"partition_expr": {"date": "order_date"}},
)
def order_lines(orders: DataFrame) -> DataFrame:
    return orders.select("id", "order_date", "region", F.col("amount").cast("double"))


@dg.asset(
    partitions_def=days,
    backfill_policy=dg.BackfillPolicy.single_run(),
    ins={
        "order_lines": dg.AssetIn(
            partition_mapping=dg.MultiToSingleDimensionPartitionMapping(
                partition_dimension_name="date"
            )
        )
    },
    metadata={"partition_expr": "order_date"},
)
def daily_totals(order_lines: DataFrame) -> DataFrame:
    return order_lines.groupBy("order_date").agg(F.sum("amount").alias("amount"))


@dg.asset(
    partitions_def=days,
    backfill_policy=dg.BackfillPolicy.single_run(),
    metadata={"partition_expr": "order_date"},
)
def big_order_ids(big_orders: DataFrame) -> DataFrame:
    return big_orders.select("id", "order_date")


spark = SparkResource(master="local[2]")
assets = [orders, big_orders, order_lines, daily_totals, big_order_ids]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""


def _connect(server: Any) -> psycopg.Connection[Any]:
    connection: psycopg.Connection[Any] = postgres_connection(server)
    return connection


@pytest.fixture(scope="module")
def shop(postgres_source: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The orders table (3 days x 2 regions, 200 rows a partition), the user's project read
    once in full."""
    server = postgres_source
    with _connect(server) as connection:
        connection.execute("DROP TABLE IF EXISTS orders")
        connection.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, order_date date NOT NULL, "
            "region text NOT NULL, amount numeric(10, 2))"
        )
        connection.execute(
            "INSERT INTO orders SELECT g, date '2024-01-01' + (g % 3), "
            "CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g FROM generate_series(1, 1200) g"
        )
        # No statistics until a test runs ANALYZE (read_by="auto" reads by them).
        connection.execute("ALTER TABLE orders SET (autovacuum_enabled = false)")
    project = UserProject(tmp_path_factory.mktemp("postgres"), {"SHOP_DB_PASSWORD": PG_PASSWORD})
    project.write(
        MODULE, CODE, port=server.port, database=server.db, user=server.user, password=PG_PASSWORD
    )
    log = Path(server.data) / "server.log"
    logged = len(log.read_bytes())
    run = project.ok("partlake", "run", "-m", MODULE)
    received = log.read_text(errors="replace")[logged:]
    return {"project": project, "server": server, "run": run, "received": received}


def _db_rows(server: Any) -> list[tuple[Any, ...]]:
    with _connect(server) as connection:
        rows = connection.execute(
            "SELECT id, order_date::text, region, amount::float FROM orders"
        ).fetchall()
    return sorted(tuple(r) for r in rows)


@covers(
    "partlake_source(postgres=)",
    "setting partlake/postgres",
    "PostgresTable",
    "PostgresTable(table=)",
    "PostgresTable(port=)",
    "PostgresTable(database=)",
    "PostgresTable(user=)",
    "PostgresTable(password_env=)",
    "PostgresTable(split_column=)",
    "PostgresTable(split_rows=)",
)
def test_a_first_run_reads_every_partition_with_its_predicate(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    lines = outcome_lines(shop["run"])
    assert len(lines) == 6 + 3 + 3 and all(line.startswith("[OK]") for line in lines), shop["run"]
    got = table_rows(project.lake / "warehouse" / "order_lines", COLUMNS)
    assert [(i, str(d), r, a) for i, d, r, a in got] == _db_rows(shop["server"])
    # PostgreSQL received one query per partition, its predicate on the partition columns,
    # and (200 rows > split_rows 150) two range queries on id for each.
    received = "\n".join(
        line for line in shop["received"].splitlines() if "PostgreSQL JDBC Driver:" in line
    )
    for day in ("2024-01-01", "2024-01-02", "2024-01-03"):
        for region in ("eu", "us"):
            where = f"""WHERE "order_date" = '{day}' AND "region" = '{region}'"""
            assert received.count(where) == 2, (where, received[-3000:])
    assert '"id" >= ' in received and '"id" IS NULL' in received
    assert PG_PASSWORD not in shop["run"]
    project.assert_fresh(MODULE)


@covers(
    "PostgresTable(query=)",
    "PostgresTable(host=)",
    "PostgresTable(password=)",
    "PostgresTable(fetch_size=)",
)
def test_a_query_source_is_read_whole_and_its_password_stays_in_the_code(
    shop: dict[str, Any],
) -> None:
    project: UserProject = shop["project"]
    got = table_rows(project.lake / "warehouse" / "big_order_ids", ["id"])
    assert [row[0] for row in got] == list(range(1001, 1201))
    # The query is what the server received; the password is nowhere but the code.
    assert "SELECT id, order_date, amount FROM orders WHERE amount > 1000" in shop["received"]
    shown = project.run("dagster", "definitions", "validate", "-m", MODULE)
    assert PG_PASSWORD not in shown.stdout + shown.stderr


@covers("PostgresTable(read_by=)")
def test_each_change_in_the_database_refreshes_exactly_its_closure(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    server = shop["server"]
    with _connect(server) as connection:
        # An insert into an old partition, an update of one row, a delete of one row, a new
        # partition...
        connection.execute("INSERT INTO orders VALUES (5000, '2024-01-01', 'eu', 1)")
        connection.execute("UPDATE orders SET amount = amount + 1 WHERE id = 2")  # 01-03|eu
        connection.execute("DELETE FROM orders WHERE id = 3")  # 2024-01-01|us
        connection.execute("INSERT INTO orders VALUES (5001, '2024-01-05', 'us', 7)")
        # ... and what changes no row: a same-value update, VACUUM, ANALYZE.
        connection.execute("UPDATE orders SET amount = amount WHERE id = 4")  # 01-02|eu
        connection.execute("VACUUM orders")
        connection.execute("ANALYZE orders")
    plan = project.ok("partlake", "plan", "-m", MODULE)
    assert "order_lines: 4 stale (missing 1, upstream_changed 3)" in plan, plan
    for line in (
        "2024-01-01|eu  upstream_changed  because orders[2024-01-01|eu]",
        "2024-01-01|us  upstream_changed  because orders[2024-01-01|us]",
        "2024-01-03|eu  upstream_changed  because orders[2024-01-03|eu]",
        "2024-01-05|us  missing           because orders[2024-01-05|us]",
    ):
        assert line in plan, plan
    assert "2024-01-02|eu" not in plan, plan
    assert "daily_totals: 3 stale" in plan, plan
    log = Path(server.data) / "server.log"
    logged = len(log.read_bytes())
    run = project.ok("partlake", "run", "-m", MODULE)
    assert len(outcome_lines(run)) == 4 + 3, run
    # ANALYZE found the days' and regions' rows spread over the table: each run's partition
    # (a run per partition of two dimensions) was read in ranges of id between the table's
    # least and greatest id (its index's), at least one range per 150 rows.
    received = [
        line
        for line in log.read_text(errors="replace")[logged:].splitlines()
        # (not Spark's query for the columns, WHERE 1=0)
        if "PostgreSQL JDBC Driver:" in line and "FROM public.orders " in line and "1=0" not in line
    ]
    for day, region, ranges in [("01", "eu", 2), ("01", "us", 2), ("03", "eu", 2), ("05", "us", 1)]:
        wanted = f"""("order_date" = '2024-01-{day}' AND "region" = '{region}')"""
        assert sum(wanted in line for line in received) == ranges, (wanted, received)
    assert len(received) == 7 and all('"id" ' in line for line in received), received
    got = table_rows(project.lake / "warehouse" / "order_lines", COLUMNS)
    assert [(i, str(d), r, a) for i, d, r, a in got] == _db_rows(server)
    totals: dict[str, float] = {}
    for _id, day, _region, amount in _db_rows(server):
        totals[day] = totals.get(day, 0.0) + amount
    got_totals = table_rows(project.lake / "warehouse" / "daily_totals", ["order_date", "amount"])
    assert [(str(d), a) for d, a in got_totals] == sorted(totals.items())
    project.assert_fresh(MODULE)


def test_a_wrong_password_and_a_stopped_server_are_one_line_naming_the_source(
    shop: dict[str, Any],
) -> None:
    project: UserProject = shop["project"]
    wrong = UserProject(project.root / "wrong", {"SHOP_DB_PASSWORD": "not-the-password"})
    wrong.write(MODULE, (project.code / f"{MODULE}.py").read_text())
    plan = wrong.run("partlake", "plan", "-m", MODULE)
    errors = [line for line in plan.stderr.splitlines() if line.startswith("Error:")]
    assert plan.returncode == 1 and len(errors) == 1, plan.stdout + plan.stderr
    assert errors[0].startswith("Error: source orders: PostgreSQL at 127.0.0.1:")
    assert "refused the password of user" in errors[0]
    assert "not-the-password" not in plan.stdout + plan.stderr
