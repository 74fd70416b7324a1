"""`partlake run`: run every stale asset partition, and nothing else, as Dagster runs: exactly
the runs `partlake plan` shows.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import click

from dagster_partlake.cli import shortcut
from dagster_partlake.cli.common import (
    boundary,
    dagster_instance,
    fail_on_unreadable,
    plan_code_location,
    require_dagster_home,
    selection,
    skip_final_collection,
)
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import NOTHING_TO_RUN, echo, terminal


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
@boundary
def run_command(module: str, select: str | None, max_parallel: int | None) -> None:
    """Run every stale asset partition (and nothing else) as Dagster runs: exactly the runs
    `partlake plan` shows."""
    require_dagster_home()
    answered = shortcut.answer(module, selection(select))
    if answered is not None and not shortcut.checking():
        for line in answered.absent_lines(selection(select)):
            echo(line, err=True)
        echo(NOTHING_TO_RUN)
        return
    session, result, runs = plan_code_location(module, select, need_instance=True)
    graph = session.graph
    if not result.plan:
        reaped = _reap_dead_runs()
        if answered is not None:
            shortcut.confirm(not reaped and not result.plan.unreadable)
        skip_final_collection()
        if not result.plan.unreadable:
            echo(NOTHING_TO_RUN)
        fail_on_unreadable(result.plan)
        return
    if answered is not None:
        shortcut.confirm(False)
    # Imported only when there is something to run: a no-op run needs none of them.
    from dagster_partlake.cli.render import outcome_line
    from dagster_partlake.orchestration.pools import parallelism
    from dagster_partlake.orchestration.runner import Outcome, execute_rounds

    instance = dagster_instance(True)
    assert instance is not None  # required: DAGSTER_HOME is set
    stale_assets = sorted({item.asset for item in result.plan.items})
    workers = parallelism(instance, graph.pools(stale_assets), max_parallel)
    total = len(result.plan.items)
    echo(
        f"Running {total} stale asset partition(s) in {len(runs.runs)} run(s). "
        f"Executing {workers.describe()}."
    )
    with terminal().progress(total, "asset partitions") as progress:

        def on_outcome(o: Outcome) -> None:
            echo(
                outcome_line(
                    o.status,
                    o.asset,
                    o.partition,
                    o.reason,
                    o.rows,
                    o.ms,
                    o.error,
                    o.metrics,
                    o.notes,
                )
            )
            progress.advance()

        outcomes = execute_rounds(
            session,
            instance,
            runs,
            select=selection(select),
            max_parallel=workers.runs,
            on_outcome=on_outcome,
            on_notice=echo,
        )
    counts: Counter[str] = Counter(o.status for o in outcomes)
    echo(_summary(counts, len(outcomes)))
    log = terminal().log_path
    if (counts["failed"] or counts["skipped"]) and log is not None:
        echo(f"Full output (Dagster, Spark) of the failed runs: {log}")
    fail_on_unreadable(result.plan)
    if counts["failed"] or counts["skipped"]:
        sys.exit(1)


def _summary(counts: Counter[str], total: int) -> str:
    """`6 asset partition(s) refreshed, 0 failed.`; when some were skipped or came out
    unchanged, those counts and the total, which they add up to."""
    summary = f"{counts['ok']} asset partition(s) refreshed, {counts['failed']} failed"
    if counts["skipped"] or counts["unchanged"]:
        summary += (
            f", {counts['skipped']} skipped because an upstream failed, "
            f"{counts['unchanged']} unchanged ({total} in all)"
        )
    return summary + "."


def _reap_dead_runs() -> int:
    """Mark failed the unfinished runs of earlier `partlake run` processes of this host that
    died (and free their pool slots); how many. Cheap when there are none: it opens the Dagster
    instance only when such a process left its registration behind."""
    if not shortcut.registered_runs():
        return 0  # without importing the workers' module
    from dagster_partlake.orchestration.workers import dead_registered, reap_dead_runs

    if not dead_registered(os.environ.get("DAGSTER_HOME")):
        return 0
    instance = dagster_instance(True)
    assert instance is not None  # required: DAGSTER_HOME is set
    reaped = reap_dead_runs(instance)
    for dead in reaped:
        echo(f"[FAILED] {dead.message}")
    return len(reaped)
