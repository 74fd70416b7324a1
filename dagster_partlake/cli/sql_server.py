"""`partlake sql-server start|stop|status|query`: Spark's Thrift JDBC/ODBC server on the lake's
metastore (`dagster_partlake.catalog.sql_server`)."""

from __future__ import annotations

from dagster_partlake.cli.main import main


@main.group("sql-server")
def sql_server_group() -> None:
    """A SQL endpoint (Spark's Thrift JDBC/ODBC server) on the lake's tables by name."""
