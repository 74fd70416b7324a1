"""The planning benchmark's harness: one fresh process per measured case, and the order of cases.

`measure_size` builds the lake of one size (`benchmarks.plan_lake`), runs partlake's scenarios
(`benchmarks.plan_partlake`) and Dagster's (`benchmarks.plan_dagster`), each in its own
`plan_scale.py _task` process (`benchmarks.plan_measure.run_child`), and summarizes them
(`benchmarks.plan_report`). `task_main` is what such a process runs: the task named in the JSON
on its stdin, its result as one line on its stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.plan_dagster import measure_dagster, task_dagster_eval, task_dagster_load
from benchmarks.plan_lake import ASSETS, REGIONS, START, Layout, build_lake, change_source, repair
from benchmarks.plan_measure import RESULT_MARK, run_child, self_peak_mb
from benchmarks.plan_partlake import task_fill_cache, task_partlake
from benchmarks.plan_report import auto_notes, log, summarize_partlake, targets


def task_build(task: dict[str, Any]) -> dict[str, Any]:
    layout = Layout(task["n"])
    started = time.perf_counter()
    timings = build_lake(layout, task["root"])
    return {"build_s": round(time.perf_counter() - started, 2), **timings}


def task_mutate(task: dict[str, Any]) -> dict[str, Any]:
    if task["op"] == "change_source":
        return change_source(task["root"], task["keys"])
    return repair(task["root"], task["keys"])


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
