"""`partlake spark start|stop|status`: the warm local Spark every run attaches to, and a local
Spark Connect server shared by every run."""

from __future__ import annotations

import sys

import click

from dagster_partlake.cli.common import boundary
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo


@main.group("spark")
def spark_group() -> None:
    """The warm local Spark runs attach to, and a local Spark Connect server (127.0.0.1 only)."""


def _root(root: str | None) -> str:
    from dagster_partlake.layout import resolve_root

    return resolve_root(root)


@spark_group.command("start")
@click.option("--port", type=int, default=15002, show_default=True)
@click.option("--master", default="local[*]", show_default=True, help="Where the server runs jobs.")
@click.option("--driver-memory", default="2g", show_default=True)
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@click.option(
    "-m",
    "--module",
    "module",
    help=(
        "Python module with the Definitions: the server reads its catalog's tables by name "
        "(its IO manager's LakeCatalog; partlake's own metastore is started if it is not running)."
    ),
)
@boundary
def spark_start(
    port: int, master: str, driver_memory: str, root: str | None, module: str | None
) -> None:
    """Start a Spark Connect server from the installed pyspark."""
    from dagster_partlake.spark.server import start_connect

    conf: dict[str, str] = {}
    metastore = None
    if module:
        from dagster_partlake.cli.catalog import location_catalog

        catalog = location_catalog(module).catalog
        # Its clients cannot set the catalog (a static setting): the server starts with it,
        # and with a metastore that answers.
        catalog.connect(start=True, say=echo).close()
        conf, metastore = catalog.spark_conf(), catalog.uri
    info = start_connect(
        _root(root), port=port, master=master, driver_memory=driver_memory, spark_conf=conf
    )
    echo(f"Spark Connect server running: pid {info.pid}, {info.url} (log {info.log})")
    if metastore:
        echo(f"It reads the tables of {module} by name (the metastore {metastore}).")
    echo(f'Use it with SparkResource(remote="{info.url}") or PARTLAKE_SPARK_REMOTE={info.url}.')


@spark_group.command("stop")
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@click.option("--warm", "only_warm", is_flag=True, help="Stop only the warm Spark.")
@click.option("--connect", "only_connect", is_flag=True, help="Stop only the Connect server.")
@boundary
def spark_stop(root: str | None, only_warm: bool, only_connect: bool) -> None:
    """Stop the warm Spark (every run attached to it fails) and the Spark Connect server
    started by `partlake spark start`."""
    from dagster_partlake.spark import warm
    from dagster_partlake.spark.server import stop

    if not only_connect:
        stopped = warm.stop_all()
        for info in stopped:
            echo(f"warm Spark stopped: pid {info.pid} ({info.master}, {info.folder})")
        if not stopped:
            echo("No warm Spark was running.")
    if not only_warm:
        echo("Spark Connect server stopped." if stop(_root(root)) else "No server was running.")


@spark_group.command("status")
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@boundary
def spark_status(root: str | None) -> None:
    """Say whether the warm Spark and the Spark Connect server are running: for the warm
    Spark, its processes, how long it has been idle and stays so, its memory and its log.
    Exits 3 when neither runs."""
    from dagster_partlake.spark import warm
    from dagster_partlake.spark.server import status

    running = [h for h in warm.hosts() if h.running]
    for host in running:
        echo(f"warm Spark: {_describe(host)}")
    if not running:
        echo(f"warm Spark: not running (started by the next local run; files in {warm.warm_dir()})")
    info = status(_root(root))
    if info.running:
        echo(f"Spark Connect server: running: pid {info.pid}, {info.url}")
    else:
        echo("Spark Connect server: not running")
    if not running and not info.running:
        sys.exit(3)


def _describe(host: object) -> str:
    import time

    from dagster_partlake.spark.warm import HostInfo

    assert isinstance(host, HostInfo)
    clients = len(host.clients())
    memory = host.memory_bytes()
    idle = host.idle_for()
    parts = [
        f"running, pid {host.pid} (JVM pid {host.jvm_pid}), {host.master}, app {host.app_name}",
        f"up {_span(time.time() - host.started)}",
        f"{clients} process(es) attached",
        f"idle {_span(idle)} of {_span(host.idle_seconds)} before it stops",
        f"memory {memory / 2**20:,.0f} MiB" if memory is not None else "memory unknown",
        f"log {host.log}",
    ]
    return ", ".join(parts)


def _span(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
