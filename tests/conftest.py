"""Shared fixtures: one local Spark per test session, Dagster test instances, table helpers."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from dagster_partlake.spark.conf import DEFAULT_CONF

REPO_ROOT = Path(__file__).resolve().parents[1]
# Every incremental plan made in the tests (and in the CLIs and servers they start, which inherit
# the environment) is also planned in full, and a difference fails loudly.
os.environ["PARTLAKE_CHECK_REPLAN"] = "1"

# The warm Spark every local run attaches to (`dagster_partlake.spark.warm`): the tests', in a
# folder of this test session, inherited by every CLI and server they start, and stopped at its
# end (`_no_warm_spark_left`), so none outlives the tests or meets a user's.
os.environ["PARTLAKE_SPARK_WARM_DIR"] = tempfile.mkdtemp(prefix="partlake-tests-warm-")

# Subprocesses and Dagster's code loading must find the example package `definitions`.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


# partlake's defaults, smaller for a 2-core machine.
SPARK_TEST_CONF = {
    **DEFAULT_CONF,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    # Delta rebuilds a snapshot's state in 50 tasks by default; the tests' tables are tiny.
    "spark.databricks.delta.snapshotPartitions": "2",
}


def lake_jars() -> list[str]:
    """The JARs `make install` fetched (hadoop-aws, the AWS SDK, Delta), or [] if it did not."""
    from dagster_partlake.spark.jars import local_jars

    return [str(path) for path in local_jars()]


@pytest.fixture(scope="session", autouse=True)
def _no_warm_spark_left() -> Iterator[None]:
    """Stop every warm Spark the tests started, when they end."""
    yield
    from dagster_partlake.spark import warm

    for info in warm.stop_all():
        print(f"stopped the tests' warm Spark, pid {info.pid} ({info.folder})")
    shutil.rmtree(os.environ["PARTLAKE_SPARK_WARM_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one local SparkSession of the test session (a JVM takes ~5 s to start); with the
    fetched JARs, it reads and writes `format("delta")` and `s3a://` (see `spark_s3`)."""
    from pyspark.sql import SparkSession

    from dagster_partlake.spark.storage import delta_conf, jars_conf

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # As SparkResource does: Python workers (streaming sources) run this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = dict(SPARK_TEST_CONF)
    jars = lake_jars()
    if jars:  # as SparkResource adds them to a local session
        conf.update(jars_conf(jars, "local[2]", {}))
        conf.update(delta_conf({}))
    builder = SparkSession.builder.master("local[2]").appName("partlake-tests")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real S3 server (s3proxy, `scripts/s3_server.py`) for the test session, on
    127.0.0.1, with the bucket `lake`: the one `.ci/run` started (its state folder in
    `$PARTLAKE_TEST_S3_STATE`; `.ci/run` stops it), else one started here on a free port,
    storing under a temporary folder, and stopped at the end of the session."""
    from tests.servers import running_s3_server, s3_server

    if os.environ.get("PARTLAKE_TEST_S3_STATE"):
        yield running_s3_server(Path(os.environ["PARTLAKE_TEST_S3_STATE"]))
        return
    with s3_server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="session")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real Hive metastore (partlake's own, `dagster_partlake.catalog.metastore`) for the
    test session on 127.0.0.1 and a free port, backed by embedded Derby in a temporary folder,
    stopped by its PID at the end; yields its `thrift://` URI. Tests keep apart by schema
    (`LakeCatalog(metastore_uri=..., default_schema=<their own>)`)."""
    from dagster_partlake.catalog.metastore import hive_settings, start_metastore, stop_metastore
    from tests.servers import free_port

    home = str(tmp_path_factory.mktemp("metastore"))
    info = start_metastore(home, port=free_port(), settings=hive_settings(home))
    try:
        yield info.url
    finally:
        stop_metastore(home)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real Kafka broker (KRaft, `scripts/kafka_server.py`) for the test session, on
    127.0.0.1 and a free port, stopped at the end of the session; each test makes its own
    topics."""
    from tests.servers import kafka_broker

    with kafka_broker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def postgres_source() -> Iterator[object]:
    """One real PostgreSQL server for the tests of PostgreSQL sources, on 127.0.0.1: every
    statement logged (a test reads what the server received), its user's password checked on
    TCP connections; each test makes its own tables."""
    from tests.servers import postgres_server

    with postgres_server(
        settings=["log_statement=all", "log_line_prefix='%m [%p] %a: '"],
        password=PG_PASSWORD,
    ) as server:
        yield server


# The password of `postgres_source`'s user: a local test server's, not a credential.
PG_PASSWORD = "partlake-test-password"


def postgres_table(server: Any, name: str, **options: Any) -> Any:
    """A `PostgresTable` of `public.<name>` on `postgres_source`, its password in the code."""
    from dagster_partlake.sources.postgres import PostgresTable

    return PostgresTable(
        table=f"public.{name}",
        port=server.port,
        database=server.db,
        user=server.user,
        password=PG_PASSWORD,
        **options,
    )


def postgres_connection(server: Any) -> Any:
    """A connection (autocommit) to `postgres_source`'s database as its user, over TCP."""
    import psycopg

    return psycopg.connect(
        host="127.0.0.1",
        port=server.port,
        dbname=server.db,
        user=server.user,
        password=PG_PASSWORD,
        autocommit=True,
    )


def postgres_database(server: Any) -> str:
    """A new, empty database on `postgres_source` (a test's own metastore keeps its catalog
    there); its name."""
    import uuid

    name = f"metastore_{uuid.uuid4().hex[:8]}"
    with postgres_connection(server) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return name


