"""`partlake plan`: which asset partitions are stale and why, and the runs that would refresh
them, without running anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dagster_partlake.cli import shortcut
from dagster_partlake.cli.common import (
    boundary,
    dagster_instance,
    fail_on_unreadable,
    plan_code_location,
    selection,
)
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import PLAN_FRESH, PLAN_FRESH_JSON, echo

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dagster import AssetKey

    from dagster_partlake.cli.render import DimensionValues, GateFailures
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.planner import Key, Plan
    from dagster_partlake.planning.retained import AssetRetention
    from dagster_partlake.planning.session import PlanningSession, PlanResult


@main.command("plan")
@click.option("-m", "--module", "module", required=True, help="Python module with the Definitions.")
@click.option("--select", help="Comma-separated asset names to show (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the stale partitions as a JSON list.")
@click.option(
    "--runs-json", "runs_json", is_flag=True, help="Print the runs the plan becomes as JSON."
)
@click.option(
    "--report",
    is_flag=True,
    help=(
        "Also record the verdicts as partlake_fresh check results in the Dagster instance "
        "(what the sensor does on each tick), so the UI shows them without a daemon."
    ),
)
@boundary
def plan_command(
    module: str, select: str | None, as_json: bool, runs_json: bool, report: bool
) -> None:
    """Show which asset partitions are stale and why, and the runs that would refresh them,
    without running anything."""
    if as_json and runs_json:
        raise click.UsageError("--json and --runs-json print different documents; choose one.")
    # --runs-json and --report need the runs and the instance: always the full path.
    answered = None if runs_json or report else shortcut.answer(module, selection(select))
    if answered is not None and not shortcut.checking():
        for line in answered.absent_lines(selection(select)):
            echo(line, err=True)
        if answered.warning:
            echo(answered.warning, err=True)
        _fresh_answer(answered, selection(select), as_json=as_json)
        return
    from dagster_partlake.cli.render import plan_json, plan_text, runs_json_text

    session, result, runs = plan_code_location(module, select, need_instance=report)
    if answered is not None:
        shortcut.confirm(not result.plan and not result.plan.unreadable)
    warning = shortcut.missing_checks_warning(session.graph)
    if warning:
        echo(warning, err=True)
    failures = _gate_failures(session.graph, result.plan)
    retention = _retention(session, result, selection(select))
    if as_json:
        echo(
            plan_json(
                result.plan,
                failures,
                _dimension_values(session.graph),
                # Only what asks for work: retired partitions that still hold data.
                retention=[r.to_json() for r in retention if r.with_data],
            )
        )
    elif runs_json:
        echo(runs_json_text(runs))
    else:
        layouts = key_layouts(session.graph)
        graph = session.graph
        order = {name: i for i, name in enumerate(result.plan.asset_order)}
        after_streams = {
            i.asset: sorted(graph.downstream(i.asset), key=lambda n: order.get(n, len(order)))
            for i in result.plan.items
            if graph.assets[i.asset].stream
        }
        echo(
            plan_text(
                runs,
                seconds=result.seconds,
                failures=failures,
                layouts=layouts,
                after_streams=after_streams,
            )
        )
        from dagster_partlake.planning.retained import retention_text

        # Said when there is something to do: retired partitions still holding data, or data
        # written into a retired range (a fresh lake's output stays one line).
        if any(r.with_data for r in retention) or result.plan.retired_writes:
            echo(retention_text([r.line() for r in retention], result.plan.retired_writes))
    if report:
        from dagster_partlake.freshness.check import checked_assets

        _report(session, result, checked_assets(session.graph.asset_graph.asset_check_keys))
    fail_on_unreadable(result.plan)


def _report(session: PlanningSession, result: PlanResult, checked: Mapping[str, AssetKey]) -> None:
    """Record the plan's verdicts as partlake_fresh results: every stale partition, and passed
    for each partition whose latest result failed but is fresh now."""
    from dagster_partlake.freshness.report import FreshnessReporter, record_report

    instance = dagster_instance(True)
    assert instance is not None and session.memo is not None
    report = FreshnessReporter(limit=None).report(instance, result, session.memo.verdicts, checked)
    record_report(instance, report)
    failed = report.failed
    echo(
        f"Reported {len(report.evaluations)} partlake_fresh result(s) to the Dagster instance: "
        f"{failed} stale, {len(report.evaluations) - failed} fresh again.",
        err=True,
    )


def _fresh_answer(answered: shortcut.Shortcut, select: list[str] | None, *, as_json: bool) -> None:
    """A fresh plan answered from the shortcut, with what the full path says of retention."""
    import json

    kept = [r for r in answered.retention if not select or r[0] in select]
    writes = [w for w in answered.retired_writes if not select or w.split("[", 1)[0] in select]
    if as_json:
        if not any(body for _, _, body in kept) and not writes:
            echo(PLAN_FRESH_JSON)
            return
        items: list[object] = [json.loads(body) for _, _, body in kept if body]
        if writes:
            items.append({"retired_writes": writes})
        echo(json.dumps(items, indent=2))
        return
    echo(PLAN_FRESH)
    if any(body for _, _, body in kept) or writes:
        from dagster_partlake.planning.retained import retention_text

        echo(retention_text([line for _, line, _ in kept], writes))


def _retention(
    session: PlanningSession, result: PlanResult, select: list[str] | None
) -> list[AssetRetention]:
    """What the retention rules retire now, of the selected assets."""
    from dagster_partlake.planning.retained import retention_report

    found = retention_report(session.graph, result.inputs)
    return [r for r in found if not select or r.asset in select]


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
