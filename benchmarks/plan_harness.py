"""The planning benchmark's measuring harness: one fresh process per measured case.

Each (N, scenario, tool) runs in its own subprocess (`plan_scale.py _task`), so each has its own
peak memory; this module holds the tasks those processes run (partlake's planner and sensor,
Dagster's automation evaluation) and the orchestration that builds a lake and runs them.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.plan_lake import (
    ASSETS,
    CONDITIONS,
    MANAGED,
    REGIONS,
    START,
    Layout,
    build_defs,
    build_lake,
    change_source,
    repair,
)
from benchmarks.plan_report import auto_notes, log, summarize_partlake, targets

REPO = Path(__file__).resolve().parents[1]
ENTRY = Path(__file__).with_name("plan_scale.py")  # children run `plan_scale.py _task`
RESULT_MARK = "@@PLAN_SCALE_RESULT@@"


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def _mb(value: float) -> float:
    return round(value / 2**20, 1)


def self_peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


class RssSampler:
    """Peak RSS of this process during a block, sampled every `interval` s by a thread."""

    def __init__(self, interval: float = 0.005) -> None:
        import psutil

        self._process = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self.before = self.peak = self.after = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(self._interval)

    def __enter__(self) -> RssSampler:
        self.cpu = time.process_time()
        self.before = self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.after = self._process.memory_info().rss
        self.peak = max(self.peak, self.after)
        self.cpu = time.process_time() - self.cpu

    def report(self) -> dict[str, float]:
        return {
            "rss_before_mb": _mb(self.before),
            "rss_peak_during_mb": _mb(self.peak),
            "rss_after_mb": _mb(self.after),
            # CPU seconds of the process (all its threads, the sampler's too) during the call:
            # steadier than wall time on a shared machine.
            "cpu_s": round(self.cpu, 3),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }


def timed(fn: Callable[[], Any]) -> tuple[Any, float, dict[str, float]]:
    with RssSampler() as sampler:
        started = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - started
    return value, round(seconds, 4), sampler.report()


def top_functions(profile: cProfile.Profile, limit: int = 12) -> dict[str, list[str]]:
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, func), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        name = filename
        for marker in ("site-packages/", str(REPO) + "/"):
            if marker in name:
                name = name.split(marker, 1)[1]
        rows.append((cumtime, tottime, calls, f"{name}:{line}({func})"))

    def fmt(row: tuple) -> str:
        return f"{row[3]} cum={row[0]:.3f}s self={row[1]:.3f}s calls={row[2]}"

    return {
        "by_cumulative": [fmt(r) for r in sorted(rows, key=lambda r: -r[0])[:limit]],
        "by_self": [fmt(r) for r in sorted(rows, key=lambda r: -r[1])[:limit]],
        "total_s": round(max((r[0] for r in rows), default=0.0), 3),
    }


def profiled(fn: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    profile = cProfile.Profile()
    profile.enable()
    try:
        value = fn()
    finally:
        profile.disable()
    return value, top_functions(profile)


def run_child(task: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run `task` in a fresh Python process; its result dict (or an error dict)."""
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(ENTRY), "_task"],
            input=json.dumps(task),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(REPO),
        )
    except subprocess.TimeoutExpired:
        return {
            "error": f"timed out after {timeout:.0f} s",
            "wall_s": round(time.perf_counter() - started, 1),
        }
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK) :])
            result["process_wall_s"] = round(time.perf_counter() - started, 2)
            return result
    return {
        "error": f"exit code {proc.returncode}",
        "stderr_tail": proc.stderr[-3000:],
        "wall_s": round(time.perf_counter() - started, 1),
    }


# --------------------------------------------------------------------------------------------
# Tasks (each runs in its own process)
# --------------------------------------------------------------------------------------------


def task_build(task: dict[str, Any]) -> dict[str, Any]:
    layout = Layout(task["n"])
    started = time.perf_counter()
    timings = build_lake(layout, task["root"])
    return {"build_s": round(time.perf_counter() - started, 2), **timings}


