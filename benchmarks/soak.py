"""The soak: the example under `dagster dev` with the sensor on while source partitions are
rewritten at random for N minutes; then quiescence, and an account of what happened.

    make soak MINUTES=20        (or: .venv/bin/python -m benchmarks.soak --minutes 20)

A writer thread rewrites a random partition of raw_events (5 days x 3 regions) at random
intervals (exponential, mean --mean-interval seconds), each time with new rows, as an upstream
system would (delta-rs, one commit). After N minutes it stops; the soak waits until nothing is
stale and no run is in flight, then reports (JSON on stdout and in benchmarks/out/soak.json):

- runs requested by the sensor against the minimum (see `minimal_runs`);
- asset partitions stale at the end (must be 0);
- failed runs, and rows lost or duplicated in each managed table against a recomputation from
  raw_events (tests/lake_checks.py; must be 0);
- RSS of the daemon and of the code server, sampled every --sample-seconds: peak, and the slope
  of a least-squares line over the writer phase (MB per hour): memory must not grow without bound.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dagster_partlake.orchestration.run_requests import IN_FLIGHT  # noqa: E402
from tests.conftest import subprocess_env  # noqa: E402
from tests.lake_checks import compare_lake  # noqa: E402
from tests.servers import DagsterDev, dagster_dev, wait_until  # noqa: E402

SENSOR = "partlake_invalidation"
MEMORY_SLOPE_LIMIT = 50.0  # MB per hour
DAYS = [dt.date(2024, 1, d) for d in range(1, 6)]
REGIONS = ["eu", "us", "apac"]
RUNS = """
{ runsOrError { ... on Runs { results {
    runId status creationTime endTime tags { key value } assetSelection { path } } } } }
