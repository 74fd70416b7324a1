"""`partlake`: show what is out of date and why (`plan`), refresh it through Dagster (`run`),
and maintain the tables (`maintain compact|vacuum|checkpoint`).

One error boundary: a PartlakeError prints `Error: ...` and exits 1 (`--debug` for a traceback).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
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
@click.option("--json", "as_json", is_flag=True, help="Print the stale partitions as a JSON list.")
@click.option(
    "--runs-json", "runs_json", is_flag=True, help="Print the runs the plan becomes as JSON."
)
@_boundary
def plan_command(module: str, select: str | None, as_json: bool, runs_json: bool) -> None:
    """Show which asset partitions are stale and why, and the runs that would refresh them,
    without running anything."""
    from dagster_partlake.cli.render import plan_json, plan_text, runs_json_text

    if as_json and runs_json:
        raise click.UsageError("--json and --runs-json print different documents; choose one.")
    session, result, runs = _plan(module, select, need_instance=False)
    failures = _gate_failures(session.graph, result.plan)
    if as_json:
        click.echo(plan_json(result.plan, failures))
    elif runs_json:
        click.echo(runs_json_text(runs))
    else:
        click.echo(plan_text(runs, seconds=result.seconds, failures=failures))
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
    """Run every stale asset partition (and nothing else) as Dagster runs: exactly the runs
    `partlake plan` shows."""
    _require_dagster_home()
    session, result, runs = _plan(module, select, need_instance=True)
    graph = session.graph
    if not result.plan:
        _skip_final_collection()
        if not result.plan.unreadable:
            click.echo("Everything is fresh: nothing to run.")
        _fail_on_unreadable(result.plan)
        return
    # Imported only when there is something to run: a no-op run needs none of them.
    from dagster_partlake.cli.render import outcome_line
    from dagster_partlake.orchestration.pools import parallelism
    from dagster_partlake.orchestration.runner import execute_runs

    instance = _instance(True)
    stale_assets = sorted({item.asset for item in result.plan.items})
    workers = parallelism(instance, graph.pools(stale_assets), max_parallel)
    click.echo(
        f"Running {len(result.plan.items)} stale asset partition(s) in {len(runs.runs)} run(s)..."
    )
    click.echo(f"Executing {workers.describe()}.")
    outcomes = execute_runs(
        session,
        instance,
        runs,
        max_parallel=workers.runs,
        on_outcome=lambda o: click.echo(
            outcome_line(o.status, o.asset, o.partition, o.reason, o.rows, o.ms, o.error, o.metrics)
        ),
    )
    failed = sum(1 for o in outcomes if o.status == "failed")
    skipped = sum(1 for o in outcomes if o.status == "skipped")
    unchanged = sum(1 for o in outcomes if o.status == "unchanged")
    refreshed = len(outcomes) - failed - skipped - unchanged
    summary = f"{refreshed} asset partition(s) refreshed, {failed} failed"
    if skipped:
        summary += f", {skipped} skipped (a run they wait for failed)"
    if unchanged:
        summary += f", {unchanged} not run (their inputs came out unchanged)"
    click.echo(summary + ".")
    _fail_on_unreadable(result.plan)
    if failed or skipped:
        sys.exit(1)


def _plan(module: str, select: str | None, *, need_instance: bool) -> tuple[Any, Any, Any]:
    """Load the code location, plan it, and turn the plan into runs (no runs blocked): the
    session, the plan and the runs."""
    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.delta.state import StateCache, default_persist_dir
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession

    session = PlanningSession(
        LakeGraph(load_definitions(module)), StateCache(default_persist_dir())
    )
    # Opening the instance costs about a second of imports: without dynamic partitions a plan
    # (and a no-op `partlake run`) does without it.
    store = _instance(need_instance) if session.graph.has_dynamic_partitions else None
    result = session.plan(select=_selection(select), dynamic_partitions_store=store)
    return session, result, session.runs(result)


@main.command("history")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.argument("asset")
@click.option("--partition", help="Partition key (default: the whole table).")
@click.option("--json", "as_json", is_flag=True, help="Print the commits as a JSON list.")
@_boundary
def history_command(module: str, asset: str, partition: str | None, as_json: bool) -> None:
    """List the commits that changed an asset's table (or one partition of it), newest first:
    what the Delta log still has (checkpointing may have removed older commits)."""
    import json

    from dagster_partlake.delta.history import table_history

    target = _history_target(module, asset, partition)
    entries = table_history(
        target.path,
        selection=target.selection,
        partition_id=partition,
        table_name=target.name,
    )
    if as_json:
        click.echo(json.dumps([e.to_json() for e in entries], indent=2))
        return
    what = f"{target.name} partition {partition}" if partition else target.name
    click.echo(f"{what}: {len(entries)} commit(s) that changed its data, newest first")
    if not entries:
        return
    header = ("version", "time", "operation", "run id", "code version", "rows", "upstream versions")
    rows = [
        (
            str(e.version),
            e.timestamp,
            e.operation,
            e.run_id or "-",
            e.code_version or "-",
            "-" if e.rows is None else str(e.rows),
            ", ".join(f"{k}={v}" for k, v in sorted(e.upstream_versions.items())) or "-",
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [f"{c:<{w}}" for c, w in zip(row, widths, strict=False)] + [row[-1]]
        click.echo("  ".join(cells).rstrip())


@main.command("restore")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.argument("asset")
@click.option(
    "--version", "version", type=click.IntRange(min=0), required=True, help="Version to restore."
)
@click.option("--partition", help="Partition key to restore (default: every partition).")
@_boundary
def restore_command(module: str, asset: str, version: int, partition: str | None) -> None:
    """Bring an asset's table, or one partition of it, back to an earlier version in one commit.
    The restored partitions show as out_of_band in `partlake plan`, their dependents as
    upstream_changed."""
    from dagster_partlake.delta.history import restore_partitions

    target = _history_target(module, asset, partition)
    result = restore_partitions(
        target.path,
        version,
        selection=target.selection,
        partition_id=target.partition_id,
        table_name=target.name,
    )
    what = f"{target.name} partition {partition}" if partition else target.name
    if result.version is None:
        click.echo(f"{what} is already as at version {version}: nothing committed.")
        return
    click.echo(
        f"Restored {what} to version {version} in version {result.version}: "
        f"{len(result.partition_ids)} partition(s) ({', '.join(result.partition_ids[:5])}"
        f"{' ...' if len(result.partition_ids) > 5 else ''}), {result.files_added} file(s) "
        f"added, {result.files_removed} removed. `partlake plan` shows what to recompute."
    )


@dataclass(frozen=True)
class _HistoryTarget:
    name: str
    path: str
    selection: Any  # PartitionSelection
    partition_id: Callable[[Any], str] | None  # partition values -> partition key


def _history_target(module: str, asset: str, partition: str | None) -> _HistoryTarget:
    """The table of `asset` and the table partitions of `partition` (all: None)."""
    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.delta.reader import open_table
    from dagster_partlake.delta.record import WHOLE_TABLE_ID
    from dagster_partlake.partitions.keys import KeyCodec, selection_for_keys, validate_keys
    from dagster_partlake.planning.graph import LakeGraph

    graph = LakeGraph(load_definitions(module))
    found = graph.assets.get(asset)
    if found is None:
        raise PartlakeError(
            f"unknown asset {asset}; the code location has {', '.join(sorted(graph.assets))}."
        )
    if found.is_folder:
        raise PartlakeError(
            f"asset {asset} is a folder of files without a Delta log, so it has no history."
        )
    if partition is not None:
        store = _instance(False) if graph.has_dynamic_partitions else None
        validate_keys(
            found.partitions_def, [partition], asset_name=asset, dynamic_partitions_store=store
        )
        if found.decoupled:
            raise PartlakeError(
                f"the table of asset {asset} (kind {found.kind}) is not partitioned by its Dagster "
                "partitions, so its partitions have no history of their own; run without "
                "--partition."
            )
    snapshot = open_table(found.path, table_name=asset)
    if not found.columns or found.decoupled:
        return _HistoryTarget(asset, found.path, None, lambda _values: WHOLE_TABLE_ID)
    codec = KeyCodec(found.columns, snapshot.column_types)
    columns = [c.column for c in found.columns]

    def partition_id(values: Any) -> str:
        key = codec.key([values.get(c) for c in columns])
        return key or "/".join(f"{c}={values.get(c)}" for c in columns)

    selection = (
        selection_for_keys(found.columns, [partition], snapshot.column_types, asset_name=asset)
        if partition is not None
        else None
    )
    return _HistoryTarget(asset, found.path, selection, partition_id)


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
@_boundary
def spark_start(port: int, master: str, driver_memory: str, root: str | None) -> None:
    """Start a Spark Connect server from the installed pyspark."""
    from dagster_partlake.spark.server import start_connect

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
    from dagster_partlake.spark.server import stop

    click.echo("Spark Connect server stopped." if stop(_root(root)) else "No server was running.")


@spark_group.command("status")
@click.option("--root", help="Lakehouse root for the PID and log files (default $PARTLAKE_HOME).")
@_boundary
def spark_status(root: str | None) -> None:
    """Say whether the Spark Connect server is running."""
    from dagster_partlake.spark.server import status

    info = status(_root(root))
    if info.running:
        click.echo(f"running: pid {info.pid}, {info.url}")
    else:
        click.echo("not running")
        sys.exit(3)


def _gate_failures(graph: Any, plan: Any) -> dict[Any, Any]:
    """The quality gates the last runs of stale partitions failed, where an instance is set
    and a stale asset has gates (a fresh plan never opens the instance)."""
    if not any(graph.assets[i.asset].gates for i in plan.items):
        return {}
    instance = _instance(False)
    if instance is None:
        return {}
    from dagster_partlake.gates.failures import last_gate_failures

    gates = {n: (a.key, a.gates) for n, a in graph.assets.items() if a.gates}
    return last_gate_failures(instance, gates, [(i.asset, i.partition) for i in plan.items])


# --- partlake maintain: table maintenance (dagster_partlake.delta.maintenance) -----------------


@main.group("maintain")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.option(
    "--select", help="Comma-separated asset names to maintain (default: every managed one)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per table instead.")
@click.pass_context
def maintain_group(ctx: click.Context, module: str, select: str | None, as_json: bool) -> None:
    """Maintain the Delta tables of a code location's managed (non-source) assets. No partition
    looks changed afterwards: nothing becomes stale."""
    ctx.obj = {"module": module, "select": _selection(select), "json": as_json}


@maintain_group.command("compact")
@click.option(
    "--target-file-mb",
    type=click.FloatRange(min=0, min_open=True),
    default=128,
    show_default=True,
    help="Files smaller than this are rewritten into files of about this size.",
)
@click.pass_context
@_boundary
def maintain_compact(ctx: click.Context, target_file_mb: float) -> None:
    """Rewrite each partition's small files into fewer files (one Spark job and one commit per
    table; rows and lastUpdated unchanged)."""
    from dagster_partlake.maintenance.operations import MaintainOptions

    _maintain(ctx, "compact", MaintainOptions(target_file_bytes=int(target_file_mb * 1024 * 1024)))


@maintain_group.command("vacuum")
@click.option(
    "--retention-hours",
    type=click.IntRange(min=0),
    default=168,
    show_default=True,
    help="Keep files removed or written within this many hours.",
)
@click.option("--force", is_flag=True, help="Allow a retention below 1 hour.")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.pass_context
@_boundary
def maintain_vacuum(ctx: click.Context, retention_hours: int, force: bool, dry_run: bool) -> None:
    """Delete files no table version references (removed or never committed) and abandoned
    staging folders, older than the retention."""
    from dagster_partlake.maintenance.operations import MaintainOptions

    options = MaintainOptions(retention_hours=retention_hours, force=force, dry_run=dry_run)
    _maintain(ctx, "vacuum", options)


@maintain_group.command("checkpoint")
@click.option(
    "--keep-log-hours",
    type=click.FloatRange(min=0),
    default=720,
    show_default=True,
    help="Keep log files modified within this many hours (delta.logRetentionDuration).",
)
@click.pass_context
@_boundary
def maintain_checkpoint(ctx: click.Context, keep_log_hours: float) -> None:
    """Write a checkpoint and delete old log files, keeping the commits whose partlake records
    are still read."""
    from dagster_partlake.maintenance.operations import MaintainOptions

    _maintain(ctx, "checkpoint", MaintainOptions(keep_log_hours=keep_log_hours))


def _maintain(ctx: click.Context, operation: Any, options: Any) -> None:
    """Run one operation on the selected tables, one line (or JSON object) per table; exit 1
    when a table failed (the others still ran)."""
    import json

    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.maintenance.operations import maintain_tables, managed_tables
    from dagster_partlake.planning.graph import LakeGraph

    options.check(operation)  # refuse before loading the code location
    graph = LakeGraph(load_definitions(ctx.obj["module"]))
    tables = managed_tables(graph, ctx.obj["select"])
    spark, stop = _maintenance_spark(graph)
    try:
        outcomes = maintain_tables(tables, operation, options, spark)
    finally:
        stop()
    for outcome in outcomes:
        click.echo(json.dumps(outcome.to_json()) if ctx.obj["json"] else outcome.text)
    if any(o.status == "failed" for o in outcomes):
        sys.exit(1)


def _maintenance_spark(graph: Any) -> tuple[Callable[[], Any], Callable[[], None]]:
    """A lazily started session from the code location's SparkResource (default: local), and
    a function stopping it if this command started it."""
    from dagster_partlake.spark.resource import SparkResource, running_session

    resources = (graph.defs.resources if graph.defs else None) or {}
    resource = next((r for r in resources.values() if isinstance(r, SparkResource)), None)
    resource = resource or SparkResource()
    started: list[Any] = []

    def session() -> Any:
        if not started:
            owned = running_session() is None
            started.append((resource.spark_session, owned))
        return started[0][0]

    def stop() -> None:
        if started and started[0][1]:
            started[0][0].stop()

    return session, stop


# --- end of partlake maintain ------------------------------------------------------------------


def _fail_on_unreadable(plan: Any) -> None:
    """Print every unreadable table's error (the rest of the plan was shown or run) and exit 1."""
    if not plan.unreadable:
        return
    for table in plan.unreadable:
        click.echo(f"Error: {table.message}", err=True)
    sys.exit(1)


def _skip_final_collection() -> None:
    """At exit, keep the interpreter's last garbage collection away from the objects made so far.

    Walking the object graph of Dagster and the code location at shutdown took about 0.25 s of a
    0.9 s no-op `partlake run`. A process that started no Spark session and no run (its state
    cache files are already in place) has nothing whose release needs a collection; the OS
    reclaims the memory. Registered with atexit, so a caller that runs `main` inside its own
    process is affected only when that process exits.
    """
    import atexit
    import gc

    atexit.register(gc.freeze)


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
