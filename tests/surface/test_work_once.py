"""No asset partition is computed twice from the same inputs, as a user runs things: a code
location over a daily source, with the invalidation sensor, under the example's `dagster.yaml`
(the queued run coordinator, `MonitoredRunLauncher`).

1. Two `partlake run`s started at once on the same stale plan: each partition is computed and
   committed once, and Dagster records one materialization of it.
2. Under `dagster dev`, a source day is rewritten and the sensor's run for it is held at its
   commit (a fault drill). Meanwhile the race is forced: a second run of the same request (what
   a tick evaluated a moment before the first run existed submits, with the same run key and
   tags) and a materialization from the UI (GraphQL `launchRun`, as the Materialize button).
   Both end at once, saying which run computes the partition, without a step or a Spark job.
   Released, the first run commits; the same request submitted again then ends at once too,
   the partition being written from the inputs it would read. The Delta log has one commit of
   the day, Dagster one materialization, and the warm Spark's status tracker Spark jobs for the
   first run only.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.servers import LAUNCH_RUN, DagsterDev, free_port, stop_group, wait_until
from tests.surface.project import BIN, UserProject, outcome_lines

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli, pytest.mark.daemon]

MODULE = "shop_once"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    build_invalidation_sensor,
    partlake_source,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
raw = partlake_source("raw", partitions_def=days)


@dg.asset(partitions_def=days, code_version="1")
def clean(raw: DataFrame) -> DataFrame:
    return raw.where("v is not null")


@dg.asset(partitions_def=days, code_version="1")
def day_sums(clean: DataFrame) -> DataFrame:
    return clean.groupBy("date").agg(F.sum("v").alias("v"))


spark = SparkResource(master="local[2]")
defs = dg.Definitions(
    assets=[raw, clean, day_sums],
    sensors=[
        build_invalidation_sensor(
            "shop_refresh",
            minimum_interval_seconds=1,
            default_status=dg.DefaultSensorStatus.RUNNING,
        )
    ],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
RUNS = """
{ runsOrError { ... on Runs { results {
  runId status creationTime tags { key value } assetSelection { path } } } } }"""
EVENTS = """
query($runId: ID!) { logsForRun(runId: $runId) { ... on EventConnection {
  events { __typename ... on MessageEvent { message } } } } }"""
# The Spark jobs of each run on the warm Spark, counted by the run's job group (a user script
# attached to the same warm Spark).
COUNT_JOBS = """
import json, sys
from dagster_partlake import SparkResource
tracker = SparkResource(master="local[2]").spark_session.sparkContext.statusTracker()
print(json.dumps({r: len(tracker.getJobIdsForGroup("dagster-run:" + r)) for r in sys.argv[1:]}))
"""


def _raw(day: str, values: list[int]) -> pa.Table:
    return pa.Table.from_pylist([{"date": day, "k": i, "v": v} for i, v in enumerate(values)])


def _commits(table: Path, day: str, since: int) -> int:
    """Commits after version `since` that added files to `day`'s partition (read from the log)."""
    count = 0
    for commit in sorted((table / "_delta_log").glob("*.json")):
        if int(commit.stem) <= since:
            continue
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
        count += any(
            a.get("add", {}).get("partitionValues", {}).get("date") == day for a in actions
        )
    return count


def _version(table: Path) -> int:
    return DeltaTable(str(table)).version()


def _materializations(project: UserProject, asset: str, day: str) -> int:
    script = (
        "import dagster as dg, sys; "
        "i = dg.DagsterInstance.get(); "
        "print(len(i.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(sys.argv[1]),"
        " asset_partitions=[sys.argv[2]]), limit=100).records))"
    )
    return int(project.ok("python", "-c", script, asset, day).split()[-1])


