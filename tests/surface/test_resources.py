"""`SparkResource` and `DeltaPartitionIOManager` as a user configures them, on local Spark: every
setting of the session (master, app name, spark_conf over spark_config, class data sharing off,
the JARs from `jars_dir`) seen from inside the session the IO manager built; the delta-spark
writer (the IO manager's `writer`, an asset's `partlake/writer` overriding it) read back by
delta-rs and by Spark's Delta; without the JARs (`add_jars=False`) the delta-spark writer names
the cause; a commit that conflicts fails after `max_commit_attempts`; an asset that builds its
own SparkSession writes through `dagster asset materialize` run without the virtualenv on the
PATH; `table_path` finds each table for a user's script. One code location, one lake:

1. `dagster asset materialize` of `homemade` (its own SparkSession) and `contested` (one
   commit attempt), paused (a fault drill, `PARTLAKE_FAULT_DIR`) before contested's commit;
2. `partlake run` of everything else meanwhile, which commits `contested` first;
3. the paused commit released: it conflicts, and fails after one attempt;
4. meanwhile, `dagster asset materialize` of `bare_native`, whose session has no JARs: it
   fails.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.conftest import lake_jars
from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_spark"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source, table_path

parts = dg.StaticPartitionsDefinition(["p1", "p2"])
one_run = dg.BackfillPolicy.single_run()
by_part = {"partition_expr": "part"}
ranged = {"partitions_def": parts, "backfill_policy": one_run, "metadata": by_part}

spark = SparkResource(
    master="local[2]",
    app_name="shop-nightly",
    spark_config={
        "spark.sql.session.timeZone": "America/New_York",
        "spark.shop.greeting": "from spark_config",
    },
    spark_conf={"spark.shop.greeting": "from spark_conf"},
    class_data_sharing=False,
    jars_dir="{jars_dir}",
)
# The same JARs, not added: a cluster whose Spark would have them already.
bare_spark = SparkResource(
    master="local[1]", class_data_sharing=False, jars_dir="{jars_dir}", add_jars=False
)

sales = partlake_source("sales", partitions_def=parts, path="landing/sales", metadata=by_part)


@dg.asset(**ranged)
def session_facts(sales: DataFrame) -> DataFrame:
    \"\"\"What the session the IO manager read `sales` with is like.\"\"\"
    session = sales.sparkSession
    conf = session.sparkContext.getConf()
    return sales.select("part").distinct().select(
        "part",
        F.lit(session.sparkContext.appName).alias("app_name"),
        F.lit(session.sparkContext.master).alias("master"),
        F.lit(session.conf.get("spark.shop.greeting")).alias("greeting"),
        F.from_unixtime(F.lit(0)).alias("epoch_local"),
        F.lit(conf.get("spark.driver.extraJavaOptions", "")).alias("java_options"),
        F.lit(session.conf.get("spark.sql.extensions", "")).alias("extensions"),
    )


@dg.asset(**ranged, io_manager_key="delta_io")
def native_sales(sales: DataFrame) -> DataFrame:
    return sales


@dg.asset(**ranged)
def delta_read(context: dg.AssetExecutionContext, native_sales: DataFrame) -> DataFrame:
    \"\"\"native_sales as Spark's Delta reads it.\"\"\"
    table = native_sales.sparkSession.read.format("delta").load(table_path(None, "native_sales"))
    return table.where(F.col("part").isin(context.partition_keys))


@dg.asset(
    partitions_def=parts,
    backfill_policy=one_run,
    metadata={**by_part, "partlake/writer": "partlake"},
    io_manager_key="delta_io",
)
def sales_copy(sales: DataFrame) -> DataFrame:
    return sales


@dg.asset(**ranged, deps=[sales])
def homemade(context: dg.AssetExecutionContext) -> DataFrame:
    \"\"\"A habit of many: the asset builds its own session, and reads with Spark's Delta.\"\"\"
    session = SparkSession.builder.master("local[1]").getOrCreate()
    landing = session.read.format("delta").load(table_path(None, "sales", path="landing/sales"))
    rows = [(key, 7, landing.count()) for key in context.partition_keys]
    return session.createDataFrame(rows, "part string, n int, sales_rows long")


@dg.asset(**ranged)
def homemade_total(homemade: DataFrame) -> DataFrame:
    \"\"\"The next step of the same run, on the session the asset above built.\"\"\"
    return homemade.groupBy("part").agg(F.sum("n").alias("total"))


@dg.asset(**ranged)
def early_made(context: dg.AssetExecutionContext) -> DataFrame:
    \"\"\"Run from `shop_early`, whose session starts at import, before any resource.\"\"\"
    session = SparkSession.builder.getOrCreate()
    rows = [(key, 3) for key in context.partition_keys]
    return session.createDataFrame(rows, "part string, n int")


@dg.asset(**ranged)
def early_total(early_made: DataFrame) -> DataFrame:
    return early_made.groupBy("part").agg(F.sum("n").alias("total"))


@dg.asset(**ranged, io_manager_key="strict_io")
def contested(homemade: DataFrame) -> DataFrame:
    return homemade


@dg.asset(**ranged, io_manager_key="bare_io")
def bare_native(context: dg.AssetExecutionContext, bare_spark: SparkResource) -> DataFrame:
    rows = [(key, 1) for key in context.partition_keys]
    return bare_spark.spark_session.createDataFrame(rows, "part string, n int")


defs = dg.Definitions(
    assets=[sales, session_facts, native_sales, delta_read, sales_copy, homemade, contested]
    + [homemade_total, early_made, early_total, bare_native],
    resources={
        "spark": spark,
        "bare_spark": bare_spark,
        "io_manager": DeltaPartitionIOManager(spark=spark),
        "delta_io": DeltaPartitionIOManager(spark=spark, writer="delta-spark"),
        "strict_io": DeltaPartitionIOManager(spark=spark, max_commit_attempts=1),
        "bare_io": DeltaPartitionIOManager(spark=bare_spark, writer="delta-spark"),
    },
    executor=dg.in_process_executor,
)
"""
# A module that starts its Spark session at import, before any resource is set up.
EARLY = """
from pyspark.sql import SparkSession

SparkSession.builder.master("local[1]").getOrCreate()

from shop_spark import defs  # noqa: E402
"""
# The user's script: where each table is, read with deltalake.
TABLES = """
import json
import os

from dagster import AssetKey
from deltalake import DeltaTable

from dagster_partlake import table_path

lake = os.environ["PARTLAKE_HOME"]
where = {
    "sales_copy": table_path(lake, AssetKey("sales_copy")),
    "native_sales": table_path(None, ["native_sales"]),
    "contested": table_path(root=lake, asset_key="contested"),
    "sales": table_path(lake, "sales", path="landing/sales"),
}
rows = {name: DeltaTable(path).to_pyarrow_table().num_rows for name, path in where.items()}
print(json.dumps({"where": where, "rows": rows}), flush=True)
# deltalake's threads sometimes abort the interpreter's exit (SIGABRT, "terminate called without
# an active exception") after all the work is done: leave without the interpreter's teardown.
os._exit(0)
"""
SALES = [{"part": p, "sku": s, "amount": 10 * i} for p in ("p1", "p2") for i, s in enumerate("abc")]
DRILL_TIMEOUT = 300