@pytest.fixture(scope="session")
def spark_s3(spark, s3) -> object:  # type: ignore[no-untyped-def]
    """The shared SparkSession, pointed at the `s3` server (its s3a settings set on the running
    session, as `SparkResource` sets the secret ones); needs the fetched JARs."""
    from dagster_partlake.spark.storage import apply_hadoop, s3a_settings

    if not lake_jars():
        pytest.fail("the Spark JARs are missing: run `make install` (it fetches them).")
    settings = s3a_settings(s3.storage_options(), environ={})
    apply_hadoop(spark, {**settings.public, **settings.secret})
    return spark


@pytest.fixture
def instance(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A Dagster instance on disk; for a test of the filled example (`example`), a copy of the
    instance that recorded the fill."""
    from dagster import instance_for_test

    home = None
    if "example" in request.fixturenames:
        template: Path = request.getfixturevalue("example_template")
        home = tmp_path / "example_dagster_home"
        shutil.copytree(template / "dagster_home", home)
    with instance_for_test(temp_dir=str(home) if home else None) as dagster_instance:
        yield dagster_instance


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A fresh lakehouse root (PARTLAKE_HOME) per test."""
    root = tmp_path / "lake"
    root.mkdir()
    return root


def _fill_example(lake: Path, instance: object) -> tuple[object, object]:
    """Write the example's sources (2 days x eu, us) into `lake` and run every stale partition;
    (defs, LakeGraph) of the example code location over it."""
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.orchestration.runner import refresh
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan
    from definitions import defs
    from definitions.ingest import write_partition

    for date in ["2024-01-01", "2024-01-02"]:
        for region in ["eu", "us"]:
            write_partition(dt.date.fromisoformat(date), region, 200, root=str(lake))
    graph = LakeGraph(defs)
    outcomes = refresh(graph, instance)  # type: ignore[arg-type]
    assert outcomes and all(o.ok for o in outcomes)
    assert not make_plan(graph, StateCache()).plan
    return defs, graph


@pytest.fixture(scope="session")
def example_template(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """The example filled once per test session: `lake/` and the Dagster instance that recorded
    the fill, `dagster_home/`. `example` and `instance` copy them for each test (filling took
    about a minute per test)."""
    from dagster import instance_for_test

    root = tmp_path_factory.mktemp("example-template")
    (root / "lake").mkdir()
    (root / "dagster_home").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PARTLAKE_HOME", str(root / "lake"))
        with instance_for_test(temp_dir=str(root / "dagster_home")) as template:
            _fill_example(root / "lake", template)
    return root


@pytest.fixture
def example(example_template: Path, lake: Path, instance, monkeypatch):  # type: ignore[no-untyped-def]
    """The example code location over a fresh lake, fully materialized: a copy of the session's
    filled lake, with `instance` a copy of the instance that recorded it."""
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan
    from definitions import defs

    shutil.copytree(example_template / "lake", lake, dirs_exist_ok=True)
    graph = LakeGraph(defs)
    assert not make_plan(graph, StateCache()).plan  # the copy is as fresh as the fill
    return defs, graph


def sensor_tick(defs, instance, sensor, cursor):
    """One tick validated as the daemon validates it (`evaluate_tick`: a sensor without a target
    fails here too): (run requests, new cursor, skip message)."""
    from dagster import build_sensor_context

    repository = defs.get_repository_def()
    context = build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),  # as under the daemon: dynamic partitions resolve
        repository_def=repository,
        cursor=cursor,
        # As the daemon does: the code location's resources that the sensor requires.
        resources={
            key: resource
            for key, resource in repository.get_top_level_resources().items()
            if key in sensor.required_resource_keys
        },
    )
    with context:  # the daemon opens the resources for the tick and closes them after
        data = sensor.evaluate_tick(context)
    return list(data.run_requests or []), data.cursor or cursor, data.skip_message


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env.update(extra)
    return env


def cli_env(tmp_path: Path, lake: Path) -> dict[str, str]:
    """Environment for `partlake` / `dagster` subprocesses on `lake`, with a fresh empty Dagster
    instance and state cache under `tmp_path`."""
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").touch()
    return subprocess_env(
        PARTLAKE_HOME=str(lake),
        DAGSTER_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        PARTLAKE_CACHE_DIR=str(tmp_path / "state-cache"),
    )


def run_partlake(
    *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The real `partlake` CLI (`python -m dagster_partlake.cli`) in a subprocess, from the repo."""
    return subprocess.run(
        [sys.executable, "-m", "dagster_partlake.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def delta_rows(path: str | Path, columns: list[str] | None = None) -> list[tuple]:
    """All rows of a Delta table read by delta-rs (no Spark), sorted."""
    table = DeltaTable(str(path)).to_pyarrow_dataset().to_table(columns=columns)
    names = columns or table.column_names
    return sorted((tuple(row[c] for c in names) for row in table.to_pylist()), key=none_first)


def none_first(row: tuple) -> tuple:
    """Sort key equal to plain tuple order, except that None sorts after any value."""
    return tuple((v is None, 0 if v is None else v) for v in row)


def delta_files(path: str | Path) -> set[str]:
    return set(DeltaTable(str(path)).file_uris())


def spark_rows(df: object, columns: list[str]) -> list[tuple]:
    """Rows collected from Spark, sorted; naive timestamps (session time zone UTC) made aware."""
    rows = df.select(*columns).collect()  # type: ignore[attr-defined]
    return sorted(tuple(_utc(row[c]) for c in columns) for row in rows)


def _utc(value: object) -> object:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def arrow_rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    return sorted(tuple(row[c] for c in columns) for row in table.to_pylist())
