"""One `dagster asset materialize` of one partition, process start to commit, phase by phase.

    make bench-materialize BEFORE=DIR
    (or: .venv/bin/python -m benchmarks.materialize --before DIR)

The example code location (`definitions`), its asset `clean_events`, partition `2024-01-01|eu`,
on a lake of 2 days x eu, us filled by `partlake run` first, with the example's `dagster.yaml`
(SQLite; `dagster asset materialize` executes the run in its own process: no run launcher, so no
warm worker). Two set-ups (`--modes`):

- `local`: local Spark. Code with the warm Spark (`dagster_partlake.spark.warm`, issue 52)
  attaches each process to one JVM kept up between runs, in a folder of its side's work dir
  (`PARTLAKE_SPARK_WARM_DIR`), stopped at the end (`partlake spark stop --warm`); earlier code
  starts a JVM in each process. Two measures: the steady state (`--rounds`: the warm Spark
  already up, started by the lake's fill and the warm-up round), and the first materialize after
  the warm Spark was stopped (`--first` rounds, each side's process preceded by `partlake spark
  stop --warm`: the warm Spark's start is in that materialize; earlier code has nothing to stop).
- `shared`: every process on one Spark Connect server started beforehand with `partlake spark
  start` (`PARTLAKE_SPARK_REMOTE`); no warm Spark, so the steady state only.

With `--before DIR` (a checkout of earlier code, its `dagster_partlake` and `definitions` ahead on
`PYTHONPATH`, the commands run from there) each round runs the earlier code and this one back to
back, in an order that alternates, each on its own lake; the ratio of each round's pair is robust
to a machine shared with other work. Target (issue 52, local steady state): after <= 7 s process
start to commit (median) and after / before <= 0.5 (median of the per-round ratios).

Phases, from the process's start (wall clock) and the run's events in its Dagster instance:

- load: to the run's creation (the interpreter, Dagster's import, the code location, the
  selection);
- setup: creation -> the step's start (the run's start, its resources), but the Spark session;
- spark_start: getting the step's Spark session (`partlake/spark_start_seconds`): with the warm
  Spark, attaching to it (in the resources' initialization, before the step; its start too in a
  `first` round), else starting a JVM (in the step, while loading the input);
- read: loading the upstream partition, but the Spark session (`partlake/read_seconds`);
- stage: Spark computing the rows and writing the files (`partlake/stage_seconds`);
- gates: the quality gates (`partlake/gates_seconds`);
- commit: the Delta commit (`partlake/commit_seconds`);
- other: the rest of the step to its materialization event;
- to_commit: process start -> the materialization event (the issue's measure);
- exit: the materialization event -> the process's end (the check steps, the run's end, the
  Spark session's stop or the detach from the warm Spark, the interpreter's exit).

JSON on stdout and in `--out`: per mode the samples, the medians per side, the per-round ratios
and their median, the target's verdict; for `local`, the same for the `first` rounds (no target).
The median phase tables go to stderr.
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
TARGET_SECONDS = 7.0  # after, local steady state: process start to commit (median)
TARGET_RATIO = 0.5  # after / before, median of the per-round ratios (2x faster)


def log(text: str) -> None:
    print(f"[bench-materialize] {text}", file=sys.stderr, flush=True)


def side_env(checkout: Path, work: Path) -> dict[str, str]:
    """A process environment on `checkout`'s code with its own instance, lake, state cache and
    warm Spark folder."""
    home = work / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text((checkout / "scripts" / "dagster.yaml").read_text())
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(checkout),
        DAGSTER_HOME=str(home),
        PARTLAKE_HOME=str(work / "lake"),
        PARTLAKE_CACHE_DIR=str(work / "state-cache"),
        PARTLAKE_SPARK_WARM_DIR=str(work / "spark-warm"),
        SPARK_LOCAL_IP="127.0.0.1",
    )
    return env


def has_warm_spark(checkout: Path) -> bool:
    """Whether `checkout`'s code has the warm Spark (issue 52)."""
    return (checkout / "dagster_partlake" / "spark" / "warm.py").is_file()


