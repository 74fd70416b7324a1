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

Usage (the lake of `plan_scale.py --sizes N`, kept here in `WORLD`):
    .venv/bin/python benchmarks/plan_cold.py WORLD N --build
    cd TREE && PYTHONPATH=TREE nice -n 19 PYTHON /path/to/plan_cold.py WORLD N [--repeats R]
        [--profile OUT]
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
        profiler = cProfile.Profile()
        profiler.runcall(lambda: PlanningSession(graph, StateCache()).plan())
        profiler.dump_stats(profile)
    return {"cpu_s": cpu, "wall_s": wall, "gc": collections}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world", help="the lake's folder (plan_scale.py's --work for one size)")
    parser.add_argument("n", type=int, help="partitions per asset (a multiple of 100)")
    parser.add_argument("--build", action="store_true", help="build the lake there first")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--profile", help="a cProfile dump of one more cold plan")
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())  # the tree measured: the current folder's
    warnings.filterwarnings("ignore")
    if args.build:
        from benchmarks.plan_lake import Layout, build_lake

        os.makedirs(args.world, exist_ok=True)
        print(json.dumps(build_lake(Layout(args.n), args.world)), flush=True)
        return
    found = _cold_plans(args.world, args.n, args.repeats, args.profile)
    import dagster_partlake

    found.update(
        load_average_1m=round(os.getloadavg()[0], 2),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        module=dagster_partlake.__file__,
    )
    print(json.dumps(found))


if __name__ == "__main__":
    main()