def _paused(proc: Any, paused: Path) -> bool:
    """Wait until the drill's process pauses at its commit (True) or ends first (False)."""
    deadline = time.monotonic() + DRILL_TIMEOUT
    while time.monotonic() < deadline:
        if paused.exists():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.2)
    raise AssertionError(f"the drill's process did not reach its commit in {DRILL_TIMEOUT} s")


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The user's project after the drill, `partlake run` and the run without the JARs."""
    root = tmp_path_factory.mktemp("resources")
    jars = root / "spark-jars"  # the fetched JARs, in a folder of the user's
    jars.mkdir()
    found = lake_jars()
    if not found:
        pytest.fail("the Spark JARs are missing: run `make install` (it fetches them).")
    for jar in found:
        (jars / Path(jar).name).symlink_to(jar)
    (root / "no-jars").mkdir()
    env = {
        # The default JAR folder is empty: only `jars_dir` brings them.
        "PARTLAKE_JARS_DIR": str(root / "no-jars"),
        # Where class data sharing would build its archive.
        "PARTLAKE_SPARK_CDS_DIR": str(root / "cds"),
    }
    project = UserProject(root, extra_env=env)
    project.write(MODULE, CODE, jars_dir=jars)
    project.write("tables", TABLES)
    project.write("shop_early", EARLY)
    write_deltalake(
        str(project.lake / "landing" / "sales"), pa.Table.from_pylist(SALES), partition_by=["part"]
    )
    drill = root / "drill"
    drill.mkdir()
    (drill / "points").write_text("before_commit@contested:1")
    drilled = UserProject(root, extra_env={**env, "PARTLAKE_FAULT_DIR": str(drill)})
    log = root / "materialize.log"
    paused = drilled.start(
        "dagster", "asset", "materialize", "-m", MODULE, "--select",
        "homemade,homemade_total,contested", "--partition-range", "p1...p2", log=log,
    )  # fmt: skip
    bare_log = root / "bare.log"
    bare = None
    try:
        reached = _paused(paused, drill / "before_commit.1.paused")
        # Meanwhile (its own process and session; the Dagster instance exists by now, which
        # two processes must not create at once): the asset whose session has no JARs, and
        # two assets of a module whose session started at import, without the JARs.
        bare = project.start(
            "dagster", "asset", "materialize", "-m", "shop_early", "--select",
            "bare_native,early_made,early_total", "--partition-range", "p1...p2", log=bare_log,
        )  # fmt: skip
        run = project.run(
            "partlake", "run", "-m", MODULE, "--select",
            "session_facts,native_sales,delta_read,sales_copy,contested",
        )  # fmt: skip
        (drill / "before_commit.1.release").touch()
        code = paused.wait(timeout=180)
        bare_code = bare.wait(timeout=300)
    finally:
        for proc in (paused, bare):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=30)
    return {
        "project": project,
        "reached": reached,
        "materialize": log.read_text(),
        "materialize_code": code,
        "run": run,
        "bare": bare_log.read_text(),
        "bare_code": bare_code,
        "plan": project.ok("partlake", "plan", "-m", MODULE),
    }