def stop_warm_spark(checkout: Path, env: dict[str, str]) -> float | None:
    """`partlake spark stop --warm` in the side's environment (its warm Spark folder only);
    seconds it took, None where the code has no warm Spark."""
    if not has_warm_spark(checkout):
        return None
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "dagster_partlake.cli", "spark", "stop", "--warm"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        raise SystemExit(f"partlake spark stop --warm failed:\n{done.stdout}{done.stderr}")
    return round(time.perf_counter() - started, 3)


def _stop_at_end(checkout: Path, env: dict[str, str]) -> None:
    try:
        stop_warm_spark(checkout, env)
    except (SystemExit, subprocess.SubprocessError) as error:
        log(f"could not stop the warm Spark in {env['PARTLAKE_SPARK_WARM_DIR']}: {error}")


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


def materialize(checkout: Path, env: dict[str, str]) -> dict[str, Any]:
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
        events = instance.get_records_for_run(record.dagster_run.run_id, limit=10_000).records
    by_kind: dict[DagsterEventType, list[Any]] = {}
    for event in events:
        entry = event.event_log_entry
        if entry.dagster_event is not None:
            by_kind.setdefault(entry.dagster_event.event_type, []).append(entry)
    step_start = min(e.timestamp for e in by_kind[DagsterEventType.STEP_START])
    [materialized] = by_kind[DagsterEventType.ASSET_MATERIALIZATION]
    meta = materialized.asset_materialization.metadata
    value = {k: float(meta[m].value) if m in meta else 0.0 for k, m in METADATA.items()}
    # The resources' initialization before the step: the warm Spark is attached there (its
    # resource's setup_for_execution); a JVM of its own starts in the step, loading the input.
    init = [
        e.timestamp
        for kind in (DagsterEventType.RESOURCE_INIT_STARTED, DagsterEventType.RESOURCE_INIT_SUCCESS)
        for e in by_kind.get(kind, [])
        if e.timestamp <= step_start
    ]
    init_seconds = max(init) - min(init) if init else 0.0
    spark = value["spark_start"]
    in_setup = 0.0 < spark <= init_seconds
    created = record.create_timestamp.timestamp()
    phases = {
        "load": created - started,
        "setup": step_start - created - (spark if in_setup else 0.0),
        "spark_start": spark,
        "read": value["read"] - (0.0 if in_setup else spark),
        "stage": value["stage"],
        "gates": value["gates"],
        "commit": value["commit"],
    }
    in_step = sum(phases[p] for p in PHASES[3:7]) + (0.0 if in_setup else spark)
    phases["other"] = materialized.timestamp - step_start - in_step
    phases["to_commit"] = materialized.timestamp - started
    phases["exit"] = ended - materialized.timestamp
    sample: dict[str, Any] = {k: round(v, 3) for k, v in phases.items()}
    sample["spark_start_in"] = "setup" if in_setup else "step" if spark else None
    return sample


def _rounds(
    mode: str,
    sides: dict[str, Path],
    envs: dict[str, dict[str, str]],
    count: int,
    *,
    first: bool,
) -> dict[str, list[dict[str, Any]]]:
    """`count` rounds of one materialization per side, in an order that alternates; with
    `first`, each preceded by stopping the side's warm Spark."""
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    label = "first" if first else "round"
    for number in range(count):
        order = list(sides) if number % 2 == 0 else list(reversed(sides))
        for name in order:
            stopped = stop_warm_spark(sides[name], envs[name]) if first else None
            sample = materialize(sides[name], envs[name])
            if first:
                sample["warm_spark_stop_s"] = stopped
            samples[name].append(sample)
            log(f"{mode} {label} {number + 1} {name}: {json.dumps(sample)}")
    return samples


