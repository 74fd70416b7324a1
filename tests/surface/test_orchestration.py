"""Keeping a lake fresh, as a user sets it up: invalidation sensors (`build_invalidation_sensor`
with each argument), Declarative Automation with `partlake_stale()` (and its `root=`), the
maintenance job (`build_maintenance_job`, `MaintenanceConfig`) and the run launcher
(`MonitoredRunLauncher`, named in the project's dagster.yaml). One code location over a daily
source. The sensors' ticks are previewed with `dagster sensor preview` before anything ran; the
lake is filled with `partlake run`; Dagster's automation is evaluated by a user's script; then
under `dagster dev` the sensor that starts running by default refreshes a rewritten day, backing
off after the failed runs of a bad batch, through the monitored launcher; and the maintenance
job compacts, vacuums and checkpoints without making anything stale.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.servers import DagsterDev, free_port, wait_until
from tests.surface.options import covers
from tests.surface.project import UserProject, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli, pytest.mark.daemon]

MODULE = "shop_ops"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    build_invalidation_sensor,
    build_maintenance_job,
    model_kind_metadata,
    partlake_asset_checks,
    partlake_source,
    partlake_stale,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
raw = partlake_source("raw", partitions_def=days)


@dg.asset(
    partitions_def=days,
    automation_condition=partlake_stale(),
    metadata={"partlake/constraints": [{"not_null": ["v"]}]},
)
def clean(raw: DataFrame) -> DataFrame:
    return raw


# Judged in another lake, where nothing was written: never stale there.
@dg.asset(partitions_def=days, automation_condition=partlake_stale(root="{empty_lake}"))
def day_sums(clean: DataFrame) -> DataFrame:
    return clean.groupBy("date").agg(F.sum("v").alias("v"))


@dg.asset(partitions_def=days, metadata=model_kind_metadata("append"))
def raw_log(raw: DataFrame) -> DataFrame:
    return raw


spark = SparkResource(master="local[2]")
assets = [raw, clean, day_sums, raw_log]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    jobs=[build_maintenance_job(name="shop_maintenance")],
    sensors=[
        # Runs as soon as the daemon sees the code location.
        build_invalidation_sensor(
            "shop_refresh",
            minimum_interval_seconds=3,
            retry_base_seconds=3,
            retry_max_seconds=4,
            max_runs_in_flight=2,
            default_status=dg.DefaultSensorStatus.RUNNING,
            refresh="runs",
        ),
        # Plans the lake of another IO manager, where nothing was written.
        build_invalidation_sensor("elsewhere_refresh", io_manager_key="elsewhere_io"),
        # The same, but its root says where the lake is; one asset backfill per verdict.
        build_invalidation_sensor(
            "rooted_refresh",
            root="{lake}",
            io_manager_key="elsewhere_io",
            minimum_interval_seconds=45,
            refresh="backfill",
        ),
        dg.AutomationConditionSensorDefinition(
            "shop_automation", target=dg.AssetSelection.all(), use_user_code_server=True
        ),
    ],
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(spark=spark, root="{lake}"),
        "elsewhere_io": DeltaPartitionIOManager(spark=spark, root="{empty_lake}"),
    },
    executor=dg.in_process_executor,
)
"""
# A user's script: what Dagster's automation would request now, and one tick of two sensors, as
# Dagster's public test API evaluates them.
AUTOMATION = """
import json

import dagster as dg

from shop_ops import defs

instance = dg.DagsterInstance.get()
result = dg.evaluate_automation_conditions(defs=defs, instance=instance)
requested = sorted(
    [key.to_user_string(), partition]
    for key in defs.resolve_all_asset_keys()
    for partition in result.get_requested_partitions(key)
)
repository = defs.get_repository_def()
ticks = {}
for name in ("elsewhere_refresh", "rooted_refresh"):
    sensor = defs.get_sensor_def(name)
    resources = repository.get_top_level_resources()
    context = dg.build_sensor_context(
        instance=instance,
        repository_def=repository,
        resources={k: v for k, v in resources.items() if k in sensor.required_resource_keys},
    )
    with context:
        tick = sensor.evaluate_tick(context)
    ticks[name] = {
        "skip": tick.skip_message,
        "requests": [
            {
                "backfill": request.requires_backfill_daemon(),
                "tags": dict(request.tags),
                "partitions": sorted(
                    [p.asset_key.to_user_string(), p.partition_key]
                    for p in request.asset_graph_subset.iterate_asset_partitions()
                ),
            }
            for request in tick.run_requests or []
        ],
    }
print(json.dumps({"requested": requested, "ticks": ticks}))
"""
# Vacuum alone, keeping anything from the last 1,000 hours: nothing to do (and no Spark).
VACUUM_ONLY = """
ops:
  shop_maintenance_tables:
    config:
      operations: [vacuum]
      assets: [raw_log]
      retention_hours: 1000
"""
# Every operation, on two tables; the target is set from the files' sizes.
MAINTENANCE = """
ops:
  shop_maintenance_tables:
    config:
      operations: [compact, vacuum, checkpoint]
      assets: [raw_log, clean]
      target_file_mb: {target_file_mb}
      retention_hours: 2
      keep_log_hours: 0
"""
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
LOCATION = {"repositoryName": "__repository__", "repositoryLocationName": MODULE}
SENSORS = """
query Sensors($sel: RepositorySelector!) {
  instance { runLauncher { name } }
  repositoryOrError(repositorySelector: $sel) {
    ... on Repository { sensors { name minIntervalSeconds sensorState { status } } }
  }
}
"""
TICKS = """
query Ticks($sel: SensorSelector!) {
  sensorOrError(sensorSelector: $sel) {
    ... on Sensor { sensorState { ticks(limit: 200) { timestamp status skipReason } } }
  }
}
"""
RUNS = """
{
  runsOrError(filter: {tags: [{key: "partlake/sensor", value: "shop_refresh"}]}) {
    ... on Runs { results { runId status creationTime endTime tags { key value }
                            assetSelection { path } } }
  }
}
"""


