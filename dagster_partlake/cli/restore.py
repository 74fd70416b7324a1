"""`partlake restore`: bring an asset's table, or one partition of it, back to an earlier
version in one commit.
"""

from __future__ import annotations

import click

from dagster_partlake.cli.common import boundary, history_target
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo


@main.command("restore")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.argument("asset")
@click.option(
    "--version", "version", type=click.IntRange(min=0), required=True, help="Version to restore."
)
@click.option("--partition", help="Partition key to restore (default: every partition).")
@boundary
def restore_command(module: str, asset: str, version: int, partition: str | None) -> None:
    """Bring an asset's table, or one partition of it, back to an earlier version in one commit.
    The restored partitions show as out_of_band in `partlake plan`, their dependents as
    upstream_changed."""
    from dagster_partlake.maintenance.restore import restore_partitions

    target = history_target(module, asset, partition)
    result = restore_partitions(
        target.path,
        version,
        selection=target.selection,
        partition_id=target.partition_id,
        table_name=target.name,
    )
    what = f"{target.name} partition {partition}" if partition else target.name
    if result.version is None:
        echo(f"{what} is already as at version {version}: nothing committed.")
        return
    echo(
        f"Restored {what} to version {version} in version {result.version}: "
        f"{len(result.partition_ids)} partition(s) ({', '.join(result.partition_ids[:5])}"
        f"{' ...' if len(result.partition_ids) > 5 else ''}), {result.files_added} file(s) "
        f"added, {result.files_removed} removed. `partlake plan` shows what to recompute."
    )
