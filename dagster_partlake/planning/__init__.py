"""The planning core: which asset partitions are stale, why, and the runs that refresh them.

`definition` holds the planner's data (its input and the frozen `Plan`); `rule` decides a
partition's verdict from its facts; `planner` is the pure plan over plain data, `bulk` its pass
over whole columns, `replan` its incremental form; `state_maps` are the planner's input maps on
column-wise storage; `batches` and `runs` turn a plan into Dagster runs; `graph` reads a code
location's assets (`LakeGraph`); `convert` turns table states into planner input; `session`
keeps what one process planned (`PlanningSession`) and is the entry point, `make_plan`; `cache`
keeps the last plan on disk. May import every layer below it; `definition`, `rule`, `planner`,
`bulk`, `replan` and `state_maps` import nothing but `columnar` and numpy, and no module here
imports one that imports it back (import contracts say so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:  # what type checkers see: each public name, re-exported (`X as X`)
    from dagster_partlake.planning.definition import Dependency as Dependency
    from dagster_partlake.planning.definition import PartitionState as PartitionState
    from dagster_partlake.planning.definition import Plan as Plan
    from dagster_partlake.planning.definition import PlanAsset as PlanAsset
    from dagster_partlake.planning.definition import PlanInput as PlanInput
    from dagster_partlake.planning.definition import Record as Record
    from dagster_partlake.planning.definition import StalePartition as StalePartition
    from dagster_partlake.planning.definition import UnreadableTable as UnreadableTable
    from dagster_partlake.planning.graph import LakeAsset as LakeAsset
    from dagster_partlake.planning.graph import LakeGraph as LakeGraph
    from dagster_partlake.planning.planner import plan as plan
    from dagster_partlake.planning.replan import PlanMemo as PlanMemo
    from dagster_partlake.planning.replan import changed_partitions as changed_partitions
    from dagster_partlake.planning.replan import full as full
    from dagster_partlake.planning.runs import PlannedRun as PlannedRun
    from dagster_partlake.planning.runs import RunPlan as RunPlan
    from dagster_partlake.planning.runs import plan_runs as plan_runs
    from dagster_partlake.planning.session import PlanningSession as PlanningSession
    from dagster_partlake.planning.session import PlanResult as PlanResult
    from dagster_partlake.planning.session import make_plan as make_plan
    from dagster_partlake.planning.session import moved as moved
    from dagster_partlake.planning.session import runs_for as runs_for
    from dagster_partlake.planning.state_maps import RecordMap as RecordMap
    from dagster_partlake.planning.state_maps import StateMap as StateMap

# The public names: name -> the module defining it, imported on first use (a process such as a
# no-op `partlake run` imports only the modules its path needs). `__all__` is its keys; a test
# ties it to the TYPE_CHECKING imports above and to the API reference page.
_LAZY = {
    "LakeAsset": "dagster_partlake.planning.graph",
    "LakeGraph": "dagster_partlake.planning.graph",
    "Dependency": "dagster_partlake.planning.definition",
    "PartitionState": "dagster_partlake.planning.definition",
    "Plan": "dagster_partlake.planning.definition",
    "PlanAsset": "dagster_partlake.planning.definition",
    "PlanInput": "dagster_partlake.planning.definition",
    "Record": "dagster_partlake.planning.definition",
    "StalePartition": "dagster_partlake.planning.definition",
    "UnreadableTable": "dagster_partlake.planning.definition",
    "plan": "dagster_partlake.planning.planner",
    "PlanMemo": "dagster_partlake.planning.replan",
    "changed_partitions": "dagster_partlake.planning.replan",
    "full": "dagster_partlake.planning.replan",
    "PlannedRun": "dagster_partlake.planning.runs",
    "RunPlan": "dagster_partlake.planning.runs",
    "plan_runs": "dagster_partlake.planning.runs",
    "PlanResult": "dagster_partlake.planning.session",
    "PlanningSession": "dagster_partlake.planning.session",
    "make_plan": "dagster_partlake.planning.session",
    "moved": "dagster_partlake.planning.session",
    "runs_for": "dagster_partlake.planning.session",
    "RecordMap": "dagster_partlake.planning.state_maps",
    "StateMap": "dagster_partlake.planning.state_maps",
}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
