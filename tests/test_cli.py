"""The real `dagster` CLI and webserver in subprocesses, on the example code location."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance
from dagster._core.instance.config import PoolGranularity
from dagster._core.instance.ref import InstanceRef

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.orchestration.pools import POOL, Parallelism, parallelism
from dagster_partlake.planning.graph import LakeGraph
from tests.conftest import REPO_ROOT, cli_env, delta_rows, run_partlake, subprocess_env
from tests.servers import stop_group

pytestmark = pytest.mark.dagster_cli

DAGSTER = str(Path(sys.executable).parent / "dagster")


def env_for(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    return subprocess_env(
        PARTLAKE_HOME=str(tmp_path / "lake"), DAGSTER_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1"
    )


def test_dagster_asset_materialize_one_partition(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "definitions.ingest",
            "--date",
            "2024-01-02",
            "--region",
            "eu",
            "--region",
            "us",
            "--rows",
            "300",
        ],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    started = time.perf_counter()
    proc = subprocess.run(
        [
            DAGSTER,
            "asset",
            "materialize",
            "-m",
            "definitions",
            "--select",
            "clean_events",
            "--partition",
            "2024-01-02|eu",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(f"dagster asset materialize of one partition: {elapsed:.1f} s")

    lake = tmp_path / "lake" / "warehouse"
    raw = delta_rows(lake / "raw_events", ["event_id", "user_id", "region"])
    clean = delta_rows(lake / "clean_events", ["event_id", "region"])
    assert clean == [(e, r) for e, u, r in raw if r == "eu" and u is not None]

    instance = DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"]))
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey("clean_events"), asset_partitions=["2024-01-02|eu"]),
        limit=5,
    ).records
    assert len(records) == 1
    assert records[0].asset_materialization.metadata["dagster/row_count"].value == len(clean)


# Loaded only to write or read data, or to run: a `partlake run` with nothing to do (the code
# location loaded, every table state from the on-disk cache) must import none of them.
NOT_ON_THE_NO_OP_PATH = (
    "deltalake",
    "pyarrow",
    "pandas",
    "dagster_partlake.delta.history",
    "dagster_partlake.delta.maintenance",
    "dagster_partlake.delta.reader",
    "dagster_partlake.delta.writer",
    "dagster_partlake.incremental.reads",
    "dagster_partlake.kinds.write",
    "dagster_partlake.orchestration.runner",
)


def imported_modules(stderr: str) -> set[str]:
    """The modules a process imported, from its `-X importtime` report (PYTHONPROFILEIMPORTTIME)."""
    return set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", stderr, re.MULTILINE))


def test_no_op_partlake_run_imports_only_what_it_needs(tmp_path: Path) -> None:
    from definitions.ingest import write_partition

    lake = tmp_path / "lake"
    for region in ["eu", "us"]:
        write_partition(dt.date(2024, 1, 1), region, 50, root=str(lake))
    env = {**cli_env(tmp_path, lake), "PYTHONPROFILEIMPORTTIME": "1"}
    # Only the source is selected: nothing to run, though every table's state is gathered. The
    # first process reads raw_events' log and keeps its state on disk... (-v: the import profile
    # goes to stderr, which a quiet command sends to its log file.)
    first = run_partlake("run", "-m", "definitions", "--select", "raw_events", "-v", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.strip() == "Everything is fresh: nothing to run."
    # (The log is replayed with Arrow, not delta-rs: see dagster_partlake.delta.log_state.)
    assert {"pyarrow", "dagster_partlake.delta.log_state"} <= imported_modules(first.stderr)
    # ...so the next one reads no Delta log, and imports no storage, writing or running code.
    second = run_partlake("run", "-m", "definitions", "--select", "raw_events", "-v", env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.strip() == "Everything is fresh: nothing to run."
    imported = imported_modules(second.stderr)
    assert {"dagster", "definitions.assets", "dagster_partlake.planning.session"} <= imported
    assert sorted(imported.intersection(NOT_ON_THE_NO_OP_PATH)) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_signals() -> None:
    # `dagster dev` started from a script inherits ignored SIGINT/SIGTERM; restore the defaults
    # so that stopping it by PID works.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setsid()


def test_dagster_dev_loads_the_code_location_and_lists_the_assets(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    port = free_port()
    log = open(tmp_path / "dagster_dev.log", "w")
    proc = subprocess.Popen(
        [DAGSTER, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_default_signals,
    )
    query = (
        "{ assetNodes { assetKey { path } groupName isPartitioned description "
        "assetChecksOrError { ... on AssetChecks { checks { name } } } } }"
    )
    try:
        nodes = None
        deadline = time.time() + 180
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "dagster_dev.log").read_text()[-4000:]
            try:
                reply = requests.post(
                    f"http://127.0.0.1:{port}/graphql", json={"query": query}, timeout=5
                )
                nodes = reply.json()["data"]["assetNodes"]
                # Both code locations of the workspace: the lakehouse and the model kinds.
                if {"plan_mix", "raw_events"} <= {"/".join(n["assetKey"]["path"]) for n in nodes}:
                    break
            except (requests.ConnectionError, requests.Timeout, KeyError, TypeError, ValueError):
                pass
            time.sleep(1)
        assert nodes, "dagster dev never answered with the asset graph"
        groups = {"/".join(n["assetKey"]["path"]): n["groupName"] for n in nodes}
        assert groups == {
            **dict.fromkeys(
                ["clean_events", "daily_region_stats", "monthly_region_stats", "raw_events"],
                "lakehouse",
            ),
            **dict.fromkeys(
                ["user_exports", "users", "users_history", "user_export_log", "plan_counts"],
                "models",
            ),
            "plan_mix": "models",
            "user_days": "models",
            **dict.fromkeys(["user_changes", "user_plans", "payment_files", "payments"], "feeds"),
            # The SQL models of definitions/sql/.
            **dict.fromkeys(
                ["staging/events", "marts/user_activity", "marts/monthly_region_summary"], "sql"
            ),
        }
        # A SQL model shows its SQL as its description.
        described = {"/".join(n["assetKey"]["path"]): n["description"] or "" for n in nodes}
        assert "```sql\nwith ranked as (" in described["staging/events"]
        unpartitioned = {"/".join(n["assetKey"]["path"]) for n in nodes if not n["isPartitioned"]}
        assert unpartitioned == {
            "plan_mix",
            "user_changes",
            "user_plans",
            "payment_files",
            "payments",
        }
        # The quality gates are asset checks the UI lists on their assets.
        checks = {
            "/".join(n["assetKey"]["path"]): sorted(
                c["name"] for c in (n["assetChecksOrError"] or {}).get("checks", [])
            )
            for n in nodes
        }
        # With partlake_fresh, partlake's verdict per partition, on every partitioned one.
        assert checks["clean_events"] == [
            "accepted_values_region",
            "non_negative",
            "not_null_user_id_event_id",
            "partlake_fresh",
            "row_count",
            "unique_event_id",
        ]
        assert checks["daily_region_stats"] == [
            "column_sum_revenue",
            "no_partition_emptied",
            "partlake_fresh",
        ]
        assert checks["payments"] == ["not_null_payment_id_user_id"]
        assert checks["staging/events"] == [
            "non_negative",
            "not_null_event_id_user_id",
            "partlake_fresh",
            "unique_event_id",
        ]
        assert checks["marts/user_activity"] == ["not_null_user_id_last_seen", "partlake_fresh"]
        assert checks["marts/monthly_region_summary"] == [
            "column_sum_revenue",
            "no_partition_emptied",
            "partlake_fresh",
        ]
        # The nightly maintenance schedule and its job, as the UI lists them.
        repositories = requests.post(
            f"http://127.0.0.1:{port}/graphql",
            json={
                "query": "{ repositoriesOrError { ... on RepositoryConnection { nodes { "
                "jobs { name } schedules { name cronSchedule pipelineName } } } } }"
            },
            timeout=10,
        ).json()["data"]["repositoriesOrError"]["nodes"]
        schedules = [s for r in repositories for s in r["schedules"]]
        assert {
            "name": "partlake_nightly_maintenance",
            "cronSchedule": "0 3 * * *",
            "pipelineName": "partlake_maintenance",
        } in schedules
        assert "partlake_maintenance" in {j["name"] for r in repositories for j in r["jobs"]}
    finally:
        stop_group(proc)
        log.close()
    assert proc.returncode is not None


def test_demo_instance_limits_parallel_runs(tmp_path: Path) -> None:
    import shutil

    from dagster._core.run_coordinator import QueuedRunCoordinator

    shutil.copy(REPO_ROOT / "scripts" / "dagster.yaml", tmp_path / "dagster.yaml")
    instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path)))
    coordinator = instance.run_coordinator
    assert isinstance(coordinator, QueuedRunCoordinator)
    config = instance.get_concurrency_config().run_queue_config
    assert config.max_concurrent_runs == 4
    assert [dict(limit) for limit in config.tag_concurrency_limits] == [
        {"key": "partlake/sensor", "limit": 3}
    ]
    # The run queue holds runs whose pool is full, and every step claims a slot of the pool.
    assert config.should_block_op_concurrency_limited_runs
    # No run waits inside another for its input (the sensor requests a level once what it reads
    # is committed), so no run needs to start ahead of a free slot: Dagster's default buffer.
    assert config.op_concurrency_slot_buffer == 0
    pools = instance.get_concurrency_config().pool_config
    assert pools.pool_granularity == PoolGranularity.OP
    from definitions import defs

    graph = LakeGraph(defs)
    assert graph.pools() == {POOL}
    assert parallelism(instance, graph.pools(), None) == Parallelism(2, {POOL: 2})
    assert parallelism(instance, graph.pools(), 3).runs == 3
    instance.event_log_storage.set_concurrency_slots(POOL, 0)
    with pytest.raises(PartlakeConfigError, match="dagster instance concurrency set partlake"):
        parallelism(instance, graph.pools(), None)
