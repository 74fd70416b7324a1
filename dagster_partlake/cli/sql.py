"""`partlake sql render` and `partlake sql lint`: SQL model files, without running them."""

from __future__ import annotations

import click

from dagster_partlake.cli.common import boundary, dagster_instance
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo


@main.group("sql")
def sql_group() -> None:
    """SQL model files: show what a run executes, check a folder."""


@sql_group.command("render")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.argument("asset")
@click.option(
    "--partition",
    "partitions",
    multiple=True,
    help="Partition key of the run (repeat it for a run over several partitions).",
)
@boundary
def render_command(module: str, asset: str, partitions: tuple[str, ...]) -> None:
    """Print the exact SQL a run of a SQL model executes: its query reading temporary views,
    each described by the upstream partitions the run reads into it. Runs nothing."""
    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.partitions.keys import is_dynamic
    from dagster_partlake.sql.explain import render_model

    defs = load_definitions(module)
    store = None
    if any(is_dynamic(a.partitions_def) for a in defs.resolve_asset_graph().asset_nodes):
        store = dagster_instance(False)
    echo(render_model(defs, asset, list(partitions), store))


@sql_group.command("lint")
@click.argument("path", type=click.Path(file_okay=False))
@click.option(
    "-m",
    "--module",
    "module",
    help="Also check that the tables the models read are assets of this code location.",
)
@boundary
def lint_command(path: str, module: str | None) -> None:
    """Check every .sql model file under PATH without Spark: directives, SQL syntax, asset keys,
    references between models, cycles. Prints `file:line: problem` per problem; exits 1 if any."""
    import sys

    from dagster_partlake.sql.project import lint_folder

    upstream = _other_assets(module, path) if module else None
    count, errors = lint_folder(path, upstream=upstream)
    for error in errors:
        echo(str(error))
    if errors:
        echo(f"{count} file(s) checked, {len(errors)} with a problem.")
        sys.exit(1)
    echo(f"{count} file(s) checked: no problem found.")


def _other_assets(module: str, path: str) -> list[tuple[str, ...]]:
    """The asset keys of the code location that are not models of the folder `path`."""
    from pathlib import Path

    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.metadata import SQL_PATH_KEY, plain

    folder = Path(path).resolve()
    keys = []
    for node in load_definitions(module).resolve_asset_graph().asset_nodes:
        source = plain(node.metadata.get(SQL_PATH_KEY))
        if isinstance(source, str) and Path(source).is_relative_to(folder):
            continue
        keys.append(tuple(node.key.path))
    return keys
