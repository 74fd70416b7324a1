"""Text and JSON renderings of a plan (`partlake plan`) and of run outcomes (`partlake run`)."""

from __future__ import annotations

import json
from collections import Counter

from dagster_partlake.planner import REASONS, Plan

MAX_LISTED = 20


def plan_json(plan: Plan) -> str:
    return json.dumps([item.to_json() for item in plan.sorted_items()], indent=2)


def plan_text(plan: Plan, *, seconds: float | None = None) -> str:
    held = _held_text(plan)
    if not plan:
        if held:
            return "No stale asset partition among the assets that could be planned." + held
        return "Everything is fresh: no asset partition needs to run."
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
        lines.append(f"{asset}: {len(items)} stale ({summary})")
        width = max(len(i.partition or "-") for i in items[:MAX_LISTED])
        for item in items[:MAX_LISTED]:
            because = f"  because {', '.join(item.because[:4])}" if item.because else ""
            more = f" (+{len(item.because) - 4} more)" if len(item.because) > 4 else ""
            lines.append(f"  {item.partition or '-':<{width}}  {item.reason:<16}{because}{more}")
        if len(items) > MAX_LISTED:
            lines.append(f"  ... and {len(items) - MAX_LISTED} more (see --json)")
    return "\n".join(lines) + held


def _held_text(plan: Plan) -> str:
    lines = [
        f"\nNot planned until the table of {u.asset} can be read: {', '.join(u.held) or '-'}"
        for u in plan.unreadable
    ]
    return "\n" + "\n".join(lines) if lines else ""


def outcome_line(
    ok: bool,
    asset: str,
    partition: str | None,
    reason: str,
    rows: int | None,
    ms: int | None,
    error: str | None = None,
) -> str:
    parts = [reason]
    if rows is not None:
        parts.append(f"{rows:,} rows")
    if ms is not None:
        parts.append(f"{ms:,} ms")
    if error:
        parts.append(f"error: {error}")
    tag = "[OK]" if ok else "[FAILED]"
    return f"{tag} {asset} {partition or '-'} ({', '.join(parts)})"
