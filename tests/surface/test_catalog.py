"""Tables by name, as a user sets them up: `DeltaPartitionIOManager(catalog=LakeCatalog(...))`
registers each table it writes in a real Hive metastore (the session's `metastore`, partlake's
own service), through `partlake run` and `dagster asset materialize`; the entry keeps the
table's schema as it grows; `LakeCatalog.named` gives the UI each asset's `dagster/table_name`;
`partlake_source(table=...)` finds another team's table by name; `partlake catalog sync|list`
register a lake written before the catalog and one that moved; a name taken by another table is
an error naming both; a metastore that does not answer is a warning and the commit stands.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dagster_partlake.catalog.client import Metastore
from dagster_partlake.catalog.register import register
from dagster_partlake.storage import TableLocation
from tests.servers import free_port, process_gone
from tests.surface.options import covers
from tests.surface.project import UserProject, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

CODE = """
import os

import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, LakeCatalog, SparkResource, partlake_source

catalog = LakeCatalog(metastore_uri="{uri}", default_schema="{schema}")
days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
regions = dg.StaticPartitionsDefinition(["eu", "us"])
daily_region = dg.MultiPartitionsDefinition({"date": days, "region": regions})
one_run = dg.BackfillPolicy.single_run()

# Another team's table, found by its name in the metastore.
orders = partlake_source(
    "orders", partitions_def=daily_region, table="{schema}_src.orders", catalog=catalog
)


@dg.asset(
    partitions_def=daily_region, backfill_policy=one_run, metadata={"schema_mode": "add_columns"}
)
def order_lines(orders: DataFrame) -> DataFrame:
    lines = orders.where("qty > 0")
    # A new column once the exporter sends discounts: the table's schema grows.
    return lines.withColumn("discount", lines.qty * 0.5) if os.environ.get("DISCOUNTS") else lines


@dg.asset(key_prefix="{schema}m", partitions_def=days, backfill_policy=one_run)
def order_totals(order_lines: DataFrame) -> DataFrame:
    return order_lines.groupBy("date").sum("qty").withColumnRenamed("sum(qty)", "qty")


@dg.asset(
    partitions_def=days,
    backfill_policy=one_run,
    # Committed by delta-spark's own writer: registered all the same.
    metadata={"dagster/table_name": "{schema}.big_days", "partlake/writer": "delta-spark"},
)
def busy_days(order_lines: DataFrame) -> DataFrame:
    return order_lines.groupBy("date").count()


