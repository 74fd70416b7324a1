"""Dagster's side of the planning benchmark: its automation conditions on the same lake.

`task_dagster_load` reports every partition of src, a1..a3 as materialized through Dagster's
public API (or says the reporting would exceed the budget); `task_dagster_eval` evaluates one
automation condition (`eager()`, `any_deps_updated()`) on a copy of that instance after no
change, one old source partition and 10% of them; `measure_dagster` runs both for one size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import warnings
from collections.abc import Sequence
from typing import Any

from benchmarks.plan_lake import ASSETS, CONDITIONS, MANAGED, Layout, build_defs
from benchmarks.plan_measure import run_child, timed
from benchmarks.plan_report import log


def local_instance(path: str) -> Any:
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
    instance = local_instance(task["instance_dir"])
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
    instance = local_instance(task["copy_dir"])
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