def _launch(dev: DagsterDev, assets: list[str], tags: dict[str, str]) -> str:
    reply = dev.graphql(
        LAUNCH_RUN,
        params={
            "selector": {
                "repositoryLocationName": MODULE,
                "repositoryName": "__repository__",
                "jobName": "__ASSET_JOB",
                "assetSelection": [{"path": [a]} for a in assets],
            },
            "mode": "default",
            "runConfigData": {},
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
        },
    )["launchRun"]
    assert reply["__typename"] == "LaunchRunSuccess", reply
    return reply["run"]["runId"]


def _runs(dev: DagsterDev) -> dict[str, dict[str, Any]]:
    found = dev.graphql(RUNS)["runsOrError"]["results"]
    return {
        r["runId"]: {
            "status": r["status"],
            "tags": {t["key"]: t["value"] for t in r["tags"]},
            "assets": sorted("/".join(a["path"]) for a in r["assetSelection"] or []),
        }
        for r in found
    }


def _messages(dev: DagsterDev, run_id: str) -> list[str]:
    events = dev.graphql(EVENTS, runId=run_id)["logsForRun"]["events"]
    return [e.get("message") or "" for e in events]


def _types(dev: DagsterDev, run_id: str) -> list[str]:
    return [e["__typename"] for e in dev.graphql(EVENTS, runId=run_id)["logsForRun"]["events"]]


