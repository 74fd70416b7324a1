"""One `dagster asset materialize` of one partition, process start to commit, phase by phase.

    make bench-materialize     (or: .venv/bin/python -m benchmarks.materialize --before DIR)

The example code location (`definitions`), its asset `clean_events`, partition `2024-01-01|eu`,
on a lake of 2 days x eu, us filled by `partlake run` first, with the example's `dagster.yaml`
(SQLite; `dagster asset materialize` executes the run in its own process: no run launcher, so no
warm worker). Two set-ups (`--modes`): `local`, each process starting its own local Spark, and
`shared`, every process on one Spark Connect server started beforehand with `partlake spark
start` (`PARTLAKE_SPARK_REMOTE`). With `--before DIR` (a checkout of earlier code, its
`dagster_partlake` and `definitions` ahead on `PYTHONPATH`, the commands run from there) each
round runs the earlier code and this one back to back, in an order that alternates, each on its
own lake; the ratio of each round's pair is robust to a machine shared with other work.

Phases, from the process's start (wall clock) and the run's events in its Dagster instance:

- load: to the run's creation (the interpreter, Dagster's import, the code location, the
  selection);
- setup: creation -> the step's start (the run's start, its resources);
- spark_start: the step's local Spark session (`partlake/spark_start_seconds`);
- read: loading the upstream partition, but the Spark start (`partlake/read_seconds` - it);
- stage: Spark computing the rows and writing the files (`partlake/stage_seconds`);
- gates: the quality gates (`partlake/gates_seconds`);
- commit: the Delta commit (`partlake/commit_seconds`);
- other: the rest of the step to its materialization event;
- to_commit: process start -> the materialization event (the issue's measure);
- exit: the materialization event -> the process's end (the check steps, the run's end, the
  Spark session's stop, the interpreter's exit).

JSON on stdout and in `--out`; the medians per side, the per-round ratios and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.output import emit  # noqa: E402

ASSET = "clean_events"
PARTITION = "2024-01-01|eu"
METADATA = {
    "spark_start": "partlake/spark_start_seconds",
    "read": "partlake/read_seconds",
    "stage": "partlake/stage_seconds",
    "gates": "partlake/gates_seconds",
    "commit": "partlake/commit_seconds",
    "write": "partlake/write_seconds",
}
PHASES = ("load", "setup", "spark_start", "read", "stage", "gates", "commit", "other")


def log(text: str) -> None:
    print(f"[bench-materialize] {text}", file=sys.stderr, flush=True)


def side_env(checkout: Path, work: Path) -> dict[str, str]:
    """A process environment on `checkout`'s code with its own instance, lake and state cache."""
    home = work / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text((checkout / "scripts" / "dagster.yaml").read_text())
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(checkout),
        DAGSTER_HOME=str(home),
        PARTLAKE_HOME=str(work / "lake"),
        PARTLAKE_CACHE_DIR=str(work / "state-cache"),
        SPARK_LOCAL_IP="127.0.0.1",
    )
    return env


def fill(checkout: Path, env: dict[str, str]) -> None:
    """The lake's source (2 days x eu, us) and every model, by `partlake run`."""
    days = ("--date", "2024-01-01", "--date", "2024-01-02", "--region", "eu", "--region", "us")
    for argv in (
        [sys.executable, "-m", "definitions.ingest", "--rows", "200", *days],
        [sys.executable, "-m", "dagster_partlake.cli", "run", "-m", "definitions"],
    ):
        done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(argv[2:5])} failed:\n{done.stdout[-2000:]}{done.stderr}")


