"""`bench-refresh` side by side with earlier code: rounds that alternate the two checkouts.

    make bench-refresh BEFORE=DIR
    (or: .venv/bin/python -m benchmarks.interleave --before DIR --rounds 3)

Each round runs `python -m benchmarks.refresh --repeats 1` once in the earlier checkout `DIR`
and once here, in an order that alternates from round to round, each with every mode asked for
(`--modes`, default local and shared): so both sides see the same state of a machine that may
be shared with other work. The harness must be the same on both sides: `DIR`'s
`benchmarks/refresh.py` must equal this one (copy it there first; the command refuses
otherwise). Each side's own `scripts/dagster.yaml` and code are used, so the comparison is of
the code and the instance settings it ships.

Per side and mode: every repeat's seconds, the median and the target (this checkout's
`benchmarks.refresh.TARGETS`), the median of each phase on the chain, and the repeat whose total
is the median, level by level (its chain of runs: tick wait, queue, launch, JVM start, compute,
commit, other), and the launch of every run (RUN_STARTING to its first step; how many runs a
warm worker took). JSON on stdout and in `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.output import emit  # noqa: E402
from benchmarks.refresh import PHASES, TARGETS  # noqa: E402


def log(text: str) -> None:
    print(f"[bench-interleave] {text}", file=sys.stderr, flush=True)


def one_round(checkout: Path, modes: str, out: Path, extra: list[str]) -> dict[str, Any]:
    """`benchmarks.refresh` once in `checkout`, with its code on `PYTHONPATH`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "benchmarks.refresh", "--repeats", "1", "--modes", modes]
    done = subprocess.run(
        [*argv, "--out", str(out), *extra],
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=3600,
    )
    if done.returncode:
        raise SystemExit(f"benchmarks.refresh in {checkout} failed:\n{done.stderr[-4000:]}")
    return json.loads(out.read_text())


def summary(mode: str, repeats: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = [r["seconds"] for r in repeats]
    median = statistics.median(seconds)
    middle = min(repeats, key=lambda r: abs(r["seconds"] - median))
    launches = [
        run["starting_to_first_step_s"]
        for r in repeats
        for run in r["per_run"]
        if run["starting_to_first_step_s"] is not None
    ]
    return {
        "seconds": seconds,
        "median_s": median,
        "spread_s": [min(seconds), max(seconds)],
        "target_s": TARGETS[mode],
        "met": median <= TARGETS[mode],
        "median_phases_on_chain_s": {
            p: statistics.median(r["phases_on_chain_s"].get(p, 0.0) for r in repeats)
            for p in PHASES
        },
        # Every run of every repeat: RUN_STARTING -> its first step, and how many were warm.
        "starting_to_first_step_s": {
            "median": statistics.median(launches) if launches else None,
            "runs": len(launches),
            "warm_runs": sum(run["warm_worker"] for r in repeats for run in r["per_run"]),
        },
        "median_repeat": {
            "seconds": middle["seconds"],
            "phases_on_chain_s": middle["phases_on_chain_s"],
            "levels": middle["chain_levels"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a checkout of the earlier code")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="local,shared", help="comma-separated: local, shared")
    parser.add_argument(
        "--out", default=str(REPO / "benchmarks" / "out" / "refresh_interleaved.json")
    )
    args, extra = parser.parse_known_args(argv)
    before = Path(args.before).resolve()
    harness = "benchmarks/refresh.py"
    if (before / harness).read_bytes() != (REPO / harness).read_bytes():
        raise SystemExit(
            f"{before / harness} differs from {REPO / harness}: the two sides must be measured "
            f"by the same harness; copy it there (cp {REPO / harness} {before / harness})."
        )
    sides = {"before": before, "after": REPO}
    work = Path(tempfile.mkdtemp(prefix="partlake-interleave-"))
    repeats: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in sides}
    for number in range(args.rounds):
        order = list(sides) if number % 2 == 0 else list(reversed(sides))
        for name in order:
            got = one_round(sides[name], args.modes, work / f"{name}_{number}.json", extra)
            for mode in got["modes"]:
                repeats[name].setdefault(mode["mode"], []).extend(mode["repeats"])
                log(f"round {number + 1} {name} {mode['mode']}: {mode['median_s']} s")
    results: dict[str, Any] = {
        "benchmark": "refresh_interleaved",
        "cores": os.cpu_count(),
        "rounds": args.rounds,
        "checkouts": {name: str(path) for name, path in sides.items()},
        "commits": {
            name: subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=path, capture_output=True, text=True
            ).stdout.strip()
            for name, path in sides.items()
        },
        "sides": {
            name: {mode: summary(mode, got) for mode, got in by_mode.items()}
            for name, by_mode in repeats.items()
        },
        "repeats": repeats,
    }
    for mode in args.modes.split(","):
        b, a = (results["sides"][name][mode] for name in sides)
        log(
            f"{mode}: before {b['median_s']} s, after {a['median_s']} s (target <= "
            f"{a['target_s']} s: {'met' if a['met'] else 'NOT met'}); on the chain before "
            f"{json.dumps(b['median_phases_on_chain_s'])}, after "
            f"{json.dumps(a['median_phases_on_chain_s'])}"
        )
    return emit(results, args.out)


if __name__ == "__main__":
    sys.exit(main())
