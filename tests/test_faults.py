"""Fault drills through real processes (`make test-faults`, not in `make test`: see README).

The example under `dagster dev` with the sensor on, and the faults a deployment meets: a run
worker killed with SIGKILL between its Parquet write and its commit and right after the commit
(each twice), a table's folder deleted and re-created by another writer, the shared Spark Connect
server killed mid-run, PostgreSQL restarted during a sensor tick, and two `partlake run`s on one
stale plan. A drill stops a process at an exact place with a fault point
(`dagster_partlake.faults`) and kills it there from outside. Each is judged by the data
(`tests/lake_checks.py`): every expected row exactly once, nothing stale at the end, every table
readable by delta-rs and DuckDB after every step. Every wait has a timeout: a hang fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dagster_partlake.faults import DIR_ENV, POINTS_FILE
from dagster_partlake.orchestration.warm import WARM_TAG
from tests.conftest import REPO_ROOT, cli_env, run_partlake, subprocess_env
from tests.lake_checks import TABLES, check_lake, read_table
from tests.servers import (
    DagsterDev,
    Postgres,
    dagster_dev,
    ended_runs,
    free_port,
    postgres_server,
    wait_until,
)
from tests.test_daemon import SENSOR, committed, ingest, ticks

pytestmark = [pytest.mark.faults, pytest.mark.daemon, pytest.mark.dagster_cli]

TICK_SECONDS = 2
RETRY_SECONDS = 10
RUN_KEY = "dagster/run_key"
# scripts/dagster.yaml: how often run monitoring looks at in-progress runs.
MONITORING_SECONDS = 15
RUNS = """
{ runsOrError { ... on Runs { results {
    runId status creationTime startTime endTime tags { key value } assetSelection { path } } } } }
