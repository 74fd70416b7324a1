"""The no-op `partlake run` (nothing stale) next to a bare `python -c "import dagster"`.

    make bench-noop            (or: .venv/bin/python -m benchmarks.noop_run --repeats 7)

On the lake `make demo` leaves (`$PARTLAKE_HOME`, default `.partlake`; the target runs the demo
first when there is none), each repeat runs, one after the other in an order that rotates, a
fresh `python -c "import dagster"` and a fresh `partlake run -m definitions` that finds nothing
to run; with `--full` also the same run with `PARTLAKE_PLAN_SHORTCUT=0` (the full path: the code
location imported and planned), and with `--baseline DIR` the run with an earlier package
(`DIR/dagster_partlake`, ahead on `PYTHONPATH`). Wall-clock seconds per process; the medians,
and the median of the per-repeat ratios run / import, which is robust to a machine shared with
other work (both sides of a ratio ran seconds apart). Every run must print exactly "Everything
is fresh: nothing to run."; one warm-up round is not counted. CPU seconds (user + system) are
kept too: on a machine shared with other work they move less than wall-clock. JSON on stdout
and in `--out`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.output import emit

REPO = Path(__file__).resolve().parents[1]
NOOP = "Everything is fresh: nothing to run."


def _commands(
    module: str, full: bool, baseline: str | None
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Name -> (argv, extra environment) of each measured process."""
    partlake = str(Path(sys.executable).parent / "partlake")
    commands = {
        "import_dagster": ([sys.executable, "-c", "import dagster"], {}),
        "partlake_run": ([partlake, "run", "-m", module], {}),
    }
    if full:
        commands["partlake_run_full"] = (
            [partlake, "run", "-m", module],
            {"PARTLAKE_PLAN_SHORTCUT": "0"},
        )
    if baseline:
        # The console script puts its own folder first on sys.path, then PYTHONPATH: the
        # package is imported from the baseline's tree, before the installed one.
        commands["partlake_run_baseline"] = (
            [partlake, "run", "-m", module],
            {"PYTHONPATH": os.pathsep.join(filter(None, [baseline, os.environ.get("PYTHONPATH")]))},
        )
    return commands


def _time(argv: list[str], env: dict[str, str], *, expect: str | None) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0 or (expect is not None and done.stdout != expect + "\n"):
        raise SystemExit(
            f"{' '.join(argv)} exited {done.returncode} and printed {done.stdout!r} (expected "
            f"{expect!r}): is the lake fresh (make demo)?\n{done.stderr[-2000:]}"
        )
    return seconds, cpu


def measure(
    module: str, repeats: int, *, full: bool, baseline: str | None
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and CPU seconds per repeat of each command, in an order that rotates per
    repeat."""
    commands = _commands(module, full, baseline)
    names = list(commands)
    samples: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for number in range(-1, repeats):  # -1: the warm-up round
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            argv, extra = commands[name]
            expect = None if name == "import_dagster" else NOOP
            seconds, used = _time(argv, {**os.environ, **extra}, expect=expect)
            if number >= 0:
                samples[name].append(seconds)
                cpu[name].append(used)
                print(
                    f"[bench-noop] {number + 1}/{repeats} {name}: {seconds:.3f} s "
                    f"(cpu {used:.3f} s)",
                    file=sys.stderr,
                )
    return samples, cpu


def summarize(samples: dict[str, list[float]]) -> dict[str, object]:
    base = samples["import_dagster"]
    runs = [name for name in samples if name != "import_dagster"]
    return {
        "median_s": {name: round(statistics.median(s), 3) for name, s in samples.items()},
        "pair_ratios": {
            name: [round(r / b, 3) for r, b in zip(samples[name], base, strict=True)]
            for name in runs
        },
        "median_ratio": {
            name: round(
                statistics.median(r / b for r, b in zip(samples[name], base, strict=True)), 3
            )
            for name in runs
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--module", default="definitions")
    parser.add_argument(
        "--full",
        action="store_true",
        help="also time the run with the shortcut off (PARTLAKE_PLAN_SHORTCUT=0)",
    )
    parser.add_argument(
        "--baseline",
        help=(
            "a folder holding an earlier dagster_partlake package (e.g. `git archive COMMIT "
            "dagster_partlake | tar -x -C DIR`): also time the no-op with it"
        ),
    )
    parser.add_argument("--label", default="", help="a note stored in the JSON (e.g. before)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "noop_run.json"))
    args = parser.parse_args(argv)

    # As the Makefile sets them: the demo's lake and instance.
    os.environ.setdefault("PARTLAKE_HOME", str(REPO / ".partlake"))
    os.environ.setdefault("DAGSTER_HOME", os.path.join(os.environ["PARTLAKE_HOME"], "dagster"))
    load = os.getloadavg()[0]
    samples, cpu = measure(args.module, args.repeats, full=args.full, baseline=args.baseline)
    result = {
        "benchmark": "noop_run",
        "label": args.label,
        "cores": os.cpu_count(),
        # The machine is shared: its load before and after, and CPU seconds next to wall-clock.
        "load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
        "repeats": args.repeats,
        "module": args.module,
        "baseline": args.baseline,
        "partlake_home": os.environ["PARTLAKE_HOME"],
        "samples_s": {name: [round(v, 3) for v in s] for name, s in samples.items()},
        **summarize(samples),
        "cpu_samples_s": {name: [round(v, 3) for v in s] for name, s in cpu.items()},
        "cpu": summarize(cpu),
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
