"""The invalidation sensor under the real Dagster daemon (`dagster dev`), on SQLite and PostgreSQL.

A user's path: write source data, `dagster dev -w workspace.yaml`, `dagster sensor start ...`,
let the daemon's runs fill the lake (on SQLite, `partlake run` fills it first, as a team turning
the sensor on over a lake it already has), rewrite one source partition, and wait until
`partlake plan --json` is empty again. What the daemon did is then read back through the
webserver's GraphQL API, as the UI reads it. On SQLite the example's catalog is on (the
session's Hive metastore): the refresh's tables are registered by the sensor's runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, run_partlake, subprocess_env
from tests.servers import (
    DagsterDev,
    S3Server,
    dagster_dev,
    ended_runs,
    postgres_server,
    spark_connect,
    wait_until,
)

pytestmark = [pytest.mark.dagster_cli, pytest.mark.daemon]

SENSOR = "partlake_invalidation"
# As the machine's notes say Debian's chromium must run headless here as root: no sandbox, no
# GPU, and no background networking (this network refuses it, many connections at a time).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TICK_SECONDS = 2  # the sensor's minimum interval: it ticks on every pass of the daemon's loop
DAEMON_LOOP_SECONDS = 5  # Dagster's sensor daemon evaluates sensors this often at most
RETRY_SECONDS = 20
CLOSURE = {
    ("clean_events", "2024-01-02|us"),
    ("daily_region_stats", "2024-01-02|us"),
    ("monthly_region_stats", "2024-01|us"),
    # The example's SQL models (definitions/sql/), refreshed by the daemon like the others.
    ("staging/events", "2024-01-02|us"),
    ("marts/user_activity", "2024-01-02|us"),
    ("marts/monthly_region_summary", "2024-01|us"),
}
SENSOR_SELECTOR = {
    "repositoryName": "__repository__",
    "repositoryLocationName": "definitions",
    "sensorName": SENSOR,
}
TICKS = """
query Ticks($sel: SensorSelector!) {
  sensorOrError(sensorSelector: $sel) {
    ... on Sensor { sensorState { status ticks(limit: 500) {
      timestamp endTimestamp status runIds skipReason error { message causes { message } }
      logEvents { events { message level } } } } }
  }
}
"""
CHECK_RESULTS = """
query Results($key: AssetKeyInput!, $partition: String!) {
  assetCheckExecutions(assetKey: $key, checkName: "partlake_fresh", partition: $partition,
                       limit: 5) {
    runId timestamp partition
    evaluation { success severity description
      metadataEntries { label ... on TextMetadataEntry { text } } }
  }
}
"""
RUNS = """
query Runs($tag: String!) {
  runsOrError(filter: {tags: [{key: "partlake/sensor", value: $tag}]}) {
    ... on Runs { results {
      runId status creationTime startTime endTime
      tags { key value } assetSelection { path } } }
  }
}
"""


@dataclass(frozen=True)
class Refreshed:
    """A demo lake kept fresh by the daemon, right after one source rewrite was refreshed."""

    dev: DagsterDev
    lake: Path  # $PARTLAKE_HOME: the lake itself, unless `lake_root` puts it on an object store
    lake_root: str  # where the example's tables live ($PARTLAKE_LAKE_ROOT, else `lake`)
    rewritten_at: float
    fill_seconds: float
    refresh_seconds: float


def ingest(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "definitions.ingest", "--rows", "200", *args],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


@contextmanager
def refreshed_demo(
    tmp: Path,
    label: str,
    storage_yaml: str = "",
    spark_remote: str | None = None,
    *,
    filled_by_partlake: bool = False,
    lake_env: Mapping[str, str] | None = None,
    daemon_env: Mapping[str, str] | None = None,
) -> Iterator[Refreshed]:
    """`dagster dev` on a fresh demo instance; the sensor, turned on with the Dagster CLI, fills
    the lake (or finds it filled by `partlake run`: a few minutes less of one process per run);
    then one source partition is rewritten and the daemon refreshes it. `lake_env` (e.g.
    PARTLAKE_LAKE_ROOT and the AWS variables) goes to every process: the example's lake where
    it says. `daemon_env` goes to `dagster dev` and every process after the fill, not to the
    `partlake run` that fills the lake: a setting a team turns on with the sensor."""
    home = tmp / "dagster_home"
    home.mkdir()
    config = (REPO_ROOT / "scripts" / "dagster.yaml").read_text()
    (home / "dagster.yaml").write_text(config + "\n" + storage_yaml)
    env = subprocess_env(
        DAGSTER_HOME=str(home),
        PARTLAKE_HOME=str(tmp / "lake"),
        PARTLAKE_CACHE_DIR=str(tmp / "state-cache"),
        PARTLAKE_SENSOR_INTERVAL_SECONDS=str(TICK_SECONDS),
        PARTLAKE_SENSOR_RETRY_SECONDS=str(RETRY_SECONDS),
        SPARK_LOCAL_IP="127.0.0.1",
        **({"PARTLAKE_SPARK_REMOTE": spark_remote} if spark_remote else {}),
        **(lake_env or {}),
    )
    ingest(env, "--date", "2024-01-01", "--date", "2024-01-02", "--region", "eu", "--region", "us")
    if filled_by_partlake:
        filled = run_partlake("run", "-m", "definitions", env=env, timeout=1800)
        assert filled.returncode == 0, filled.stdout[-3000:] + filled.stderr[-3000:]
    env.update(daemon_env or {})
    with dagster_dev(env, tmp / "dagster_dev.log") as dev:
        started = time.monotonic()
        turned_on = dev.dagster("sensor", "start", "-w", "workspace.yaml", SENSOR)
        assert turned_on.returncode == 0, turned_on.stderr[-3000:]
        wait_until(lambda: dev.stale() == [], timeout=1800, what="the daemon to fill the lake")
        fill_seconds = time.monotonic() - started

        rewritten_at = time.time()
        ingest(env, "--date", "2024-01-02", "--region", "us", "--seed", "7")
        assert {(i["asset"], i["partition"]) for i in dev.stale()} == CLOSURE
        wait_until(lambda: dev.stale() == [], timeout=900, what="the daemon to refresh")
        refresh_seconds = time.time() - rewritten_at
        filled = "found the lake partlake run filled" if filled_by_partlake else "filled the lake"
        print(
            f"daemon ({label}): {filled} in {fill_seconds:.0f} s; "
            f"source rewrite -> everything fresh in {refresh_seconds:.0f} s"
        )
        root = env.get("PARTLAKE_LAKE_ROOT") or str(tmp / "lake")
        yield Refreshed(dev, tmp / "lake", root, rewritten_at, fill_seconds, refresh_seconds)


def chromium() -> str:
    path = shutil.which("chromium")
    assert path, (
        "Debian's chromium is missing (Playwright's own browser download is not reachable "
        "here): run scripts/install_test_deps.sh"
    )
    return path


def ticks(dev: DagsterDev) -> list[dict[str, Any]]:
    state = dev.graphql(TICKS, sel=SENSOR_SELECTOR)["sensorOrError"]["sensorState"]
    assert state["status"] == "RUNNING"
    return sorted(state["ticks"], key=lambda t: t["timestamp"])


def sensor_runs(dev: DagsterDev) -> list[dict[str, Any]]:
    runs = dev.graphql(RUNS, tag=SENSOR)["runsOrError"]["results"]
    for run in runs:
        run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
        run["assets"] = ["/".join(a["path"]) for a in run["assetSelection"]]
    return sorted(runs, key=lambda r: r["creationTime"])


def fresh_results(
    dev: DagsterDev, partitions: set[tuple[str, str]], *, after: float, passed: bool
) -> dict[tuple[str, str], dict[str, Any]] | None:
    """The newest partlake_fresh result of each (asset, partition) (not counting executions a
    run only planned so far), if every one is newer than `after` and has passed (or failed) as
    wanted; else None."""
    found = {}
    for asset, partition in partitions:
        executions = dev.graphql(CHECK_RESULTS, key={"path": [asset]}, partition=partition)[
            "assetCheckExecutions"
        ]
        newest = next((e for e in executions if e["evaluation"] is not None), None)
        if newest is None:
            return None
        if newest["timestamp"] < after or newest["evaluation"]["success"] is not passed:
            return None
        found[asset, partition] = newest
    return found


def dismiss_welcome(page: Any) -> None:
    """A fresh instance greets the user with a dialog over the first page they open."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.get_by_role("button", name="Skip").click(timeout=5_000)
    except PlaywrightTimeout:
        return  # this browser was greeted before


