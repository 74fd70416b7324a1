"""`partlake`: show what is out of date and why (`plan`), and refresh it through Dagster (`run`).

One error boundary: a PartlakeError prints `Error: ...` and exits 1 (`--debug` for a traceback).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import click

from dagster_partlake.errors import PartlakeError


def _boundary(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def wrapper(*args: Any, debug: bool = False, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except PartlakeError as error:
            if debug:
                traceback.print_exc()
            click.echo(f"Error: {error}", err=True)
            sys.exit(1)

    return click.option("--debug", is_flag=True, help="Print the full traceback on errors.")(
        wrapper
    )


def _selection(select: str | None) -> list[str] | None:
    return [s.strip() for s in select.split(",") if s.strip()] if select else None


@click.group()
def main() -> None:
    """Partition-aware incremental lakehouse on Dagster, Spark and Delta Lake."""


@main.command("plan")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.option("--select", help="Comma-separated asset names to show (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as a JSON list.")
@_boundary
def plan_command(module: str, select: str | None, as_json: bool) -> None:
    """Show which asset partitions are stale and why, without running anything."""
    from dagster_partlake.delta.state import StateCache, default_persist_dir
    from dagster_partlake.graph import LakeGraph
    from dagster_partlake.lake import load_definitions, make_plan
    from dagster_partlake.render import plan_json, plan_text

    graph = LakeGraph(load_definitions(module))
    store = _instance(False) if graph.has_dynamic_partitions else None
    result = make_plan(
        graph,
        StateCache(default_persist_dir()),
        select=_selection(select),
        dynamic_partitions_store=store,
    )
    click.echo(
        plan_json(result.plan) if as_json else plan_text(result.plan, seconds=result.seconds)
    )
    _fail_on_unreadable(result.plan)


@main.command("run")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.option("--select", help="Comma-separated asset names to refresh (default: all).")
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1),
    default=None,
    help=(
        "Runs executed at the same time (default: the limit of the assets' Dagster pool on the "
        "instance, else 1). Every step also claims a pool slot, shared with all other runs."
    ),
)
@_boundary
def run_command(module: str, select: str | None, max_parallel: int | None) -> None:
    """Run every stale asset partition (and nothing else) as Dagster runs."""
    from dagster_partlake.delta.state import StateCache, default_persist_dir
    from dagster_partlake.graph import LakeGraph
    from dagster_partlake.lake import load_definitions, make_plan
    from dagster_partlake.parallel import parallelism
    from dagster_partlake.render import outcome_line
    from dagster_partlake.runner import run_plan, selected_pools

    _require_dagster_home()
    graph = LakeGraph(load_definitions(module))
    # Opening the instance costs about a second of imports: a no-op run does without it.
    instance = _instance(True) if graph.has_dynamic_partitions else None
    selection = _selection(select)
    cache = StateCache(default_persist_dir())
    first = make_plan(graph, cache, select=selection, dynamic_partitions_store=instance)
    if not first.plan:
        if not first.plan.unreadable:
            click.echo("Everything is fresh: nothing to run.")
        _fail_on_unreadable(first.plan)
        return
    instance = instance or _instance(True)
    stale_assets = sorted({item.asset for item in first.plan.items})
    workers = parallelism(instance, selected_pools(graph, stale_assets), max_parallel)
    click.echo(f"Running {len(first.plan.items)} stale asset partition(s)...")
    click.echo(f"Executing {workers.describe()}.")
    outcomes = run_plan(
        graph,
        instance,
        select=selection,
        max_parallel=workers.runs,
        cache=cache,
        on_outcome=lambda o: click.echo(
            outcome_line(o.ok, o.asset, o.partition, o.reason, o.rows, o.ms, o.error)
        ),
    )
    failed = [o for o in outcomes if not o.ok]
    click.echo(f"{len(outcomes) - len(failed)} asset partition(s) refreshed, {len(failed)} failed.")
    # The tables that were unreadable when the runs ended (a repair meanwhile clears them).
    _fail_on_unreadable(
        make_plan(graph, cache, select=selection, dynamic_partitions_store=instance).plan
    )
    if failed:
        sys.exit(1)


@main.group("spark")
def spark_group() -> None:
    """A local Spark Connect server shared by every run (127.0.0.1 only)."""


def _root(root: str | None) -> str:
    from dagster_partlake.io_manager import default_root

    return root or default_root()


@spark_group.command("start")
@click.option("--port", type=int, default=15002, show_default=True)
@click.option("--master", default="local[*]", show_default=True, help="Where the server runs jobs.")
@click.option("--driver-memory", default="2g", show_default=True)
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@_boundary
def spark_start(port: int, master: str, driver_memory: str, root: str | None) -> None:
    """Start a Spark Connect server from the installed pyspark."""
    from dagster_partlake.spark_server import start_connect

    info = start_connect(_root(root), port=port, master=master, driver_memory=driver_memory)
    click.echo(f"Spark Connect server running: pid {info.pid}, {info.url} (log {info.log})")
    click.echo(
        f'Use it with SparkResource(remote="{info.url}") or PARTLAKE_SPARK_REMOTE={info.url}.'
    )


@spark_group.command("stop")
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@_boundary
def spark_stop(root: str | None) -> None:
    """Stop the Spark Connect server started by `partlake spark start`."""
    from dagster_partlake.spark_server import stop

    click.echo("Spark Connect server stopped." if stop(_root(root)) else "No server was running.")


@spark_group.command("status")
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@_boundary
def spark_status(root: str | None) -> None:
    """Say whether the Spark Connect server is running."""
    from dagster_partlake.spark_server import status

    info = status(_root(root))
    if info.running:
        click.echo(f"running: pid {info.pid}, {info.url}")
    else:
        click.echo("not running")
        sys.exit(3)


def _fail_on_unreadable(plan: Any) -> None:
    """Print every unreadable table's error (the rest of the plan was shown or run) and exit 1."""
    if not plan.unreadable:
        return
    for table in plan.unreadable:
        click.echo(f"Error: {table.message}", err=True)
    sys.exit(1)


def _require_dagster_home() -> None:
    if not os.environ.get("DAGSTER_HOME"):
        raise PartlakeError(
            "DAGSTER_HOME is not set, so runs would not be recorded anywhere; set it to the "
            "Dagster instance directory (make demo uses .partlake/dagster)."
        )


def _instance(required: bool) -> Any:
    from dagster import DagsterInstance

    if os.environ.get("DAGSTER_HOME"):
        return DagsterInstance.get()
    if required:
        _require_dagster_home()
    return None


if __name__ == "__main__":
    main()