def summarize(samples: dict[str, list[dict[str, Any]]], *, target: bool) -> dict[str, Any]:
    """Medians per side; with both sides, the per-round ratios after / before and their median;
    with `target`, the verdict of issue 52's target."""
    median = {
        name: {
            p: round(statistics.median(s[p] for s in got), 3)
            for p in (*PHASES, "to_commit", "exit")
        }
        for name, got in samples.items()
    }
    out: dict[str, Any] = {"samples_s": samples, "median_s": median}
    paired = "before" in samples
    if paired:
        ratios = [
            round(a["to_commit"] / b["to_commit"], 3)
            for a, b in zip(samples["after"], samples["before"], strict=True)
        ]
        out["ratio_after_over_before"] = ratios
        out["median_ratio"] = statistics.median(ratios)
    if target:
        after = median["after"]["to_commit"]
        out["target"] = f"after <= {TARGET_SECONDS} s process start to commit (median)" + (
            f" and after / before <= {TARGET_RATIO} (median of the round ratios)" if paired else ""
        )
        out["met_seconds"] = after <= TARGET_SECONDS
        out["over_seconds_by"] = round(max(0.0, after - TARGET_SECONDS), 3)
        if paired:
            out["met_ratio"] = out["median_ratio"] <= TARGET_RATIO
            out["over_ratio_by"] = round(max(0.0, out["median_ratio"] - TARGET_RATIO), 3)
        out["met"] = out["met_seconds"] and out.get("met_ratio", True)
    return out


def phase_table(title: str, summary: dict[str, Any]) -> str:
    """The median phases per side, as the docs' table shows them."""
    median = summary["median_s"]
    lines = [
        title,
        "| code | " + " | ".join(PHASES) + " | **to_commit** | exit |",
        "| --- |" + " ---: |" * (len(PHASES) + 2),
    ]
    for name, got in median.items():
        cells = [f"{got[p]:.2f}" for p in PHASES]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | **{got['to_commit']:.2f}** | "
            f"{got['exit']:.2f} |"
        )
    if "median_ratio" in summary:
        lines.append(
            f"after / before per round: {summary['ratio_after_over_before']}, median "
            f"{summary['median_ratio']}"
        )
    if "met" in summary:
        missed = []
        if not summary["met_seconds"]:
            missed.append(f"{summary['over_seconds_by']} s over")
        if not summary.get("met_ratio", True):
            missed.append(f"the ratio {summary['over_ratio_by']} over")
        verdict = "met" if summary["met"] else f"NOT met ({', '.join(missed)})"
        lines.append(f"target: {summary['target']}: {verdict}")
    return "\n".join(lines)


def measure(
    mode: str,
    sides: dict[str, Path],
    envs: dict[str, dict[str, str]],
    rounds: int,
    first: int,
) -> dict[str, Any]:
    """Every side's lake filled, then `rounds` steady rounds and, locally, `first` rounds after
    the warm Spark was stopped."""
    for name, path in sides.items():
        log(f"{mode} {name}: filling the lake of {path}")
        fill(path, envs[name])
        # A warm-up round, not counted: the OS's file cache, and the warm Spark up (if any).
        materialize(path, envs[name])
    steady = summarize(_rounds(mode, sides, envs, rounds, first=False), target=mode == "local")
    log(phase_table(f"{mode}, steady state: median seconds per phase", steady))
    out: dict[str, Any] = dict(steady)
    if mode == "local" and first > 0:
        cold = summarize(_rounds(mode, sides, envs, first, first=True), target=False)
        log(phase_table(f"{mode}, first after `spark stop --warm`: median seconds", cold))
        out["first"] = cold
    else:
        out["first"] = None  # Spark Connect: no warm Spark to stop
    out["warm_spark_started"] = {
        name: any((Path(env["PARTLAKE_SPARK_WARM_DIR"])).glob("*/spark.log"))
        for name, env in envs.items()
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="steady-state rounds")
    parser.add_argument(
        "--first",
        type=int,
        default=3,
        help="local: rounds after `partlake spark stop --warm` (its start included); 0: none",
    )
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
        "first_rounds": args.first,
        "checkouts": {name: str(path) for name, path in sides.items()},
        "commits": {
            name: subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=path, capture_output=True, text=True
            ).stdout.strip()
            for name, path in sides.items()
        },
        "load_average_1m_start": round(os.getloadavg()[0], 2),
        "modes": {},
    }
    began = time.monotonic()
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
            for name, path in sides.items():  # whatever happens, no warm Spark outlives this
                stack.callback(_stop_at_end, path, envs[name])
            results["modes"][mode] = measure(mode, sides, envs, args.rounds, args.first)
    results["load_average_1m"] = round(os.getloadavg()[0], 2)
    results["wall_s"] = round(time.monotonic() - began, 1)
    return emit(results, args.out)


if __name__ == "__main__":
    sys.exit(main())