@dataclass(frozen=True)
class Materialized:
    """One asset's materialization in a run: when, and its metadata."""

    timestamp: float
    metadata: dict[str, Any]  # each value as plain Python (a text's string)


def materializations(dev: DagsterDev, run_id: str) -> dict[str, Materialized]:
    """Each asset run `run_id` materialized, with that materialization's metadata, read from
    the instance as the daemon wrote it."""
    from dagster import DagsterEventType, DagsterInstance

    with DagsterInstance.from_config(dev.env["DAGSTER_HOME"]) as instance:
        records = instance.get_records_for_run(
            run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
        ).records
    found = {}
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None or event.asset_key is None:
            continue
        metadata = event.step_materialization_data.materialization.metadata
        found[event.asset_key.to_user_string()] = Materialized(
            record.event_log_entry.timestamp, {k: v.value for k, v in metadata.items()}
        )
    return found


def committed(dev: DagsterDev, run_id: str) -> dict[str, float]:
    """When run `run_id` recorded each asset's materialization (after its commit)."""
    return {asset: m.timestamp for asset, m in materializations(dev, run_id).items()}


def run_messages(dev: DagsterDev, run_id: str) -> list[str]:
    """The messages of a run's event log, as the UI shows them."""
    events = dev.graphql(RUN_MESSAGES, runId=run_id)["logsForRun"]["events"]
    return [e["message"] for e in events if e.get("message")]


RUN_MESSAGES = """
query($runId: ID!) { logsForRun(runId: $runId) { ... on EventConnection {
  events { ... on MessageEvent { message } } } } }"""


def refresh_filter(refresh_id: str) -> str:
    """The run list's query string that shows the runs of one refresh."""
    from urllib.parse import urlencode

    return urlencode({"q[]": f"tag:partlake/refresh={refresh_id}"})


