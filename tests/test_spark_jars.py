"""Spark with the JARs `make install` fetched (`spark/jars.py`): `s3a://` on the real S3 server
and `format("delta")`, on the shared local session, through `SparkResource` in a new process,
and agreeing with delta-rs on the same tables. The list follows the installed pyspark; the
resource's storage options become s3a settings whose secrets never reach Spark's conf, a
command line or a repr. (A Spark Connect server and a standalone cluster: test_clusters.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.io_manager.manager import DeltaPartitionIOManager
from dagster_partlake.spark import jars as spark_jars
from dagster_partlake.spark.resource import SparkResource
from tests.conftest import REPO_ROOT, subprocess_env
from tests.servers import S3Server

AWS_VARIABLES = (
    "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ALLOW_HTTP",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
)  # fmt: skip


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_jar_list_follows_the_installed_pyspark() -> None:
    import pyspark

    wanted = {jar.artifact: jar for jar in spark_jars.required_jars()}
    hadoop = spark_jars.bundled_hadoop_version()
    assert (spark_jars.pyspark_jars_dir() / f"hadoop-client-api-{hadoop}.jar").is_file()
    assert wanted["hadoop-aws"].version == hadoop
    minor = ".".join(pyspark.__version__.split(".")[:2])
    assert wanted[f"delta-spark_{minor}_2.13"].version == wanted["delta-storage"].version
    assert {jar.role for jar in wanted.values()} == {"s3a", "delta", "kafka", "jdbc"}
    # Spark's Kafka source of this Spark minor, with the clients its POM names.
    assert wanted["spark-sql-kafka-0-10_2.13"].version.startswith(minor + ".")
    kafka = wanted["spark-sql-kafka-0-10_2.13"].version
    assert wanted["spark-token-provider-kafka-0-10_2.13"].version == kafka
    assert wanted["postgresql"].group == "org.postgresql"
    # None of them duplicates a JAR pyspark already bundles.
    bundled = {name.rsplit("-", 1)[0] for name in os.listdir(spark_jars.pyspark_jars_dir())}
    assert not bundled & set(wanted)


def test_fetch_skips_what_is_there_and_a_partial_folder_names_what_is_missing(
    tmp_path: Path,
) -> None:
    wanted = spark_jars.required_jars()
    for jar in wanted:
        (tmp_path / jar.file_name).write_bytes(b"")
    # `false` fails if called: nothing is fetched when everything is there.
    assert spark_jars.fetch(tmp_path, mvn="false") == []
    assert spark_jars.local_jars(tmp_path) == [tmp_path / jar.file_name for jar in wanted]
    (tmp_path / wanted[-1].file_name).unlink()
    with pytest.raises(PartlakeConfigError, match=f"lacks {wanted[-1].file_name} .*make install"):
        spark_jars.local_jars(tmp_path)
    with pytest.raises(PartlakeConfigError, match="`no-such-mvn` .* is not on the PATH"):
        spark_jars.fetch(tmp_path, mvn="no-such-mvn")
    assert spark_jars.local_jars(tmp_path / "never-fetched") == []


def test_storage_options_become_s3a_settings_without_their_secrets(
    no_aws_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    options = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "aws_allow_http": "true",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "key-id-1234",
        "AWS_SECRET_ACCESS_KEY": "secret-5678",
        "fs.s3a.connection.maximum": "64",
    }
    resource = SparkResource(storage_options=options, jars_dir=str(tmp_path))
    conf = resource.effective_conf()
    assert {k: v for k, v in conf.items() if "s3a" in k} == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.connection.maximum": "64",
    }
    assert resource.s3a().secret == {
        "fs.s3a.access.key": "key-id-1234",
        "fs.s3a.secret.key": "secret-5678",
    }
    io_manager = DeltaPartitionIOManager(
        spark=resource, root="s3://lake/prod", storage_options=options
    )
    shown = repr(resource) + str(resource) + repr(resource.s3a()) + repr(io_manager)
    assert "secret-5678" not in shown and "key-id-1234" not in shown
    # What the Object stores page shows of a repr: each secret option's value as '***'.
    for text in (repr(resource), repr(io_manager)):
        assert "'AWS_ACCESS_KEY_ID': '***', 'AWS_SECRET_ACCESS_KEY': '***'" in text, text
    assert "secret-5678" not in json.dumps(conf)
    assert "spark.jars" not in conf and "spark.sql.extensions" not in conf  # none fetched there

    # The environment fills what the options leave out; the options win.
    no_aws_env.setenv("AWS_REGION", "us-east-2")
    no_aws_env.setenv("AWS_SECRET_ACCESS_KEY", "from-env")
    from_env = SparkResource(storage_options={"AWS_REGION": "eu-west-1"}, jars_dir=str(tmp_path))
    assert from_env.effective_conf()["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert from_env.s3a().secret == {"fs.s3a.secret.key": "from-env"}

    with pytest.raises(PartlakeConfigError, match="unknown storage option.*AWS_ENDPOINT_UR\\b"):
        SparkResource(storage_options={"AWS_ENDPOINT_UR": "http://x"})
    with pytest.raises(PartlakeConfigError, match="plain http but AWS_ALLOW_HTTP is not true"):
        SparkResource(storage_options={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}).effective_conf()


def test_the_fetched_jars_go_on_a_local_drivers_classpath_and_a_clusters_spark_jars(
    no_aws_env: pytest.MonkeyPatch,
) -> None:
    fetched = [str(path) for path in spark_jars.local_jars()]
    if not fetched:
        pytest.fail("the Spark JARs are missing: run `make install` (it fetches them).")
    local = SparkResource(spark_conf={"spark.sql.extensions": "my.Extension"}).effective_conf()
    assert local["spark.driver.extraClassPath"] == os.pathsep.join(fetched)
    assert "spark.jars" not in local
    assert local["spark.sql.extensions"] == "my.Extension,io.delta.sql.DeltaSparkSessionExtension"
    assert local["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog")
    cluster = SparkResource(master="spark://spark-master:7077", spark_conf={"spark.jars": "/x.jar"})
    assert cluster.effective_conf()["spark.jars"] == ",".join([*fetched, "/x.jar"])
    on_this_machine = SparkResource(master="spark://127.0.0.1:7077").effective_conf()
    assert on_this_machine["spark.executor.extraClassPath"] == os.pathsep.join(fetched)
    assert on_this_machine["spark.driver.extraClassPath"] == os.pathsep.join(fetched)
    # A cluster whose Spark has them already: nothing added.
    bare = SparkResource(master="spark://127.0.0.1:7077", add_jars=False).effective_conf()
    assert not {"spark.jars", "spark.sql.extensions", "spark.driver.extraClassPath"} & set(bare)


@pytest.mark.spark
def test_local_spark_reads_and_writes_s3a_and_delta_agreeing_with_delta_rs(
    spark_s3, s3: S3Server
) -> None:  # type: ignore[no-untyped-def]
    spark = spark_s3
    rows = spark.range(6).selectExpr("id", "if(id % 2 = 0, 'eu', 'us') as region")
    rows.write.mode("overwrite").partitionBy("region").parquet(s3.uri("spark/parquet", "s3a"))
    back = spark.read.parquet(s3.uri("spark/parquet", "s3a"))
    assert sorted((r.id, r.region) for r in back.collect()) == [
        (i, "eu" if i % 2 == 0 else "us") for i in range(6)
    ]
    assert list((s3.data / s3.bucket / "spark/parquet/region=eu").glob("*.parquet"))

    delta = s3.uri("spark/delta", "s3a")
    rows.write.format("delta").partitionBy("region").save(delta)
    rows.where("id = 1").write.format("delta").mode("append").save(delta)
    assert spark.read.format("delta").load(delta).count() == 7
    assert list((s3.data / s3.bucket / "spark/delta/_delta_log").glob("*1.json"))

    # delta-rs reads what Spark's Delta wrote on S3, and Spark reads what delta-rs commits.
    table = DeltaTable(s3.uri("spark/delta"), storage_options=s3.storage_options())
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 1, 2, 3, 4, 5]
    more = pa.table({"id": pa.array([10], pa.int64()), "region": ["eu"]})
    write_deltalake(table, more, mode="append")
    assert spark.read.format("delta").load(delta).where("region = 'eu'").count() == 4
    history = spark.sql(f"DESCRIBE HISTORY delta.`{delta}`").collect()
    assert [h.version for h in history] == [2, 1, 0]
    assert [h.operation for h in history[1:]] == ["WRITE", "WRITE"]


RESOURCE_PROBE = """
import json, sys
from dagster_partlake.spark import warm
from dagster_partlake.spark.resource import SparkResource
options, uri = json.loads(sys.argv[1]), sys.argv[2]
resource = SparkResource(master="local[1]", storage_options=options, class_data_sharing=False,
                         spark_conf={"spark.databricks.delta.snapshotPartitions": "1"})