def _raw(day: str, values: list[int | None]) -> pa.Table:
    return pa.Table.from_pylist([{"date": day, "k": i, "v": v} for i, v in enumerate(values)])


def _rewrite(raw: str, day: str, values: list[int | None]) -> None:
    """Another system rewrites one day of the source."""
    write_deltalake(raw, _raw(day, values), mode="overwrite", predicate=f"date = '{day}'")


def _tick_log(err: str) -> list[str]:
    """The lines a previewed tick logged (Dagster prints them on stderr)."""
    return [m.group(1) for m in re.finditer(r" - __repository__ - \w+ - (.*)", err)]


def _ticks(dev: DagsterDev) -> list[dict[str, Any]]:
    found = dev.graphql(TICKS, sel={**LOCATION, "sensorName": "shop_refresh"})
    return sorted(found["sensorOrError"]["sensorState"]["ticks"], key=lambda t: t["timestamp"])


def _runs(dev: DagsterDev) -> list[dict[str, Any]]:
    runs = dev.graphql(RUNS)["runsOrError"]["results"]
    for run in runs:
        run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
        run["assets"] = sorted("/".join(a["path"]) for a in run["assetSelection"])
    return sorted(runs, key=lambda r: r["creationTime"])


def _skipped_with(dev: DagsterDev, text: str) -> bool:
    return any(text in (t["skipReason"] or "") for t in _ticks(dev))


def _daemon_refresh(project: UserProject, raw: str) -> dict[str, Any]:
    """Under `dagster dev`: the sensor that runs by default refreshes day 2, whose batch fails
    its constraint twice (the ticks back off), then succeeds once the source is fixed."""
    port = free_port()
    log = project.root / "dagster-dev.log"
    proc = project.start(
        "dagster", "dev", "-m", MODULE, "-h", "127.0.0.1", "-p", str(port), log=log
    )
    dev = DagsterDev(port, project.env, log, proc.pid)
    try:
        wait_until(lambda: _loaded(dev, proc, log), timeout=240, what=f"dagster dev ({log})")
        listed = dev.graphql(SENSORS, sel=LOCATION)
        # The first failed run: the tick that counts it backs off retry_base_seconds.
        backing_off = "backing off after a failed run (next retry: clean[2024-01-02] in {} s)"
        wait_until(lambda: _skipped_with(dev, backing_off.format(3)), timeout=180, interval=1,
                   what=f"a tick backing off 3 s ({log})")  # fmt: skip
        # The retry fails too: 2 x 3 s, at most retry_max_seconds.
        wait_until(lambda: _skipped_with(dev, backing_off.format(4)), timeout=180, interval=1,
                   what=f"a tick backing off 4 s ({log})")  # fmt: skip
        _rewrite(raw, DAYS[1], [5, 6])

        def refreshed() -> list[dict[str, Any]] | None:
            runs = _runs(dev)
            done = [r for r in runs if r["status"] == "SUCCESS"]
            if {a for r in done for a in r["assets"]} >= {"clean", "day_sums", "raw_log"} and all(
                r["endTime"] for r in runs
            ):
                return runs
            return None

        runs = wait_until(refreshed, timeout=240, interval=1, what=f"the refresh ({log})")
        return {"listed": listed, "runs": runs, "ticks": _ticks(dev)}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _loaded(dev: DagsterDev, proc: subprocess.Popen[Any], log: Path) -> bool:
    assert proc.poll() is None, log.read_text()[-4000:]
    try:
        return bool(dev.graphql("{ assetNodes { id } }")["assetNodes"])
    except Exception:  # noqa: BLE001 - not listening yet
        return False


