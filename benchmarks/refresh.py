"""Refresh latency under the daemon: one source partition rewritten -> its closure fresh again.

    make bench-refresh        (or: .venv/bin/python -m benchmarks.refresh --repeats 3)

The example code location under `dagster dev` (webserver, daemon, code server) with the
invalidation sensor on (`--refresh runs`, the default: each level of a refresh requested as runs
once what it reads has ended; `--refresh backfill`: one Dagster asset backfill per refresh), in
two set-ups, each measured `--repeats` times:

- `local`: the example's instance (SQLite), every run starting its own local Spark (a JVM);
- `shared`: a Dagster instance on PostgreSQL and a shared Spark Connect server
  (`partlake spark start`), which every run reuses.

The lake holds the daemon tests' data (2 days x eu, us), filled by `partlake run` first. Each
repeat rewrites one source partition of raw_events (a new day-region pair each time, so every
repeat refreshes a closure of the same shape; `--warmup` refreshes of another pair come first,
not counted, as on a daemon that has run before) and waits until the planner, polled in this
process every 0.25 s, finds nothing stale. With `--later-days N` the lake holds N + 1 days x eu,
us, apac and each repeat rewrites the first day of another region: the merge model
`marts/user_activity` then has N later days of that region to apply again, in order (issue 35
point 4: 124 s for N = 3 when each later day was its own run). Then it reads back from the
Dagster instance what the daemon did, run by run:

- tick wait: from the moment a run could have been requested (the rewrite's commit, or the end
  of the run before it) to its creation (by a sensor tick, or by the backfill daemon);
- queue: creation -> the run coordinator taking it off the queue and launching it
  (RUN_STARTING);
- launch: RUN_STARTING -> RUN_START (a worker process started with the code location loaded,
  or a warm worker handed the run);
- JVM start: the Spark session the run started (`partlake/spark_start_seconds`);
- hand-off: kept for comparison with earlier results, always 0 now: runs requested ahead of
  the runs they read and waiting inside their run for them are gone (issue 35);
- compute: Spark reading, computing and staging the outputs, and the quality gates
  (`partlake/write_seconds` - `partlake/commit_seconds`);
- commit: the Delta commits (`partlake/commit_seconds`);
- other: the rest of the run (Dagster's step bookkeeping, the check steps, the run's end);

summed along the chain of runs that ended last (each run's predecessor: the run that committed
its last asset last before it was created, else the run that ended last before it). The total
is from the rewrite to nothing stale (the last run's commit); the last run ends a little later
(its check steps).

In the same `dagster dev`, interleaved with the daemon's refreshes (unless `--no-partlake-run`),
each repeat also times `partlake run -m definitions` of a closure of the same shape: the sensor
stopped (`dagster sensor stop`: no tick requests runs for it), another source partition rewritten
(the same day, the next region), the command started, the planner polled as above until nothing
is stale; the sensor started again. Its time is from the rewrite to nothing stale too, split
into the start (the rewrite -> the command's start: the writing process's exit), plan (the
command's start -> its first run's creation: the interpreter, the code location, the plan),
runs (-> its last commit) and, apart, exit (nothing stale -> the command's end). Within a repeat
the daemon's refresh comes first in even repeats, `partlake run` first in odd ones; the warm-up
times one of each.

Each set-up's local Spark runs (code with the warm Spark of issue 52: the daemon's warm workers,
its runs and `partlake run`) attach to one warm Spark in a folder of its work dir
(`PARTLAKE_SPARK_WARM_DIR`), stopped at the end (`partlake spark stop --warm`); on `shared`
every run uses the Spark Connect server instead.

JSON on stdout and in `--out`; the targets (issues 45 and 52: local <= 25 s, shared <= 12 s, as
the median of the repeats; issue 52: the daemon's median <= 1.5 x `partlake run`'s) are printed
as met or not met. Side by side with earlier code: `python -m benchmarks.interleave --before
DIR` (`make bench-refresh BEFORE=DIR`).
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
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.conftest import run_partlake, subprocess_env  # noqa: E402
from tests.servers import dagster_dev, postgres_server, spark_connect, wait_until  # noqa: E402

SENSOR = "partlake_invalidation"
SENSOR_TAG = "partlake/sensor"
TARGETS = {"local": 25.0, "shared": 12.0}  # seconds, median of the repeats (issues 45, 52)
# The daemon's refresh / `partlake run` of a closure of the same shape, medians (issue 52).
RATIO_TARGET = 1.5
DATES = ["2024-01-01", "2024-01-02"]
REGIONS = ["eu", "us"]
ALL_REGIONS = ["eu", "us", "apac"]
CHAIN_SLACK = 2.0  # seconds: see critical_chain
PHASES = ("tick_wait", "queue", "launch", "jvm_start", "handoff", "compute", "commit", "other")
# `partlake run` of a closure: rewrite -> command start -> first run created -> last commit.
RUN_PHASES = ("start", "plan", "runs")
ENDED = ("SUCCESS", "FAILURE", "CANCELED")


def log(text: str) -> None:
    print(f"[bench-refresh] {text}", file=sys.stderr, flush=True)


def ingest(env: dict[str, str], rows: int, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "definitions.ingest", "--rows", str(rows), *args],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )


@dataclass
class RunTimes:
    """One run of the refresh, from the Dagster instance."""

    run_id: str
    assets: list[str]
    created: float
    started: float
    ended: float
    status: str
    phases: dict[str, float] = field(default_factory=dict)
    refresh: str | None = None  # `partlake/refresh`: the refresh it belongs to
    backfill: str | None = None  # `dagster/backfill`: the asset backfill that made it
    committed: float | None = None  # its last materialization (every asset committed)
    starting_to_step: float | None = None  # RUN_STARTING -> its first STEP_START: the launch
    warm: bool = False  # handed to a warm worker (tag `partlake/warm_worker`)


def run_times(instance: Any, since: float, *, sensor: bool = True) -> list[RunTimes]:
    """The runs created after `since`, with their phases but the tick wait: the sensor's (and
    those its runs requested), or with `sensor=False` every other run (`partlake run`'s)."""
    from dagster import DagsterEventType, RunsFilter

    MATERIALIZATION = DagsterEventType.ASSET_MATERIALIZATION
    found = []
    after = datetime.fromtimestamp(since - 1, tz=UTC)  # the exact check below
    for record in instance.get_run_records(filters=RunsFilter(created_after=after)):
        created = record.create_timestamp.timestamp()
        by_sensor = (record.dagster_run.tags or {}).get(SENSOR_TAG) == SENSOR
        if created < since or by_sensor != sensor:
            continue
        run = record.dagster_run
        started, ended = record.start_time or created, record.end_time or time.time()
        spark = write = commit = 0.0
        committed = None
        starting, first_step = (
            min(
                (r.event_log_entry.timestamp for r in instance.get_records_for_run(
                    run.run_id, of_type=kind).records),
                default=None,
            )
            for kind in (DagsterEventType.RUN_STARTING, DagsterEventType.STEP_START)
        )  # fmt: skip
        for event in instance.get_records_for_run(run.run_id, of_type=MATERIALIZATION).records:
            committed = max(committed or 0.0, event.event_log_entry.timestamp)
            meta = event.event_log_entry.asset_materialization.metadata  # type: ignore[union-attr]
            spark += _value(meta, "partlake/spark_start_seconds")
            write += _value(meta, "partlake/write_seconds")
            commit += _value(meta, "partlake/commit_seconds")
        # The run coordinator logs RUN_STARTING when it takes the run off the queue and
        # launches it (no RUN_DEQUEUED event is written).
        left_queue = min(starting or created, started)
        phases = {
            "queue": left_queue - created,
            "launch": started - left_queue,
            "jvm_start": spark,
            "handoff": 0.0,
            "compute": write - commit,
            "commit": commit,
            "other": max(0.0, ended - started - spark - write),
        }
        assets = sorted(k.to_user_string() for k in run.asset_selection or ())
        tags = run.tags or {}
        found.append(
            RunTimes(
                run.run_id,
                assets,
                created,
                started,
                ended,
                run.status.value,
                phases,
                tags.get("partlake/refresh"),
                tags.get("dagster/backfill"),
                committed,
                first_step - starting if starting and first_step else None,
                "partlake/warm_worker" in tags,
            )
        )
    return sorted(found, key=lambda r: r.created)


def _value(metadata: dict[str, Any], key: str) -> float:
    entry = metadata.get(key)
    return float(entry.value) if entry is not None else 0.0


def critical_chain(runs: list[RunTimes], rewritten: float) -> list[RunTimes]:
    """The chain of runs ending with the one that ended last; each run follows the run whose
    work it could start after: the one that committed last (its last materialization) before
    it was created, else that ended last before; its tick wait is from that moment (or the
    rewrite) to its creation. (The sensor requests a level once what it reads is committed,
    which may be before the run that wrote it has ended.)"""

    def done(run: RunTimes) -> float:
        return run.committed if run.committed is not None else run.ended

    chain: list[RunTimes] = []
    current = max(runs, key=lambda r: r.ended) if runs else None
    while current is not None:
        # A run the refresh chain requested is created at its predecessor's last commit, a
        # moment before that commit's materialization event is written: hence the slack.
        before = [
            r
            for r in runs
            if r.created < current.created and done(r) <= current.created + CHAIN_SLACK
        ]
        previous = max(before, key=done) if before else None
        ready = done(previous) if previous is not None else rewritten
        current.phases["tick_wait"] = max(0.0, current.created - ready)
        chain.append(current)
        current = previous
    return chain[::-1]


class Freshness:
    """The planner over the lake, in this process: polled cheaply (incremental planning)."""

    def __init__(self, lake: Path) -> None:
        os.environ["PARTLAKE_HOME"] = str(lake)
        from dagster_partlake.delta.state import StateCache
        from dagster_partlake.planning.graph import LakeGraph
        from dagster_partlake.planning.session import PlanningSession
        from definitions import defs

        self.session = PlanningSession(LakeGraph(defs, root=str(lake)), StateCache())

    def stale(self) -> list[tuple[str, Any]]:
        return [(i.asset, i.partition) for i in self.session.plan().plan.items]


@contextmanager
def setting(mode: str, work: Path, refresh: str = "runs") -> Iterator[dict[str, str]]:
    """The environment of one set-up, its servers running; its warm Spark (if any) stopped at
    the end."""
    with ExitStack() as stack:
        home = work / "dagster_home"
        home.mkdir(parents=True)
        config = (REPO / "scripts" / "dagster.yaml").read_text()
        extra: dict[str, str] = {}
        if mode == "shared":
            postgres = stack.enter_context(postgres_server())
            config += "\n" + postgres.dagster_yaml()
        (home / "dagster.yaml").write_text(config)
        env = subprocess_env(
            DAGSTER_HOME=str(home),
            PARTLAKE_HOME=str(work / "lake"),
            PARTLAKE_CACHE_DIR=str(work / "state-cache"),
            SPARK_LOCAL_IP="127.0.0.1",
            PARTLAKE_SENSOR_REFRESH=refresh,
            PARTLAKE_SPARK_WARM_DIR=str(work / "spark-warm"),
        )
        stack.callback(stop_warm_spark, env)  # after dagster dev and the Connect server
        if mode == "shared":
            remote = stack.enter_context(spark_connect(work / "spark", env))
            extra["PARTLAKE_SPARK_REMOTE"] = remote
        yield {**env, **extra}


def has_warm_spark() -> bool:
    """Whether this checkout's code has the warm Spark (issue 52)."""
    return (REPO / "dagster_partlake" / "spark" / "warm.py").is_file()


def stop_warm_spark(env: dict[str, str]) -> None:
    """`partlake spark stop --warm` in the set-up's environment (its own folder only)."""
    if not has_warm_spark():
        return
    stopped = run_partlake("spark", "stop", "--warm", env=env, timeout=300)
    if stopped.returncode:
        log(f"could not stop the warm Spark: {stopped.stdout}{stopped.stderr[-2000:]}")
    else:
        log(stopped.stdout.strip())


def warm_spark_started(env: dict[str, str]) -> bool:
    """Whether a warm Spark was started in the set-up's folder (never on `shared`)."""
    return any(Path(env["PARTLAKE_SPARK_WARM_DIR"]).glob("*/spark.log"))


def _newest_commit_time(lake: Path) -> float:
    """When raw_events' newest Delta commit was written (its log file's mtime)."""
    from definitions.ingest import raw_events_path

    log_dir = Path(raw_events_path(str(lake))) / "_delta_log"
    return max(p.stat().st_mtime for p in log_dir.glob("*.json"))


def rewrites(later_days: int) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """The lake's days and regions, and the (day, region) each repeat rewrites, in turn."""
    if later_days <= 0:
        pairs = [(DATES[n % 2], REGIONS[(n // 2) % 2]) for n in range(4)]
        return DATES, REGIONS, pairs
    days = [f"2024-01-{d:02d}" for d in range(1, later_days + 2)]
    return days, ALL_REGIONS, [(days[0], region) for region in ALL_REGIONS]


def partner(pair: tuple[str, str], regions: list[str]) -> tuple[str, str]:
    """The pair `partlake run` rewrites beside the daemon's: the same day (a closure of the same
    shape), the next region."""
    date, region = pair
    return date, regions[(regions.index(region) + 1) % len(regions)]


def measure(
    mode: str,
    repeats: int,
    rows: int,
    refresh: str = "runs",
    later_days: int = 0,
    warmup: int = 0,
    partlake_run: bool = True,
) -> dict[str, Any]:
    from dagster import DagsterInstance

    dates, regions, pairs = rewrites(later_days)
    work = Path(tempfile.mkdtemp(prefix=f"partlake-refresh-{mode}-"))
    log(f"{mode}: working in {work}")
    with setting(mode, work, refresh) as env:
        ingest(
            env,
            rows,
            *(a for d in dates for a in ("--date", d)),
            *(a for r in regions for a in ("--region", r)),
        )
        filled = run_partlake("run", "-m", "definitions", env=env, timeout=900)
        assert filled.returncode == 0, filled.stdout[-3000:] + filled.stderr[-3000:]
        freshness = Freshness(work / "lake")
        assert freshness.stale() == []
        with dagster_dev(env, work / "dagster_dev.log") as dev:
            instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
            interval = _sensor_interval(dev)
            bench = Bench(env, work, rows, freshness, instance, dev, interval)
            bench.sensor("start")
            time.sleep(2 * interval)  # its first ticks: the lake is fresh, nothing requested
            for number in range(warmup):  # not measured: a daemon that has run before
                pair = pairs[-1 - number % len(pairs)]
                bench.daemon_refresh(pair, seed=900 + number, warmup=True)
                log(f"{mode} warm-up {number + 1}: {'|'.join(pair)} refreshed by the daemon")
                if partlake_run:
                    other = partner(pair, regions)
                    bench.partlake_run_refresh(other, seed=950 + number, name=f"warmup{number}")
                    log(f"{mode} warm-up {number + 1}: {'|'.join(other)} by partlake run")
            daemon_out: list[dict[str, Any]] = []
            run_out: list[dict[str, Any]] = []
            for number in range(repeats):
                pair = pairs[number % len(pairs)]
                sides = ["daemon", "partlake_run"] if partlake_run else ["daemon"]
                for side in sides if number % 2 == 0 else sides[::-1]:
                    if side == "daemon":
                        got = bench.daemon_refresh(pair, seed=100 + number)
                        daemon_out.append(got)
                        log(
                            f"{mode} repeat {number + 1} daemon: {got['seconds']} s "
                            + json.dumps(got["phases_on_chain_s"])
                        )
                    else:
                        got = bench.partlake_run_refresh(
                            partner(pair, regions), seed=500 + number, name=f"repeat{number}"
                        )
                        run_out.append(got)
                        log(
                            f"{mode} repeat {number + 1} partlake run: {got['seconds']} s "
                            + json.dumps(got["phases_s"])
                        )
    return summarize_mode(
        mode, daemon_out, run_out if partlake_run else None, refresh, later_days, interval
    ) | {"warm_spark_started": warm_spark_started(env)}


def summarize_mode(
    mode: str,
    daemon: list[dict[str, Any]],
    runs: list[dict[str, Any]] | None,
    refresh: str = "runs",
    later_days: int = 0,
    interval: float | None = None,
) -> dict[str, Any]:
    """A set-up's repeats: the daemon's medians and target, `partlake run`'s, and their ratio."""
    seconds = [r["seconds"] for r in daemon]
    median = statistics.median(seconds)
    out: dict[str, Any] = {
        "mode": mode,
        "refresh": refresh,
        "later_days": later_days,
        "sensor_interval_s": interval,
        "repeats": daemon,
        "median_s": median,
        "spread_s": [min(seconds), max(seconds)],
        "median_phases_on_chain_s": {
            p: statistics.median(r["phases_on_chain_s"].get(p) or 0.0 for r in daemon)
            for p in PHASES
        },
        "target_s": TARGETS[mode],
        "met": median <= TARGETS[mode],
        "over_by_s": round(max(0.0, median - TARGETS[mode]), 2),
        "partlake_run": None,
    }
    if runs:
        run_seconds = [r["seconds"] for r in runs]
        run_median = statistics.median(run_seconds)
        ratio = round(median / run_median, 3)
        out["partlake_run"] = {
            "repeats": runs,
            "median_s": run_median,
            "spread_s": [min(run_seconds), max(run_seconds)],
            "median_phases_s": {
                p: statistics.median(r["phases_s"][p] for r in runs) for p in (*RUN_PHASES, "exit")
            },
        }
        pairs = list(zip(seconds, run_seconds, strict=False))  # the same repeat: the same shape
        out["daemon_over_partlake_run"] = {
            "ratio_of_medians": ratio,
            "per_repeat": [round(d / r, 3) for d, r in pairs],
            "median_of_repeat_ratios": round(statistics.median(d / r for d, r in pairs), 3),
            "target": RATIO_TARGET,
            "met": ratio <= RATIO_TARGET,
            "over_by": round(max(0.0, ratio - RATIO_TARGET), 3),
        }
    return out


@dataclass
class Bench:
    """One set-up's running `dagster dev`, lake and planner: what a refresh needs."""

    env: dict[str, str]
    work: Path
    rows: int
    freshness: Freshness
    instance: Any
    dev: Any
    interval: float

    def sensor(self, action: str) -> None:
        """`dagster sensor start|stop` of the invalidation sensor, as a user would."""
        done = self.dev.dagster("sensor", action, "-w", "workspace.yaml", SENSOR)
        assert done.returncode == 0, done.stderr[-3000:]

    def daemon_refresh(
        self, pair: tuple[str, str], *, seed: int, warmup: bool = False
    ) -> dict[str, Any]:
        """Rewrite `pair` and wait for the daemon to make its closure fresh; its runs by
        phase."""
        date, region = pair
        ingest(self.env, self.rows, "--date", date, "--region", region, "--seed", str(seed))
        # The rewrite's commit, not the end of the ingest process: a watching sensor tick may
        # act on it while that process still exits.
        rewritten = _newest_commit_time(self.work / "lake")
        closure = self.freshness.stale()
        wait_until(
            lambda: not self.freshness.stale(),
            timeout=900,
            interval=0.5 if warmup else 0.25,
            what=f"the daemon to refresh {date}|{region}",
        )
        fresh = time.time()
        # The last run commits, then ends (its check steps, Dagster's bookkeeping).
        wait_until(
            lambda since=rewritten - 1: all(
                r.status in ENDED for r in run_times(self.instance, since)
            ),
            timeout=300,
            interval=0.5,
            what="the refresh's runs to end",
        )
        time.sleep(2 * self.interval)  # quiet again before the next rewrite
        if warmup:
            return {}
        runs = run_times(self.instance, rewritten - 1)
        chain = critical_chain(runs, rewritten)
        phases = {p: round(sum(r.phases.get(p, 0.0) for r in chain), 2) for p in PHASES}
        return {
            "rewritten": f"{date}|{region}",
            "stale_partitions": len(closure),
            "seconds": round(fresh - rewritten, 2),
            # The last run ends after its commit made everything fresh.
            "last_run_ended_after_fresh_s": round(max(r.ended for r in runs) - fresh, 2),
            "runs": len(runs),
            "backfills": len({r.backfill for r in runs if r.backfill}),
            "refresh_ids": sorted({r.refresh for r in runs if r.refresh}),
            "runs_failed": sum(r.status != "SUCCESS" for r in runs),
            "chain": [r.assets for r in chain],
            "chain_levels": [_described(r, rewritten) for r in chain],
            "phases_on_chain_s": phases,
            "per_run": [_described(r, rewritten) for r in runs],
        }

    def partlake_run_refresh(
        self, pair: tuple[str, str], *, seed: int, name: str
    ) -> dict[str, Any]:
        """With the sensor stopped, rewrite `pair` and time `partlake run -m definitions` until
        its closure is fresh (the planner's view, polled as for the daemon)."""
        date, region = pair
        self.sensor("stop")
        time.sleep(2 * self.interval)  # a tick already under way ends
        try:
            ingest(self.env, self.rows, "--date", date, "--region", region, "--seed", str(seed))
            rewritten = _newest_commit_time(self.work / "lake")
            closure = self.freshness.stale()
            output = self.work / f"partlake_run_{name}.log"
            with open(output, "w") as out:
                started = time.time()
                command = subprocess.Popen(
                    [sys.executable, "-m", "dagster_partlake.cli", "run", "-m", "definitions"],
                    cwd=REPO,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
                try:
                    wait_until(
                        lambda: not self.freshness.stale() or command.poll() is not None,
                        timeout=900,
                        interval=0.25,
                        what=f"partlake run to refresh {date}|{region}",
                    )
                    fresh = time.time()
                    code = command.wait(timeout=300)
                finally:
                    if command.poll() is None:
                        command.kill()
                        command.wait()
            ended = time.time()
            stale = self.freshness.stale()
            assert code == 0 and not stale, (
                f"partlake run exited {code}, stale after it: {stale}\n"
                + output.read_text()[-3000:]
            )
        finally:
            self.sensor("start")
            time.sleep(2 * self.interval)  # its first ticks: nothing stale, nothing requested
        runs = run_times(self.instance, started, sensor=False)
        created = min((r.created for r in runs), default=fresh)
        committed = max((r.committed or r.ended for r in runs), default=fresh)
        phases = {
            "start": started - rewritten,
            "plan": created - started,
            "runs": fresh - created,
            "exit": ended - fresh,
        }
        return {
            "rewritten": f"{date}|{region}",
            "stale_partitions": len(closure),
            "seconds": round(fresh - rewritten, 2),
            "command_to_fresh_s": round(fresh - started, 2),
            "command_s": round(ended - started, 2),
            "last_commit_s": round(committed - rewritten, 2),
            "phases_s": {k: round(v, 2) for k, v in phases.items()},
            "runs": len(runs),
            "runs_failed": sum(r.status != "SUCCESS" for r in runs),
            "per_run": [_described(r, rewritten) for r in runs],
        }


def _described(run: RunTimes, rewritten: float) -> dict[str, Any]:
    return {
        "assets": run.assets,
        **{k: round(v, 2) for k, v in run.phases.items()},
        "timeline_s": _timeline(run, rewritten),
        **_launch(run),
    }


def _timeline(run: RunTimes, rewritten: float) -> dict[str, float]:
    """When the run was created, started and ended, in seconds after the rewrite."""
    moments = {"created": run.created, "started": run.started, "ended": run.ended}
    return {k: round(v - rewritten, 2) for k, v in moments.items()}


def _launch(run: RunTimes) -> dict[str, Any]:
    """Its launch, RUN_STARTING to the first step, and whether a warm worker took it."""
    seconds = None if run.starting_to_step is None else round(run.starting_to_step, 2)
    return {"starting_to_first_step_s": seconds, "warm_worker": run.warm}


def _sensor_interval(dev: Any) -> float:
    data = dev.graphql(
        """query($sel: SensorSelector!) { sensorOrError(sensorSelector: $sel) {
            ... on Sensor { minIntervalSeconds } } }""",
        sel={
            "repositoryName": "__repository__",
            "repositoryLocationName": "definitions",
            "sensorName": SENSOR,
        },
    )
    return float(data["sensorOrError"]["minIntervalSeconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="local,shared", help="comma-separated: local, shared")
    parser.add_argument("--rows", type=int, default=200, help="rows per source partition")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="refreshes before the measured ones, not counted (a daemon that has launched runs "
        "before: its warm workers, if any, started)",
    )
    parser.add_argument(
        "--refresh",
        default="runs",
        choices=["runs", "backfill"],
        help="the sensor's refresh: runs level by level, or one Dagster asset backfill",
    )
    parser.add_argument(
        "--later-days",
        type=int,
        default=0,
        help="N > 0: N + 1 days x 3 regions, each repeat rewriting a region's first day (the "
        "merge model marts/user_activity then applies N later days again)",
    )
    parser.add_argument(
        "--no-partlake-run",
        dest="partlake_run",
        action="store_false",
        help="time the daemon's refreshes only, not `partlake run` of the same closures",
    )
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "refresh.json"))
    args = parser.parse_args(argv)
    began = time.monotonic()
    load = os.getloadavg()[0]
    modes = [
        measure(
            m,
            args.repeats,
            args.rows,
            args.refresh,
            args.later_days,
            args.warmup,
            args.partlake_run,
        )
        for m in args.modes.split(",")
    ]
    results = {
        "benchmark": "refresh",
        "cores": os.cpu_count(),
        "refresh": args.refresh,
        "later_days": args.later_days,
        "warmup": args.warmup,
        "load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
        "wall_s": round(time.monotonic() - began, 1),
        "modes": modes,
    }
    for mode in modes:
        log(verdict(mode))
    text = json.dumps(results, indent=2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def verdict(mode: dict[str, Any]) -> str:
    """One set-up's medians and targets, in words."""
    text = (
        f"{mode['mode']}: daemon median {mode['median_s']} s (spread {mode['spread_s']}), target "
        f"<= {mode['target_s']} s: "
        + ("met" if mode["met"] else f"NOT met, over by {mode['over_by_s']} s")
        + "; on the chain: "
        + json.dumps(mode["median_phases_on_chain_s"])
    )
    run = mode.get("partlake_run")
    if run:
        ratio = mode["daemon_over_partlake_run"]
        text += (
            f"; partlake run median {run['median_s']} s "
            f"({json.dumps(run['median_phases_s'])}); daemon / partlake run "
            f"{ratio['ratio_of_medians']} (target <= {ratio['target']}: "
            + ("met" if ratio["met"] else f"NOT met, over by {ratio['over_by']}")
            + ")"
        )
    return text


if __name__ == "__main__":
    sys.exit(main())