spark = SparkResource(master="local[2]")
defs = dg.Definitions(
    assets=catalog.named([orders, order_lines, order_totals, busy_days]),
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(spark=spark, catalog=catalog),
    },
    executor=dg.in_process_executor,
)
"""

PLAIN = """
import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import (
    DeltaPartitionIOManager,
    LakeCatalog,
    SparkResource,
    build_maintenance_job,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")


@dg.asset(partitions_def=days, backfill_policy=dg.BackfillPolicy.single_run())
def visits(context: dg.AssetExecutionContext, spark: SparkResource) -> DataFrame:
    keys = context.partition_keys
    rows = [(d, i) for d in keys for i in range(3)]
    return spark.spark_session.createDataFrame(rows, "date string, n long")


@dg.asset(partitions_def=days, backfill_policy=dg.BackfillPolicy.single_run())
def visit_counts(visits: DataFrame) -> DataFrame:
    return visits.groupBy("date").count()


spark = SparkResource(master="local[2]")
io_manager = DeltaPartitionIOManager(spark=spark, root="{root}"{catalog})
defs = dg.Definitions(
    assets=[visits, visit_counts],
    jobs=[build_maintenance_job()],
    resources={"spark": spark, "io_manager": io_manager},
    executor=dg.in_process_executor,
)
"""
DAYS = ["2024-01-01", "2024-01-02"]


def _orders(seed: int = 0, days: list[str] = DAYS) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"date": d, "region": r, "order_id": i, "qty": (i + seed) % 3}
            for d in days
            for r in ("eu", "us")
            for i in range(6)
        ]
    )


def _fields(schema_json: str) -> list[str]:
    return [f["name"] for f in json.loads(schema_json)["fields"]]


@covers(
    "LakeCatalog",
    "LakeCatalog(metastore_uri=)",
    "LakeCatalog(default_schema=)",
    "DeltaPartitionIOManager(catalog=)",
    "partlake_source(table=)",
    "partlake_source(catalog=)",
)
def test_tables_are_registered_by_name_and_follow_their_schema(
    tmp_path: Path, metastore: str
) -> None:
    schema = f"shop{uuid.uuid4().hex[:8]}"
    project = UserProject(tmp_path)
    module = project.write("shop_catalog", CODE, uri=metastore, schema=schema)
    # Another team writes its orders and registers them by name.
    orders_path = tmp_path / "other_team" / "orders"
    write_deltalake(str(orders_path), _orders(), partition_by=["date", "region"])
    with Metastore(metastore) as client:
        register(client, f"{schema}_src.orders", TableLocation.parse(str(orders_path)))

    out = project.ok("partlake", "run", "-m", module)
    assert "order_lines" in out and "busy_days" in out, out
    lake = project.lake / "warehouse"
    expected = {
        f"{schema}.order_lines": lake / "order_lines",
        f"{schema}m.order_totals": lake / f"{schema}m" / "order_totals",
        f"{schema}.big_days": lake / "busy_days",
    }
    with Metastore(metastore) as client:
        for name, where in expected.items():
            entry = client.entry(name)
            assert entry is not None, f"{name} is not registered"
            assert entry.is_delta and entry.same_location(str(where)), entry
            assert _fields(entry.schema_json) == DeltaTable(str(where)).schema().to_arrow().names
    # The UI's table name is the catalog name.
    script = (
        f"import {module}\n"
        f"for a in {module}.defs.assets:\n"
        "    for s in getattr(a, 'specs', []):\n"
        "        print(s.key.to_user_string(), s.metadata.get('dagster/table_name'))\n"
    )
    names = project.ok("python", "-c", script)
    assert f"order_lines {schema}.order_lines" in names, names
    assert f"{schema}m/order_totals {schema}m.order_totals" in names, names
    assert f"busy_days {schema}.big_days" in names, names

    # The exporter rewrites a day and sends discounts: the next run adds the column, and the
    # entry's schema follows without a manual step.
    write_deltalake(
        str(orders_path),
        _orders(seed=1, days=["2024-01-02"]),
        partition_by=["date", "region"],
        mode="overwrite",
        predicate="date = '2024-01-02'",
    )
    project.extra_env["DISCOUNTS"] = "1"
    project.ok("partlake", "run", "-m", module)
    with Metastore(metastore) as client:
        entry = client.entry(f"{schema}.order_lines")
    assert entry is not None and "discount" in _fields(entry.schema_json), entry
    listed = [
        json.loads(line)
        for line in project.ok("partlake", "catalog", "list", "-m", module, "--json").splitlines()
    ]
    assert {row["table"]: row["state"] for row in listed} == dict.fromkeys(expected, "ok"), listed
    # The source by name planned and read as a source at its path.
    assert table_rows(lake / "order_lines", ["date", "region", "order_id"]) == sorted(
        (r["date"], r["region"], r["order_id"])
        for r in DeltaTable(str(orders_path)).to_pyarrow_dataset().to_table().to_pylist()
        if r["qty"] > 0
    )


def test_a_source_name_not_in_the_metastore_or_not_delta_fails_at_load(
    tmp_path: Path, metastore: str
) -> None:
    schema = f"shop{uuid.uuid4().hex[:8]}"
    project = UserProject(tmp_path)
    module = project.write("shop_missing", CODE, uri=metastore, schema=schema)
    proc = project.run("partlake", "plan", "-m", module)
    assert proc.returncode != 0
    assert f"no table {schema}_src.orders in the metastore at {metastore}" in proc.stderr, (
        proc.stderr
    )
    _hive_table(metastore, f"{schema}_src", "orders", str(tmp_path / "csv"))
    proc = project.run("partlake", "plan", "-m", module)
    assert proc.returncode != 0
    assert "is a hive (text) table" in proc.stderr and "not a Delta table" in proc.stderr, (
        proc.stderr
    )


@covers("LakeCatalog(port=)")
def test_sync_registers_an_earlier_lake_and_a_moved_one_and_never_replaces_another(
    tmp_path: Path, metastore: str
) -> None:
    schema = f"web{uuid.uuid4().hex[:8]}"
    project = UserProject(tmp_path)
    old_root = tmp_path / "old_lake"
    project.write("web_plain", PLAIN, root=old_root, catalog="")
    project.ok("partlake", "run", "-m", "web_plain")
    catalog = f', catalog=LakeCatalog(metastore_uri="{metastore}", default_schema="{schema}")'
    module = project.write("web_named", PLAIN, root=old_root, catalog=catalog)
    # Another tool already holds one of the names.
    _hive_table(metastore, schema, "visit_counts", str(tmp_path / "csv"))
    listed = project.ok("partlake", "catalog", "list", "-m", module)
    assert "not registered" in listed and "not delta" in listed, listed
    proc = project.run("partlake", "catalog", "sync", "-m", module)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{schema}.visit_counts is already in the metastore as a hive (text) table" in (
        proc.stdout
    ), proc.stdout
    assert str(old_root / "warehouse" / "visit_counts") in proc.stdout
    assert f"{schema}.visits" in proc.stdout and "registered" in proc.stdout
    with Metastore(metastore) as client:
        kept = client.entry(f"{schema}.visit_counts")
        visits = client.entry(f"{schema}.visits")
    assert kept is not None and not kept.is_delta  # never replaced
    assert visits is not None and visits.same_location(str(old_root / "warehouse" / "visits"))

    # The lake moves: sync repoints partlake's own entry, since nothing is left where it
    # pointed.
    new_root = tmp_path / "new_lake"
    shutil.move(str(old_root), str(new_root))
    moved = project.write("web_moved", PLAIN, root=new_root, catalog=catalog)
    proc = project.run("partlake", "catalog", "sync", "-m", moved)
    assert f"{schema}.visits" in proc.stdout and "moved" in proc.stdout, proc.stdout
    with Metastore(metastore) as client:
        entry = client.entry(f"{schema}.visits")
    assert entry is not None and entry.same_location(str(new_root / "warehouse" / "visits"))

    # partlake's own metastore on another port, for this lake home: start, status, stop by PID.
    port = free_port()
    out = project.ok("partlake", "catalog", "start", "--port", str(port))
    pid = int(out.split("pid ")[1].split(",")[0])
    try:
        assert f"thrift://127.0.0.1:{port}" in out, out
        assert (project.lake / "catalog" / "metastore_db").is_dir()
    finally:
        assert "metastore stopped." in project.ok("partlake", "catalog", "stop")
    assert process_gone(pid)


def test_a_metastore_that_does_not_answer_is_a_warning_and_the_maintenance_job_registers(
    tmp_path: Path, spark: Any
) -> None:
    from dagster_partlake.catalog.metastore import hive_settings, start_metastore, stop_metastore

    project = UserProject(tmp_path)
    down = free_port()
    schema = f"web{uuid.uuid4().hex[:8]}"
    catalog = (
        f', catalog=LakeCatalog(metastore_uri="thrift://127.0.0.1:{down}", '
        f'default_schema="{schema}")'
    )
    module = project.write("web_down", PLAIN, root=tmp_path / "lake2", catalog=catalog)
    proc = project.run(
        "dagster", "asset", "materialize", "-m", module, "--select", "visits",
        "--partition", "2024-01-01",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        f"{schema}.visits is not registered (the Hive metastore at thrift://127.0.0.1:{down} "
        "did not answer"
    ) in proc.stderr, proc.stderr[-3000:]
    visits = tmp_path / "lake2" / "warehouse" / "visits"
    assert table_rows(visits, ["date", "n"]) == [("2024-01-01", i) for i in range(3)]

    # delta-spark renames a column (column mapping) while the metastore is still down.
    spark.sql(
        f"ALTER TABLE delta.`{visits}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    spark.sql(f"ALTER TABLE delta.`{visits}` RENAME COLUMN n TO visit_number")

    # The metastore is back: the nightly maintenance job registers the table, with its schema
    # as it is now.
    home = str(tmp_path / "metastore_home")
    start_metastore(home, port=down, settings=hive_settings(home))
    try:
        config = tmp_path / "maintenance.yaml"
        config.write_text(
            "ops:\n  partlake_maintenance_tables:\n    config:\n      operations: [checkpoint]\n"
        )
        project.ok(
            "dagster", "job", "execute", "-m", module, "-j", "partlake_maintenance",
            "-c", str(config),
        )  # fmt: skip
        with Metastore(f"thrift://127.0.0.1:{down}") as client:
            entry = client.entry(f"{schema}.visits")
    finally:
        stop_metastore(home)
    assert entry is not None and entry.same_location(str(visits))
    assert sorted(_fields(entry.schema_json)) == ["date", "visit_number"]


def _hive_table(uri: str, schema: str, table: str, location: str) -> None:
    """A plain Hive text table, as another tool would register one."""
    from hmsclient.genthrift.hive_metastore import ThriftHiveMetastore, ttypes
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    host, port = uri.removeprefix("thrift://").split(":")
    transport = TTransport.TBufferedTransport(TSocket.TSocket(host, int(port)))
    transport.open()
    client: Any = ThriftHiveMetastore.Client(TBinaryProtocol.TBinaryProtocol(transport))
    try:
        try:
            client.create_database(ttypes.Database(name=schema, description="", parameters={}))
        except ttypes.AlreadyExistsException:
            pass
        sd = ttypes.StorageDescriptor(
            cols=[ttypes.FieldSchema("line", "string", "")],
            location=location,
            inputFormat="org.apache.hadoop.mapred.TextInputFormat",
            outputFormat="org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
            serdeInfo=ttypes.SerDeInfo(
                serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                parameters={},
            ),
        )
        client.create_table(
            ttypes.Table(
                tableName=table, dbName=schema, sd=sd, tableType="EXTERNAL_TABLE",
                parameters={"EXTERNAL": "TRUE"}, partitionKeys=[],
            )
        )  # fmt: skip
    finally:
        transport.close()


SHARED = """
import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, LakeCatalog, SparkResource

options = {
    "AWS_ENDPOINT_URL": "{endpoint}",
    "AWS_ALLOW_HTTP": "true",
    "AWS_REGION": "{region}",
}
# partlake's own metastore, its catalog kept in PostgreSQL: every machine that names the same
# database sees the same tables. The password comes from the environment (the UI shows the
# variable's name, never its value).
catalog = LakeCatalog(
    port={port},
    database_url="jdbc:postgresql://127.0.0.1:{pg_port}/{db}",
    database_user="{user}",
    database_password=dg.EnvVar("METASTORE_PASSWORD"),
    default_schema="{schema}",
)
days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")


@dg.asset(partitions_def=days, backfill_policy=dg.BackfillPolicy.single_run())
def visits(context: dg.AssetExecutionContext, spark: SparkResource) -> DataFrame:
    keys = context.partition_keys
    return spark.spark_session.createDataFrame(
        [(d, i) for d in keys for i in range(3)], "date string, n long"
    )


spark = SparkResource(master="local[2]", storage_options=options)
defs = dg.Definitions(
    assets=catalog.named([visits]),
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(
            spark=spark, root="{lake}", storage_options=options, catalog=catalog
        ),
    },
    executor=dg.in_process_executor,
)
"""


@pytest.mark.s3
@covers(
    "LakeCatalog(database_url=)",
    "LakeCatalog(database_user=)",
    "LakeCatalog(database_password=)",
)
def test_a_catalog_kept_in_postgresql_for_a_lake_on_s3(
    tmp_path: Path, postgres_source: Any, s3: Any
) -> None:
    import psycopg

    from tests.conftest import PG_PASSWORD, postgres_database

    db = postgres_database(postgres_source)
    schema = f"s3{uuid.uuid4().hex[:8]}"
    project = UserProject(
        tmp_path,
        extra_env={
            "METASTORE_PASSWORD": PG_PASSWORD,
            "AWS_ACCESS_KEY_ID": s3.access_key,
            "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        },
    )
    port = free_port()
    lake = s3.uri(f"catalog-{schema}/lake")
    module = project.write(
        "shared_catalog", SHARED, endpoint=s3.endpoint, region=s3.region, port=port,
        pg_port=postgres_source.port, db=db, user=postgres_source.user, schema=schema, lake=lake,
    )  # fmt: skip
    try:
        # The first commit starts partlake's own metastore (nothing was running) and registers.
        project.ok("partlake", "run", "-m", module)
        with Metastore(f"thrift://127.0.0.1:{port}") as client:
            entry = client.entry(f"{schema}.visits")
        assert entry is not None and entry.is_delta
        assert entry.location == s3.uri(f"catalog-{schema}/lake/warehouse/visits", scheme="s3a")
        listed = project.ok("partlake", "catalog", "list", "-m", module)
        assert f"{schema}.visits" in listed and " ok " in listed, listed
        # The catalog lives in PostgreSQL, not in a Derby folder of this lake home.
        with psycopg.connect(
            host="127.0.0.1", port=postgres_source.port, dbname=db,
            user=postgres_source.user, password=PG_PASSWORD,
        ) as connection:  # fmt: skip
            names = connection.execute('SELECT "TBL_NAME" FROM "TBLS"').fetchall()
        assert ("visits",) in names
        assert not (project.lake / "catalog" / "metastore_db").exists()
        # The password: in a 0600 file the metastore reads, not on its command line or in a log.
        site = project.lake / "catalog" / "conf" / "hive-site.xml"
        assert site.stat().st_mode & 0o777 == 0o600
        pid = int((project.lake / "catalog" / "metastore.pid").read_text().split()[0])
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        assert PG_PASSWORD not in command_line
        logs = "".join(p.read_text(errors="replace") for p in project.lake.rglob("*.log"))
        assert PG_PASSWORD not in logs and s3.secret_key not in logs
    finally:
        project.ok("partlake", "catalog", "stop", "-m", module)


def test_a_name_held_by_a_delta_table_elsewhere_is_an_error_naming_both(
    tmp_path: Path, metastore: str
) -> None:
    from dagster_partlake.errors import CatalogError

    schema = f"two{uuid.uuid4().hex[:8]}"
    first, second = tmp_path / "team_a" / "orders", tmp_path / "team_b" / "orders"
    for where in (first, second):
        write_deltalake(str(where), _orders(), partition_by=["date"])
    with Metastore(metastore) as client:
        assert register(client, f"{schema}.orders", TableLocation.parse(str(first))).outcome == (
            "registered"
        )
        with pytest.raises(CatalogError, match="never repoints an entry") as raised:
            register(client, f"{schema}.orders", TableLocation.parse(str(second)))
        entry = client.entry(f"{schema}.orders")
    assert str(first) in str(raised.value) and str(second) in str(raised.value)
    assert entry is not None and entry.same_location(str(first))  # left as it was