def _live_sizes(table: Path) -> dict[str, list[int]]:
    """The sizes of each day's live files."""
    live = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    sizes: dict[str, list[int]] = {}
    for day, size in zip(
        live.column("partition.date").to_pylist(),
        live.column("size_bytes").to_pylist(),
        strict=True,
    ):
        sizes.setdefault(day, []).append(size)
    return sizes


def _files(table: Path) -> list[str]:
    return sorted(str(p.relative_to(table)) for p in table.rglob("*.parquet"))


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    project = UserProject(tmp_path_factory.mktemp("ops"))
    lake, empty = project.root / "shop-lake", project.root / "empty-lake"
    project.write(MODULE, CODE, lake=lake, empty_lake=empty)
    project.write("automation_check", AUTOMATION)
    raw = str(lake / "warehouse" / "raw")
    write_deltalake(raw, pa.concat_tables([_raw(d, [1, 2]) for d in DAYS]), partition_by=["date"])
    preview = project.run("dagster", "sensor", "preview", "-m", MODULE, "shop_refresh")
    project.ok("partlake", "run", "-m", MODULE)
    _rewrite(raw, DAYS[1], [1, None])  # a batch that fails clean's not_null gate
    automation = json.loads(project.ok("python", "automation_check.py").splitlines()[-1])
    daemon = _daemon_refresh(project, raw)

    # Maintenance: old and new files no commit references, as a killed writer leaves them.
    log_table = lake / "warehouse" / "raw_log"
    for name, age in (("orphan-old.parquet", 3 * 3600), ("orphan-new.parquet", 0)):
        orphan = log_table / f"date={DAYS[0]}" / name
        orphan.write_bytes(b"PAR1 not referenced by the log")
        os.utime(orphan, (time.time() - age, time.time() - age))
    log_before = sorted(p.name for p in (log_table / "_delta_log").iterdir())
    before = {t: _rows(lake, t) for t in ROWS}
    files = {t: _files(lake / "warehouse" / t) for t in ("raw_log", "day_sums")}
    # Day 2 was appended several times: a target of half its size makes its files two.
    sizes = _live_sizes(log_table)[DAYS[1]]
    target_mb = (sum(sizes) / 2 + 1) / 2**20
    (project.code / "vacuum_only.yaml").write_text(VACUUM_ONLY)
    (project.code / "maintenance.yaml").write_text(
        MAINTENANCE.replace("{target_file_mb}", f"{target_mb:.9f}")
    )
    job = ["job", "execute", "-m", MODULE, "-j", "shop_maintenance", "-c"]
    untouched = project.run("dagster", *job, "vacuum_only.yaml")
    after_nothing = {
        "files": _files(log_table),
        "log": sorted(p.name for p in (log_table / "_delta_log").iterdir()),
    }
    maintained = project.run("dagster", *job, "maintenance.yaml")
    project.assert_fresh(MODULE)
    return {
        "project": project,
        "lake": lake,
        "preview": preview,
        "automation": automation,
        "daemon": daemon,
        "before": before,
        "files": files,
        "sizes": sizes,
        "log": log_before,
        "untouched": untouched,
        "after_nothing": after_nothing,
        "maintained": maintained,
    }


ROWS = {
    "clean": ["date", "k", "v"],
    "day_sums": ["date", "v"],
    "raw_log": ["date", "k", "v"],
}


def _rows(lake: Path, table: str) -> list[tuple[Any, ...]]:
    return table_rows(lake / "warehouse" / table, ROWS[table])


