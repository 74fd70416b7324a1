"""The SQL endpoint as a user runs it: a code location with `LakeCatalog` writes a partitioned
table (`partlake run`, which registers it), `partlake sql-server start -m` starts Spark's Thrift
JDBC/ODBC server on the same metastore on 127.0.0.1, and beeline (`partlake sql-server query`)
finds the table by name, reads one partition (the rows delta-rs reads) and lists its columns;
`status` and `stop` (by PID) close it.
"""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import pytest

from dagster_partlake.catalog.client import Metastore
from dagster_partlake.spark.jars import default_jars_dir
from tests.servers import free_port, process_gone
from tests.surface.project import UserProject, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

CODE = """
import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, LakeCatalog, SparkResource

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
regions = dg.StaticPartitionsDefinition(["eu", "us"])
daily_region = dg.MultiPartitionsDefinition({"date": days, "region": regions})


@dg.asset(partitions_def=daily_region, backfill_policy=dg.BackfillPolicy.single_run())
def region_sales(context: dg.AssetExecutionContext, spark: SparkResource) -> DataFrame:
    rows = []
    for key in context.partition_keys:
        date, region = key.split("|")
        rows += [(date, region, i, i * 10 + len(region) + int(date[-1])) for i in range(3)]
    return spark.spark_session.createDataFrame(
        rows, "date string, region string, order_id long, amount long"
    )


spark = SparkResource(master="local[2]")
catalog = LakeCatalog(metastore_uri="{uri}", default_schema="{schema}")
defs = dg.Definitions(
    assets=[region_sales],
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(spark=spark, catalog=catalog),
    },
    executor=dg.in_process_executor,
)
"""
COLUMNS = ["date", "region", "order_id", "amount"]


def _csv(out: str) -> list[list[str]]:
    return [row for row in csv.reader(io.StringIO(out)) if row]


def _listening_on(port: int) -> list[str]:
    """The local addresses (hex, as the kernel lists them) of the TCP sockets listening on
    `port`, IPv4 and IPv6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def test_sql_endpoint_serves_the_lake_by_name(tmp_path: Path, metastore: str) -> None:
    schema = f"sql{uuid.uuid4().hex[:8]}"
    jars = default_jars_dir()
    # The user's shell finds the fetched JARs (Delta's catalog) as the test session does.
    project = UserProject(tmp_path, extra_env={"PARTLAKE_JARS_DIR": str(jars)} if jars else {})
    module = project.write("sales_sql", CODE, uri=metastore, schema=schema)
    project.ok("partlake", "run", "-m", module)
    # The IO manager registered the table on its commit.
    with Metastore(metastore) as client:
        entry = client.entry(f"{schema}.region_sales")
    assert entry is not None and entry.is_delta, entry

    port = free_port()
    try:
        started = project.ok("partlake", "sql-server", "start", "-m", module, "--port", str(port))
        assert f"jdbc:hive2://127.0.0.1:{port}/default" in started, started
        # Listening on loopback only (as `ss -ltn` shows: 127.0.0.1, or ::ffff:127.0.0.1).
        bound = _listening_on(port)
        assert bound and all(addr.endswith("0100007F") for addr in bound), bound

        def query(sql: str, *flags: str) -> list[list[str]]:
            return _csv(project.ok("partlake", "sql-server", "query", "--csv", *flags, sql))

        # One beeline call (each starts a JVM): the schema's tables, then the table's columns as
        # DESCRIBE shows them and as the metastore keeps them for JDBC clients (SHOW COLUMNS).
        table = f"{schema}.region_sales"
        rows = query(f"SHOW TABLES IN {schema}; DESCRIBE {table}; SHOW COLUMNS IN {table}")
        described_at = rows.index(["col_name", "data_type", "comment"])
        columns_at = rows.index(["col_name"])
        tables = rows[1:described_at]
        assert rows[0] == ["namespace", "tableName", "isTemporary"], rows
        assert [schema, "region_sales", "false"] in tables, rows
        described = {row[0]: row[1] for row in rows[described_at + 1 : described_at + 5]}
        assert described == {
            "date": "string",
            "region": "string",
            "order_id": "bigint",
            "amount": "bigint",
        }, rows
        assert sorted(row[0] for row in rows[columns_at + 1 :]) == sorted(COLUMNS), rows

        # One partition; with -m, the code location's schema is the current one.
        got = query(
            f"SELECT {', '.join(COLUMNS)} FROM region_sales "
            "WHERE date = '2024-01-02' AND region = 'us' ORDER BY order_id",
            "-m",
            module,
        )
        expected = [
            [str(v) for v in row]
            for row in table_rows(project.lake / "warehouse" / "region_sales", COLUMNS)
            if row[:2] == ("2024-01-02", "us")
        ]
        assert got[0] == COLUMNS and got[1:] == expected and len(expected) == 3, got

        status = project.ok("partlake", "sql-server", "status")
        assert "running" in status and str(port) in status, status
        pid = int((project.lake / "catalog" / "sql-server.pid").read_text().split()[0])
        project.ok("partlake", "sql-server", "stop")
        assert process_gone(pid)
        stopped = project.run("partlake", "sql-server", "status")
        assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    finally:
        project.run("partlake", "sql-server", "stop")