def covered(run: dict[str, Any]) -> set[tuple[str, str]]:
    keys = run["tags"]["partlake/partitions"].split(", ")
    return {(asset, key) for asset in run["assets"] for key in keys}


def check_refresh(refreshed: Refreshed) -> None:
    """The daemon's own runs did exactly the closure; its ticks list them; later ticks are idle."""
    dev = refreshed.dev
    runs = ended_runs(
        lambda: [r for r in sensor_runs(dev) if r["creationTime"] >= refreshed.rewritten_at],
        what="the refresh's runs to end",
    )
    assert all(r["status"] == "SUCCESS" for r in runs), runs
    assert set().union(*(covered(r) for r in runs)) == CLOSURE
    assert sum(len(covered(r)) for r in runs) == len(CLOSURE)  # nothing requested twice
    assert all(r["tags"]["partlake/reasons"] == "upstream_changed" for r in runs)
    assert all(r["tags"]["partlake/sensor"] == SENSOR for r in runs)
    # One run per level, the monthly one created only once the daily one had committed what it
    # reads (it may still be running its check steps: no run waits inside another), both under
    # the refresh's one id.
    assert len(runs) == 2, runs
    daily, monthly = runs
    assert "monthly_region_stats" in monthly["assets"]
    assert monthly["creationTime"] >= committed(dev, daily["runId"])["daily_region_stats"], runs
    assert all("partlake/waits_for" not in r["tags"] for r in runs)
    assert len({r["tags"]["partlake/refresh"] for r in runs}) == 1, runs
    # A tick may start just before the rewrite and act on it: ticks that ended after it. The
    # first level is the sensor's; the next one the first run requested itself once it had
    # committed (orchestration.chain), without waiting for a tick.
    after = [t for t in ticks(dev) if (t["endTimestamp"] or 0) >= refreshed.rewritten_at]
    requested = [run_id for t in after for run_id in t["runIds"]]
    assert requested == [daily["runId"]], (requested, runs)
    said = " ".join(m for m in run_messages(dev, daily["runId"]) if "next level" in m)
    assert "requested 1 run(s) of its next level" in said and monthly["runId"][:8] in said, said
    assert all(t["status"] == "SUCCESS" for t in after if t["runIds"])

    # Fresh: the next ticks request nothing (and no tick failed meanwhile).
    done = max(r["endTime"] for r in runs)
    idle = wait_until(
        # Ended ticks: one in progress has no status yet.
        lambda: (
            [t for t in ticks(dev) if t["timestamp"] > done + 1 and t["status"] != "STARTED"][1:]
            or None
        ),
        timeout=60,
        interval=DAEMON_LOOP_SECONDS,
        what="two sensor ticks after the refresh",
    )
    assert all(t["status"] == "SKIPPED" and not t["runIds"] for t in idle), idle
    assert all(t["status"] != "FAILURE" for t in ticks(dev)), [
        t["error"] for t in ticks(dev) if t["error"]
    ]


def check_lake_on_s3(refreshed: Refreshed, s3: S3Server) -> None:
    """The refresh's tables as delta-rs reads them on the S3 server, through each table's
    location: the rewritten source partition, clean_events' copy of it, and the month above;
    nothing of the lake on local disk."""
    import datetime as dt

    from deltalake import DeltaTable

    from dagster_partlake.records.queries import newest_record
    from dagster_partlake.storage.location import table_location
    from definitions.ingest import generate

    assert refreshed.lake_root.startswith("s3://"), refreshed.lake_root

    def location(name: str) -> Any:
        return table_location(refreshed.lake_root, [name], storage_options=s3.storage_options())

    def event_ids(name: str) -> set[int]:
        where = location(name)
        dt_table = DeltaTable(where.delta_uri, storage_options=where.delta_options)
        got = dt_table.to_pyarrow_table(columns=["event_id", "date", "region"]).to_pylist()
        return {r["event_id"] for r in got if (r["date"], r["region"]) == (day, "us")}

    day = dt.date(2024, 1, 2)
    rewritten = set(generate(day, "us", 200, seed=7).column("event_id").to_pylist())
    assert event_ids("raw_events") == rewritten
    cleaned = event_ids("clean_events")
    assert cleaned and cleaned <= rewritten, sorted(cleaned - rewritten)[:5]
    newest = {
        name: newest_record(location(name)) for name in ("clean_events", "monthly_region_stats")
    }
    assert {n: r.partition_keys if r else None for n, r in newest.items()} == {
        "clean_events": ("2024-01-02|us",),
        "monthly_region_stats": ("2024-01|us",),
    }
    # On the server's disk, not in $PARTLAKE_HOME.
    assert (s3.data / s3.bucket / "daemon" / "warehouse" / "clean_events" / "_delta_log").is_dir()
    assert not (refreshed.lake / "warehouse").exists()