@covers(
    "build_invalidation_sensor",
    "build_invalidation_sensor(name=)",
    "build_invalidation_sensor(max_runs_in_flight=)",
)
def test_a_tick_requests_the_stale_partitions_at_most_max_runs_in_flight(
    shop: dict[str, Any],
) -> None:
    """`dagster sensor preview` before anything ran: three days are missing, one run each;
    the tick requests two (max_runs_in_flight=2) and says which partitions, why."""
    preview = shop["preview"]
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert "Sensor returning run requests for 2 run(s):" in preview.stdout, preview.stdout
    log = _tick_log(preview.stdout + preview.stderr)
    started = [line for line in log if line.startswith("Refresh ")]
    assert len(started) == 1 and re.fullmatch(
        r"Refresh \w+: 2 run\(s\) for 6 stale asset partition\(s\) \(tag partlake/refresh=\w+\)\.",
        started[0],
    ), log
    assert sorted(line for line in log if " missing " in line) == sorted(
        f"{asset}[{day}] missing because {upstream}[{day}]"
        for day in DAYS[:2]
        for asset, upstream in (("clean", "raw"), ("day_sums", "clean"), ("raw_log", "raw"))
    )


@covers(
    "build_invalidation_sensor(io_manager_key=)",
    "build_invalidation_sensor(root=)",
    "build_invalidation_sensor(refresh=)",
)
def test_a_sensor_plans_the_lake_its_io_manager_or_root_names(shop: dict[str, Any]) -> None:
    """After the lake was filled and day 2 of the source rewritten: the sensor on another IO
    manager's (empty) lake finds nothing; the same with `root=` the lake requests the stale
    closure of day 2 as one asset backfill (`refresh="backfill"`)."""
    ticks = shop["automation"]["ticks"]
    assert ticks["elsewhere_refresh"] == {"skip": "Everything is fresh.", "requests": []}
    (request,) = ticks["rooted_refresh"]["requests"]
    assert request["backfill"] is True
    assert request["partitions"] == [
        ["clean", DAYS[1]],
        ["day_sums", DAYS[1]],
        ["raw_log", DAYS[1]],
    ]
    assert request["tags"]["partlake/sensor"] == "rooted_refresh"
    assert request["tags"]["partlake/reasons"] == "upstream_changed"


@covers("partlake_stale", "partlake_stale(root=)")
def test_dagster_s_automation_requests_what_partlake_finds_stale(shop: dict[str, Any]) -> None:
    """`partlake_stale()` on clean: its rewritten day; `partlake_stale(root=...)` on day_sums
    judges it in that (empty) lake, where nothing is stale, although day 2 is stale in the
    code location's lake (the backfill above lists it). The automation sensor
    (`use_user_code_server=True`) loads under `dagster dev`."""
    assert shop["automation"]["requested"] == [["clean", DAYS[1]]]
    sensors = _sensors(shop)
    assert sensors["shop_automation"] == (30, "STOPPED")


def _sensors(shop: dict[str, Any]) -> dict[str, tuple[int, str]]:
    listed = shop["daemon"]["listed"]["repositoryOrError"]["sensors"]
    return {s["name"]: (s["minIntervalSeconds"], s["sensorState"]["status"]) for s in listed}