def materialize(checkout: Path, env: dict[str, str]) -> dict[str, float]:
    """One `dagster asset materialize` of the partition; its phases in seconds."""
    from dagster import DagsterEventType, DagsterInstance

    dagster = str(Path(sys.executable).parent / "dagster")
    argv = [dagster, "asset", "materialize", "-m", "definitions", "--select", ASSET]
    started = time.time()
    done = subprocess.run(
        [*argv, "--partition", PARTITION], cwd=checkout, env=env, capture_output=True, text=True
    )
    ended = time.time()
    if done.returncode:
        raise SystemExit(f"dagster asset materialize failed:\n{done.stderr[-3000:]}")
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        record = instance.get_run_records(limit=1)[0]
        run_id = record.dagster_run.run_id
        step = instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_START).records
        [materialized] = instance.get_records_for_run(
            run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
        ).records
    entry = materialized.event_log_entry
    meta = entry.asset_materialization.metadata  # type: ignore[union-attr]
    value = {k: float(meta[m].value) if m in meta else 0.0 for k, m in METADATA.items()}
    created = record.create_timestamp.timestamp()
    step_start = min(r.event_log_entry.timestamp for r in step)
    phases = {
        "load": created - started,
        "setup": step_start - created,
        "spark_start": value["spark_start"],
        "read": value["read"] - value["spark_start"],
        "stage": value["stage"],
        "gates": value["gates"],
        "commit": value["commit"],
    }
    phases["other"] = entry.timestamp - step_start - sum(phases[p] for p in PHASES[2:7])
    phases["to_commit"] = entry.timestamp - started
    phases["exit"] = ended - entry.timestamp
    return {k: round(v, 3) for k, v in phases.items()}


def measure(
    mode: str,
    sides: dict[str, Path],
    envs: dict[str, dict[str, str]],
    rounds: int,
    paired: bool,
) -> dict[str, Any]:
    """Every side's lake filled, then `rounds` rounds of one materialization per side."""
    for name, path in sides.items():
        log(f"{mode} {name}: filling the lake of {path}")
        fill(path, envs[name])
        materialize(path, envs[name])  # a warm-up round, not counted (the OS's file cache)
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for number in range(rounds):
        order = list(sides) if number % 2 == 0 else list(reversed(sides))
        for name in order:
            samples[name].append(materialize(sides[name], envs[name]))
            log(f"{mode} round {number + 1} {name}: {json.dumps(samples[name][-1])}")
    median = {
        name: {p: round(statistics.median(s[p] for s in got), 3) for p in got[0]}
        for name, got in samples.items()
    }
    out: dict[str, Any] = {"samples_s": samples, "median_s": median}
    if paired:
        ratios = [
            round(a["to_commit"] / b["to_commit"], 3)
            for a, b in zip(samples["after"], samples["before"], strict=True)
        ]
        out["ratio_after_over_before"] = ratios
        out["median_ratio"] = statistics.median(ratios)
        out["target"] = "after <= before / 2 (process start to commit)"
        out["met"] = out["median_ratio"] <= 0.5
        log(
            f"{mode}: process start to commit before {median['before']['to_commit']} s, after "
            f"{median['after']['to_commit']} s, ratio {out['median_ratio']} (target <= 0.5: "
            f"{'met' if out['met'] else 'NOT met'})"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", default="local,shared", help="comma-separated: local, shared")
    parser.add_argument("--before", help="a checkout of earlier code to measure side by side")
    parser.add_argument("--work", help="where the lakes go (default: a new temporary folder)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "materialize.json"))
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="partlake-materialize-"))
    sides = {"after": REPO}
    if args.before:
        sides = {"before": Path(args.before).resolve(), **sides}
    results: dict[str, Any] = {
        "benchmark": "materialize",
        "cores": os.cpu_count(),
        "asset": ASSET,
        "partition": PARTITION,
        "rounds": args.rounds,
        "checkouts": {name: str(path) for name, path in sides.items()},
        "modes": {},
    }
    for mode in args.modes.split(","):
        with ExitStack() as stack:
            remote: dict[str, str] = {}
            if mode == "shared":
                from tests.servers import spark_connect

                server_env = side_env(REPO, work / mode / "server")
                remote["PARTLAKE_SPARK_REMOTE"] = stack.enter_context(
                    spark_connect(work / mode / "spark", server_env)
                )
            envs = {n: {**side_env(p, work / mode / n), **remote} for n, p in sides.items()}
            results["modes"][mode] = measure(mode, sides, envs, args.rounds, bool(args.before))
    results["load_average_1m"] = round(os.getloadavg()[0], 2)
    return emit(results, args.out)


if __name__ == "__main__":
    sys.exit(main())