def _warehouse(shop: dict[str, Any]) -> Path:
    return shop["project"].lake / "warehouse"


def test_partlake_run_refreshes_what_it_selects(shop: dict[str, Any]) -> None:
    run = shop["run"]
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    lines = outcome_lines(run.stdout)
    assert len(lines) == 2 * 5 and all(line.startswith("[OK]") for line in lines), run.stdout
    # Only the asset whose session has no JARs is left.
    assert "bare_native: 2 stale (missing 2)" in shop["plan"], shop["plan"]
    assert "2 stale asset partition(s) in 1 asset(s)" in shop["plan"], shop["plan"]


@covers(
    "SparkResource",
    "SparkResource(master=)",
    "SparkResource(app_name=)",
    "SparkResource(spark_conf=)",
    "SparkResource(spark_config=)",
    "SparkResource(class_data_sharing=)",
    "SparkResource(jars_dir=)",
    "DeltaPartitionIOManager",
    "DeltaPartitionIOManager(spark=)",
)
def test_the_io_manager_reads_with_the_session_its_spark_resource_describes(
    shop: dict[str, Any],
) -> None:
    columns = [
        "part",
        "app_name",
        "master",
        "greeting",
        "epoch_local",
        "java_options",
        "extensions",
    ]
    facts = table_rows(_warehouse(shop) / "session_facts", columns)
    assert [f[0] for f in facts] == ["p1", "p2"]
    part, app_name, master, greeting, epoch_local, java_options, extensions = facts[0]
    assert (app_name, master) == ("shop-nightly", "local[2]")
    assert greeting == "from spark_conf"  # spark_conf wins over spark_config
    assert epoch_local == "1969-12-31 19:00:00"  # spark_config's time zone (UTC-5)
    # Class data sharing off: no archive given to the JVM, none built.
    assert "SharedArchiveFile" not in java_options
    assert not (shop["project"].root / "cds").exists()
    # jars_dir: Delta's extension, from the user's JAR folder (the default one is empty).
    assert "io.delta.sql.DeltaSparkSessionExtension" in extensions


@covers("DeltaPartitionIOManager(writer=)", "setting partlake/writer")
def test_the_delta_spark_writer_commits_through_spark_s_delta(shop: dict[str, Any]) -> None:
    warehouse = _warehouse(shop)
    expected = sorted((r["part"], r["sku"], r["amount"]) for r in SALES)
    for table in ("native_sales", "sales_copy"):
        assert table_rows(warehouse / table, ["part", "sku", "amount"]) == expected
    writes = {
        table: [
            h for h in DeltaTable(str(warehouse / table)).history() if h["operation"] == "WRITE"
        ]
        for table in ("native_sales", "sales_copy")
    }
    # The IO manager's writer: Spark's Delta committed, with partlake's record.
    assert len(writes["native_sales"]) == 1
    assert "Delta-Lake/" in writes["native_sales"][0]["engineInfo"]
    assert '"asset_key":"native_sales"' in writes["native_sales"][0]["userMetadata"]
    # partlake/writer on the asset overrides it: delta-rs committed.
    assert [w["engineInfo"].split(":")[0] for w in writes["sales_copy"]] == ["delta-rs"]
    # Spark's Delta reads the table it wrote (delta_read, written by partlake's writer).
    assert table_rows(warehouse / "delta_read", ["part", "sku", "amount"]) == expected