class TestSqliteInstance:
    """The demo instance as `make dev` runs it (SQLite storage, the example's dagster.yaml)."""

    @pytest.fixture(scope="class")
    def refreshed(
        self, tmp_path_factory: pytest.TempPathFactory, metastore: str
    ) -> Iterator[Refreshed]:
        tmp = tmp_path_factory.mktemp("daemon-sqlite")
        # Tables by name, turned on with the sensor over the lake `partlake run` filled without
        # a catalog: the tables the refresh writes are registered by the sensor's runs. Only
        # this class: the Postgres class's lake would claim the same names elsewhere.
        catalog = {"PARTLAKE_CATALOG": metastore}
        with refreshed_demo(tmp, "sqlite", filled_by_partlake=True, daemon_env=catalog) as demo:
            yield demo

    def test_sensor_refreshes_exactly_the_closure_under_the_daemon(
        self, refreshed: Refreshed
    ) -> None:
        check_refresh(refreshed)

    def test_the_sensors_runs_register_the_closures_tables_in_the_catalog(
        self, refreshed: Refreshed, metastore: str
    ) -> None:
        """Each table of the closure is in the metastore under its name, as a Delta table at its
        folder in this lake with its schema; the sensor's runs registered it (`partlake run`
        filled the lake without a catalog), and each of their materializations says so."""
        import json

        from deltalake import DeltaTable

        from dagster_partlake.catalog.client import Metastore

        names = {
            "clean_events": "lake.clean_events",
            "daily_region_stats": "lake.daily_region_stats",
            "monthly_region_stats": "lake.monthly_region_stats",
            "staging/events": "staging.events",
            "marts/user_activity": "marts.user_activity",
            "marts/monthly_region_summary": "marts.monthly_region_summary",
        }
        assert set(names) == {asset for asset, _ in CLOSURE}

        def field_names(schema_json: str) -> list[str]:
            return [f["name"] for f in json.loads(schema_json)["fields"]]

        with Metastore(metastore) as catalog:
            for asset, name in names.items():
                folder = refreshed.lake / "warehouse" / asset
                entry = catalog.entry(name)
                assert entry is not None, f"{name} is not in the metastore"
                assert entry.is_delta and entry.same_location(str(folder)), entry
                own = DeltaTable(str(folder), without_files=True).schema().to_json()
                assert field_names(entry.schema_json) == field_names(own), name

        dev = refreshed.dev
        runs = ended_runs(
            lambda: [r for r in sensor_runs(dev) if r["creationTime"] >= refreshed.rewritten_at],
            what="the refresh's runs to end",
        )
        made = [(a, m) for r in runs for a, m in materializations(dev, r["runId"]).items()]
        first: dict[str, dict[str, Any]] = {}
        for asset, m in sorted(made, key=lambda made: made[1].timestamp):
            metadata = m.metadata
            assert metadata["dagster/table_name"] == names[asset], (asset, metadata)
            first.setdefault(asset, metadata)
        assert {a: m.get("partlake/catalog") for a, m in first.items()} == dict.fromkeys(
            names, "registered"
        )

    @pytest.mark.browser
    def test_the_ui_in_a_real_browser_shows_the_graph_partitions_ticks_and_tags(
        self, refreshed: Refreshed, tmp_path: Path
    ) -> None:
        """Playwright driving Debian's chromium through the pages a user checks after a refresh.
        Screenshots go to $PARTLAKE_SCREENSHOTS (`make screenshots`: docs/), else tmp_path."""
        from playwright.sync_api import expect, sync_playwright

        dev = refreshed.dev
        out = Path(os.environ.get("PARTLAKE_SCREENSHOTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        refresh_runs = [r for r in sensor_runs(dev) if r["creationTime"] >= refreshed.rewritten_at]
        run = next(r for r in refresh_runs if "clean_events" in r["assets"])
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(60_000)

            # The asset graph: four assets, three edges, and two edges out to the group `sql`
            # (raw_events -> staging/events, daily_region_stats -> its monthly summary). A fresh
            # instance first greets the user with a dialog over every page; dismiss it as a
            # user would.
            page.goto(f"{dev.url}/locations/definitions/asset-groups/lakehouse")
            page.get_by_role("button", name="Skip").click()
            expect(page.get_by_text("Join the Dagster community")).to_be_hidden()
            for name in [
                "raw_events",
                "clean_events",
                "daily_region_stats",
                "monthly_region_stats",
            ]:
                expect(page.get_by_text(name, exact=True).first).to_be_visible()
            expect(page.locator('svg path[stroke="var(--color-lineage-edge)"]')).to_have_count(5)
            page.screenshot(path=out / "ui-asset-graph.png")

            # clean_events' partitions: the four written by the daemon's runs.
            page.goto(f"{dev.url}/assets/clean_events?view=partitions")
            expect(page.get_by_text("Materialized (4)")).to_be_visible()
            page.get_by_text(re.compile(r"^Missing \(\d+\)$")).click()  # show only written ones
            for day in ["2024-01-01", "2024-01-02"]:
                expect(page.get_by_text(day, exact=True).first).to_be_visible()
            page.screenshot(path=out / "ui-partitions.png")

            # The sensor's ticks that requested runs.
            page.goto(f"{dev.url}/locations/definitions/sensors/{SENSOR}")
            page.get_by_text("All ticks").click()
            page.get_by_text("Requested", exact=True).click()
            expect(page.get_by_text(re.compile(r"^\d+ runs? requested$")).first).to_be_visible()
            page.screenshot(path=out / "ui-sensor-ticks.png")

            # A run the sensor requested, with its partlake tags.
            page.goto(f"{dev.url}/runs/{run['runId']}")
            expect(page.get_by_text("partlake_invalidation").first).to_be_visible()
            page.get_by_text("View tags and config").click()
            for key in ["partlake/reasons", "partlake/partitions", "partlake/sensor"]:
                tag = f"{key}: {run['tags'][key]}"  # the dialog shows each tag as key: value
                expect(page.get_by_text(tag).first).to_be_visible()
            page.wait_for_timeout(1000)  # the dialog fades in; let it finish before the picture
            page.screenshot(path=out / "ui-run-tags.png")

            # The refresh as one chain: the run list filtered by its `partlake/refresh` tag
            # shows its two runs, the monthly one created after the daily one ended.
            refresh_id = run["tags"]["partlake/refresh"]
            page.goto(f"{dev.url}/runs?{refresh_filter(refresh_id)}")
            for r in refresh_runs:
                expect(page.get_by_text(r["runId"][:8]).first).to_be_visible(timeout=60_000)
            page.screenshot(path=out / "ui-refresh-runs.png")

            # Tables by name: the asset's overview shows its catalog name (its
            # `dagster/table_name`) under Definition -> Storage, with a button to copy it.
            page.goto(f"{dev.url}/assets/daily_region_stats")
            expect(page.get_by_text("Storage", exact=True).first).to_be_visible()
            expect(page.get_by_text("lake.daily_region_stats", exact=True).first).to_be_visible()
            page.screenshot(path=out / "ui-table-name.png")
            browser.close()

    @pytest.mark.extended
    def test_a_merge_models_later_days_refresh_in_one_run_under_the_daemon(
        self, refreshed: Refreshed
    ) -> None:
        """Two more days for us, then its first of them rewritten: the merge model
        marts/user_activity's later days (applied each on top of the one before) are requested
        as one range run once the day they follow is committed, and applied in it in order,
        each its own commit (issue 35: no chain of one run per later day)."""
        dev = refreshed.dev
        ingest(dev.env, "--date", "2024-01-03", "--date", "2024-01-04", "--region", "us")
        wait_until(lambda: dev.stale() == [], timeout=900, what="the daemon to fill two days")
        rewritten_at = time.time()
        ingest(dev.env, "--date", "2024-01-02", "--region", "us", "--seed", "12")
        later = {("marts/user_activity", f"2024-01-0{d}|us") for d in (3, 4)}
        assert later <= {(i["asset"], i["partition"]) for i in dev.stale()}
        wait_until(lambda: dev.stale() == [], timeout=900, what="the daemon to refresh them")
        runs = ended_runs(
            lambda: [r for r in sensor_runs(dev) if r["creationTime"] >= rewritten_at],
            what="the refresh's runs to end",
        )
        assert all(r["status"] == "SUCCESS" for r in runs), runs
        [ranged] = [r for r in runs if covered(r) & later]
        assert ranged["assets"] == ["marts/user_activity"] and covered(ranged) == later, runs
        assert ranged["tags"]["dagster/asset_partition_range_start"] == "2024-01-03|us"
        assert ranged["tags"]["dagster/asset_partition_range_end"] == "2024-01-04|us"
        [first] = [r for r in runs if ("marts/user_activity", "2024-01-02|us") in covered(r)]
        assert ranged["creationTime"] >= committed(dev, first["runId"])["marts/user_activity"]
        assert len({r["tags"]["partlake/refresh"] for r in runs}) == 1, runs
        from dagster_partlake.delta.table import log_versions
        from dagster_partlake.records.queries import read_record

        path = refreshed.lake / "warehouse" / "marts" / "user_activity"
        records = [read_record(str(path), v) for v in log_versions(str(path))]
        mine = [r for r in records if r is not None and r.run_id == ranged["runId"]]
        assert [r.partition_keys for r in mine] == [("2024-01-03|us",), ("2024-01-04|us",)]

    @pytest.mark.extended  # CI: tests/test_unreadable.py (plan, run, sensor tick in process)
    def test_damaged_table_fails_ticks_with_its_message_and_holds_back_its_closure(
        self, refreshed: Refreshed
    ) -> None:
        """A truncated commit file in daily_region_stats: the daemon still refreshes
        clean_events (and the SQL models over raw_events), its ticks then fail with the message,
        nothing downstream of the damaged table runs until the file is restored, and then the
        closure is refreshed."""
        dev, lake = refreshed.dev, refreshed.lake
        daily_log = lake / "warehouse" / "daily_region_stats" / "_delta_log"
        newest = max(daily_log.glob("*.json"))
        original = newest.read_bytes()
        newest.write_bytes(original[: len(original) // 2])
        damaged_at = time.time()
        ingest(dev.env, "--date", "2024-01-02", "--region", "eu", "--seed", "8")

        def finished_since(moment: float) -> list[dict[str, Any]]:
            return [
                r
                for r in sensor_runs(dev)
                if r["creationTime"] >= moment and r["status"] in ("SUCCESS", "FAILURE")
            ]

        def failed_ticks() -> list[dict[str, Any]] | None:
            failed = [
                t
                for t in ticks(dev)
                if (t["endTimestamp"] or 0) > damaged_at and t["status"] == "FAILURE"
            ]
            return failed or None

        free = {
            ("clean_events", "2024-01-02|eu"),
            ("staging/events", "2024-01-02|eu"),
            ("marts/user_activity", "2024-01-02|eu"),
        }
        held = {
            ("daily_region_stats", "2024-01-02|eu"),
            ("monthly_region_stats", "2024-01|eu"),
            ("marts/monthly_region_summary", "2024-01|eu"),
        }
        [run] = wait_until(
            lambda: [r for r in finished_since(damaged_at) if "clean_events" in r["assets"]],
            timeout=600,
            what="the clean_events refresh",
        )
        assert run["status"] == "SUCCESS"
        assert covered(run) == free  # one run: clean_events and the SQL models beside it
        failed = wait_until(failed_ticks, timeout=60, what="a tick failing with the message")
        expected = f"the Delta log of daily_region_stats at {daily_log.parent} cannot be read"
        for tick in failed:
            messages = [tick["error"]["message"], *(c["message"] for c in tick["error"]["causes"])]
            assert any(expected in m and newest.name in m for m in messages), tick["error"]
        requesting = [t for t in ticks(dev) if run["runId"] in t["runIds"]]
        logged = [e["message"] for t in requesting for e in t["logEvents"]["events"]]
        assert any(expected in m for m in logged), logged
        time.sleep(2 * DAEMON_LOOP_SECONDS)
        since = [r for r in sensor_runs(dev) if r["creationTime"] >= damaged_at]
        assert set().union(*(covered(r) for r in since)) <= free
        assert newest.read_bytes() == original[: len(original) // 2]  # nobody wrote there

        newest.write_bytes(original)
        repaired_at = time.time()
        wait_until(lambda: dev.stale() == [], timeout=900, what="the refresh after the repair")
        # A partition is fresh once its commit lands; its run ends a moment later.
        wait_until(
            lambda: set().union(*(covered(r) for r in finished_since(repaired_at))) >= held,
            timeout=120,
            what="the runs of the refresh after the repair to end",
        )
        assert set().union(*(covered(r) for r in finished_since(damaged_at))) == free | held
        assert all(r["status"] == "SUCCESS" for r in finished_since(damaged_at))

    @pytest.mark.extended  # back-off in CI: test_invalidation.py, in the test's process
    def test_failing_partition_is_retried_with_back_off_not_every_tick(
        self, refreshed: Refreshed
    ) -> None:
        """A batch with missing event ids fails clean_events' quality gate (nothing committed):
        the daemon retries after RETRY_SECONDS, then after twice that, with ticks between, and
        `partlake plan` names the gate the last run failed."""
        dev = refreshed.dev
        # Taken before the ingest: the daemon may request the first attempt as soon as the bad
        # batch is committed, while the ingest process is still shutting its Spark down.
        broke_at = time.time()
        ingest(
            dev.env, "--date", "2024-01-01", "--region", "eu", "--seed", "9", "--missing-ids", "3"
        )

        def attempts(count: int) -> list[dict[str, Any]] | None:
            mine = [
                r
                for r in sensor_runs(dev)
                if r["creationTime"] >= broke_at and ("clean_events", "2024-01-01|eu") in covered(r)
            ]
            finished = [r for r in mine if r["status"] in ("FAILURE", "SUCCESS")]
            return mine if len(finished) >= count else None

        first, second = wait_until(
            lambda: attempts(2),
            timeout=900,
            interval=3,
            what="two attempts of the broken partition",
        )[:2]
        assert first["status"] == second["status"] == "FAILURE"
        assert "partlake/attempt" not in first["tags"]
        assert second["tags"]["partlake/attempt"] == "2"
        # The failed upstream stops its downstream: no run of the monthly rollups reading it.
        readers = {
            ("monthly_region_stats", "2024-01|eu"),
            ("marts/monthly_region_summary", "2024-01|eu"),
        }
        assert not any(
            covered(r) & readers for r in sensor_runs(dev) if r["creationTime"] >= broke_at
        )
        assert first["tags"]["partlake/refresh"] == second["tags"]["partlake/refresh"]
        waited = second["creationTime"] - first["endTime"]
        assert waited >= RETRY_SECONDS - 1, f"retried {waited:.1f} s after the failure"
        between = [
            t for t in ticks(dev) if first["endTime"] < t["timestamp"] < second["creationTime"] - 1
        ]
        assert len(between) >= 2, between
        # No tick between requests clean_events again (the SQL model staging/events reads the
        # same bad batch, fails its own gate and backs off on its own schedule).
        clean = {r["runId"] for r in attempts(2) or []}
        assert all(not set(t["runIds"]) & clean for t in between)
        assert all("backing-off" in (t["skipReason"] or "") for t in between if not t["runIds"])
        plan = subprocess.run(
            [sys.executable, "-m", "dagster_partlake.cli", "plan", "-m", "definitions"],
            cwd=REPO_ROOT,
            env=dev.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        line = next(x for x in plan.stdout.splitlines() if x.strip().startswith("2024-01-01|eu"))
        assert line.rstrip().endswith("last run failed: not_null_user_id_event_id"), plan.stdout

        # The next retry waits twice as long: none within 1.75 x RETRY_SECONDS of the failure.
        quiet_until = second["endTime"] + 1.75 * RETRY_SECONDS
        time.sleep(max(0.0, quiet_until - time.time()))
        third = [r for r in attempts(2) or [] if r["creationTime"] > second["creationTime"]]
        assert third == [], third
        print(
            f"daemon back-off: attempt 2 came {waited:.0f} s after attempt 1 failed; "
            f"no attempt 3 within {1.75 * RETRY_SECONDS:.0f} s of attempt 2's failure"
        )

    @pytest.mark.browser
    @pytest.mark.extended  # follows the back-off test, in make test-extended
    def test_the_ui_shows_a_failing_partition_holding_back_its_downstream(
        self, refreshed: Refreshed, tmp_path: Path
    ) -> None:
        """After the back-off test: the refresh of the broken partition in the browser, its
        failed runs and no run of what reads them; the partition's status in the asset's
        partitions. Screenshots as in the test above."""
        from playwright.sync_api import expect, sync_playwright

        dev = refreshed.dev
        out = Path(os.environ.get("PARTLAKE_SCREENSHOTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        failed = [
            r
            for r in sensor_runs(dev)
            if r["status"] == "FAILURE" and ("clean_events", "2024-01-01|eu") in covered(r)
        ]
        assert failed, "run after test_failing_partition_is_retried_with_back_off_not_every_tick"
        refresh_id = failed[-1]["tags"]["partlake/refresh"]
        mine = [r for r in sensor_runs(dev) if r["tags"].get("partlake/refresh") == refresh_id]
        # The refresh id lasts until the lake is fresh, so the refresh may hold runs of the
        # closure the tests before left stale; none of them reads the failed partition.
        readers = {
            ("monthly_region_stats", "2024-01|eu"),
            ("marts/monthly_region_summary", "2024-01|eu"),
        }
        assert not any(covered(r) & readers for r in mine), mine
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(f"{dev.url}/runs?{refresh_filter(refresh_id)}")
            dismiss_welcome(page)
            # The run list loads its runs after the page (a minute on a busy machine).
            expect(page.get_by_text("Failure").first).to_be_visible(timeout=60_000)
            page.screenshot(path=out / "ui-refresh-failed-upstream.png")
            page.goto(f"{dev.url}/assets/clean_events?view=partitions")
            failed_count = page.get_by_text(re.compile(r"^Failed \(\d+\)$")).first
            expect(failed_count).to_be_visible(timeout=60_000)
            page.screenshot(path=out / "ui-refresh-partition-status.png")
            browser.close()

    def test_the_sensor_never_rebuilds_a_retired_day(self, refreshed: Refreshed) -> None:
        """Last of the class: it retires the days the tests above rewrite. raw_events keeps 30
        days counted back from its newest (`partlake/retention`), and clean_events forgets with
        it (`cascade`): a new day 35 days later retires 2024-01-01 and 2024-01-02. The daemon
        refreshes the new day only; `partlake maintain --retention --apply` then removes
        clean_events' retired days, and the sensor rebuilds none of them while what reads them
        stays fresh."""
        dev = refreshed.dev

        def stale() -> list[dict[str, Any]]:
            return [i for i in dev.stale() if "reason" in i]  # retention objects aside

        started = time.time()
        ingest(dev.env, "--date", "2024-02-05", "--region", "eu")
        wait_until(lambda: stale() == [], timeout=900, what="the new day's refresh")
        removed = run_partlake(
            "maintain", "-m", "definitions", "--retention", "--apply", env=dev.env, timeout=300
        )
        assert removed.returncode == 0, removed.stdout[-3000:] + removed.stderr[-3000:]
        assert "clean_events: removed 4 retired partition(s)" in removed.stdout, removed.stdout
        removed_at = time.time()
        time.sleep(4 * DAEMON_LOOP_SECONDS)  # several ticks see the removal
        assert stale() == []
        after = [r for r in sensor_runs(dev) if r["creationTime"] >= removed_at]
        assert after == [], after
        since = [r for r in sensor_runs(dev) if r["creationTime"] >= started]
        assert since, "the new day was refreshed by the sensor"
        assert {p[:7] for r in since for _, p in covered(r)} == {"2024-02"}  # never January


@pytest.mark.extended  # CI: the daemon on SQLite above, surface/test_orchestration.py
@pytest.mark.s3
class TestPostgresInstance:
    """The same daemon flow as a team runs it beyond one machine: the Dagster instance in
    PostgreSQL, one shared Spark Connect server for every run (both started by the test), and
    the example's lake on the S3 server (the session's s3proxy; `PARTLAKE_LAKE_ROOT` and the
    AWS variables in every process, the Connect server's too). The SQLite class keeps its lake
    on local disk: each storage backend keeps one end-to-end path under the daemon, without a
    third `dagster dev` (CI has no minutes left for one)."""

    @pytest.fixture(scope="class")
    def refreshed(
        self, tmp_path_factory: pytest.TempPathFactory, s3: S3Server
    ) -> Iterator[Refreshed]:
        tmp = tmp_path_factory.mktemp("daemon-postgres")
        lake_env = {**s3.storage_options(), "PARTLAKE_LAKE_ROOT": s3.uri("daemon")}
        env = subprocess_env(SPARK_LOCAL_IP="127.0.0.1", **lake_env)
        with postgres_server() as postgres, spark_connect(tmp / "spark", env) as remote:
            label = "postgres + Spark Connect + S3"
            storage = postgres.dagster_yaml()
            # Filled by `partlake run` (one process on the Connect server) as the SQLite class
            # is: the daemon's own fill is the same sensor path as the refresh, a minute longer.
            with refreshed_demo(
                tmp, label, storage, remote, lake_env=lake_env, filled_by_partlake=True
            ) as demo:
                yield demo

    def test_sensor_refreshes_exactly_the_closure_under_the_daemon(
        self, refreshed: Refreshed, s3: S3Server
    ) -> None:
        storage = (refreshed.dev.env["DAGSTER_HOME"], "dagster.yaml")
        assert "postgres_db" in Path(*storage).read_text()
        check_refresh(refreshed)
        check_lake_on_s3(refreshed, s3)

    @pytest.mark.browser
    def test_a_stale_partition_shows_as_a_failed_partlake_fresh_check_until_refreshed(
        self, refreshed: Refreshed, tmp_path: Path
    ) -> None:
        """A source rewrite: the sensor's next tick reports partlake_fresh failed (warn) for each
        partition of the stale closure, with its reason, and the check's page in the browser
        shows it; after the refresh, the runs report them passed. The refresh is held back
        meanwhile by the pool's limit set to 0 with the Dagster CLI, as an operator would: the
        first run starts (its checks in progress) and waits for a slot, the second waits for it,
        so monthly_region_stats shows the sensor's verdict until then."""
        from playwright.sync_api import expect, sync_playwright

        dev = refreshed.dev
        out = Path(os.environ.get("PARTLAKE_SCREENSHOTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        closure = {
            ("clean_events", "2024-01-01|us"),
            ("daily_region_stats", "2024-01-01|us"),
            ("monthly_region_stats", "2024-01|us"),
        }
        held = dev.dagster("instance", "concurrency", "set", "partlake", "0")
        assert held.returncode == 0, held.stderr[-3000:]
        try:
            rewritten_at = time.time()
            ingest(dev.env, "--date", "2024-01-01", "--region", "us", "--seed", "11")
            stale = wait_until(
                lambda: fresh_results(dev, closure, after=rewritten_at, passed=False),
                timeout=120,
                what="the sensor's partlake_fresh results for the stale closure",
            )
            assert all(r["runId"].startswith("partlake-fresh-") for r in stale.values())
            clean = stale["clean_events", "2024-01-01|us"]
            assert clean["evaluation"]["severity"] == "WARN"
            assert clean["evaluation"]["description"] == (
                "upstream_changed because raw_events[2024-01-01|us]"
            )
            metadata = {m["label"]: m for m in clean["evaluation"]["metadataEntries"]}
            assert metadata["partlake/reason"]["text"] == "upstream_changed"
            assert "partlake/last_updated" in metadata
            monthly = stale["monthly_region_stats", "2024-01|us"]
            because = "upstream_changed because daily_region_stats[2024-01-01|us]"
            assert monthly["evaluation"]["description"] == because
            # The tick that reported them says why, in partlake plan's words. It may have
            # started before the rewrite (watching) and still be ending: wait for its log.
            said = "clean_events[2024-01-01|us] upstream_changed because raw_events[2024-01-01|us]"

            def tick_logs() -> list[str]:
                return [
                    e["message"]
                    for t in ticks(dev)
                    if (t["endTimestamp"] or 0) >= rewritten_at
                    for e in t["logEvents"]["events"]
                ]

            wait_until(
                lambda: any(said in m for m in tick_logs()),
                timeout=30,
                what=f"a tick that ended after the rewrite to log {said!r}",
            )

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(60_000)
                page.goto(
                    f"{dev.url}/assets/monthly_region_stats?view=checks&checkDetail=partlake_fresh"
                )
                dismiss_welcome(page)
                expect(page.get_by_text(because)).to_be_visible()
                expect(page.get_by_text("2024-01|us", exact=True).first).to_be_visible()
                expect(page.get_by_text("Failed", exact=True).first).to_be_visible()
                page.screenshot(path=out / "ui-stale-partitions.png")
                # The check's partitions: the one stale partition counts as failed.
                page.get_by_text("Partitions", exact=True).last.click()
                expect(page.get_by_text("Failed (1)", exact=True)).to_be_visible()
                browser.close()
        finally:
            released = dev.dagster("instance", "concurrency", "set", "partlake", "2")
            assert released.returncode == 0, released.stderr[-3000:]

        wait_until(lambda: dev.stale() == [], timeout=900, what="the refresh of the closure")
        fresh = wait_until(
            lambda: fresh_results(dev, closure, after=rewritten_at, passed=True),
            timeout=60,
            what="partlake_fresh passed for the refreshed closure",
        )
        assert not any(r["runId"].startswith("partlake-fresh-") for r in fresh.values())
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(
                f"{dev.url}/assets/monthly_region_stats?view=checks&checkDetail=partlake_fresh"
            )
            dismiss_welcome(page)
            expect(page.get_by_text("Succeeded").first).to_be_visible()
            page.get_by_text("Partitions", exact=True).last.click()
            expect(page.get_by_text("Failed (0)", exact=True)).to_be_visible()
            expect(page.get_by_text("Passed (2)", exact=True)).to_be_visible()
            page.screenshot(path=tmp_path / "fresh-again.png")
            browser.close()