"""
FAILURE = """
query Failure($id: ID!) {
  logsForRun(runId: $id) { ... on EventConnection { events {
    __typename ... on MessageEvent { message }
    ... on ExecutionStepFailureEvent { error { message causes { message } } } } } }
}
"""


@dataclass(frozen=True)
class Drill:
    """A filled demo lake under `dagster dev` with the sensor on, and its fault drill folder."""

    dev: DagsterDev
    lake: Path
    folder: Path

    def arm(self, points: str) -> None:
        """Pause at `points` from now on (passes counted afresh)."""
        for old in [*self.folder.glob("*.paused"), *self.folder.glob("*.release")]:
            old.unlink()
        (self.folder / POINTS_FILE).write_text(points)

    def aim(self, points: str) -> None:
        """Pause at `points` from now on, the passes already taken still counted."""
        (self.folder / POINTS_FILE).write_text(points)

    def disarm(self) -> None:
        (self.folder / POINTS_FILE).unlink(missing_ok=True)

    def paused(self, point: str, number: int, timeout: float = 300) -> int:
        """The pid of the process paused at the `number`th pass through `point`."""
        marker = self.folder / f"{point}.{number}.paused"
        wait_until(
            lambda: marker.exists() and marker.read_text().strip(),
            timeout=timeout,
            interval=0.5,
            what=f"a process to pause at {point} (pass {number})",
        )
        return int(marker.read_text())

    def release(self, point: str, number: int) -> None:
        (self.folder / f"{point}.{number}.release").touch()


@contextmanager
def filled_demo(
    tmp: Path, storage_yaml: str = "", extra_env: dict[str, str] | None = None
) -> Iterator[Drill]:
    """`dagster dev` on a fresh demo instance whose sensor, turned on with the Dagster CLI,
    filled the lake (2 days x 2 regions)."""
    home = tmp / "dagster_home"
    home.mkdir()
    config = (REPO_ROOT / "scripts" / "dagster.yaml").read_text()
    (home / "dagster.yaml").write_text(config + "\n" + storage_yaml)
    folder = tmp / "drill"
    folder.mkdir()
    env = subprocess_env(
        DAGSTER_HOME=str(home),
        PARTLAKE_HOME=str(tmp / "lake"),
        PARTLAKE_CACHE_DIR=str(tmp / "state-cache"),
        PARTLAKE_SENSOR_INTERVAL_SECONDS=str(TICK_SECONDS),
        PARTLAKE_SENSOR_RETRY_SECONDS=str(RETRY_SECONDS),
        SPARK_LOCAL_IP="127.0.0.1",
        **{DIR_ENV: str(folder)},
        **(extra_env or {}),
    )
    ingest(env, "--date", "2024-01-01", "--date", "2024-01-02", "--region", "eu", "--region", "us")
    with dagster_dev(env, tmp / "dagster_dev.log") as dev:
        turned_on = dev.dagster("sensor", "start", "-w", "workspace.yaml", SENSOR)
        assert turned_on.returncode == 0, turned_on.stderr[-3000:]
        wait_until(lambda: dev.stale() == [], timeout=600, what="the daemon to fill the lake")
        check_lake(tmp / "lake")
        yield Drill(dev, tmp / "lake", folder)


def runs_since(dev: DagsterDev, moment: float) -> list[dict[str, Any]]:
    found = dev.graphql(RUNS)["runsOrError"]["results"]
    for run in found:
        run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
        run["assets"] = sorted("/".join(a["path"]) for a in run["assetSelection"] or [])
    return sorted(
        (r for r in found if r["creationTime"] >= moment), key=lambda r: r["creationTime"]
    )


def ended_runs_since(dev: DagsterDev, moment: float) -> list[dict[str, Any]]:
    """The runs since `moment`, once every one has ended."""
    return ended_runs(lambda: runs_since(dev, moment), what="the refresh's runs to end")


def started_run(dev: DagsterDev, moment: float, asset: str) -> dict[str, Any]:
    [run] = [
        r for r in runs_since(dev, moment) if r["status"] == "STARTED" and asset in r["assets"]
    ]
    return run


def failure_messages(dev: DagsterDev, run_id: str) -> list[str]:
    events = dev.graphql(FAILURE, id=run_id)["logsForRun"]["events"]
    messages = []
    for event in events:
        if event["__typename"] in ("RunFailureEvent", "EngineEvent"):
            messages.append(event["message"])
        if event["__typename"] == "ExecutionStepFailureEvent":
            error = event["error"]
            messages += [error["message"], *(c["message"] for c in error["causes"])]
    return messages


def status_of(dev: DagsterDev, run_id: str) -> str:
    return next(r["status"] for r in runs_since(dev, 0) if r["runId"] == run_id)


def partition_rows(lake: Path, table: str, date: str, region: str) -> list[tuple]:
    rows = read_table(lake / "warehouse" / table).to_pylist()
    return sorted(
        tuple(sorted(r.items())) for r in rows if str(r["date"]) == date and r["region"] == region
    )


def kill_paused_run(
    drill: Drill,
    point: str,
    number: int,
    since: float,
    asset: str,
    then: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Kill with SIGKILL the run worker (writing `asset`) paused at `point`'s `number`th pass;
    return its run once run monitoring marked it failed, which must happen within its
    interval, and its pool slot is freed. `then` runs as soon as it is marked failed: the
    sensor's retry may commit while the slot waits to be freed (up to 45 s)."""
    pid = drill.paused(point, number)
    run = started_run(drill.dev, since, asset)
    # The example's dagster.yaml keeps a warm worker: a run handed to one runs in that worker,
    # so the process killed is the worker the run's tag names.
    warm = run["tags"].get(WARM_TAG)
    assert warm is None or warm == str(pid), (warm, pid)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    wait_until(
        lambda: status_of(drill.dev, run["runId"]) == "FAILURE",
        timeout=MONITORING_SECONDS + 60,
        interval=1,
        what=f"run monitoring to mark run {run['runId']} failed",
    )
    noticed = time.monotonic() - killed
    if then is not None:
        then()
    assert noticed <= MONITORING_SECONDS + 30, f"marked failed {noticed:.0f} s after the kill"
    # Whoever noticed first says why: the code server that launched the worker ("terminated by
    # signal 9"), or run monitoring through partlake's launcher ("process N on host H ... is
    # gone").
    messages = failure_messages(drill.dev, run["runId"])
    assert any(
        "terminated by signal 9" in m or (f"process {pid} on host" in m and "is gone" in m)
        for m in messages
    ), messages
    print(f"{point} pass {number}: run {run['runId'][:8]} marked failed {noticed:.0f} s after kill")
    # Its pool slot is freed too (by partlake's launcher at once, else by the daemon's run
    # monitoring `free_slots_after_run_end_seconds` after the run ended).
    from dagster import DagsterInstance

    from dagster_partlake import POOL

    instance = DagsterInstance.from_config(drill.dev.env["DAGSTER_HOME"])
    wait_until(
        lambda: (
            not [
                slot
                for slot in instance.event_log_storage.get_concurrency_info(POOL).claimed_slots
                if slot.run_id == run["runId"]
            ]
        ),
        timeout=90,
        interval=1,
        what=f"the pool slot of run {run['runId']} to be freed",
    )
    return run