def task_mutate(task: dict[str, Any]) -> dict[str, Any]:
    if task["op"] == "change_source":
        return change_source(task["root"], task["keys"])
    return repair(task["root"], task["keys"])


def _items(plan: Any) -> set[tuple[str, str | None]]:
    return {(i.asset, i.partition) for i in plan.items}


def _reasons(plan: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in plan.items:
        counts[item.reason] = counts.get(item.reason, 0) + 1
    return counts


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
    out["rss_after_import_mb"] = _mb(_rss())

    if scenario == "sensor_tick":
        return {**out, **_sensor_ticks(defs, root, task)}
    if scenario.startswith("sensor_one_change"):
        checked = build_defs(layout, root, None, checks=task["report"])
        return {**out, **_sensor_one_change(checked, layout, root, task)}

    if scenario == "disk_cache":
        # `partlake plan` in a new process: the previous process left its states on disk.
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

    # One session, as the sensor keeps one: each plan after the first is incremental.
    session = PlanningSession(graph, StateCache())
    cold, cold_s, cold_mem = timed(lambda: session.plan())
    assert not cold.plan.items, f"initial plan not empty: {len(cold.plan.items)} items"
    out.update({"cold_make_plan_s": cold_s, "cold_memory": cold_mem})
    before = {name: s.version for name, s in cold.states.items() if s is not None}
    del cold  # like the sensor, keep no plan between ticks (only the StateCache)

    def quick_check(current: dict[str, int], repeats: int = 200) -> tuple[bool, float]:
        begun = time.perf_counter()
        for _ in range(repeats):
            changed = session.moved(current)
        return changed, (time.perf_counter() - begun) / repeats

    if scenario == "no_change":
        runs, memory, items = [], {}, -1
        repeats = task.get("repeats", 5) if cold_s < 5 else 3
        for _ in range(repeats):
            result, seconds, memory = timed(lambda: session.plan())
            items = len(result.plan.items)
            del result
            assert items == 0
            runs.append(seconds)
        moved, quick_s = quick_check(before)
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
    else:
        if scenario == "one_old_change":
            keys = [layout.old_key(0)]
            profile_keys = [layout.old_key(1)]
        else:
            keys, profile_keys = layout.ten_percent(5), layout.ten_percent(6)
        change = run_child({"kind": "mutate", "op": "change_source", "root": root, "keys": keys})
        if "error" in change:
            raise RuntimeError(f"source change failed: {change}")
        moved, quick_s = quick_check(before, repeats=20)
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
    if task.get("profile_cold"):
        out["profile_cold"] = profiled(lambda: make_plan(graph, StateCache()))[1]
    if task.get("memory_profile"):
        out["memory_profile_cold"] = memory_profile(lambda: make_plan(graph, StateCache()))
    return out


def memory_profile(fn: Callable[[], Any], limit: int = 10) -> dict[str, Any]:
    """Python allocations still held after `fn` (tracemalloc, by line), and the RSS growth.

    The RSS growth includes tracemalloc's own bookkeeping (a traceback per block, millions of
    blocks at 100k), so `native_or_untraced_mb` overstates native memory; compare
    `python_traced_mb` with the cold make_plan RSS growth of the timed run instead."""
    import tracemalloc

    gc.collect()
    rss_before = _rss()
    tracemalloc.start()
    value = fn()
    snapshot = tracemalloc.take_snapshot()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_growth = _rss() - rss_before
    rows = []
    for stat in snapshot.statistics("lineno")[:limit]:
        frame = stat.traceback[0]
        name = frame.filename
        for marker in ("site-packages/", str(REPO) + "/"):
            if marker in name:
                name = name.split(marker, 1)[1]
        rows.append(f"{name}:{frame.lineno} {_mb(stat.size)} MB in {stat.count} blocks")
    del value
    return {
        "python_traced_mb": _mb(traced),
        "rss_growth_mb": _mb(rss_growth),
        "native_or_untraced_mb": _mb(rss_growth - traced),
        "top_lines": rows,
    }


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
    with _instance(instance_dir) as instance:

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


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


# ---- Dagster --------------------------------------------------------------------------------


def _instance(path: str) -> Any:
    from dagster import DagsterInstance

    os.makedirs(path, exist_ok=True)
    return DagsterInstance.local_temp(tempdir=path)


def _materializations(asset: str, keys: Sequence[str]) -> list[Any]:
    from dagster import AssetKey, AssetMaterialization

    return [AssetMaterialization(AssetKey(asset), partition=k) for k in keys]


def report_api(instance: Any, events: Sequence[Any]) -> float:
    started = time.perf_counter()
    for event in events:
        instance.report_runless_asset_event(event)
    return time.perf_counter() - started


class OverBudget(Exception):
    """Reporting the events through Dagster's public API would take longer than allowed."""


def report(
    instance: Any, events: Sequence[Any], *, budget_s: float, sample: int = 1000
) -> dict[str, Any]:
    """Report every event through Dagster's public API (`report_runless_asset_event`).

    Raises:
        OverBudget: a first sample shows the whole would exceed `budget_s`; nothing more is
            loaded (writing Dagster's tables directly would depend on its internals).
    """
    sample = min(sample, len(events))
    api_s = report_api(instance, events[:sample])
    estimate = api_s / sample * len(events) if sample else 0.0
    per_s = round(sample / api_s, 1) if api_s else None
    if estimate > budget_s:
        raise OverBudget(
            f"reporting {len(events)} materializations through report_runless_asset_event "
            f"would take ~{estimate:.0f} s ({per_s} events/s on the first {sample}), over the "
            f"budget of {budget_s:.0f} s"
        )
    rest_s = report_api(instance, events[sample:])
    return {
        "events": len(events),
        "method": "instance.report_runless_asset_event for every event",
        "api_s": round(api_s + rest_s, 2),
        "api_events_per_s": round(len(events) / (api_s + rest_s), 1) if api_s + rest_s else None,
        "total_s": round(api_s + rest_s, 2),
    }


def task_dagster_load(task: dict[str, Any]) -> dict[str, Any]:
    """Report every partition of src, a1, a2, a3 as materialized (upstream first)."""
    warnings.filterwarnings("ignore")
    from dagster import AssetKey

    layout = Layout(task["n"])
    instance = _instance(task["instance_dir"])
    keys = layout.keys()
    events = [e for asset in ASSETS for e in _materializations(asset, keys)]
    try:
        out = report(instance, events, budget_s=task["budget_s"], sample=task.get("sample", 1000))
    except OverBudget as error:
        instance.dispose()
        return {"over_budget": str(error)}
    started = time.perf_counter()
    counts = {a: len(instance.get_materialized_partitions(AssetKey(a))) for a in ASSETS}
    out["materialized_partitions"] = counts
    out["materialized_partitions_check_s"] = round(time.perf_counter() - started, 2)
    assert all(c == layout.n for c in counts.values()), counts
    instance.dispose()
    return out


def task_dagster_eval(task: dict[str, Any]) -> dict[str, Any]:
    """One automation condition in a fresh process, on its own copy of the loaded instance."""
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("dagster").setLevel(logging.WARNING)
    from dagster import AssetKey, AssetSelection, evaluate_automation_conditions

    layout, condition = Layout(task["n"]), task["condition"]
    copy_started = time.perf_counter()
    shutil.copytree(task["instance_dir"], task["copy_dir"])
    out: dict[str, Any] = {"instance_copy_s": round(time.perf_counter() - copy_started, 2)}
    instance = _instance(task["copy_dir"])
    defs = build_defs(layout, task["root"], condition)
    selection = AssetSelection.assets(*MANAGED)
    cursor = None

    def evaluate(label: str, watch: Sequence[str] = ()) -> None:
        nonlocal cursor
        result, seconds, memory = timed(
            lambda: evaluate_automation_conditions(
                defs=defs, instance=instance, asset_selection=selection, cursor=cursor
            )
        )
        cursor = result.cursor
        requested = {a: result.get_num_requested(AssetKey(a)) for a in MANAGED}
        entry: dict[str, Any] = {
            "seconds": seconds,
            "requested_total": sum(requested.values()),
            "requested": requested,
            "memory": memory,
        }
        if watch:
            wanted = set(watch)
            entry["requested_of_changed"] = {
                a: len(wanted & set(result.get_requested_partitions(AssetKey(a)))) for a in MANAGED
            }
        out[label] = entry

    evaluate("first_evaluation")
    evaluate("no_change")
    old = [layout.old_key(0)]
    out["report_one_old_s"] = round(report_api(instance, _materializations("src", old)), 4)
    evaluate("one_old_change", old)
    out["one_old_change"]["changed_key"] = old[0]
    out["one_old_change"]["requested_changed_key"] = {
        a: out["one_old_change"]["requested_of_changed"][a] == 1 for a in MANAGED
    }
    ten = layout.ten_percent(5)
    try:
        out["report_ten_percent"] = report(
            instance, _materializations("src", ten), budget_s=task["budget_s"], sample=500
        )
    except OverBudget as error:
        out["ten_percent"] = {"over_budget": str(error)}
    else:
        evaluate("ten_percent", ten)
        out["ten_percent"]["changed_source_partitions"] = len(ten)
    # The same kind of change reported as an AssetObservation of src (another old partition).
    from dagster import AssetObservation

    observed = [layout.old_key(1)]
    instance.report_runless_asset_event(AssetObservation(AssetKey("src"), partition=observed[0]))
    evaluate("one_old_change_as_observation", observed)
    instance.dispose()
    shutil.rmtree(task["copy_dir"], ignore_errors=True)
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


TASKS = {
    "build": task_build,
    "fill_cache": task_fill_cache,
    "mutate": task_mutate,
    "partlake": task_partlake,
    "dagster_load": task_dagster_load,
    "dagster_eval": task_dagster_eval,
}


def task_main(raw: str) -> None:
    task = json.loads(raw)
    try:
        result = TASKS[task["kind"]](task)
    except BaseException as error:  # report, then fail
        result = {
            "error": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc()[-3000:],
        }
    result.setdefault("peak_rss_mb", self_peak_mb())  # partlake tasks set it before profiling
    result["peak_rss_at_exit_mb"] = self_peak_mb()
    result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    result["peak_rss_method"] = (
        "resource.getrusage(RUSAGE_SELF).ru_maxrss of this task's process (before profiling)"
    )
    sys.stdout.write(RESULT_MARK + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------


@contextmanager
def workdir(base: str, n: int) -> Iterator[str]:
    path = os.path.join(base, f"n{n}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    yield path


# Old source partitions the sensor's one-change ticks rewrite: three without reporting, three
# with (`Layout.old_key(which)`), interleaved.
SENSOR_CHANGE_KEYS = (2, 3, 4, 5, 6, 7)


def _sensor_one_change_side_by_side(n: int, root: str) -> dict[str, Any]:
    """The one-change sensor tick without and with partlake_fresh reporting, three processes
    each, interleaved (off, on, off, ...) so that both see the same machine."""
    out: dict[str, Any] = {}
    for i, which in enumerate(SENSOR_CHANGE_KEYS):
        report = i % 2 == 1
        name = f"sensor_one_change_{'report' if report else 'no_report'}_{i // 2 + 1}"
        log(f"N={n}: partlake {name}")
        out[name] = run_child(
            {
                "kind": "partlake",
                "n": n,
                "root": root,
                "scenario": name,
                "report": report,
                "which": which,
            }
        )
        if "error" in out[name]:
            log(f"N={n}: partlake {name} failed: {out[name]['error']}")
    return out


def measure_size(n: int, args: argparse.Namespace) -> dict[str, Any]:
    layout = Layout(n)
    entry: dict[str, Any] = {
        "n_per_asset": n,
        "assets": list(ASSETS),
        "total_partitions": 4 * n,
        "layout": f"{layout.days} days from {START} x {REGIONS} regions; identity mappings",
        "notes": [],
    }
    profile = not args.no_profile
    with workdir(args.work, n) as root:
        log(f"N={n}: building the lake in {root}")
        entry["build"] = run_child({"kind": "build", "n": n, "root": root})
        if "error" in entry["build"]:
            entry["notes"].append("lake build failed; nothing measured")
            return entry

        partlake: dict[str, Any] = {}
        scenarios = (
            ()
            if args.skip_partlake
            else (
                "no_change",
                "disk_cache",
                "sensor_tick",
                "one_old_change",
                "sensor_one_change",
                "ten_percent",
            )
        )
        for scenario in scenarios:
            if scenario == "sensor_one_change":  # the one-old-change partitions fresh again
                changed = [layout.old_key(0)] + ([layout.old_key(1)] if profile else [])
                partlake["repair_after_one_old_change"] = run_child(
                    {"kind": "mutate", "op": "repair", "root": root, "keys": changed}
                )
            if scenario == "sensor_one_change":
                partlake.update(_sensor_one_change_side_by_side(n, root))
                continue
            log(f"N={n}: partlake {scenario}")
            partlake[scenario] = run_child(
                {
                    "kind": "partlake",
                    "n": n,
                    "root": root,
                    "scenario": scenario,
                    "profile": profile,
                    "profile_cold": profile and scenario == "no_change",
                    "memory_profile": profile and scenario == "no_change",
                    "repeats": args.repeats,
                }
            )
            if "error" in partlake[scenario]:
                log(f"N={n}: partlake {scenario} failed: {partlake[scenario]['error']}")
        entry["partlake"] = summarize_partlake(partlake)
        entry["partlake_detail"] = partlake

        if args.skip_dagster:
            entry["notes"].append("Dagster comparison skipped (--skip-dagster)")
        elif n > args.dagster_max:
            entry["notes"].append(
                f"Dagster not run at N={n} (--dagster-max {args.dagster_max}): reporting every "
                "partition as materialized takes longer than the benchmark's time limit"
            )
        else:
            entry["dagster"] = measure_dagster(n, root, args, entry["notes"])
    entry["targets"] = targets(n, entry)
    entry["notes"].extend(auto_notes(n, entry))
    return entry


def measure_dagster(
    n: int, root: str, args: argparse.Namespace, notes: list[str]
) -> dict[str, Any]:
    base = args.dagster_dir or os.path.join(root, "dagster")
    instance_dir = os.path.join(base, f"plan_scale_n{n}_instance")
    shutil.rmtree(instance_dir, ignore_errors=True)
    out: dict[str, Any] = {"instance": f"SQLite DagsterInstance.local_temp in {base}"}
    try:
        log(f"N={n}: Dagster: reporting {4 * n} materializations")
        load = run_child(
            {
                "kind": "dagster_load",
                "n": n,
                "instance_dir": instance_dir,
                "budget_s": args.report_budget,
            }
        )
        out["load"] = load
        if "error" in load:
            notes.append(f"Dagster load failed: {load['error']}")
            return out
        if "over_budget" in load:
            notes.append(f"Dagster not measured at N={n}: {load['over_budget']}.")
            return out
        out["report_events_per_s"] = load.get("api_events_per_s")
        out["report_all_s"] = load.get("total_s")
        for condition in CONDITIONS:
            log(f"N={n}: Dagster {condition}")
            out[condition] = run_child(
                {
                    "kind": "dagster_eval",
                    "n": n,
                    "root": root,
                    "condition": condition,
                    "instance_dir": instance_dir,
                    "copy_dir": f"{instance_dir}_{condition}",
                    "budget_s": args.report_budget / 5,
                },
                timeout=args.dagster_timeout,
            )
            if "error" in out[condition]:
                notes.append(f"Dagster {condition}: {out[condition]['error']}")
    finally:
        shutil.rmtree(instance_dir, ignore_errors=True)
    return out