@covers(
    "build_invalidation_sensor(default_status=)",
    "build_invalidation_sensor(minimum_interval_seconds=)",
    "build_invalidation_sensor(retry_base_seconds=)",
    "build_invalidation_sensor(retry_max_seconds=)",
    "MonitoredRunLauncher",
)
def test_the_daemon_refreshes_through_the_monitored_launcher_backing_off_after_failures(
    shop: dict[str, Any],
) -> None:
    daemon = shop["daemon"]
    assert daemon["listed"]["instance"]["runLauncher"]["name"] == "MonitoredRunLauncher"
    # Only the sensor with default_status RUNNING runs without being started.
    assert _sensors(shop) == {
        "shop_refresh": (3, "RUNNING"),
        "elsewhere_refresh": (2, "STOPPED"),
        "rooted_refresh": (45, "STOPPED"),
        "shop_automation": (30, "STOPPED"),
    }
    # The bad batch failed twice: the ticks backed off 3 s (retry_base_seconds), then
    # 2 x 3 s capped at 4 s (retry_max_seconds).
    reasons = [t["skipReason"] or "" for t in daemon["ticks"]]
    backing_off = "backing off after a failed run (next retry: clean[2024-01-02] in {} s)"
    first = next(i for i, r in enumerate(reasons) if backing_off.format(3) in r)
    assert any(backing_off.format(4) in r for r in reasons[first + 1 :]), reasons
    runs = daemon["runs"]
    failed = [r for r in runs if r["status"] == "FAILURE"]
    assert len(failed) >= 2 and all("clean" in r["assets"] for r in failed), runs
    assert [r["tags"].get("partlake/attempt") for r in failed[:2]] == [None, "2"]
    # Once the source was fixed, the retry succeeded: one refresh from the first run to the
    # last, each run launched in a worker process whose tags name it.
    done = [r for r in runs if r["status"] == "SUCCESS"]
    assert done and {a for r in done for a in r["assets"]} == {"clean", "day_sums", "raw_log"}
    assert done[0]["tags"]["partlake/attempt"] == str(len(failed) + 1), runs
    assert len({r["tags"]["partlake/refresh"] for r in runs}) == 1, runs
    pids = set()
    for run in runs:
        tags = run["tags"]
        assert tags["partlake/sensor"] == "shop_refresh"
        assert tags["partlake/partitions"] == DAYS[1]
        assert {"partlake/host", "partlake/pid", "partlake/process_start"} <= set(tags), tags
        pids.add(tags["partlake/pid"])
    assert len(pids) == len(runs)  # a worker process per run
    lake = shop["lake"]
    assert [r for r in _rows(lake, "clean") if r[0] == DAYS[1]] == [
        (DAYS[1], 0, 5),
        (DAYS[1], 1, 6),
    ]
    assert _rows(lake, "day_sums") == [(DAYS[0], 3), (DAYS[1], 11), (DAYS[2], 3)]


@covers(
    "build_maintenance_job",
    "build_maintenance_job(name=)",
    "MaintenanceConfig",
    "MaintenanceConfig(operations=)",
    "MaintenanceConfig(assets=)",
    "MaintenanceConfig(target_file_mb=)",
    "MaintenanceConfig(retention_hours=)",
    "MaintenanceConfig(keep_log_hours=)",
)
def test_the_maintenance_job_compacts_vacuums_and_checkpoints_and_nothing_goes_stale(
    shop: dict[str, Any],
) -> None:
    lake: Path = shop["lake"]
    log_table = lake / "warehouse" / "raw_log"
    # operations [vacuum], retention 1,000 h: nothing removed, compacted or checkpointed.
    untouched = shop["untouched"]
    assert untouched.returncode == 0, untouched.stderr[-3000:]
    assert "vacuum raw_log: removed 0 file(s)" in untouched.stderr, untouched.stderr[-3000:]
    assert "compact" not in untouched.stderr and "checkpoint" not in untouched.stderr
    assert shop["after_nothing"] == {"files": shop["files"]["raw_log"], "log": shop["log"]}
    maintained = shop["maintained"]
    out = maintained.stdout + maintained.stderr
    assert maintained.returncode == 0, out[-3000:]
    # compact, to a target of half day 2's bytes: its appended files became two.
    assert len(shop["sizes"]) >= 3, shop["sizes"]
    sizes = _live_sizes(log_table)
    assert [len(sizes[day]) for day in DAYS] == [1, 2, 1], sizes
    assert f"compact raw_log: compacted 1 partition(s): {len(shop['sizes'])} -> 2 file(s)" in out
    # vacuum (retention 2 h): the old orphan is gone, the new one (and what compaction just
    # replaced) stays.
    files = _files(log_table)
    assert f"date={DAYS[0]}/orphan-new.parquet" in files
    assert f"date={DAYS[0]}/orphan-old.parquet" not in files
    assert "vacuum raw_log: removed 1 file(s) and 0 staging folder(s)" in out
    # checkpoint (keep_log_hours 0): a checkpoint, and JSON commits no record needs removed.
    for table in ("raw_log", "clean"):
        assert list((lake / "warehouse" / table / "_delta_log").glob("*.checkpoint.parquet"))
        assert re.search(rf"checkpoint {table}: checkpoint at version \d+; removed [1-9]", out)
    # assets: day_sums was left alone.
    assert not list((lake / "warehouse" / "day_sums" / "_delta_log").glob("*.checkpoint*"))
    assert _files(lake / "warehouse" / "day_sums") == shop["files"]["day_sums"]
    # Nothing changed for a reader, and the plan stayed empty (the fixture checked it).
    assert {t: _rows(lake, t) for t in ROWS} == shop["before"]
