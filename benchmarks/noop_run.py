"""The no-op `partlake run` (nothing stale) next to a bare `python -c "import dagster"`.

    make bench-noop            (or: .venv/bin/python -m benchmarks.noop_run --repeats 7)

On the lake `make demo` leaves (`$PARTLAKE_HOME`, default `.partlake`; the target runs the demo
first when there is none), each repeat runs, one after the other in an order that rotates, a
fresh `python -c "import dagster"` and a fresh `partlake run -m definitions` that finds nothing
to run; with `--full` also the same run with `PARTLAKE_PLAN_SHORTCUT=0` (the full path: the code
location imported and planned), and with `--baseline DIR` the run with an earlier package
(`DIR/dagster_partlake`, ahead on `PYTHONPATH`, its own state cache `PARTLAKE_CACHE_DIR`: the
two packages would otherwise replace each other's last plan, and every run would plan in full).
Wall-clock seconds per process; the medians,
and the median of the per-repeat ratios run / import, which is robust to a machine shared with
other work (both sides of a ratio ran seconds apart). Every run must print exactly "Everything
is fresh: nothing to run."; one warm-up round is not counted. CPU seconds (user + system) are
kept too: on a machine shared with other work they move less than wall-clock.

A no-op makes no Spark call: every process runs with a new, empty warm Spark folder
(`PARTLAKE_SPARK_WARM_DIR`), which must still be empty at the end (no warm Spark started or
attached to), and, before the warm-up round, two untimed no-ops record the modules they had at
their exit (a `sitecustomize` ahead on `PYTHONPATH`; the first plans and keeps the last plan for
that environment, the second answers from it): the second must import neither pyspark nor py4j,
nor Dagster (else it planned in full: the lake lacks a source's table or folder, and the run
would time the full path). Either check failing fails the command. JSON on stdout and in
`--out`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.output import emit

REPO = Path(__file__).resolve().parents[1]
NOOP = "Everything is fresh: nothing to run."


def _commands(
    module: str, full: bool, baseline: str | None, baseline_cache: str | None = None
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
            {
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [baseline, os.environ.get("PYTHONPATH")])
                ),
                **({"PARTLAKE_CACHE_DIR": baseline_cache} if baseline_cache else {}),
            },
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


# Put on PYTHONPATH for the import check: the modules a process had at its exit, to a file (the
# command sends its own stderr to its log file, so Python's import log would not show them).
_SITECUSTOMIZE = """
import atexit, os, sys

def _modules():
    with open(os.environ["PARTLAKE_NOOP_MODULES"], "w") as out:
        out.write("\\n".join(sorted(sys.modules)))

atexit.register(_modules)
"""


def imports_of_a_noop(module: str) -> dict[str, object]:
    """What a no-op `partlake run` answered from the last plan imports: two untimed runs that
    record their modules (the first keeps the last plan for their environment, the second
    answers from it)."""
    partlake = str(Path(sys.executable).parent / "partlake")
    with tempfile.TemporaryDirectory(prefix="partlake-noop-imports-") as folder:
        # The listing goes beside the folder on sys.path, not in it: the last plan holds that
        # folder's modification time.
        Path(folder, "path").mkdir()
        Path(folder, "path", "sitecustomize.py").write_text(_SITECUSTOMIZE)
        listed = Path(folder, "modules.txt")
        path = os.pathsep.join(filter(None, [f"{folder}/path", os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "PARTLAKE_NOOP_MODULES": str(listed)}
        for _ in range(2):
            _time([partlake, "run", "-m", module], env, expect=NOOP)
        imported = listed.read_text().split()
    tops = {name.split(".")[0] for name in imported}
    found = {
        "modules": len(imported),
        "imports_pyspark": "pyspark" in tops,
        "imports_py4j": "py4j" in tops,
        "imports_dagster": "dagster" in tops,
    }
    if found["imports_dagster"]:
        raise SystemExit(
            f"the no-op planned in full instead of answering from the last plan ({found}): is "
            "a source of the code location without its table or folder (each plan says so)? "
            "`make bench-noop` writes the example's feeds (python -m definitions.feeds)."
        )
    return found


def measure(
    module: str,
    repeats: int,
    *,
    full: bool,
    baseline: str | None,
    baseline_cache: str | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and CPU seconds per repeat of each command, in an order that rotates per
    repeat."""
    commands = _commands(module, full, baseline, baseline_cache)
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
    # Every process's warm Spark folder: new and empty, and it must stay so.
    warm = tempfile.mkdtemp(prefix="partlake-noop-warm-")
    os.environ["PARTLAKE_SPARK_WARM_DIR"] = warm
    baseline_cache = tempfile.mkdtemp(prefix="partlake-noop-baseline-") if args.baseline else None
    load = os.getloadavg()[0]
    try:
        imports = imports_of_a_noop(args.module)
        samples, cpu = measure(
            args.module,
            args.repeats,
            full=args.full,
            baseline=args.baseline,
            baseline_cache=baseline_cache,
        )
        touched = sorted(os.listdir(warm))
    finally:
        if baseline_cache:
            shutil.rmtree(baseline_cache, ignore_errors=True)
        if not os.listdir(warm):  # else kept for the check below
            os.rmdir(warm)
    if touched:
        # Whatever started there is stopped before the command fails.
        subprocess.run(
            [sys.executable, "-m", "dagster_partlake.cli", "spark", "stop", "--warm"],
            cwd=REPO,
            capture_output=True,
            timeout=300,
        )
        raise SystemExit(f"a no-op run used the warm Spark: {warm} holds {touched}")
    if imports["imports_pyspark"] or imports["imports_py4j"]:
        raise SystemExit(f"a no-op run answered from the last plan imported Spark: {imports}")
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
        # A no-op makes no Spark call: no warm Spark folder appeared, and no Spark module was
        # imported by a no-op answered from the last plan.
        "warm_spark_folder_appeared": False,
        "noop_imports": imports,
        "samples_s": {name: [round(v, 3) for v in s] for name, s in samples.items()},
        **summarize(samples),
        "cpu_samples_s": {name: [round(v, 3) for v in s] for name, s in cpu.items()},
        "cpu": summarize(cpu),
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
