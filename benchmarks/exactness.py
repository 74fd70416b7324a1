"""Exactness of incremental planning over random worlds: `replan` vs `plan` vs the oracle.

    .venv/bin/python -m benchmarks.exactness [--scenarios 100000] [--jobs 2] [--seed N]
        [--out PATH]

Each scenario is a random asset graph (sources; daily/monthly time partitions with up to two
static dimensions, `date|region/product`, or none; aggregating and fan-out partition mappings;
managed assets of every model kind as the planner sees them, self-dependencies) and a random
sequence of 5-40 events (source edits and deletions, writes, failed writes, code changes,
out-of-band edits, damaged and repaired logs, retention rules set or changed, cascades,
retired partitions removed), drawn by the property test's generator
(`tests.test_planner_property.worlds`). After every event the plan is computed incrementally
from the previous one, on both of the planner's paths (one partition at a time, and in bulk on
column-wise maps), and compared with the full plan and the independent oracle
(`tests.test_replan.replay`). `--jobs` splits the scenarios over processes, each drawing its own
(job `i` uses seed `seed + i`). JSON to stdout and `--out`: scenarios, plans compared, how many
of them were incremental, mismatches (must be 0) and the first few, how many worlds held each
model kind, self-dependency and dimension count. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.test_planner_property import SCHEMES, Event, World, worlds
from tests.test_replan import replay

PROGRESS_EVERY = 1000  # scenarios between two progress lines of a job


def _features(world: World) -> set[str]:
    """What a world holds, for the coverage counts: its model kinds, decoupled tables,
    self-dependencies and the most dimensions of a partitioned asset."""
    found = set()
    for spec in world.specs.values():
        if spec.is_source:
            continue
        found.add(f"kind_{spec.kind}")
        if spec.decoupled:
            found.add("decoupled_table")
        if spec.self_dep == "read":
            found.add("reads_own_previous_partition")
        if spec.self_dep == "order":
            found.add("order_only_self_dependency")
        if spec.cascade:
            found.add("retention_cascade")
    if any(spec.retire for spec in world.specs.values()):
        found.add("retention_rule")
    dims = [
        1 + len(SCHEMES[s.scheme][1]) if s.scheme in SCHEMES else 0 for s in world.specs.values()
    ]
    found.add(f"max_dimensions_{max(dims)}")
    return found


def run_job(job: int, scenarios: int, job_seed: int) -> dict[str, Any]:
    """`scenarios` random scenarios drawn from `job_seed`: the counts and the first mismatches."""
    counts = {"scenarios": 0, "plans": 0, "incremental_plans": 0, "mismatches": 0}
    covered: dict[str, int] = {}
    examples: list[str] = []
    started = time.perf_counter()

    @seed(job_seed)
    @settings(
        max_examples=scenarios,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # every scenario fresh; a mismatch is counted, not shrunk
        suppress_health_check=list(HealthCheck),
    )
    @given(worlds())
    def scenario(case: tuple[World, list[Event]]) -> None:
        world, events = case
        counts["scenarios"] += 1
        for feature in _features(world):
            covered[feature] = covered.get(feature, 0) + 1
        try:
            plans, incremental = replay(world, events)
        except AssertionError as error:
            counts["mismatches"] += 1
            if len(examples) < 5:
                specs = list(world.specs.values())
                examples.append(f"seed {job_seed}: {specs} {events}: {error}"[:4000])
            return
        counts["plans"] += plans
        counts["incremental_plans"] += incremental
        if counts["scenarios"] % PROGRESS_EVERY == 0:
            print(
                f"[exactness] job {job}: {counts['scenarios']}/{scenarios} scenarios, "
                f"{counts['mismatches']} mismatch(es), {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    cpu = time.process_time()
    scenario()
    return {
        **counts,
        "covered": covered,
        "examples": examples,
        "cpu_seconds": round(time.process_time() - cpu, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=1, help="processes to split them over")
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--out", default="benchmarks/out/exactness.json")
    args = parser.parse_args(argv)
    base_seed = args.seed if args.seed is not None else random.randrange(2**32)
    jobs = max(1, min(args.jobs, args.scenarios))
    shares = [args.scenarios // jobs + (i < args.scenarios % jobs) for i in range(jobs)]
    print(
        f"[exactness] {args.scenarios} scenarios over {jobs} process(es), seed {base_seed}",
        file=sys.stderr,
        flush=True,
    )
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    if jobs == 1:
        results = [run_job(0, shares[0], base_seed)]
    else:
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(run_job, i, n, base_seed + i) for i, n in enumerate(shares)]
            results = [f.result() for f in futures]
    totals = {
        key: sum(r[key] for r in results)
        for key in ("scenarios", "plans", "incremental_plans", "mismatches")
    }
    covered: dict[str, int] = {}
    for result in results:
        for feature, n in result["covered"].items():
            covered[feature] = covered.get(feature, 0) + n
    output: dict[str, Any] = {
        "benchmark": "exactness",
        **totals,
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(sum(r["cpu_seconds"] for r in results), 1),
        "jobs": jobs,
        "seed": base_seed,
        "worlds_with": dict(sorted(covered.items())),
        "load_average_1m": {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)},
        "mismatch_examples": [e for r in results for e in r["examples"]][:5],
        "met": totals["mismatches"] == 0 and totals["scenarios"] >= args.scenarios,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(output, indent=2) + "\n")
    print(json.dumps(output, indent=2))
    return 0 if output["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
