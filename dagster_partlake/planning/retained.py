"""What the retention rules of a code location retire now: per asset, its rule, the retired
partitions that still hold data (what `partlake maintain --retention` would remove) and the
retired partitions written again. `partlake plan` renders it; `maintenance.retention` removes
what it lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dagster_partlake.columnar.interner import Key
from dagster_partlake.partitions.retention import RetentionRule
from dagster_partlake.planning.definition import PlanInput
from dagster_partlake.planning.graph import LakeGraph


@dataclass(frozen=True)
class AssetRetention:
    """One asset's retention now."""

    asset: str
    rule: RetentionRule | None  # None: retired only by an upstream's rule through a cascade
    retires: str  # which partitions, in words (`Retirement.rule`); "" when none yet
    with_data: tuple[Key, ...]  # retired partitions that still hold data, sorted
    managed: bool

    def line(self) -> str:
        """Its line in `partlake plan`."""
        rule = self.rule.describe() if self.rule is not None else "cascade"
        retires = f"retires {self.retires}" if self.retires else "retires nothing yet"
        held = ""
        if self.with_data:
            shown = ", ".join(str(k) for k in self.with_data[:5])
            more = f" (+{len(self.with_data) - 5} more)" if len(self.with_data) > 5 else ""
            held = f"; {len(self.with_data)} retired partition(s) hold data: {shown}{more}" + (
                " (partlake maintain --retention removes them)" if self.managed else ""
            )
        return f"  {self.asset}: {rule}: {retires}{held}"

    def to_json(self) -> dict[str, object]:
        return {
            "asset": self.asset,
            "retention": self.rule.to_json() if self.rule is not None else {"cascade": True},
            "retires": self.retires,
            "retired_with_data": [k for k in self.with_data],
        }


def retention_report(graph: LakeGraph, inputs: PlanInput) -> list[AssetRetention]:
    """Per asset with a rule or retired partitions, by name."""
    found = []
    for name in sorted(graph.assets):
        rule = graph.specs[name].retention
        retired = inputs.retired.get(name)
        if rule is None and retired is None:
            continue
        states: Mapping[Key, object] = inputs.states.get(name, {})
        with_data = (
            tuple(sorted((k for k in states if retired.contains(k)), key=lambda k: k or ""))
            if retired is not None
            else ()
        )
        found.append(
            AssetRetention(
                name,
                rule,
                retired.rule if retired is not None else "",
                with_data,
                not graph.assets[name].is_source,
            )
        )
    return found


def retention_text(lines: Sequence[str], retired_writes: Sequence[str]) -> str:
    """What `partlake plan` prints about retention ("" without any rule): the assets' lines
    (`AssetRetention.line`) and the writes into a retired range (`Plan.retired_writes`)."""
    if not lines and not retired_writes:
        return ""
    out = ["", "Retention (partlake/retention):", *lines]
    if retired_writes:
        shown = ", ".join(retired_writes[:10])
        more = f" (+{len(retired_writes) - 10} more)" if len(retired_writes) > 10 else ""
        out.append(
            f"Warning: data written into a retired range, not rebuilt: {shown}{more}; "
            "remove it with partlake maintain --retention, or change the rule to keep it."
        )
    return "\n".join(out)
