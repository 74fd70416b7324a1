"""partlake's side of the planning benchmark: the tasks its measuring processes run.

`task_partlake` times one scenario in a fresh process (`benchmarks.plan_harness` starts it):
`make_plan` with nothing changed, after one old source partition or 10% of them changed, from the
on-disk cache of a previous process, and the real sensor's ticks (first, skip, one change with
and without `partlake_fresh` reporting). `task_fill_cache` is the previous process of the
on-disk case.
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import time
import warnings
from typing import Any

from benchmarks.plan_dagster import local_instance
from benchmarks.plan_lake import MANAGED, Layout, build_defs
from benchmarks.plan_measure import (
    mb,
    memory_profile,
    profiled,
    rss,
    run_child,
    self_peak_mb,
    timed,
)


def task_partlake(task: dict[str, Any]) -> dict[str, Any]:
    """One partlake scenario in a fresh process: warm the cache, change, time make_plan."""
    warnings.filterwarnings("ignore")
    layout, root, scenario = Layout(task["n"]), task["root"], task["scenario"]
    started = time.perf_counter()
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession, make_plan

    out: dict[str, Any] = {"import_s": round(time.perf_counter() - started, 2)}
    defs = build_defs(layout, root, None)
    graph = LakeGraph(defs)
    out["rss_after_import_mb"] = mb(rss())

    if scenario == "sensor_tick":
        return {**out, **_sensor_ticks(defs, root, task)}
    if scenario.startswith("sensor_one_change"):
        checked = build_defs(layout, root, None, checks=task["report"])
        return {**out, **_sensor_one_change(checked, layout, root, task)}
    if scenario == "disk_cache":
        return _disk_cache(graph, root, task, out)

    # One session, as the sensor keeps one: each plan after the first is incremental.
    session = PlanningSession(graph, StateCache())
    cold, cold_s, cold_mem = timed(lambda: session.plan())
    assert not cold.plan.items, f"initial plan not empty: {len(cold.plan.items)} items"
    out.update({"cold_make_plan_s": cold_s, "cold_memory": cold_mem})
    before = {name: s.version for name, s in cold.states.items() if s is not None}
    del cold  # like the sensor, keep no plan between ticks (only the StateCache)
    if scenario == "no_change":
        _no_change(session, before, cold_s, task, out)
    else:
        _after_a_change(session, before, layout, task, out)
    if task.get("profile_cold"):
        out["profile_cold"] = profiled(lambda: make_plan(graph, StateCache()))[1]
    if task.get("memory_profile"):
        out["memory_profile_cold"] = memory_profile(lambda: make_plan(graph, StateCache()))
    return out


def _disk_cache(graph: Any, root: str, task: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    """`partlake plan` in a new process: the previous process left its states on disk."""
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.session import make_plan

    persist = os.path.join(root, "state_cache")
    shutil.rmtree(persist, ignore_errors=True)
    out["fill_process"] = run_child({"kind": "fill_cache", "n": task["n"], "root": root})
    result, seconds, memory = timed(lambda: make_plan(graph, StateCache(persist)))
    out.update(
        {
            "first_plan_disk_cache_s": seconds,
            "plan_items": len(result.plan.items),
            "memory": memory,
            "peak_rss_mb": self_peak_mb(),
        }
    )
    assert not result.plan.items
    return out


def _quick_check(session: Any, current: dict[str, int], repeats: int = 200) -> tuple[bool, float]:
    """The sensor's quick check (`PlanningSession.moved`): whether a table moved, and its mean
    time over `repeats` calls."""
    begun = time.perf_counter()
    for _ in range(repeats):
        changed = session.moved(current)
    return changed, (time.perf_counter() - begun) / repeats


def _no_change(
    session: Any, before: dict[str, int], cold_s: float, task: dict[str, Any], out: dict[str, Any]
) -> None:
    """Plans with nothing changed (the median of repeats), the quick check, and the same call
    with the cyclic GC off."""
    runs, memory, items = [], {}, -1
    repeats = task.get("repeats", 5) if cold_s < 5 else 3
    for _ in range(repeats):
        result, seconds, memory = timed(lambda: session.plan())
        items = len(result.plan.items)
        del result
        assert items == 0
        runs.append(seconds)
    moved, quick_s = _quick_check(session, before)
    assert not moved
    out.update(
        {
            "make_plan_s": runs,
            "make_plan_median_s": round(statistics.median(runs), 4),
            "quick_check_s": round(quick_s, 7),
            "quick_check_moved": moved,
            "plan_items": items,
            "memory": memory,
        }
    )
    out["peak_rss_mb"] = self_peak_mb()
    # Extra data point: the same call with the cyclic GC off (it walks every live object).
    gc_runs = []
    gc.disable()
    try:
        for _ in range(2):
            result, seconds, _ = timed(lambda: session.plan())
            del result
            gc_runs.append(seconds)
    finally:
        gc.enable()
    out["make_plan_gc_disabled_s"] = gc_runs
    if task.get("profile"):
        out["profile"] = profiled(lambda: session.plan())[1]


def _after_a_change(
    session: Any, before: dict[str, int], layout: Layout, task: dict[str, Any], out: dict[str, Any]
) -> None:
    """One old source partition (`one_old_change`) or 10% of them (`ten_percent`) rewritten by
    another process, then the plan that follows the new commits."""
    root, scenario = task["root"], task["scenario"]
    if scenario == "one_old_change":
        keys = [layout.old_key(0)]
        profile_keys = [layout.old_key(1)]
    else:
        keys, profile_keys = layout.ten_percent(5), layout.ten_percent(6)
    change = run_child({"kind": "mutate", "op": "change_source", "root": root, "keys": keys})
    if "error" in change:
        raise RuntimeError(f"source change failed: {change}")
    moved, quick_s = _quick_check(session, before, repeats=20)
    result, seconds, memory = timed(lambda: session.plan())
    expected = {(a, k) for a in MANAGED for k in keys}
    got = _items(result.plan)
    out.update(
        {
            "changed_source_partitions": len(keys),
            "source_commit": change,
            "quick_check_moved": moved,
            "quick_check_s": round(quick_s, 7),
            "make_plan_s": seconds,
            "plan_items": len(got),
            "expected_items": len(expected),
            "items_match_expected": got == expected,
            "reasons": _reasons(result.plan),
            "example_item": result.plan.items[0].to_json() if result.plan.items else None,
            "memory": memory,
        }
    )
    del result
    out["peak_rss_mb"] = self_peak_mb()
    assert got == expected, f"plan differs: {len(got)} items, {len(got ^ expected)} differ"
    if task.get("profile"):
        again = run_child(
            {"kind": "mutate", "op": "change_source", "root": root, "keys": profile_keys}
        )
        if "error" in again:
            raise RuntimeError(f"source change failed: {again}")
        profiled_result, out["profile"] = profiled(lambda: session.plan())
        out["profile"]["plan_items"] = len(profiled_result.plan.items)
        del profiled_result


def _items(plan: Any) -> set[tuple[str, str | None]]:
    return {(i.asset, i.partition) for i in plan.items}


def _reasons(plan: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in plan.items:
        counts[item.reason] = counts.get(item.reason, 0) + 1
    return counts


def _sensor_ticks(defs: Any, root: str, task: dict[str, Any]) -> dict[str, Any]:
    from dagster import DagsterInstance, build_sensor_context

    from dagster_partlake.orchestration.sensor import build_invalidation_sensor

    sensor = build_invalidation_sensor("plan_scale", root=root)
    repository = defs.get_repository_def()
    # As the daemon builds it: the code location's resources the sensor requires.
    resources = {
        key: value
        for key, value in repository.get_top_level_resources().items()
        if key in sensor.required_resource_keys
    }
    out: dict[str, Any] = {}
    with DagsterInstance.ephemeral() as instance:

        def tick(cursor: str | None) -> Any:
            with build_sensor_context(
                instance=instance, repository_def=repository, cursor=cursor, resources=resources
            ) as context:
                return sensor.evaluate_tick(context)  # as the daemon evaluates it

        first, first_s, first_mem = timed(lambda: tick(None))
        cursor = first.cursor
        out["first_tick_s"] = first_s
        out["first_tick_message"] = first.skip_message
        out["first_tick_memory"] = first_mem
        runs, memory, message = [], {}, None
        for _ in range(task.get("repeats", 5)):
            result, seconds, memory = timed(lambda: tick(cursor))
            assert not result.run_requests, f"expected a skip, got {result.run_requests!r}"
            message = result.skip_message
            runs.append(seconds)
        out.update(
            {
                "skip_tick_s": runs,
                "skip_tick_median_s": round(statistics.median(runs), 4),
                "skip_message": message,
                "memory": memory,
            }
        )
    return out


def _sensor_one_change(
    defs: Any, layout: Layout, root: str, task: dict[str, Any]
) -> dict[str, Any]:
    """The sensor's tick after one old source partition changed, as the daemon runs it (a
    file-backed SQLite instance): with `task["report"]`, the code location registers
    `partlake_fresh` and the tick reports the three changed verdicts; without, it does not."""
    from dagster import AssetCheckKey, AssetKey, build_sensor_context

    from dagster_partlake.freshness.report import flush_reports
    from dagster_partlake.metadata import FRESH_CHECK
    from dagster_partlake.orchestration.sensor import build_invalidation_sensor

    sensor = build_invalidation_sensor("plan_scale", root=root)
    repository = defs.get_repository_def()
    resources = {
        key: value
        for key, value in repository.get_top_level_resources().items()
        if key in sensor.required_resource_keys
    }
    out: dict[str, Any] = {"reporting": bool(task["report"])}
    instance_dir = os.path.join(root, f"sensor_instance_{task['scenario']}")
    shutil.rmtree(instance_dir, ignore_errors=True)
    with local_instance(instance_dir) as instance:

        def tick(cursor: str | None) -> Any:
            with build_sensor_context(
                instance=instance, repository_def=repository, cursor=cursor, resources=resources
            ) as context:
                return sensor.evaluate_tick(context)

        first, out["first_tick_s"], _ = timed(lambda: tick(None))
        skip = tick(first.cursor)
        assert not skip.run_requests, skip.run_requests
        key = layout.old_key(task["which"])
        change = run_child({"kind": "mutate", "op": "change_source", "root": root, "keys": [key]})
        if "error" in change:
            raise RuntimeError(f"source change failed: {change}")
        result, seconds, memory = timed(lambda: tick(skip.cursor))
        # The sensor's writer thread records the results after the tick: how long that took.
        begun = time.perf_counter()
        assert flush_reports(timeout=120)
        out["results_recorded_after_s"] = round(time.perf_counter() - begun, 4)
        requested = sorted(
            (asset.to_user_string(), request.partition_key)
            for request in result.run_requests
            for asset in request.asset_selection
        )
        reported = sum(
            len(
                instance.event_log_storage.get_asset_check_execution_history(
                    AssetCheckKey(AssetKey(asset), FRESH_CHECK), limit=10
                )
            )
            for asset in MANAGED
        )
        out.update(
            {
                "changed_key": key,
                "one_change_tick_s": seconds,
                "requested": requested,
                "results_reported": reported,
                "memory": memory,
                "peak_rss_mb": self_peak_mb(),
            }
        )
        assert {a for a, _ in requested} == set(MANAGED), requested
        assert reported == (len(MANAGED) if task["report"] else 0), reported
    # Fresh again for the next process (a run would have written a1..a3).
    out["repair"] = run_child({"kind": "mutate", "op": "repair", "root": root, "keys": [key]})
    return out


def task_fill_cache(task: dict[str, Any]) -> dict[str, Any]:
    """A first `partlake plan`: reads every table and leaves the states in the on-disk cache."""
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan

    graph = LakeGraph(build_defs(Layout(task["n"]), task["root"], None))
    _, seconds, _ = timed(
        lambda: make_plan(graph, StateCache(os.path.join(task["root"], "state_cache")))
    )
    return {"cold_make_plan_s": seconds}
