"""The cold `make_plan` alone, on a lake built once, to compare trees of the code on one world.

`plan_scale.py` builds its lake anew for each run (about 4 minutes at 1M partitions per asset)
and measures every case; this measures only the first plan of a new process with an empty
`StateCache` (what `partlake plan` without its on-disk cache does) on a lake built once with
`--build`, so that two trees of the code are timed on the same bytes. The tree measured is the
one in the current folder: its `benchmarks.plan_lake` and `dagster_partlake` are imported from
there (run it with `PYTHONPATH` set to that folder as well).

Prints one JSON line: CPU seconds (`time.process_time`, the measure on a shared machine) and
wall seconds of each repeat (each repeat a new `PlanningSession` and `StateCache` in this
process; the first is what `plan_scale.py` reports as `cold_make_plan`), the collections the
cyclic GC ran during each (per generation) and their CPU time, the 1-minute load average, the
peak RSS of the process, and the module measured.

With `--case ten_percent` it measures instead `plan_scale.py`'s `ten_percent` case: a plan
of a warm session (one cold plan and one with nothing changed before it) right after another
system rewrote 10% of src's partitions in one commit. `--build` then also makes that commit
once and keeps it beside the lake (`TEN_PERCENT_COMMIT`); each repeat is a new process state
(new session and `StateCache`) that syncs without it, then finds it in src's log (written
back, taken out again after the plan): every tree reads the same bytes.

Usage (the lake of `plan_scale.py --sizes N`, kept here in `WORLD`):
    .venv/bin/python benchmarks/plan_cold.py WORLD N --build [--case ten_percent]
    cd TREE && PYTHONPATH=TREE nice -n 19 PYTHON /path/to/plan_cold.py WORLD N [--repeats R]
        [--profile OUT] [--case ten_percent]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
import warnings
from typing import Any


class _Collections:
    """The cyclic GC's collections while it is attached (`gc.callbacks`), and their CPU time."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.cpu_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
            return
        self.counts[info["generation"]] += 1
        self.cpu_s += time.process_time() - self._started


def _cold_plans(root: str, n: int, repeats: int, profile: str | None) -> dict[str, Any]:
    from benchmarks.plan_lake import Layout, build_defs
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession

    graph = LakeGraph(build_defs(Layout(n), root, None))
    cpu, wall, collections = [], [], []
    for _ in range(repeats):
        gc.collect()
        watch = _Collections()
        gc.callbacks.append(watch)
        began_cpu, began = time.process_time(), time.perf_counter()
        result = PlanningSession(graph, StateCache()).plan()
        cpu.append(round(time.process_time() - began_cpu, 3))
        wall.append(round(time.perf_counter() - began, 3))
        gc.callbacks.remove(watch)
        collections.append({"per_generation": watch.counts, "cpu_s": round(watch.cpu_s, 3)})
        assert not result.plan.items, f"the first plan is not empty: {len(result.plan.items)}"
        del result
    if profile:
        import cProfile

        gc.collect()
        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(lambda: PlanningSession(graph, StateCache()).plan())
        profiler.dump_stats(profile)
    return {"cpu_s": cpu, "wall_s": wall, "gc": collections}


TEN_PERCENT_COMMIT = "ten_percent_commit.json"  # in WORLD: the commit and its name in src's log


def _ten_percent_commit(root: str, n: int) -> dict[str, Any]:
    """Make the 10% commit to src once, then take it out of the log (kept in WORLD)."""
    from benchmarks.plan_lake import Layout, _table, change_source

    made = change_source(root, Layout(n).ten_percent(5))
    log = os.path.join(_table(root, "src"), "_delta_log")
    name = f"{made['version']:020d}.json"
    with open(os.path.join(log, name), "rb") as commit:
        data = commit.read()
    with open(os.path.join(root, TEN_PERCENT_COMMIT), "w") as kept:
        json.dump({"name": name, "commit": data.decode()}, kept)
    _take_out(root)
    return {**made, "name": name, "bytes": len(data)}


def _take_out(root: str) -> tuple[str, str]:
    """Remove the kept 10% commit from src's log (if there); its path in the log and text."""
    from benchmarks.plan_lake import _table

    with open(os.path.join(root, TEN_PERCENT_COMMIT)) as kept:
        found = json.load(kept)
    path = os.path.join(_table(root, "src"), "_delta_log", found["name"])
    if os.path.exists(path):
        os.remove(path)
    return path, found["commit"]


def _ten_percent_plans(root: str, n: int, repeats: int, profile: str | None) -> dict[str, Any]:
    from benchmarks.plan_lake import Layout, build_defs
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession

    graph = LakeGraph(build_defs(Layout(n), root, None))
    cpu, wall, items = [], [], []
    for index in range(repeats + (1 if profile else 0)):
        path, text = _take_out(root)
        session = PlanningSession(graph, StateCache())
        for _ in range(2):  # cold, then warm with nothing changed
            assert not session.plan().plan.items
        with open(path, "w") as commit:
            commit.write(text)
        try:
            gc.collect()
            if index == repeats:  # the profile: one more plan, not timed
                import cProfile

                profiler = cProfile.Profile(time.process_time)
                result = profiler.runcall(session.plan)
                profiler.dump_stats(profile)
            else:
                began_cpu, began = time.process_time(), time.perf_counter()
                result = session.plan()
                cpu.append(round(time.process_time() - began_cpu, 3))
                wall.append(round(time.perf_counter() - began, 3))
            items.append(len(result.plan.items))
            del result, session
        finally:
            _take_out(root)
    expected = 3 * len(Layout(n).ten_percent(5))
    assert set(items) == {expected}, f"plan items {items}, expected {expected}"
    return {"case": "ten_percent", "cpu_s": cpu, "wall_s": wall, "plan_items": items[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world", help="the lake's folder (plan_scale.py's --work for one size)")
    parser.add_argument("n", type=int, help="partitions per asset (a multiple of 100)")
    parser.add_argument("--build", action="store_true", help="build the lake there first")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--profile", help="a cProfile dump of one more plan (CPU time)")
    parser.add_argument("--case", choices=("cold", "ten_percent"), default="cold")
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())  # the tree measured: the current folder's
    warnings.filterwarnings("ignore")
    if args.build:
        from benchmarks.plan_lake import Layout, build_lake

        os.makedirs(args.world, exist_ok=True)
        if not os.path.exists(os.path.join(args.world, "warehouse", "src")):
            print(json.dumps(build_lake(Layout(args.n), args.world)), flush=True)
        if args.case == "ten_percent":
            print(json.dumps(_ten_percent_commit(args.world, args.n)), flush=True)
        return
    measure = _ten_percent_plans if args.case == "ten_percent" else _cold_plans
    found = measure(args.world, args.n, args.repeats, args.profile)
    import dagster_partlake

    found.update(
        load_average_1m=round(os.getloadavg()[0], 2),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        module=dagster_partlake.__file__,
    )
    print(json.dumps(found))


if __name__ == "__main__":
    main()
