"""`partlake_stale()`: a Declarative Automation condition true for exactly the stale partitions.

Dagster's own conditions see what Dagster recorded (materializations, code versions); a source
partition rewritten by another system is invisible to them. `partlake_stale()` asks partlake's
planner instead, with the same incremental planning the sensor uses (one `PlanningSession` per
code location in the process, one plan per evaluation, shared by every asset it evaluates). It
composes with Dagster's conditions; a closure refreshes in dependency order with

    condition = (
        partlake_stale()
        & ~AutomationCondition.in_progress()
        & ~AutomationCondition.any_deps_match(
            partlake_stale() | AutomationCondition.in_progress()
        )
    )

evaluated by `AutomationConditionSensorDefinition(..., use_user_code_server=True)` (a custom
condition runs in the code server). Its children, one per reason (`missing`, `code_changed`,
`out_of_band`, `upstream_changed`), label the UI's evaluation tree with why each partition is
stale.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dagster import AutomationCondition, AutomationResult

from dagster_partlake.compat import AssetGraph
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.planning.planner import REASONS, Reason

if TYPE_CHECKING:
    from dagster import AssetKey

    from dagster_partlake.compat import AssetGraphView, AutomationContext
    from dagster_partlake.planning.session import PlanningSession, PlanResult


def partlake_stale(root: str | None = None) -> PartlakeStale:
    """The condition true for the asset partitions partlake's planner finds stale.

    Args:
        root: the lake root; default: the code location's `DeltaPartitionIOManager(root=...)`,
            else `$PARTLAKE_HOME`, else `.partlake`.

    Example:
        .. code-block:: python

            from dagster import AutomationCondition, AutomationConditionSensorDefinition

            stale_first = partlake_stale() & ~AutomationCondition.in_progress()
            sensor = AutomationConditionSensorDefinition(
                "partlake_automation", target="*", use_user_code_server=True
            )
    """
    return PartlakeStale(root=root)


class PartlakeStale(AutomationCondition):
    """True for the partitions partlake's planner finds stale (for one `reason`, or any)."""

    def __init__(self, reason: Reason | None = None, *, root: str | None = None) -> None:
        self.reason = reason
        self.root = root

    @property
    def name(self) -> str:
        return "partlake_stale" if self.reason is None else f"partlake_stale[{self.reason}]"

    @property
    def description(self) -> str:
        if self.reason is None:
            return "partlake's planner finds the partition stale"
        return f"partlake's planner finds the partition stale: {self.reason}"

    def get_label(self) -> str | None:
        return "partlake_stale" if self.reason is None else self.reason

    @property
    def requires_cursor(self) -> bool:
        return False

    @property
    def operator_type(self) -> Literal["identity", "or"]:
        return "identity" if self.reason is not None else "or"

    @property
    def children(self) -> Sequence[AutomationCondition]:
        if self.reason is not None:
            return []
        return [PartlakeStale(reason, root=self.root) for reason in REASONS]

    def evaluate(self, context: AutomationContext) -> AutomationResult:
        if self.reason is None:
            true_subset = context.get_empty_subset()
            results = []
            for index, child in enumerate(self.children):
                child_context = context.for_child_condition(
                    child_condition=child,
                    child_indices=[index],
                    candidate_subset=context.candidate_subset,
                )
                result = child.evaluate(child_context)
                results.append(result)
                true_subset = true_subset.compute_union(result.true_subset)
            return AutomationResult(context, true_subset, child_results=results)
        keys = _stale_keys(context, self.root, self.reason)
        if context.candidate_subset.partitions_def is None:
            subset = context.candidate_subset if None in keys else context.get_empty_subset()
        else:
            wanted = {k for k in keys if k is not None}
            subset = context.candidate_subset.compute_intersection_with_partition_keys(wanted)
        return AutomationResult(context, subset)


@dataclass
class _Evaluation:
    """One plan per automation evaluation, shared by every asset it evaluates.

    An evaluation is known by its asset graph view (one per tick, shared by every asset and
    condition it evaluates): its `evaluation_id` cannot tell ticks apart, since the automation
    sensor in a code server evaluates every tick under its cursor's unchanged id."""

    view: weakref.ref[AssetGraphView]
    result: PlanResult


_sessions: dict[tuple[int, str], tuple[AssetGraph, PlanningSession]] = {}
_evaluations: dict[tuple[int, str], _Evaluation] = {}


def _stale_keys(context: AutomationContext, root: str | None, reason: Reason) -> set[str | None]:
    """The partition keys of the context's asset that the plan of this evaluation finds stale
    for `reason`."""
    asset_graph = context.asset_graph
    if not isinstance(asset_graph, AssetGraph):
        raise PartlakeConfigError(
            "partlake_stale() plans the code location itself, so it is evaluated in the code "
            "server: declare the automation sensor with "
            "AutomationConditionSensorDefinition(..., use_user_code_server=True)."
        )
    result = _plan(context, asset_graph, root)
    name = _name(context.key)
    return {i.partition for i in result.plan.items if i.asset == name and i.reason == reason}


def _plan(context: AutomationContext, asset_graph: AssetGraph, root: str | None) -> PlanResult:
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph, assets_lake
    from dagster_partlake.planning.session import PlanningSession
    from dagster_partlake.storage.location import lake_location

    configured = assets_lake(asset_graph)
    lake = lake_location(
        root or configured, configured.storage_options if configured is not None else None
    )
    where = (id(asset_graph), lake.uri)
    view = context.asset_graph_view
    done = _evaluations.get(where)
    if done is not None and done.view() is view:
        return done.result
    cached = _sessions.get(where)
    if cached is None or cached[0] is not asset_graph:
        # `root` alone overrides where the tables are; else each asset's IO manager says.
        graph = LakeGraph(asset_graph=asset_graph, root=lake if root else None)
        session = PlanningSession(graph, StateCache())
        cached = _sessions[where] = (asset_graph, session)
    result = cached[1].plan(dynamic_partitions_store=view.instance)
    _evaluations[where] = _Evaluation(weakref.ref(view), result)
    return result


def _name(key: AssetKey) -> str:
    return key.to_user_string()
