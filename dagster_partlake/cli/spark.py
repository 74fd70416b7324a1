"""`partlake spark start|stop|status`: a local Spark Connect server shared by every run."""

from __future__ import annotations

import sys

import click

from dagster_partlake.cli.common import boundary
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo


@main.group("spark")
def spark_group() -> None:
    """A local Spark Connect server shared by every run (127.0.0.1 only)."""


def _root(root: str | None) -> str:
    from dagster_partlake.layout import resolve_root

    return resolve_root(root)


@spark_group.command("start")
@click.option("--port", type=int, default=15002, show_default=True)
@click.option("--master", default="local[*]", show_default=True, help="Where the server runs jobs.")
@click.option("--driver-memory", default="2g", show_default=True)
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@boundary
def spark_start(port: int, master: str, driver_memory: str, root: str | None) -> None:
    """Start a Spark Connect server from the installed pyspark."""
    from dagster_partlake.spark.server import start_connect

    info = start_connect(_root(root), port=port, master=master, driver_memory=driver_memory)
    echo(f"Spark Connect server running: pid {info.pid}, {info.url} (log {info.log})")
    echo(f'Use it with SparkResource(remote="{info.url}") or PARTLAKE_SPARK_REMOTE={info.url}.')


@spark_group.command("stop")
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@boundary
def spark_stop(root: str | None) -> None:
    """Stop the Spark Connect server started by `partlake spark start`."""
    from dagster_partlake.spark.server import stop

    echo("Spark Connect server stopped." if stop(_root(root)) else "No server was running.")


@spark_group.command("status")
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@boundary
def spark_status(root: str | None) -> None:
    """Say whether the Spark Connect server is running."""
    from dagster_partlake.spark.server import status

    info = status(_root(root))
    if info.running:
        echo(f"running: pid {info.pid}, {info.url}")
    else:
        echo("not running")
        sys.exit(3)
