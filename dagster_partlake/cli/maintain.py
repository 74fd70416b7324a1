"""`partlake maintain compact|vacuum|checkpoint`: table maintenance of a code location's
managed tables (`dagster_partlake.maintenance`); nothing becomes stale.

`partlake maintain --retention -m MODULE [--apply]`: the partitions the retention rules retire
(`partlake/retention`), listed with their rows (a dry run, the default), or removed (`--apply`:
one commit per table, after the archive copy where the rule names an archive), and the archive
compaction of the rules' `compact_after` (`maintenance.retention`).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from dagster_partlake.cli.common import (
    boundary,
    code_location_spark,
    dagster_instance,
    selection,
)
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo

if TYPE_CHECKING:
    from dagster_partlake.maintenance.operations import MaintainOptions, Operation


@main.group("maintain", invoke_without_command=True)
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.option(
    "--select", help="Comma-separated asset names to maintain (default: every managed one)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per table instead.")
@click.option(
    "--retention",
    is_flag=True,
    help="Retire what the partlake/retention rules retire: list the partitions and rows it "
    "would remove (a dry run unless --apply).",
)
@click.option(
    "--apply",
    "apply_retention",
    is_flag=True,
    help="With --retention: remove the retired partitions (one commit per table, after the "
    "archive copy) and compact what compact_after says.",
)
@click.pass_context
def maintain_group(
    ctx: click.Context,
    module: str,
    select: str | None,
    as_json: bool,
    retention: bool,
    apply_retention: bool,
) -> None:
    """Maintain the Delta tables of a code location's managed (non-source) assets. No partition
    looks changed afterwards: nothing becomes stale. With --retention, retire the partitions the
    retention rules retire (rows gone, never rebuilt)."""
    ctx.obj = {"module": module, "select": selection(select), "json": as_json}
    if apply_retention and not retention:
        raise click.UsageError("--apply goes with --retention.")
    if retention:
        if ctx.invoked_subcommand is not None:
            raise click.UsageError(
                f"--retention is an operation of its own; run {ctx.invoked_subcommand} apart."
            )
        _retain(ctx, dry_run=not apply_retention)
    elif ctx.invoked_subcommand is None:
        raise click.UsageError("name an operation: compact, vacuum, checkpoint, or --retention.")


@boundary
def _retain(ctx: click.Context, *, dry_run: bool) -> None:
    """The retention operation (`maintenance.retention.retain_tables`), one line or JSON
    object per table; exit 1 when a table failed."""
    import json

    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.maintenance.retention import retain_tables
    from dagster_partlake.planning.graph import LakeGraph

    graph = LakeGraph(load_definitions(ctx.obj["module"]))
    spark, stop = code_location_spark(graph)
    try:
        outcomes = retain_tables(graph, ctx.obj["select"], dry_run=dry_run, spark=spark)
    finally:
        stop()
    if not outcomes:
        echo("No managed asset has a retention rule (partlake/retention): nothing to retire.")
    for outcome in outcomes:
        echo(json.dumps(outcome.to_json()) if ctx.obj["json"] else outcome.text)
    instance = dagster_instance(False) if not dry_run else None
    if instance is not None:  # the UI's word for the removed partitions (`record_retired`)
        from dagster_partlake.maintenance.retention import record_retired

        record_retired(instance, graph, outcomes)
    if any(o.status == "failed" for o in outcomes):
        sys.exit(1)


@maintain_group.command("compact")
@click.option(
    "--target-file-mb",
    type=click.FloatRange(min=0, min_open=True),
    default=128,
    show_default=True,
    help="Files smaller than this are rewritten into files of about this size.",
)
@click.pass_context
@boundary
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
@boundary
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
@boundary
def maintain_checkpoint(ctx: click.Context, keep_log_hours: float) -> None:
    """Write a checkpoint and delete old log files, keeping the commits whose partlake records
    are still read."""
    from dagster_partlake.maintenance.operations import MaintainOptions

    _maintain(ctx, "checkpoint", MaintainOptions(keep_log_hours=keep_log_hours))


def _maintain(ctx: click.Context, operation: Operation, options: MaintainOptions) -> None:
    """Run one operation on the selected tables, one line (or JSON object) per table; exit 1
    when a table failed (the others still ran)."""
    import json

    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.maintenance.operations import maintain_tables, managed_tables
    from dagster_partlake.planning.graph import LakeGraph

    options.check(operation)  # refuse before loading the code location
    graph = LakeGraph(load_definitions(ctx.obj["module"]))
    tables = managed_tables(graph, ctx.obj["select"])
    spark, stop = code_location_spark(graph)
    try:
        outcomes = maintain_tables(tables, operation, options, spark)
    finally:
        stop()
    for outcome in outcomes:
        echo(json.dumps(outcome.to_json()) if ctx.obj["json"] else outcome.text)
    if any(o.status == "failed" for o in outcomes):
        sys.exit(1)
