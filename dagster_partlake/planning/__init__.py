"""The planning core: which asset partitions are stale, why, and the runs that refresh them.

`planner` is the pure rule over plain data (`bulk` its pass over whole columns) and `replan` its
incremental form; `state_maps` are
the planner's input maps on column-wise storage; `batches` and `runs` turn a plan into Dagster
runs; `graph` reads a code location's assets (`LakeGraph`); `convert` turns table states into
planner input; `session` keeps what one process planned (`PlanningSession`) and is the entry
point, `make_plan`; `cache` keeps the last plan on disk. May import every layer below it;
`planner`, `bulk`, `replan` and `state_maps` import nothing but `columnar` and numpy (an import
contract says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.planning.graph import LakeAsset, LakeGraph
    from dagster_partlake.planning.planner import (
        Dependency,
        PartitionState,
        Plan,
        PlanAsset,
        PlanInput,
        Record,
        StalePartition,
        UnreadableTable,
        plan,
    )
    from dagster_partlake.planning.replan import PlanMemo, changed_partitions, full, replan
    from dagster_partlake.planning.runs import PlannedRun, RunPlan, plan_runs
    from dagster_partlake.planning.session import (
        PlanningSession,
        PlanResult,
        make_plan,
        moved,
        runs_for,
    )
    from dagster_partlake.planning.state_maps import RecordMap, StateMap

__all__ = [
    "Dependency",
    "LakeAsset",
    "LakeGraph",
    "PartitionState",
    "Plan",
    "PlanAsset",
    "PlanInput",
    "PlanMemo",
    "PlanResult",
    "PlannedRun",
    "PlanningSession",
    "Record",
    "RecordMap",
    "RunPlan",
    "StalePartition",
    "StateMap",
    "UnreadableTable",
    "changed_partitions",
    "full",
    "make_plan",
    "moved",
    "plan",
    "plan_runs",
    "replan",
    "runs_for",
]

_LAZY = {
    "Dependency": "dagster_partlake.planning.planner",
    "PartitionState": "dagster_partlake.planning.planner",
    "Plan": "dagster_partlake.planning.planner",
    "PlanAsset": "dagster_partlake.planning.planner",
    "PlanInput": "dagster_partlake.planning.planner",
    "Record": "dagster_partlake.planning.planner",
    "StalePartition": "dagster_partlake.planning.planner",
    "UnreadableTable": "dagster_partlake.planning.planner",
    "plan": "dagster_partlake.planning.planner",
    "PlanMemo": "dagster_partlake.planning.replan",
    "changed_partitions": "dagster_partlake.planning.replan",
    "full": "dagster_partlake.planning.replan",
    "replan": "dagster_partlake.planning.replan",
    "RecordMap": "dagster_partlake.planning.state_maps",
    "StateMap": "dagster_partlake.planning.state_maps",
    "PlannedRun": "dagster_partlake.planning.runs",
    "RunPlan": "dagster_partlake.planning.runs",
    "plan_runs": "dagster_partlake.planning.runs",
    "LakeAsset": "dagster_partlake.planning.graph",
    "LakeGraph": "dagster_partlake.planning.graph",
    "PlanResult": "dagster_partlake.planning.session",
    "PlanningSession": "dagster_partlake.planning.session",
    "make_plan": "dagster_partlake.planning.session",
    "moved": "dagster_partlake.planning.session",
    "runs_for": "dagster_partlake.planning.session",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