spark = resource.spark_session
# The warm Spark's JVM (the default), started by its host process, or one of this process.
process = spark.sparkContext._gateway.proc
(jvm_pid,) = [h.jvm_pid for h in warm.hosts() if h.running] if process is None else [process.pid]
with open(f"/proc/{jvm_pid}/cmdline", "rb") as handle:
    command_line = handle.read().decode()
read = spark.read.format("delta").load(uri).count()
spark.range(3).selectExpr("id", "'apac' as region").write.format("delta").mode("append").save(uri)
print(json.dumps({"read": read, "secret_on_command_line": options["AWS_SECRET_ACCESS_KEY"]
                  in command_line, "classpath": "delta-spark" in command_line}))
"""


@pytest.mark.spark
def test_spark_resource_in_a_new_process_takes_the_storage_options(
    s3: S3Server, tmp_path: Path
) -> None:
    """The resource's own path: a JVM (the warm Spark's, in a folder of the test's own) with the
    JARs on its classpath and the keys set after its start, never on its command line."""
    uri = s3.uri("resource/table")
    write_deltalake(uri, pa.table({"id": [1, 2], "region": ["eu", "us"]}), partition_by=["region"],
                    storage_options=s3.storage_options())  # fmt: skip
    env = subprocess_env(
        SPARK_LOCAL_IP="127.0.0.1", PARTLAKE_SPARK_WARM_DIR=str(tmp_path / "spark-warm")
    )
    for name in AWS_VARIABLES:
        env.pop(name, None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", RESOURCE_PROBE, json.dumps(s3.storage_options()),
             s3.uri("resource/table", "s3a")],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        subprocess.run(
            [sys.executable, "-m", "dagster_partlake.cli", "spark", "stop", "--warm"],
            env=env, capture_output=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"read": 2, "secret_on_command_line": False, "classpath": True}
    table = DeltaTable(uri, storage_options=s3.storage_options())
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table()["region"].to_pylist()) == ["apac"] * 3 + ["eu", "us"]


CONNECT_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
url, uri = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.remote(url).getOrCreate()
read = spark.read.format("delta").load(uri).count()
spark.range(2).selectExpr("id", "'us' as region").write.format("delta").mode("append").save(uri)
history = [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").collect()]
print(json.dumps({"read": read, "history": history}))
"""

