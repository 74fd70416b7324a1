"""Text and JSON renderings of a plan and its runs (`partlake plan`) and of run outcomes
(`partlake run`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from dagster_partlake.cli.output import PLAN_FRESH
from dagster_partlake.planning.planner import REASONS, Key, Plan
from dagster_partlake.planning.runs import RunPlan

MAX_LISTED = 20
_TAGS = {"ok": "[OK]", "failed": "[FAILED]", "skipped": "[SKIPPED]", "unchanged": "[UNCHANGED]"}


# (asset, partition) -> the quality gates its last run failed (`dagster_partlake.gates.failures`).
GateFailures = Mapping[tuple[str, Key], Sequence[str]]
# (asset, partition key) -> the value of each of its dimensions, by name (None: unpartitioned).
DimensionValues = Callable[[str, Key], Mapping[str, str] | None]


def plan_json(
    plan: Plan,
    failures: GateFailures | None = None,
    dimensions: DimensionValues | None = None,
    *,
    retention: Sequence[Mapping[str, object]] = (),
) -> str:
    """The stale partitions, sorted by asset then partition (`partlake plan --json`); a
    partition whose last run failed a gate also has `last_run_failed` (the gate names), and one
    of a partitioned asset `dimensions` (each dimension's value by name). After them, one
    object per asset whose retired partitions still hold data (`retention`: it has the key
    "retention", no "reason"), and, when data was written into a retired range,
    `{"retired_writes": [...]}`: like the stale partitions, what asks for work."""
    items = []
    for item in plan.sorted_items():
        body = item.to_json()
        named = dimensions(item.asset, item.partition) if dimensions is not None else None
        if named:
            body["dimensions"] = dict(named)
        failed = (failures or {}).get((item.asset, item.partition))
        if failed:
            body["last_run_failed"] = list(failed)
        items.append(body)
    items.extend(dict(r) for r in retention)
    if plan.retired_writes:
        items.append({"retired_writes": list(plan.retired_writes)})
    return json.dumps(items, indent=2)


def runs_json_text(runs: RunPlan) -> str:
    """The runs, upstream first (`partlake plan --runs-json`)."""
    return json.dumps(runs.to_json(), indent=2)


def plan_text(
    runs: RunPlan,
    *,
    seconds: float | None = None,
    failures: GateFailures | None = None,
    layouts: Mapping[str, str] | None = None,
    after_streams: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The stale partitions per asset with their reasons, then the runs that refresh them.
    `layouts`: per asset whose keys combine dimensions, how a key names them
    ('date|region/product'), shown next to its name. `after_streams`: per stale streaming
    asset, the assets downstream of it, which its new batch may make stale (which partitions,
    its rows decide: `partlake run` plans them once it has run)."""
    plan = runs.plan
    held = _held_text(plan)
    if not plan:
        if held:
            return "No stale asset partition among the assets that could be planned." + held
        return PLAN_FRESH
    grouped = plan.by_asset()
    took = f" (planned in {seconds * 1000:.0f} ms)" if seconds is not None else ""
    lines = [
        f"{len(plan.items)} stale asset partition(s) in {len(grouped)} asset(s){took}, "
        "upstream first:",
    ]
    for asset in plan.asset_order:
        items = grouped.get(asset)
        if not items:
            continue
        counts = Counter(i.reason for i in items)
        summary = ", ".join(f"{r} {counts[r]}" for r in REASONS if counts[r])
        lines.append("")
        layout = f" ({layouts[asset]})" if layouts and asset in layouts else ""
        lines.append(f"{asset}{layout}: {len(items)} stale ({summary})")
        width = max(len(i.partition or "-") for i in items[:MAX_LISTED])
        for item in items[:MAX_LISTED]:
            because = f"  because {', '.join(item.because[:4])}" if item.because else ""
            more = f" (+{len(item.because) - 4} more)" if len(item.because) > 4 else ""
            failed = (failures or {}).get((item.asset, item.partition))
            last = f"  last run failed: {', '.join(failed)}" if failed else ""
            lines.append(
                f"  {item.partition or '-':<{width}}  {item.reason:<16}{because}{more}{last}"
            )
        if len(items) > MAX_LISTED:
            lines.append(f"  ... and {len(items) - MAX_LISTED} more (see --json)")
        downstream = (after_streams or {}).get(asset)
        if downstream:
            lines.append(
                f"  then, where its new rows land, maybe stale: {', '.join(downstream)} "
                "(planned once the stream has run; partlake run does so)"
            )
    lines.append("")
    lines.append(_runs_text(runs))
    return "\n".join(lines) + held


def _runs_text(runs: RunPlan) -> str:
    lines = [f"Runs: {len(runs.runs)}, upstream first (one Dagster run each):"]
    width = len(str(len(runs.runs)))
    for run in runs.runs[:MAX_LISTED]:
        after = f"  after run {', '.join(map(str, run.waits_for))}" if run.waits_for else ""
        lines.append(
            f"  run {run.number:>{width}}: {', '.join(run.assets)}  "
            f"{run.describe_partitions()}{after}"
        )
    if len(runs.runs) > MAX_LISTED:
        lines.append(f"  ... and {len(runs.runs) - MAX_LISTED} more runs (see --runs-json)")
    if runs.waiting:
        lines.append(f"  {len(runs.waiting)} stale partition(s) wait for runs in progress")
    return "\n".join(lines)


def _held_text(plan: Plan) -> str:
    lines = [
        f"\nNot planned until the table of {u.asset} can be read: {', '.join(u.held) or '-'}"
        for u in plan.unreadable
    ]
    return "\n" + "\n".join(lines) if lines else ""


def outcome_line(
    status: str,
    asset: str,
    partition: str | None,
    reason: str,
    rows: int | None,
    ms: int | None,
    error: str | None = None,
    metrics: Mapping[str, int] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """`[OK] clean_events 2024-01-02|eu (upstream_changed, 977 rows, 15,953 ms)`; a `[FAILED]`
    line ends with the error; a `[SKIPPED]` one says which upstream failed:
    `[SKIPPED] daily_region_stats 2024-01-02|eu (upstream clean_events 2024-01-02|eu failed)`.
    `notes` (a warn gate that failed, a run condition that skipped the write) come before the
    time: `[OK] payments 2024-01-02 (missing, 0 rows, skipped: 'input_rows > 0' does not hold,
    812 ms)`."""
    if status == "skipped" and error:
        return f"{_TAGS[status]} {asset} {partition or '-'} ({error})"
    parts = [reason]
    if rows is not None:
        parts.append(f"{rows:,} rows")
    if metrics:
        parts.append(
            ", ".join(
                f"{metrics.get(f'rows_{what}', 0):,} {what}"
                for what in ("inserted", "updated", "deleted", "unchanged")
            )
        )
    parts.extend(notes)
    if ms is not None:
        parts.append(f"{ms:,} ms")
    if error:
        parts.append(f"error: {error}" if status == "failed" else error)
    return f"{_TAGS[status]} {asset} {partition or '-'} ({', '.join(parts)})"
