"""`bench-refresh` side by side with earlier code: rounds that alternate the two checkouts.

    make bench-refresh BEFORE=DIR
    (or: .venv/bin/python -m benchmarks.interleave --before DIR --rounds 3)

Each round runs `python -m benchmarks.refresh --repeats R` (`--repeats`, default 2: a rewrite of
the first day, three runs on two levels, and of the second, two runs; the daemon's refresh first
in one, `partlake run` first in the other) once in the earlier checkout `DIR` and once here, in
an order that alternates from round to round, each with every mode asked for (`--modes`, default
local and shared): so both sides see the same state of a machine that may be shared with other
work. Other arguments go to `benchmarks.refresh` as they are (`--no-partlake-run`,
`--warmup`). The harness must be the same on both sides: `DIR`'s `benchmarks/refresh.py` must
equal this one (copy it there first; the command refuses otherwise). Each side's own
`scripts/dagster.yaml` and code are used, so the comparison is of the code and the instance
settings it ships.

Per side and mode: every repeat's seconds, the median and the target (this checkout's
`benchmarks.refresh.TARGETS`), the median of each phase on the chain, and the repeat whose total
is the median, level by level (its chain of runs: tick wait, queue, launch, JVM start, compute,
commit, other), and the launch of every run (RUN_STARTING to its first step; how many runs a
warm worker took); `partlake run` of the same closures (its seconds, median, phases) and the
daemon's median over its median (issue 52: <= 1.5). Per mode, `partlake run` after / before
(issue 52: faster than before). JSON on stdout and in `--out`.
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.output import emit  # noqa: E402
from benchmarks.refresh import summarize_mode  # noqa: E402


def log(text: str) -> None:
    print(f"[bench-interleave] {text}", file=sys.stderr, flush=True)


def one_round(
    checkout: Path, modes: str, repeats: int, out: Path, extra: list[str]
) -> dict[str, Any]:
    """`benchmarks.refresh` once in `checkout`, with its code on `PYTHONPATH`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "benchmarks.refresh", "--repeats", str(repeats)]
    argv += ["--modes", modes]
    # Its progress (stderr) shows as it goes; its JSON is read from `out`.
    done = subprocess.run(
        [*argv, "--out", str(out), *extra],
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        timeout=3600,
    )
    if done.returncode:
        raise SystemExit(f"benchmarks.refresh in {checkout} failed (its log is above)")
    return json.loads(out.read_text())


def summary(mode: str, repeats: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's set-up: the daemon's repeats, and `partlake run`'s (`runs`, maybe none)."""
    both = summarize_mode(mode, repeats, runs)
    median = both["median_s"]
    middle = min(repeats, key=lambda r: abs(r["seconds"] - median))
    launches = [
        run["starting_to_first_step_s"]
        for r in repeats
        for run in r["per_run"]
        if run["starting_to_first_step_s"] is not None
    ]
    return {
        "seconds": [r["seconds"] for r in repeats],
        **{
            k: both[k]
            for k in (
                "median_s",
                "spread_s",
                "target_s",
                "met",
                "over_by_s",
                "median_phases_on_chain_s",
            )
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
        "partlake_run": (
            {k: v for k, v in both["partlake_run"].items() if k != "repeats"}
            | {"seconds": [r["seconds"] for r in runs]}
            if runs
            else None
        ),
        "daemon_over_partlake_run": both.get("daemon_over_partlake_run"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a checkout of the earlier code")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="repeats per round and side")
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
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in sides}
    began = time.monotonic()
    load = os.getloadavg()[0]
    for number in range(args.rounds):
        order = list(sides) if number % 2 == 0 else list(reversed(sides))
        for name in order:
            out = work / f"{name}_{number}.json"
            got = one_round(sides[name], args.modes, args.repeats, out, extra)
            for mode in got["modes"]:
                repeats[name].setdefault(mode["mode"], []).extend(mode["repeats"])
                ran = (mode.get("partlake_run") or {}).get("repeats", [])
                runs[name].setdefault(mode["mode"], []).extend(ran)
                log(
                    f"round {number + 1} {name} {mode['mode']}: daemon {mode['median_s']} s"
                    + (f", partlake run {median_of(ran)} s" if ran else "")
                )
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
        "load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
        "wall_s": round(time.monotonic() - began, 1),
        "sides": {
            name: {mode: summary(mode, got, runs[name][mode]) for mode, got in by_mode.items()}
            for name, by_mode in repeats.items()
        },
        "partlake_run_after_over_before": {},
        "repeats": repeats,
        "partlake_run_repeats": runs,
    }
    for mode in args.modes.split(","):
        b, a = (results["sides"][name][mode] for name in sides)
        log(
            f"{mode}: daemon before {b['median_s']} s, after {a['median_s']} s (target <= "
            f"{a['target_s']} s: "
            + ("met" if a["met"] else f"NOT met, over by {a['over_by_s']} s")
            + f"); on the chain before {json.dumps(b['median_phases_on_chain_s'])}, after "
            f"{json.dumps(a['median_phases_on_chain_s'])}"
        )
        if a["partlake_run"] and b["partlake_run"]:
            ratio = round(a["partlake_run"]["median_s"] / b["partlake_run"]["median_s"], 3)
            results["partlake_run_after_over_before"][mode] = {
                "ratio_of_medians": ratio,
                "faster": ratio < 1.0,
            }
            d = a["daemon_over_partlake_run"]
            log(
                f"{mode}: partlake run before {b['partlake_run']['median_s']} s, after "
                f"{a['partlake_run']['median_s']} s ({ratio}x: "
                + ("faster" if ratio < 1.0 else "NOT faster")
                + f"); after, daemon / partlake run {d['ratio_of_medians']} (target <= "
                f"{d['target']}: "
                + ("met" if d["met"] else f"NOT met, over by {d['over_by']}")
                + "); partlake run's phases after "
                + json.dumps(a["partlake_run"]["median_phases_s"])
            )
    return emit(results, args.out)


def median_of(repeats: list[dict[str, Any]]) -> float:
    return statistics.median(r["seconds"] for r in repeats)


if __name__ == "__main__":
    sys.exit(main())