CLUSTER_CLIENT = """
import json, sys
from dagster_partlake.spark.resource import SparkResource
master, options, uri = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
spark = SparkResource(master=master, storage_options=options,
                      spark_conf={"spark.executor.memory": "512m"}).spark_session
read = spark.read.format("delta").load(uri).count()
spark.range(3).selectExpr("id", "'apac' as region").write.format("delta").mode("append").save(uri)
print(json.dumps({"read": read}))
"""


@pytest.mark.cluster
def test_a_spark_connect_server_and_a_standalone_cluster_use_delta_on_s3(
    s3: S3Server, tmp_path: Path
) -> None:
    """`partlake spark start` with the AWS settings in its environment (as a user runs it): the
    server gets the JARs, Delta's settings and s3a; a standalone cluster's app gets them from
    `SparkResource(master=...)`. Both read and append to a Delta table delta-rs wrote on S3."""
    from dagster_partlake.spark.server import start_standalone, stop
    from tests.servers import free_port, spark_connect

    uri = s3.uri("clusters/table")
    write_deltalake(uri, pa.table({"id": [1, 2], "region": ["eu", "us"]}), partition_by=["region"],
                    storage_options=s3.storage_options())  # fmt: skip
    env = subprocess_env(SPARK_LOCAL_IP="127.0.0.1", **s3.storage_options())

    def client(script: str, *args: str, env: dict[str, str] = env) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", script, *args], cwd=REPO_ROOT, env=env, capture_output=True,
            text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    with spark_connect(tmp_path / "connect", env) as url:
        seen = client(CONNECT_CLIENT, url, s3.uri("clusters/table", "s3a"))
    assert seen == {"read": 2, "history": ["WRITE", "WRITE"]}

    root, port = str(tmp_path / "standalone"), free_port()
    bare = {k: v for k, v in env.items() if not k.startswith("AWS_")}  # options, not the env
    try:
        start_standalone(root, port=port, workers=1, cores=1, memory="1g")
        seen = client(
            CLUSTER_CLIENT, f"spark://127.0.0.1:{port}", json.dumps(s3.storage_options()),
            s3.uri("clusters/table", "s3a"), env=bare,
        )  # fmt: skip
    finally:
        for name in ["worker0", "master"]:
            stop(root, name)
    assert seen == {"read": 4}
    table = DeltaTable(uri, storage_options=s3.storage_options())
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["region"].to_pylist()) == (
        ["apac"] * 3 + ["eu"] + ["us"] * 3
    )