class TestRunWorkerKilled:
    """SQLite instance, local Spark: the example's deployment on one machine."""

    @pytest.fixture(scope="class")
    def drill(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drill]:
        with filled_demo(tmp_path_factory.mktemp("faults-workers")) as drill:
            yield drill

    def test_killed_between_its_parquet_write_and_its_commit_twice(self, drill: Drill) -> None:
        """The staged files are in the table's folder, not in its log: readers see the old
        partition; run monitoring fails the run; the sensor retries; the third attempt lands."""
        before = partition_rows(drill.lake, "clean_events", "2024-01-02", "us")
        # Commits to clean_events only: its run commits the SQL models beside it too.
        drill.arm("before_commit@clean_events:2")
        changed = time.time()
        ingest(drill.dev.env, "--date", "2024-01-02", "--region", "us", "--seed", "21")
        failed = []

        def old_partition() -> None:
            check_readable(drill.lake)
            assert partition_rows(drill.lake, "clean_events", "2024-01-02", "us") == before

        for number in (1, 2):
            drill.paused("before_commit", number)
            old_partition()
            run = kill_paused_run(
                drill, "before_commit", number, changed, "clean_events", then=old_partition
            )
            failed.append(run)
        drill.disarm()
        # Warm workers killed too: the pool replaced them and later runs went on.
        assert any(WARM_TAG in r["tags"] for r in failed), failed
        wait_until(lambda: drill.dev.stale() == [], timeout=600, what="the closure to refresh")
        check_lake(drill.lake)
        runs = ended_runs_since(drill.dev, changed)
        # The same partition, three times: two killed attempts, then the retry that landed.
        clean = [r for r in runs if "clean_events" in r["assets"]]
        assert [r["status"] for r in clean] == ["FAILURE", "FAILURE", "SUCCESS"], clean
        assert clean[1]["tags"]["partlake/attempt"] == "2"
        assert clean[2]["tags"]["partlake/attempt"] == "3"
        # What reads the killed runs' partitions was requested only once they had landed: the
        # monthly rollups (reading daily_region_stats, in clean_events' run) once the third
        # attempt had committed it (its check steps may still run); no run waited in its run
        # for another.
        others = [r for r in runs if r not in clean]
        assert others and all(r["status"] == "SUCCESS" for r in others), others
        monthly = [r for r in others if "monthly_region_stats" in r["assets"]]
        landed = committed(drill.dev, clean[2]["runId"])["daily_region_stats"]
        assert monthly and all(r["creationTime"] >= landed for r in monthly), runs
        assert all("partlake/waits_for" not in r["tags"] for r in runs), runs

    def test_killed_right_after_its_commit_twice(self, drill: Drill) -> None:
        """The commit landed but the run never recorded it: the partition is fresh by its
        commit record, the run is failed, and what is downstream is refreshed."""
        drill.arm("after_commit@clean_events:1")
        changed = time.time()
        ingest(drill.dev.env, "--date", "2024-01-01", "--region", "eu", "--seed", "22")
        killed = []
        for number, asset in ((1, "clean_events"), (2, "daily_region_stats")):
            drill.paused("after_commit", number)
            if number == 1:
                # Aimed while the first run is held: once it is killed, the sensor's next run
                # may commit daily_region_stats within seconds. Pass 1 stays taken: this is 2.
                drill.aim("after_commit@daily_region_stats:2")
            check_readable(drill.lake)
            killed.append(kill_paused_run(drill, "after_commit", number, changed, asset))
            check_readable(drill.lake)
        drill.disarm()
        assert any(WARM_TAG in r["tags"] for r in killed), killed
        wait_until(lambda: drill.dev.stale() == [], timeout=600, what="the closure to refresh")
        check_lake(drill.lake)
        runs = ended_runs_since(drill.dev, changed)
        # Each committed partition was written once: nothing reran what had landed.
        assert sum("clean_events" in r["assets"] for r in runs) == 1, runs
        monthly = [r["status"] for r in runs if "monthly_region_stats" in r["assets"]]
        assert monthly == ["SUCCESS"], runs  # requested once what it reads had landed

    def test_a_table_deleted_and_recreated_by_another_writer(self, drill: Drill) -> None:
        """daily_region_stats' folder removed and written anew by another system with one
        partition: the sensor's caches notice, the plan says exactly that, and the sensor
        refreshes it without a failed tick."""
        import shutil

        from deltalake import write_deltalake

        path = drill.lake / "warehouse" / "daily_region_stats"
        table = read_table(path)
        other = table.filter(pc_equal(table, "region", "eu")).slice(0, 1)
        shutil.rmtree(path)
        recreated = time.time()
        write_deltalake(str(path), other, partition_by=["date", "region"])
        stale = {(i["asset"], i["partition"], i["reason"]) for i in drill.dev.stale()}
        # The new log holds no partlake write: every partition is one partlake never wrote,
        # including the one the other writer filled; the monthly rollups read them.
        expected = {
            ("daily_region_stats", f"{d}|{r}", "missing")
            for d in ("2024-01-01", "2024-01-02")
            for r in ("eu", "us")
        }
        expected |= {
            (monthly, f"2024-01|{r}", "upstream_changed")
            for monthly in ("monthly_region_stats", "marts/monthly_region_summary")
            for r in ("eu", "us")
        }
        assert stale == expected
        wait_until(lambda: drill.dev.stale() == [], timeout=600, what="the table to be rewritten")
        check_lake(drill.lake)
        assert not [t for t in ticks(drill.dev) if t["timestamp"] > recreated and t["error"]]


