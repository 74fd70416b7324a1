"""Exactness of incremental planning over random worlds: `replan` vs `plan` vs the oracle.

    .venv/bin/python -m benchmarks.exactness [--scenarios 10000] [--out PATH]

Each scenario is a random asset graph (sources, daily/monthly/region/unpartitioned schemes,
partition mappings, self-dependencies) and a random sequence of 5-40 events (source edits and
deletions, writes, failed writes, code changes, out-of-band edits, damaged and repaired logs),
drawn by the property test's generator (`tests.test_planner_property.worlds`). After every event
the plan is computed incrementally from the previous one and compared with the full plan and
the independent oracle (`tests.test_replan.replay`). JSON to stdout and `--out`: scenarios,
plans compared, how many of them were incremental, mismatches (must be 0) and the first few.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from tests.test_planner_property import Event, World, worlds
from tests.test_replan import replay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", type=int, default=10_000)
    parser.add_argument("--out", default="benchmarks/out/exactness.json")
    args = parser.parse_args(argv)
    counts = {"scenarios": 0, "plans": 0, "incremental_plans": 0, "mismatches": 0}
    examples: list[str] = []

    @settings(
        max_examples=args.scenarios,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # every scenario fresh; a mismatch is counted, not shrunk
        suppress_health_check=list(HealthCheck),
    )
    @given(worlds())
    def scenario(case: tuple[World, list[Event]]) -> None:
        world, events = case
        counts["scenarios"] += 1
        try:
            plans, incremental = replay(world, events)
        except AssertionError as error:
            counts["mismatches"] += 1
            if len(examples) < 5:
                examples.append(f"{sorted(world.specs)} {events}: {error}"[:2000])
            return
        counts["plans"] += plans
        counts["incremental_plans"] += incremental

    started = time.perf_counter()
    scenario()
    results: dict[str, Any] = {
        "benchmark": "exactness",
        **counts,
        "seconds": round(time.perf_counter() - started, 1),
        "mismatch_examples": examples,
        "met": counts["mismatches"] == 0 and counts["scenarios"] >= args.scenarios,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0 if results["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
