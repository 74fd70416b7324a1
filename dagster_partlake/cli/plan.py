"""`partlake plan`: which asset partitions are stale and why, and the runs that would refresh
them, without running anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dagster_partlake.cli.common import (
    boundary,
    dagster_instance,
    fail_on_unreadable,
    plan_code_location,
)
from dagster_partlake.cli.main import main

if TYPE_CHECKING:
    from dagster_partlake.cli.render import DimensionValues, GateFailures
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.planner import Key, Plan


@main.command("plan")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.option("--select", help="Comma-separated asset names to show (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the stale partitions as a JSON list.")
@click.option(
    "--runs-json", "runs_json", is_flag=True, help="Print the runs the plan becomes as JSON."
)
@boundary
def plan_command(module: str, select: str | None, as_json: bool, runs_json: bool) -> None:
    """Show which asset partitions are stale and why, and the runs that would refresh them,
    without running anything."""
    from dagster_partlake.cli.render import plan_json, plan_text, runs_json_text

    if as_json and runs_json:
        raise click.UsageError("--json and --runs-json print different documents; choose one.")
    session, result, runs = plan_code_location(module, select, need_instance=False)
    failures = _gate_failures(session.graph, result.plan)
    if as_json:
        click.echo(plan_json(result.plan, failures, _dimension_values(session.graph)))
    elif runs_json:
        click.echo(runs_json_text(runs))
    else:
        layouts = key_layouts(session.graph)
        click.echo(plan_text(runs, seconds=result.seconds, failures=failures, layouts=layouts))
    fail_on_unreadable(result.plan)


def _dimension_values(graph: LakeGraph) -> DimensionValues:
    """Each dimension's value of a key of a partitioned asset, by name."""
    from dagster_partlake.partitions.keys import key_dimension_values

    def values(asset: str, key: Key) -> dict[str, str] | None:
        found = graph.assets.get(asset)
        if found is None or key is None or not found.columns:
            return None
        return key_dimension_values(found.columns, key)

    return values


def key_layouts(graph: LakeGraph) -> dict[str, str]:
    """Per asset with a combined dimension, how its keys name the dimensions:
    'date|region/product' (Dagster's order: dimensions alphabetical, parts in order)."""
    layouts = {}
    for name, asset in graph.assets.items():
        if any(c.part is not None for c in asset.columns):
            dims = sorted({c.dimension for c in asset.columns})
            layouts[name] = "|".join(dims)
    return layouts


def _gate_failures(graph: LakeGraph, plan: Plan) -> GateFailures:
    """The quality gates the last runs of stale partitions failed, where an instance is set
    and a stale asset has gates (a fresh plan never opens the instance)."""
    if not any(graph.assets[i.asset].gates for i in plan.items):
        return {}
    instance = dagster_instance(False)
    if instance is None:
        return {}
    from dagster_partlake.gates.failures import last_gate_failures

    gates = {n: (a.key, a.gates) for n, a in graph.assets.items() if a.gates}
    return last_gate_failures(instance, gates, [(i.asset, i.partition) for i in plan.items])