def pc_equal(table: Any, column: str, value: str) -> Any:
    import pyarrow.compute as pc

    return pc.equal(table.column(column), value)


def check_readable(lake: Path) -> None:
    for asset in TABLES:
        read_table(lake / "warehouse" / asset)


@contextmanager
def connect_server(root: Path, env: dict[str, str], port: int) -> Iterator[str]:
    started = start_connect(root, env, port)
    try:
        yield started
    finally:
        run_partlake("spark", "stop", "--root", str(root), env=env, timeout=120)


def start_connect(root: Path, env: dict[str, str], port: int) -> str:
    """`partlake spark start` on `port`, as a user would; its `sc://` URL."""
    started = run_partlake(
        "spark", "start", "--port", str(port), "--master", "local[2]", "--driver-memory", "1g",
        "--root", str(root), env=env, timeout=300,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-3000:]
    return f"sc://127.0.0.1:{port}"


class TestSparkConnectServerLost:
    """Every run on one shared Spark Connect server, which is killed in the middle of a run."""

    @pytest.fixture(scope="class")
    def drill(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Drill, Path, int]]:
        tmp = tmp_path_factory.mktemp("faults-connect")
        server_root, port = tmp / "spark-server", free_port()
        env = subprocess_env(SPARK_LOCAL_IP="127.0.0.1")
        with connect_server(server_root, env, port) as url:
            extra = {"PARTLAKE_SPARK_REMOTE": url, "PARTLAKE_SPARK_CONNECT_WAIT_SECONDS": "10"}
            with filled_demo(tmp, extra_env=extra) as drill:
                yield drill, server_root, port

    def test_killed_mid_run_then_started_again(self, drill: tuple[Drill, Path, int]) -> None:
        """The run fails with an error naming the server (nothing committed); once the server is
        back, the sensor's retry refreshes the partition."""
        from dagster_partlake.spark.server import listening, status

        lake_drill, server_root, port = drill
        dev = lake_drill.dev
        before = partition_rows(lake_drill.lake, "clean_events", "2024-01-02", "eu")
        lake_drill.arm("before_write:1")
        changed = time.time()
        ingest(dev.env, "--date", "2024-01-02", "--region", "eu", "--seed", "23")
        lake_drill.paused("before_write", 1)
        run = started_run(dev, changed, "clean_events")
        server = status(str(server_root))
        assert server.pid is not None and server.running
        os.killpg(server.pid, signal.SIGKILL)  # the server's JVM, without a goodbye
        wait_until(lambda: not listening(port), timeout=60, what="the server to be gone")
        lake_drill.release("before_write", 1)
        wait_until(
            lambda: status_of(dev, run["runId"]) == "FAILURE",
            timeout=300,
            what="the run to fail on the lost server",
        )
        messages = failure_messages(dev, run["runId"])
        named = f"the Spark Connect server sc://127.0.0.1:{port} did not answer"
        assert any(named in m and "Nothing was committed" in m for m in messages), messages
        check_readable(lake_drill.lake)
        assert partition_rows(lake_drill.lake, "clean_events", "2024-01-02", "eu") == before

        lake_drill.disarm()
        start_connect(server_root, subprocess_env(SPARK_LOCAL_IP="127.0.0.1"), port)
        wait_until(lambda: dev.stale() == [], timeout=600, what="the retry after the restart")
        check_lake(lake_drill.lake)
        clean = [r for r in runs_since(dev, changed) if "clean_events" in r["assets"]]
        assert [r["status"] for r in clean] == ["FAILURE", "SUCCESS"], clean


