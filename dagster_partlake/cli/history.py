"""`partlake history`: the commits that changed an asset's table or one partition of it."""

from __future__ import annotations

import click

from dagster_partlake.cli.common import boundary, history_target
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo


@main.command("history")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.argument("asset")
@click.option("--partition", help="Partition key (default: the whole table).")
@click.option("--json", "as_json", is_flag=True, help="Print the commits as a JSON list.")
@boundary
def history_command(module: str, asset: str, partition: str | None, as_json: bool) -> None:
    """List the commits that changed an asset's table (or one partition of it), newest first:
    what the Delta log still has (checkpointing may have removed older commits)."""
    import json

    from dagster_partlake.records.history import table_history

    target = history_target(module, asset, partition)
    entries = table_history(
        target.path,
        selection=target.selection,
        partition_id=partition,
        table_name=target.name,
    )
    if as_json:
        echo(json.dumps([e.to_json() for e in entries], indent=2))
        return
    what = f"{target.name} partition {partition}" if partition else target.name
    echo(f"{what}: {len(entries)} commit(s) that changed its data, newest first")
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
        echo("  ".join(cells).rstrip())
