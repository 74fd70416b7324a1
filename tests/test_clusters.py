"""The same example assets on local Spark, a Spark Connect server and a standalone cluster
(the last in `make test-extended`).

Every server is started here from the pip-installed pyspark, on 127.0.0.1, and stopped by PID.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_partlake.spark.server import start_standalone, status, stop
from tests.conftest import REPO_ROOT, delta_rows, run_partlake, subprocess_env

pytestmark = pytest.mark.cluster

DAGSTER = str(Path(sys.executable).parent / "dagster")
TABLES = ["clean_events", "daily_region_stats", "monthly_region_stats"]
# The example's SQL models (definitions/sql/) and the columns that hold their partitions; on a
# Spark Connect session their temporary views stay until the session ends.
SQL_TABLES = {
    "staging/events": ["date", "region"],
    "marts/user_activity": ["user_id", "region"],
    "marts/monthly_region_summary": ["month", "region"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_lake(
    tmp_path: Path, name: str, dagster_yaml: str = "telemetry:\n  enabled: false\n"
) -> tuple[Path, dict[str, str]]:
    from definitions.ingest import write_partition

    lake = tmp_path / name
    home = lake / "dagster"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(dagster_yaml)
    # Two days across a month's end, two regions: 4 daily and 4 monthly partitions.
    for day in ["2024-01-31", "2024-02-01"]:
        for region in ["eu", "us"]:
            write_partition(dt.date.fromisoformat(day), region, 300, root=str(lake))
    env = subprocess_env(
        PARTLAKE_HOME=str(lake), DAGSTER_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1"
    )
    return lake, env


def refresh(env: dict[str, str], *options: str, **extra: str) -> str:
    proc = run_partlake("run", "-m", "definitions", *options, env={**env, **extra}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0 failed" in proc.stdout
    return proc.stdout


def fingerprint(lake: Path) -> dict[str, dict[tuple, tuple[int, str]]]:
    """Per table and partition: row count and a checksum of the sorted rows."""
    result: dict[str, dict[tuple, tuple[int, str]]] = {}
    keys = {t: ["date" if t != "monthly_region_stats" else "month", "region"] for t in TABLES}
    for table, columns in {**keys, **SQL_TABLES}.items():
        rows = delta_rows(lake / "warehouse" / table)
        from deltalake import DeltaTable

        names = DeltaTable(str(lake / "warehouse" / table)).schema().to_arrow().names
        index = [names.index(c) for c in columns]
        parts: dict[tuple, list[tuple]] = {}
        for row in rows:
            parts.setdefault(tuple(row[i] for i in index), []).append(row)
        result[table] = {
            key: (len(rs), hashlib.sha256(repr(sorted(rs, key=repr)).encode()).hexdigest())
            for key, rs in parts.items()
        }
    return result


@pytest.mark.extended  # CI: tests/surface/test_spark_connect.py
def test_local_spark_and_a_spark_connect_server_give_identical_tables(tmp_path: Path) -> None:
    local_lake, local_env = fresh_lake(tmp_path, "local")
    refresh(local_env, "--max-parallel", "2")
    expected = fingerprint(local_lake)
    assert sum(n for n, _ in expected["clean_events"].values()) > 0
    assert len(expected["monthly_region_stats"]) == 4  # Jan and Feb x 2 regions

    # Spark Connect, through the documented command, with the demo instance (pool limit 2).
    connect_lake, connect_env = fresh_lake(
        tmp_path, "connect", (REPO_ROOT / "scripts" / "dagster.yaml").read_text()
    )
    port = free_port()
    servers = str(tmp_path / "servers")
    started = run_partlake(
        "spark",
        "start",
        "--port",
        str(port),
        "--master",
        "local[2]",
        "--driver-memory",
        "1g",
        "--root",
        servers,
        env=connect_env,
        timeout=300,
    )
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        assert f"sc://127.0.0.1:{port}" in started.stdout
        running = run_partlake("spark", "status", "--root", servers, env=connect_env)
        assert running.returncode == 0 and running.stdout.startswith("running: pid ")
        pid = status(servers).pid
        # With a shared Spark configured, no run starts a JVM: Java is made unreachable for them.
        no_java = {
            **connect_env,
            "JAVA_HOME": str(tmp_path / "no-java"),
            "PATH": str(Path(sys.executable).parent),
        }
        out = refresh(no_java, PARTLAKE_SPARK_REMOTE=f"sc://127.0.0.1:{port}")
        # 4 clean + 4 daily + 4 monthly, and the SQL models: 4 staging + 4 merge days + 4 monthly
        assert out.count("[OK]") == 12 + 12
        assert "Executing up to 2 run(s) at a time; Dagster pool partlake (limit 2)" in out
        # ...nor does a run started by Dagster's own CLI. (Rewrites use the original seed: the
        # data stay the same, only their lastUpdated moves, so the tables still match `expected`.)
        from definitions.ingest import write_partition

        write_partition(dt.date(2024, 1, 31), "us", 300, root=str(connect_lake))
        materialize = subprocess.run(
            [DAGSTER, "asset", "materialize", "-m", "definitions", "--select", "clean_events"]
            + ["--partition", "2024-01-31|us"],
            cwd=REPO_ROOT,
            env={**no_java, "PARTLAKE_SPARK_REMOTE": f"sc://127.0.0.1:{port}"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert materialize.returncode == 0, materialize.stderr[-3000:]
        # Scattered changes: several runs at once (pool limit 2) in threads, on one Connect session.
        for day, region in [("2024-01-31", "eu"), ("2024-02-01", "us")]:
            write_partition(dt.date.fromisoformat(day), region, 300, root=str(connect_lake))
        out = refresh(no_java, PARTLAKE_SPARK_REMOTE=f"sc://127.0.0.1:{port}")
        # 2 x (clean + daily), daily 31|us, monthly 01|eu, 01|us, 02|us; the SQL models: staging
        # and monthly the same 3 each, and 4 merge days (a merge applies the days after a
        # changed one again, in order: 31|eu, 01|eu, 31|us, 01|us).
        assert out.count("[OK]") == 2 * 2 + 1 + 3 + 3 + 3 + 4
        assert out.rstrip().endswith("18 asset partition(s) refreshed, 0 failed.")
    finally:
        stopped = run_partlake("spark", "stop", "--root", servers, env=connect_env, timeout=120)
    assert stopped.stdout.strip() == "Spark Connect server stopped."
    assert pid is not None and not os.path.exists(f"/proc/{pid}/status") or _zombie(pid)
    assert fingerprint(connect_lake) == expected


@pytest.mark.extended
def test_a_standalone_cluster_gives_the_tables_of_local_spark(tmp_path: Path) -> None:
    """The whole example through `partlake run` on a standalone cluster (one master, two
    workers). CI covers a standalone cluster once, reading and appending Delta on S3
    (`tests/test_spark_jars.py`); this long variant runs in `make test-extended`."""
    local_lake, local_env = fresh_lake(tmp_path, "local")
    refresh(local_env, "--max-parallel", "2")
    expected = fingerprint(local_lake)
    cluster_lake, cluster_env = fresh_lake(tmp_path, "standalone")
    master_port = free_port()
    cluster_root = str(tmp_path / "cluster")
    try:
        nodes = start_standalone(cluster_root, port=master_port, workers=2, cores=1, memory="1g")
        assert [n.name for n in nodes] == ["master", "worker0", "worker1"]
        refresh(cluster_env, PARTLAKE_SPARK_MASTER=f"spark://127.0.0.1:{master_port}")
    finally:
        for name in ["worker0", "worker1", "master"]:
            stop(cluster_root, name)
    for name in ["worker0", "worker1", "master"]:
        assert not status(cluster_root, name).running
    assert fingerprint(cluster_lake) == expected


def _zombie(pid: int | None) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] == "Z"
    except OSError:
        return True