class TestPostgresRestarted:
    """The Dagster instance on PostgreSQL (as in tests/test_daemon.py), restarted mid-tick."""

    @pytest.fixture(scope="class")
    def drill(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Drill, Postgres]]:
        with postgres_server() as pg:
            tmp = tmp_path_factory.mktemp("faults-postgres")
            with filled_demo(tmp, storage_yaml=pg.dagster_yaml()) as drill:
                yield drill, pg

    def test_restarted_during_a_sensor_tick(self, drill: tuple[Drill, Postgres]) -> None:
        """The tick that planned the change is paused, PostgreSQL restarts under it (every
        connection cut), and the daemon and the sensor carry on by themselves: the closure is
        refreshed once, with no two runs for the same table versions (run key)."""
        lake_drill, pg = drill
        dev = lake_drill.dev
        lake_drill.arm("sensor_tick:1")
        changed = time.time()
        ingest(dev.env, "--date", "2024-01-01", "--region", "us", "--seed", "24")
        lake_drill.paused("sensor_tick", 1)
        closure = sorted((i["asset"], i["partition"]) for i in dev.stale())
        pg.restart()
        lake_drill.release("sensor_tick", 1)
        lake_drill.disarm()
        wait_until(lambda: dev.stale() == [], timeout=600, what="the refresh after the restart")
        check_lake(lake_drill.lake)
        runs = ended_runs_since(dev, changed)
        keys = [r["tags"].get(RUN_KEY) for r in runs]
        assert len(keys) == len(set(keys)), keys  # no run key twice
        covered = [
            (asset, key)
            for r in runs
            for asset in r["assets"]
            for key in r["tags"]["partlake/partitions"].split(", ")
        ]
        assert ("monthly_region_stats", "2024-01|us") in closure
        assert sorted(covered) == closure, runs  # the closure, each partition once
        assert all(r["status"] == "SUCCESS" for r in runs), runs


def test_two_partlake_runs_on_one_stale_plan_commit_each_partition_once(
    tmp_path: Path, lake: Path
) -> None:
    """Two `partlake run`s started at once on the same stale plan: each partition is committed
    once for its upstream versions (the other run finds that commit and commits nothing), and
    the data is exact."""
    import datetime as dt

    from dagster_partlake.delta.table import log_versions
    from dagster_partlake.records.queries import read_record
    from definitions.ingest import write_partition

    env = cli_env(tmp_path, lake)
    select = ("--select", "clean_events,daily_region_stats,monthly_region_stats")
    for day in (1, 2):
        for region in ("eu", "us"):
            write_partition(dt.date(2024, 1, day), region, 200, root=str(lake))
    filled = run_partlake("run", "-m", "definitions", *select, env=env, timeout=900)
    assert filled.returncode == 0, filled.stdout + filled.stderr
    changed_ms = int(time.time() * 1000)
    write_partition(dt.date(2024, 1, 2), "eu", 200, seed=25, root=str(lake))

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "dagster_partlake.cli", "run", "-m", "definitions", *select],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    first, second = start(), start()
    outputs = [p.communicate(timeout=900)[0] for p in (first, second)]
    assert first.returncode == second.returncode == 0, outputs
    closure = {
        ("clean_events", "2024-01-02|eu"),
        ("daily_region_stats", "2024-01-02|eu"),
        ("monthly_region_stats", "2024-01|eu"),
    }
    for asset, partition in closure:
        path = str(lake / "warehouse" / asset)
        commits = [
            record
            for version in log_versions(path)
            if (record := read_record(path, version)) is not None
            and record.commit_time_ms is not None
            and record.commit_time_ms >= changed_ms
            and partition in record.partition_ids
        ]
        assert len(commits) == 1, (asset, partition, [c.run_id for c in commits], outputs)
        ok = [o for o in outputs if f"[OK] {asset} {partition} " in o]
        assert len(ok) == 1, outputs  # one process wrote it; the other says why it did not
    assert any("already written by run" in o for o in outputs), outputs
    print("\n---\n".join(outputs))
    check_lake(lake, ["clean_events", "daily_region_stats", "monthly_region_stats"])
    plan = run_partlake("plan", "-m", "definitions", *select, env=env)
    assert plan.stdout.strip() == "Everything is fresh: no asset partition needs to run."
