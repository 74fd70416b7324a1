"""The lake read by name beyond one machine, as a user sets it up: partlake's own metastore kept in
PostgreSQL; `partlake run` writes and registers a table; then an asset that reads it by name
(`spark.table("lake.visits")`) runs on local Spark, on a standalone cluster and on a Spark
Connect server, each with the catalog's settings: `SparkResource(spark_conf=catalog.spark_conf())`
for the first two, `partlake spark start -m MODULE` for the server (its clients cannot set the
catalog, a static setting).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from dagster_partlake.catalog.client import Metastore
from dagster_partlake.spark.server import start_standalone, stop
from tests.servers import free_port
from tests.surface.options import covers
from tests.surface.project import UserProject, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.dagster_cli]

MODULE = "visits_by_name"
CODE = """
import os

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, LakeCatalog, SparkResource

# One catalog for every machine: partlake's own metastore, kept in PostgreSQL.
catalog = LakeCatalog(
    port={port},
    database_url="jdbc:postgresql://127.0.0.1:{pg_port}/{db}",
    database_user="{user}",
    database_password=os.environ["METASTORE_PASSWORD"],
)
days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")


@dg.asset(partitions_def=days, backfill_policy=dg.BackfillPolicy.single_run())
def visits(context: dg.AssetExecutionContext, spark: SparkResource) -> DataFrame:
    keys = context.partition_keys
    return spark.spark_session.createDataFrame(
        [(d, i) for d in keys for i in range(3)], "date string, n long"
    )


# Reads the lake's table by its name, not through the IO manager.
@dg.asset(partitions_def=days, deps=[visits], backfill_policy=dg.BackfillPolicy.single_run())
def visits_copy(context: dg.AssetExecutionContext, spark: SparkResource) -> DataFrame:
    session = spark.spark_session
    on_connect = type(session).__module__.startswith("pyspark.sql.connect")
    engine = "connect" if on_connect else session.sparkContext.master
    days_read = session.table("lake.visits").where(F.col("date").isin(context.partition_keys))
    return days_read.withColumn("engine", F.lit(engine))


# Local Spark by default; a cluster or a Spark Connect server from the environment.
spark = SparkResource(
    master=os.environ.get("VISITS_MASTER", "local[2]"),
    remote=os.environ.get("VISITS_REMOTE"),
    spark_conf=catalog.spark_conf(),
)
defs = dg.Definitions(
    assets=catalog.named([visits, visits_copy]),
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(spark=spark, catalog=catalog),
    },
    executor=dg.in_process_executor,
)
"""


@covers(
    "SparkResource(master=)",
    "SparkResource(remote=)",
    "SparkResource(spark_conf=)",
    "LakeCatalog(database_url=)",
)
def test_local_spark_a_standalone_cluster_and_spark_connect_read_the_lake_by_name(
    tmp_path: Path, postgres_source: Any
) -> None:
    from tests.conftest import PG_PASSWORD, postgres_database

    db = postgres_database(postgres_source)
    project = UserProject(tmp_path, extra_env={"METASTORE_PASSWORD": PG_PASSWORD})
    port = free_port()
    project.write(
        MODULE, CODE, port=port, pg_port=postgres_source.port, db=db,
        user=postgres_source.user,
    )  # fmt: skip
    cluster, master_port, connect_port = str(tmp_path / "cluster"), free_port(), free_port()

    # The same code location, its Spark named by the environment (made ahead: each writes
    # the Dagster home's settings).
    on_cluster, on_connect = (
        UserProject(tmp_path, extra_env={**project.extra_env, **spark})
        for spark in (
            {"VISITS_MASTER": f"spark://127.0.0.1:{master_port}"},
            {"VISITS_REMOTE": f"sc://127.0.0.1:{connect_port}"},
        )
    )

    def copy(where: UserProject, day: str) -> None:
        where.ok(
            "dagster", "asset", "materialize", "-m", MODULE, "--select", "visits_copy",
            "--partition", day,
        )  # fmt: skip

    try:
        # Each server starts while the step before it runs (leaving the pool waits for them,
        # so the finally block stops whatever started).
        with ThreadPoolExecutor(max_workers=1) as pool:
            nodes = pool.submit(
                start_standalone, cluster, port=master_port, workers=1, cores=1, memory="1g"
            )
            # (a) Local Spark (the warm Spark, keyed on the catalog's settings): partlake's own
            # metastore starts with the first commit, which registers visits; visits_copy then
            # reads it by name.
            out = project.ok("partlake", "run", "-m", MODULE)
            assert "6 asset partition(s) refreshed, 0 failed" in out, out
            with Metastore(f"thrift://127.0.0.1:{port}") as client:
                entry = client.entry("lake.visits")
            assert entry is not None and entry.is_delta, entry
            nodes.result()
            # A Spark Connect server started with the code location's catalog.
            connect = pool.submit(
                project.ok, "partlake", "spark", "start", "-m", MODULE, "--port",
                str(connect_port), "--master", "local[2]", "--driver-memory", "1g", timeout=300,
            )  # fmt: skip
            # (b) The standalone cluster: the run's driver reads the name, its executors the
            # files.
            copy(on_cluster, "2024-01-02")
            for name in ("worker0", "master"):
                stop(cluster, name)
            out = connect.result()
        assert f"tables of {MODULE} by name (the metastore thrift://127.0.0.1:{port})" in out, out
        # (c) The Spark Connect server.
        copy(on_connect, "2024-01-03")
    finally:
        project.run("partlake", "spark", "stop", "--connect", timeout=120)
        for name in ("worker0", "master"):
            stop(cluster, name)
        project.run("partlake", "catalog", "stop", "-m", MODULE, timeout=120)

    assert table_rows(project.lake / "warehouse" / "visits_copy", ["date", "n", "engine"]) == [
        ("2024-01-01", 0, "local[2]"),
        ("2024-01-01", 1, "local[2]"),
        ("2024-01-01", 2, "local[2]"),
        ("2024-01-02", 0, f"spark://127.0.0.1:{master_port}"),
        ("2024-01-02", 1, f"spark://127.0.0.1:{master_port}"),
        ("2024-01-02", 2, f"spark://127.0.0.1:{master_port}"),
        ("2024-01-03", 0, "connect"),
        ("2024-01-03", 1, "connect"),
        ("2024-01-03", 2, "connect"),
    ]
