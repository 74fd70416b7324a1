"""`partlake sql-server start|stop|status|query`: Spark's Thrift JDBC/ODBC server on the lake's
metastore (`dagster_partlake.catalog.sql_server`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from dagster_partlake.cli.common import boundary
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo

if TYPE_CHECKING:
    from dagster_partlake.catalog.config import LakeCatalog


@main.group("sql-server")
def sql_server_group() -> None:
    """A SQL endpoint (Spark's Thrift JDBC/ODBC server) on the lake's tables by name."""


def _home() -> str:
    from dagster_partlake.layout import resolve_root

    return resolve_root(None)


def _catalog(module: str | None) -> tuple[LakeCatalog, dict[str, str]]:
    """The catalog and the lake's storage options of `module`'s code location; without one,
    partlake's own metastore of $PARTLAKE_HOME and no options (the AWS environment applies)."""
    from dagster_partlake.catalog.config import LakeCatalog
    from dagster_partlake.cli.catalog import location_catalog

    if module is None:
        return LakeCatalog(), {}
    found = location_catalog(module)
    return found.catalog, dict(found.graph.lake.storage_options)


@sql_server_group.command("start")
@click.option(
    "-m",
    "--module",
    "module",
    help="Python module with the Definitions (its IO manager's catalog and the lake's storage).",
)
@click.option("--port", type=int, default=10000, show_default=True, help="Port on 127.0.0.1.")
@click.option("--driver-memory", default="1g", show_default=True)
@boundary
def sql_server_start(module: str | None, port: int, driver_memory: str) -> None:
    """Start the SQL endpoint on the catalog's metastore (partlake's own is started first when
    it is the catalog and does not run)."""
    from dagster_partlake.catalog.sql_server import start_sql_server

    catalog, options = _catalog(module)
    info = start_sql_server(
        catalog, port=port, storage_options=options, driver_memory=driver_memory, say=echo
    )
    echo(f"SQL endpoint running: pid {info.pid}, {info.url}/default (log {info.log})")
    echo(f'Query it with `partlake sql-server query "SHOW TABLES IN {catalog.default_schema}"`.')


@sql_server_group.command("stop")
@boundary
def sql_server_stop() -> None:
    """Stop the SQL endpoint of $PARTLAKE_HOME, by its PID."""
    from dagster_partlake.catalog.sql_server import stop_sql_server

    stopped = stop_sql_server(_home())
    echo("SQL endpoint stopped." if stopped else "No SQL endpoint was running.")


@sql_server_group.command("status")
@boundary
def sql_server_status() -> None:
    """Say whether the SQL endpoint of $PARTLAKE_HOME runs, and where. Exits 3 when it does
    not."""
    from dagster_partlake.catalog.sql_server import sql_server_status as status

    info = status(_home())
    if info.running:
        echo(f"SQL endpoint: running, pid {info.pid}, {info.url}/default (log {info.log})")
        return
    echo("SQL endpoint: not running; `partlake sql-server start` starts it")
    sys.exit(3)


@sql_server_group.command("query")
@click.argument("sql")
@click.option(
    "-m",
    "--module",
    "module",
    help="Python module with the Definitions: its catalog's default schema is the current one.",
)
@click.option("--port", type=int, help="The endpoint's port (default: the running one's).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV with a header line instead of a table.")
@boundary
def sql_server_query(sql: str, module: str | None, port: int | None, as_csv: bool) -> None:
    """Run SQL on the running SQL endpoint with beeline (from pyspark's JARs) and print the
    result; unqualified names are in `default`, or with -m in the code location's default
    schema."""
    from dagster_partlake.catalog.sql_server import run_query

    schema = _catalog(module)[0].default_schema if module else "default"
    out = run_query(_home(), sql, port=port, schema=schema, output="csv2" if as_csv else "table")
    for line in out.splitlines():
        echo(line)