"""
TICKS = """
query Ticks($sel: SensorSelector!) {
  sensorOrError(sensorSelector: $sel) {
    ... on Sensor { sensorState { ticks(limit: 100000) { timestamp status runIds } } }
  }
}
"""
SELECTOR = {
    "repositoryName": "__repository__",
    "repositoryLocationName": "definitions",
    "sensorName": SENSOR,
}


def log(message: str) -> None:
    sys.stderr.write(f"[soak {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


class Writer(threading.Thread):
    """Rewrites random raw_events partitions until stopped; remembers when and which."""

    def __init__(self, lake: Path, rows: int, mean_interval: float, seed: int) -> None:
        super().__init__(name="soak-writer", daemon=True)
        self.lake, self.rows, self.mean = lake, rows, mean_interval
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.rewrites: list[tuple[float, str, str]] = []  # (time, date, region)

    def run(self) -> None:
        from definitions.ingest import write_partition

        while not self.stop.wait(self.random.expovariate(1 / self.mean)):
            day, region = self.random.choice(DAYS), self.random.choice(REGIONS)
            write_partition(
                day, region, self.rows, seed=self.random.randrange(1, 10**6), root=str(self.lake)
            )
            self.rewrites.append((time.time(), day.isoformat(), region))


class Memory(threading.Thread):
    """RSS of the daemon and the code server of a `dagster dev`, every `interval` seconds."""

    def __init__(self, dev_pid: int, interval: float) -> None:
        super().__init__(name="soak-memory", daemon=True)
        self.dev_pid, self.interval = dev_pid, interval
        self.stop = threading.Event()
        self.samples: dict[str, list[tuple[float, float]]] = {"daemon": [], "code_server": []}

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            for role, mb in self.measure().items():
                self.samples[role].append((time.time(), mb))

    def measure(self) -> dict[str, float]:
        import psutil

        found: dict[str, float] = {}
        for proc in psutil.Process(self.dev_pid).children(recursive=True):
            try:
                command = " ".join(proc.cmdline())
                rss = proc.memory_info().rss / 2**20
            except psutil.Error:
                continue
            # `dagster dev` starts the daemon as `python -m dagster._daemon run`.
            if ("dagster-daemon" in command or "dagster._daemon" in command) and " run" in command:
                found["daemon"] = found.get("daemon", 0.0) + rss
            elif " api grpc" in command or "code-server" in command:
                found["code_server"] = found.get("code_server", 0.0) + rss
        return found


def slope_mb_per_hour(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of RSS over time."""
    if len(samples) < 3:
        return None
    xs = [(t - samples[0][0]) / 3600 for t, _ in samples]
    ys = [mb for _, mb in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return round(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var, 2)


def runs(dev: DagsterDev, since: float) -> list[dict[str, Any]]:
    found = dev.graphql(RUNS)["runsOrError"]["results"]
    for run in found:
        run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
    return [r for r in found if r["creationTime"] >= since]


def minimal_runs(
    lake: Path, rewrites: list[tuple[float, str, str]], ticks: list[float]
) -> tuple[int, int]:
    """The fewest runs that refresh the rewrites, and the runs of refreshing each promptly.

    Both are what partlake's planner and batching (`planning.runs`) make of the closure that is
    stale when the rewritten source partitions move in the final, fresh lake (every asset of the
    code location, the SQL models and a merge's later days included):

    - the minimum: all rewrites seen at once. Every asset partition in the closure must be
      written after its last upstream change, and one plan over all of them puts each in one
      run, sharing runs as far as partlake's batching can; no schedule needs fewer.
    - prompt: the rewrites that landed between two sensor ticks seen together, one plan per
      tick interval, summed: what refreshing every change at the first tick that can see it
      costs. The sensor comes out below it when a rewrite lands while an earlier one's runs are
      in flight (it waits for them and then plans both at once), above the minimum whenever
      rewrites land while their closure is being refreshed.
    """
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.planner import PartitionState, PlanInput, plan
    from dagster_partlake.planning.runs import runs_of
    from dagster_partlake.planning.session import PlanningSession
    from definitions import defs

    graph = LakeGraph(defs, root=str(lake))
    result = PlanningSession(graph, StateCache()).plan()
    assert not result.plan.items, "the lake must be fresh before the minimum is derived"
    inputs = result.inputs
    rules = graph.run_rules(inputs.assets)

    def runs_for(changed: set[str]) -> int:
        source = dict(inputs.states["raw_events"])
        for key in changed:  # moved: its lastUpdated differs from what every reader consumed
            source[key] = PartitionState(source[key].last_updated + 1)
        moved = PlanInput(
            inputs.assets,
            {**inputs.states, "raw_events": source},
            inputs.records,
            inputs.partition_keys,
            inputs.unreadable,
        )
        return len(runs_of(plan(moved), rules).runs)

    waves: dict[int, set[str]] = {}
    for when, day, region in rewrites:
        wave = next((i for i, t in enumerate(ticks) if t >= when), len(ticks))
        waves.setdefault(wave, set()).add(f"{day}|{region}")
    everything = set().union(*waves.values()) if waves else set()
    return runs_for(everything), sum(runs_for(changed) for changed in waves.values())


def soak(args: argparse.Namespace) -> dict[str, Any]:
    from definitions.ingest import write_partition

    work = Path(tempfile.mkdtemp(prefix="partlake-soak-"))
    lake, home = work / "lake", work / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "scripts" / "dagster.yaml").read_text())
    env = subprocess_env(
        DAGSTER_HOME=str(home),
        PARTLAKE_HOME=str(lake),
        PARTLAKE_CACHE_DIR=str(work / "state-cache"),
        PARTLAKE_SENSOR_INTERVAL_SECONDS=str(args.tick_seconds),
        PARTLAKE_SENSOR_RETRY_SECONDS="20",
        SPARK_LOCAL_IP="127.0.0.1",
    )
    for day in DAYS:
        for region in REGIONS:
            write_partition(day, region, args.rows, root=str(lake))
    log(f"working in {work}; dagster dev starting")
    with dagster_dev(env, work / "dagster_dev.log") as dev:
        turned_on = dev.dagster("sensor", "start", "-w", "workspace.yaml", SENSOR)
        assert turned_on.returncode == 0, turned_on.stderr[-3000:]
        started = time.monotonic()
        wait_until(lambda: dev.stale() == [], timeout=1800, what="the daemon to fill the lake")
        log(f"filled in {time.monotonic() - started:.0f} s; writing for {args.minutes} minutes")
        memory = Memory(dev.pid, args.sample_seconds)
        memory.start()
        writer = Writer(lake, args.rows, args.mean_interval, args.seed)
        writing_from = time.time()
        writer.start()
        time.sleep(args.minutes * 60)
        writer.stop.set()
        writer.join()
        writing_until = time.time()
        log(f"{len(writer.rewrites)} rewrites; waiting for quiescence")

        def quiet() -> bool:
            in_flight = [
                r
                for r in runs(dev, writing_from)
                if r["status"] in {status.value for status in IN_FLIGHT}
            ]
            return not in_flight and dev.stale() == []

        wait_until(quiet, timeout=1800, interval=10, what="nothing stale and no run in flight")
        quiesced = time.time()
        memory.stop.set()
        memory.join()
        stale = dev.stale()
        requested = [r for r in runs(dev, writing_from) if r["tags"].get("partlake/sensor")]
        state = dev.graphql(TICKS, sel=SELECTOR)["sensorOrError"]["sensorState"]
        tick_times = sorted(
            t["timestamp"] for t in state["ticks"] if t["timestamp"] >= writing_from
        )
    differences = compare_lake(lake)
    minimum, prompt = minimal_runs(lake, writer.rewrites, tick_times)
    writer_samples = {
        role: [(t, mb) for t, mb in samples if t <= writing_until]
        for role, samples in memory.samples.items()
    }
    return {
        "benchmark": "soak",
        "minutes": args.minutes,
        "mean_rewrite_interval_s": args.mean_interval,
        "sensor_interval_s": args.tick_seconds,
        "rows_per_partition": args.rows,
        "rewrites": len(writer.rewrites),
        "partitions_rewritten": len({(d, r) for _, d, r in writer.rewrites}),
        "runs_requested": len(requested),
        "runs_minimal": minimum,
        "runs_ratio": round(len(requested) / minimum, 3) if minimum else None,
        "runs_prompt": prompt,
        "runs_ratio_to_prompt": round(len(requested) / prompt, 3) if prompt else None,
        "runs_failed": sum(r["status"] == "FAILURE" for r in requested),
        "stale_at_end": len(stale),
        "rows_lost": {name: missing for name, (missing, _) in differences.items()},
        "rows_duplicated": {name: extra for name, (_, extra) in differences.items()},
        "quiescence_after_writer_s": round(quiesced - writing_until, 1),
        "memory": {
            role: {
                "samples": len(samples),
                "start_mb": round(samples[0][1], 1) if samples else None,
                "peak_mb": round(max(mb for _, mb in samples), 1) if samples else None,
                "end_mb": round(samples[-1][1], 1) if samples else None,
                "slope_mb_per_hour": slope_mb_per_hour(writer_samples[role]),
                # After the caches warmed up: the second half of the writer phase.
                "slope_second_half_mb_per_hour": slope_mb_per_hour(
                    writer_samples[role][len(writer_samples[role]) // 2 :]
                ),
            }
            for role, samples in memory.samples.items()
        },
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "met": {
            "stale_at_end_0": not stale,
            "rows_lost_0": all(m == 0 for m, _ in differences.values()),
            "rows_duplicated_0": all(e == 0 for _, e in differences.values()),
            "runs_failed_0": not any(r["status"] == "FAILURE" for r in requested),
            # Bounded memory: over the writer phase's second half, neither process grows by
            # more than MEMORY_SLOPE_LIMIT MB an hour.
            "memory_flat": all(
                (slope_mb_per_hour(samples[len(samples) // 2 :]) or 0.0) <= MEMORY_SLOPE_LIMIT
                for samples in writer_samples.values()
            ),
        },
        "work_dir": str(work),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--mean-interval", type=float, default=30, help="seconds between rewrites")
    parser.add_argument("--tick-seconds", type=int, default=10, help="the sensor's interval")
    parser.add_argument("--rows", type=int, default=300, help="rows per source partition")
    parser.add_argument("--sample-seconds", type=float, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "soak.json"))
    args = parser.parse_args()
    result = soak(args)
    text = json.dumps(result, indent=2)
    print(text)
    Path(args.out).write_text(text + "\n")
    return 0 if all(result["met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
