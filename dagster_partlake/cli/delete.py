"""`partlake delete`: remove the rows of an asset's table that match a predicate, in one commit
(`dagster_partlake.delta.delete`); the touched partitions become `out_of_band` for the planner,
so `partlake run` recomputes what reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dagster_partlake.cli.common import boundary, code_location_spark, table_target
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo

if TYPE_CHECKING:
    from dagster_partlake.maintenance.delete import DeleteResult


@main.command("delete")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.argument("asset")
@click.option(
    "--where",
    "predicate",
    required=True,
    help="Spark SQL condition over the table's columns: rows for which it is true are removed.",
)
@click.option("--partition", help="Partition key to delete from (default: the whole table).")
@click.option(
    "--dry-run", is_flag=True, help="List the files and rows that would change; commit nothing."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@boundary
def delete_command(
    module: str, asset: str, predicate: str, partition: str | None, dry_run: bool, as_json: bool
) -> None:
    """Remove the rows of an asset's table that match a predicate, in one commit that rewrites
    only the files holding them. The touched partitions show as out_of_band in `partlake plan`,
    their dependents as upstream_changed."""
    import json

    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.maintenance.delete import delete_rows
    from dagster_partlake.planning.graph import LakeGraph

    graph = LakeGraph(load_definitions(module))
    target = table_target(graph, asset, partition)
    spark, stop = code_location_spark(graph)
    try:
        result = delete_rows(
            spark(),
            target.path,
            predicate,
            selection=target.selection,
            partition_id=target.partition_id,
            partition=partition,
            dry_run=dry_run,
            table_name=target.name,
        )
    finally:
        stop()
    what = f"{target.name} partition {partition}" if partition else target.name
    echo(json.dumps(result.to_json(), indent=2) if as_json else delete_text(what, result))


def delete_text(what: str, result: DeleteResult) -> str:
    """What `partlake delete` prints: the files and rows changed (or that would change)."""
    scanned = (
        f"{result.files_scanned} file(s) read to count matching rows, {result.files_skipped} "
        "ruled out by the log's partition values and statistics"
    )
    if not result.files:
        return f"No row of {what} matches {result.predicate}: nothing to delete ({scanned})."
    partitions = result.partitions
    shown = ", ".join(partitions[:5]) + (" ..." if len(partitions) > 5 else "")
    width = max(len(f.partition_id) for f in result.files)
    lines = [
        f"  {f.partition_id:<{width}}  {f.path}  {f.rows_matching:,} of {f.rows:,} row(s)"
        for f in result.files[:20]
    ]
    if len(result.files) > 20:
        lines.append(f"  ... and {len(result.files) - 20} more file(s) (see --json)")
    if result.dry_run:
        head = (
            f"Dry run: deleting the rows of {what} where {result.predicate} would remove "
            f"{result.rows_deleted:,} row(s) from {len(result.files)} file(s) in "
            f"{len(partitions)} partition(s) ({shown}):"
        )
        return "\n".join([head, *lines, f"{scanned}. Nothing was committed."])
    head = (
        f"Deleted {result.rows_deleted:,} row(s) of {what} where {result.predicate} in version "
        f"{result.version}: {len(result.files)} file(s) rewritten into {result.files_added}, in "
        f"{len(partitions)} partition(s) ({shown}):"
    )
    tail = (
        f"{scanned}. `partlake plan` shows the touched partitions out_of_band and what reads "
        "them upstream_changed."
    )
    return "\n".join([head, *lines, tail])