def _ended(dev: DagsterDev, run_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        run = _runs(dev).get(run_id)
        return run if run and run["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None

    return wait_until(ended, timeout=300, interval=0.5, what=f"run {run_id} to end")


def _two_partlake_runs(project: UserProject) -> list[subprocess.CompletedProcess[str]]:
    """Two `partlake run`s started together; what each printed."""
    command = [str(BIN / "partlake"), "run", "-m", MODULE]
    procs = [
        subprocess.Popen(
            command,
            cwd=project.code,
            env=project.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    return done


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("once")
    drill = root / "drill"
    drill.mkdir()
    project = UserProject(root, extra_env={"PARTLAKE_FAULT_DIR": str(drill)})
    project.write(MODULE, CODE)
    raw = project.lake / "warehouse" / "raw"
    clean = project.lake / "warehouse" / "clean"
    write_deltalake(
        str(raw), pa.concat_tables([_raw(d, [1, 2, 3]) for d in DAYS]), partition_by=["date"]
    )
    # The instance exists before two processes use it (two creating it at once break it).
    project.ok("python", "-c", "import dagster as dg; dg.DagsterInstance.get().get_runs()")
    both = _two_partlake_runs(project)
    filled = {d: _materializations(project, "clean", d) for d in DAYS}
    fill_commits = {d: _commits(clean, d, -1) for d in DAYS}

    port = free_port()
    log = root / "dagster-dev.log"
    proc = project.start(
        "dagster", "dev", "-m", MODULE, "-h", "127.0.0.1", "-p", str(port), log=log
    )
    dev = DagsterDev(port, project.env, log, proc.pid)
    try:
        wait_until(lambda: _loaded(dev, proc, log), timeout=240, what=f"dagster dev ({log})")
        since = _version(clean)
        # The sensor's run for day 2 is held before its commit to clean.
        (drill / "points").write_text("before_commit@clean:1")
        write_deltalake(
            str(raw), _raw(DAYS[1], [4, 5, 6]), mode="overwrite", predicate=f"date = '{DAYS[1]}'"
        )
        paused = drill / "before_commit.1.paused"
        wait_until(
            paused.exists, timeout=300, interval=0.5, what=f"the sensor's run at its commit ({log})"
        )
        first_id = next(
            r
            for r, run in _runs(dev).items()
            if run["status"] == "STARTED" and "clean" in run["assets"]
        )
        first = _runs(dev)[first_id]
        # The race: the same request again, as a tick evaluated a moment before the first run
        # existed submits it (same run key, same tags); and a materialization from the UI.
        duplicate = _launch(dev, first["assets"], _requested(first["tags"]))
        ui = _launch(dev, ["clean"], {"dagster/partition": DAYS[1]})
        held = {r: _ended(dev, r) for r in (duplicate, ui)}
        (drill / "before_commit.1.release").touch()
        done = _ended(dev, first_id)
        wait_until(lambda: _refreshed(dev), timeout=300, interval=1, what=f"the refresh ({log})")
        # The same request once more, now that the partition is written.
        late = _launch(dev, first["assets"], _requested(first["tags"]))
        late_run = _ended(dev, late)
        runs = [first_id, duplicate, ui, late]
        jobs = json.loads(project.ok("python", "-c", COUNT_JOBS, *runs).splitlines()[-1])
        result = {
            "project": project,
            "both": both,
            "filled": filled,
            "fill_commits": fill_commits,
            "first": done,
            "held": held,
            "late": late_run,
            "ids": {"first": first_id, "duplicate": duplicate, "ui": ui, "late": late},
            "messages": {r: _messages(dev, r) for r in runs},
            "types": {r: _types(dev, r) for r in runs},
            "jobs": jobs,
            "commits": _commits(clean, DAYS[1], since),
            "materialized": _materializations(project, "clean", DAYS[1]) - filled[DAYS[1]],
        }
    finally:
        stop_group(proc, grace=60)
    yield result


def _requested(tags: dict[str, str]) -> dict[str, str]:
    """The tags the sensor's request gave a run (not those its launch added)."""
    kept = ("dagster/partition", "dagster/run_key", "dagster/sensor_name")
    return {
        k: v
        for k, v in tags.items()
        if k in kept
        or (k.startswith("partlake/") and k not in ("partlake/worker", "partlake/warm_worker"))
    }


def _loaded(dev: DagsterDev, proc: subprocess.Popen[Any], log: Path) -> bool:
    assert proc.poll() is None, log.read_text()[-4000:]
    try:
        return bool(dev.graphql("{ assetNodes { id } }")["assetNodes"])
    except Exception:  # noqa: BLE001 - not listening yet
        return False


def _refreshed(dev: DagsterDev) -> bool:
    runs = _runs(dev).values()
    return all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs) and any(
        "day_sums" in r["assets"] and r["status"] == "SUCCESS" for r in runs
    )


def test_two_partlake_runs_compute_each_partition_once(shop: dict[str, Any]) -> None:
    both = shop["both"]
    for done in both:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for done in both for line in outcome_lines(done.stdout)]
    computed = [line for line in lines if line.startswith("[OK]")]
    skipped = [line for line in lines if line.startswith("[UNCHANGED]")]
    assert len(computed) == 2 * len(DAYS), lines  # clean and day_sums, each day once
    assert len(skipped) == 2 * len(DAYS), lines
    assert all("not run: already written by run " in line for line in skipped), skipped
    assert shop["fill_commits"] == dict.fromkeys(DAYS, 1)
    assert shop["filled"] == dict.fromkeys(DAYS, 1)


def test_a_tick_racing_a_run_and_a_ui_materialize_compute_nothing(shop: dict[str, Any]) -> None:
    ids, held = shop["ids"], shop["held"]
    assert shop["first"]["status"] == "SUCCESS"
    for name in ("duplicate", "ui"):
        run_id = ids[name]
        assert held[run_id]["status"] == "SUCCESS", held[run_id]
        said = [m for m in shop["messages"][run_id] if "being computed by run" in m]
        assert said and f"clean[{DAYS[1]}]" in said[0] and ids["first"][:8] in said[0], said
        assert "ExecutionStepStartEvent" not in shop["types"][run_id]
        assert shop["jobs"][run_id] == 0
    assert shop["jobs"][ids["first"]] > 0
    assert shop["commits"] == 1  # clean's day 2, once
    assert shop["materialized"] == 1


def test_a_run_whose_partitions_are_written_ends_at_once(shop: dict[str, Any]) -> None:
    late = shop["ids"]["late"]
    assert shop["late"]["status"] == "SUCCESS"
    said = [m for m in shop["messages"][late] if "already written by run" in m]
    assert said and "from the inputs this run would read" in said[0], shop["messages"][late]
    assert "ExecutionStepStartEvent" not in shop["types"][late]
    assert shop["jobs"][late] == 0
