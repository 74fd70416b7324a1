"""The public entry points of planning: `plan` and `plan_runs`, over a code location or over the
planner's plain data.

`plan(defs)` plans a code location's `Definitions` as `partlake plan -m MODULE` does (the same
graph, table states and rule), and `plan_runs(plan, defs)` turns its result into the runs
`partlake plan` lists and `partlake run` and the sensor execute. Given the planner's plain
input instead (`PlanInput`, or a plan with its `PlanAsset`s and partitions), both are the pure
functions of `planning.planner` and `planning.runs`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from dagster import Definitions

from dagster_partlake.planning import planner, runs
from dagster_partlake.planning.definition import Key, Plan, PlanAsset, PlanInput

if TYPE_CHECKING:
    from dagster import BackfillPolicy, DagsterInstance, PartitionsDefinition

    from dagster_partlake.planning.runs import RunPlan
    from dagster_partlake.storage.location import TableLocation


def plan(
    source: Definitions | PlanInput,
    *,
    select: Sequence[str] | None = None,
    instance: DagsterInstance | None = None,
    root: str | TableLocation | None = None,
) -> Plan:
    """The stale asset partitions, upstream first, each with its reason and what caused it.

    Example:
        .. code-block:: python

            from dagster_partlake import plan
            from my_project.definitions import defs

            for item in plan(defs).items:  # what `partlake plan -m my_project.definitions` shows
                print(item.asset, item.partition, item.reason, item.because)

    Args:
        source: a code location's `Definitions` (its tables are read where its
            `DeltaPartitionIOManager` keeps them), or the planner's plain input (`PlanInput`,
            planned without reading anything).
        select: with `Definitions`, only these assets' partitions (names as `partlake plan
            --select` takes them).
        instance: with `Definitions`, the Dagster instance holding dynamic partitions (default:
            the one of `$DAGSTER_HOME`, when the code location has dynamic partitions).
        root: with `Definitions`, the lake root instead of the IO manager's.

    Raises:
        PartlakeConfigError: an asset's settings are wrong, or `select` names an unknown asset.
        TypeError: `source` is neither.
    """
    if isinstance(source, PlanInput):
        return planner.plan(source)
    if not isinstance(source, Definitions):
        raise TypeError(
            f"plan() takes a code location's Definitions or a PlanInput, not "
            f"{type(source).__name__}"
        )
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan

    graph = LakeGraph(source, root=root)
    store = instance if instance is not None else _dynamic_store(graph.has_dynamic_partitions)
    return make_plan(graph, StateCache(), select=select, dynamic_partitions_store=store).plan


def plan_runs(
    plan: Plan,
    assets: Definitions | Sequence[PlanAsset],
    partitions_defs: Mapping[str, PartitionsDefinition | None] | None = None,
    policies: Mapping[str, BackfillPolicy | None] | None = None,
    *,
    blocked: Mapping[str, set[Key]] | None = None,
    units: Mapping[str, Sequence[str]] | None = None,
    cutoff: Collection[str] = (),
    instance: DagsterInstance | None = None,
) -> RunPlan:
    """Every run a plan needs (partition ranges per backfill policy), with what each waits
    for: the runs `partlake plan` lists.

    Example:
        .. code-block:: python

            from dagster_partlake import plan, plan_runs

            for run in plan_runs(plan(defs), defs).runs:
                print(run.number, run.assets, run.describe_partitions(), run.waits_for)

    Args:
        plan: from `plan`.
        assets: the code location's `Definitions` (its assets, partitions, backfill policies
            and multi-assets are read from it), or the planner's `PlanAsset`s, with
            `partitions_defs`, `policies`, `units` and `cutoff` given by hand.
        blocked: partitions not to run (already running, or backing off after a failure); the
            partitions that depend on them are left waiting too.
        instance: the Dagster instance holding dynamic partitions (with `Definitions`,
            default: the one of `$DAGSTER_HOME`, when the code location has dynamic
            partitions); a range of dynamic partitions follows its order of their keys.
    """
    if not isinstance(assets, Definitions):
        return runs.plan_runs(
            plan,
            assets,
            partitions_defs or {},
            policies or {},
            blocked=blocked,
            units=units,
            cutoff=cutoff,
            dynamic_partitions_store=instance,
        )
    from dagster_partlake.planning.graph import LakeGraph

    graph = LakeGraph(assets)
    store = instance if instance is not None else _dynamic_store(graph.has_dynamic_partitions)
    rules = graph.run_rules(graph.plan_assets(store), store)
    return runs.runs_of(plan, rules, blocked=blocked)


def _dynamic_store(needed: bool) -> DagsterInstance | None:
    """The instance of `$DAGSTER_HOME` when dynamic partitions need one (else None)."""
    if not needed:
        return None
    from dagster import DagsterInstance

    from dagster_partlake.errors import PartlakeConfigError

    if not os.environ.get("DAGSTER_HOME"):
        raise PartlakeConfigError(
            "the code location has dynamic partitions, whose keys live in a Dagster instance; "
            "pass instance=... or set DAGSTER_HOME."
        )
    return DagsterInstance.get()