@covers("DeltaPartitionIOManager(max_commit_attempts=)")
def test_a_conflicting_commit_fails_after_max_commit_attempts(shop: dict[str, Any]) -> None:
    """The paused write of contested (one attempt allowed) finds partlake run's commit of the
    same partitions: it fails at once, saying why, and the table keeps the other write."""
    assert shop["reached"], shop["materialize"][-3000:]
    out = shop["materialize"]
    assert shop["materialize_code"] != 0, out[-3000:]
    assert "could not commit to table contested after 1 attempts" in out, out[-3000:]
    assert "raise the IO manager's max_commit_attempts" in out, out[-3000:]
    table = DeltaTable(str(_warehouse(shop) / "contested"))
    writes = [h for h in table.history() if h["operation"] == "WRITE"]
    assert len(writes) == 1  # partlake run's
    assert table_rows(_warehouse(shop) / "contested", ["part", "n"]) == [("p1", 7), ("p2", 7)]


def test_an_asset_building_its_own_session_writes_under_dagster_materialize(
    shop: dict[str, Any],
) -> None:
    """`SparkSession.builder.getOrCreate()` in the asset, run by the virtualenv's `dagster`
    with the virtualenv not on the PATH: partlake's writer still finds pyarrow, the session
    has the lake's JARs (Spark's Delta reads the landing table), and the next step of the same
    run works on it."""
    out = shop["materialize"]
    assert 'Finished execution of step "homemade"' in out, out[-3000:]
    assert "Cannot find catalog plugin class" not in out, out[-3000:]
    assert "no pyarrow" not in out
    homemade = DeltaTable(str(_warehouse(shop) / "homemade"))
    assert len([h for h in homemade.history() if h["operation"] == "WRITE"]) == 1
    assert table_rows(_warehouse(shop) / "homemade", ["part", "n", "sales_rows"]) == [
        ("p1", 7, 6),
        ("p2", 7, 6),
    ]
    assert table_rows(_warehouse(shop) / "homemade_total", ["part", "total"]) == [
        ("p1", 7),
        ("p2", 7),
    ]


def test_a_session_started_at_import_works_and_says_what_it_lacks(shop: dict[str, Any]) -> None:
    """A module that starts Spark at import, before partlake's resource: the run works with
    partlake's writer, and one line says the session lacks the lake's JARs and what to do."""
    out = shop["bare"]
    assert 'Finished execution of step "early_total"' in out, out[-3000:]
    assert "Cannot find catalog plugin class" not in out, out[-3000:]
    assert out.count("was started before partlake's SparkResource") == 1, out[-3000:]
    assert "use the resource's session" in out
    assert table_rows(_warehouse(shop) / "early_total", ["part", "total"]) == [
        ("p1", 3),
        ("p2", 3),
    ]


@covers("SparkResource(add_jars=)")
def test_without_the_jars_the_delta_spark_writer_names_the_cause(shop: dict[str, Any]) -> None:
    out = shop["bare"]
    assert shop["bare_code"] != 0, out[-3000:]
    assert (
        "the delta-spark writer of table bare_native needs Spark's Delta on the session, which "
        "lacks its extension io.delta.sql.DeltaSparkSessionExtension"
    ) in out, out[-3000:]
    bare_table = _warehouse(shop) / "bare_native"
    assert not bare_table.exists() or not list(bare_table.rglob("*.parquet"))


@covers("table_path", "table_path(root=)", "table_path(asset_key=)", "table_path(path=)")
def test_a_script_finds_each_table_with_table_path(shop: dict[str, Any]) -> None:
    import json

    project: UserProject = shop["project"]
    found = json.loads(project.ok("python", "tables.py").strip().splitlines()[-1])
    warehouse = _warehouse(shop)
    assert found["where"] == {
        "sales_copy": str(warehouse / "sales_copy"),
        "native_sales": str(warehouse / "native_sales"),
        "contested": str(warehouse / "contested"),
        "sales": str(project.lake / "landing" / "sales"),
    }
    assert found["rows"] == {"sales_copy": 6, "native_sales": 6, "contested": 2, "sales": 6}
