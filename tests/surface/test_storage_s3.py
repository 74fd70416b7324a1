"""A lake on the S3 server, set up as the object-store guide says: the IO manager's lake root an
`s3://` URI, the endpoint, region and `AWS_ALLOW_HTTP` in the code as storage options of the IO
manager and of the Spark resource, the keys in the standard environment variables. Sources at
an `s3://` URI (`path`), at a path relative to the S3 lake root, and in another S3 lake
(`root`); one `partlake run` writes every asset and the plan is empty. Then a second S3 server
holding the same bucket and paths, planned with the same state cache, is not mistaken for the
first (`TableLocation.cache_key`).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.servers import S3Server, s3_server
from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.s3, pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_s3"
CODE = """
import os

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source

# The object store: the endpoint and region here, the keys in AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY.
options = {
    "AWS_ENDPOINT_URL": os.environ["SHOP_S3_ENDPOINT"],
    "AWS_ALLOW_HTTP": "true",
    "AWS_REGION": "{region}",
}
days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
one_run = dg.BackfillPolicy.single_run()

# A table anywhere on the store.
orders = partlake_source("orders", partitions_def=days, path="{exports}/orders")
# A table below the lake root, at a path of its own.
refunds = partlake_source("refunds", partitions_def=days, path="landing/refunds")
# A table of another lake on the store.
stock = partlake_source("stock", partitions_def=days, root="{partner}")


@dg.asset(partitions_def=days, backfill_policy=one_run)
def order_lines(orders: DataFrame) -> DataFrame:
    return orders.where("qty > 0")


@dg.asset(partitions_def=days, backfill_policy=one_run)
def refund_totals(refunds: DataFrame) -> DataFrame:
    return refunds.groupBy("date").agg(F.sum("amount").alias("amount"))


@dg.asset(partitions_def=days, backfill_policy=one_run)
def stock_levels(stock: DataFrame) -> DataFrame:
    return stock


spark = SparkResource(master="local[2]", storage_options=options)
defs = dg.Definitions(
    assets=[orders, refunds, stock, order_lines, refund_totals, stock_levels],
    resources={
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(spark=spark, root="{lake}", storage_options=options),
    },
    executor=dg.in_process_executor,
)
"""
DAYS = ["2024-01-01", "2024-01-02"]
ORDERS = [{"date": d, "order_id": i, "qty": i % 3} for d in DAYS for i in range(6)]
REFUNDS = [{"date": d, "amount": 10 * k} for d in DAYS for k in range(3)]
STOCK = [{"date": d, "sku": s, "level": 5} for d in DAYS for s in ("a", "b")]


def _user_env(server: S3Server) -> dict[str, str]:
    """What the user's shell has: the code's own endpoint variable and the standard keys."""
    return {
        "SHOP_S3_ENDPOINT": server.endpoint,
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret_key,
    }


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> dict[str, Any]:
    """The user's project on the session's S3 server after its first `partlake run`."""
    prefix = f"surface-{uuid.uuid4().hex[:8]}"
    places = {
        "lake": s3.uri(f"{prefix}/lake"),
        "exports": s3.uri(f"{prefix}/exports"),
        "partner": s3.uri(f"{prefix}/partner"),
    }
    project = UserProject(tmp_path_factory.mktemp("s3"), extra_env=_user_env(s3))
    project.write(MODULE, CODE, region=s3.region, **places)
    options = s3.storage_options()
    for where, rows in (
        (f"{places['exports']}/orders", ORDERS),
        (f"{places['lake']}/landing/refunds", REFUNDS),
        (f"{places['partner']}/warehouse/stock", STOCK),
    ):
        table = pa.Table.from_pylist(rows)
        write_deltalake(where, table, partition_by=["date"], storage_options=options)
    plan = project.ok("partlake", "plan", "-m", MODULE)
    run = project.run("partlake", "run", "-m", MODULE)
    return {"project": project, "prefix": prefix, "places": places, "plan": plan, "run": run}


@covers(
    "partlake_source(path=) [s3]",
    "partlake_source(root=) [s3]",
    "DeltaPartitionIOManager(root=) [s3]",
)
def test_sources_on_s3_are_read_where_declared(shop: dict[str, Any], s3: S3Server) -> None:
    run = shop["run"]
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    for asset in ("order_lines", "refund_totals", "stock_levels"):
        assert f"{asset}: 2 stale (missing 2)" in shop["plan"], shop["plan"]
    lines = outcome_lines(run.stdout)
    assert len(lines) == 3 * 2 and all(line.startswith("[OK]") for line in lines), run.stdout
    warehouse = f"{shop['places']['lake']}/warehouse"
    options = s3.storage_options()
    # path: an s3:// URI
    assert table_rows(f"{warehouse}/order_lines", ["date", "order_id"], **options) == sorted(
        (o["date"], o["order_id"]) for o in ORDERS if o["qty"] > 0
    )
    # path: relative to the S3 lake root
    assert table_rows(f"{warehouse}/refund_totals", ["date", "amount"], **options) == [
        ("2024-01-01", 30),
        ("2024-01-02", 30),
    ]
    # root: another lake on the store
    assert len(table_rows(f"{warehouse}/stock_levels", ["date", "sku"], **options)) == 4
    shop["project"].assert_fresh(MODULE)


@covers(
    "DeltaPartitionIOManager(storage_options=) [s3]",
    "DeltaPartitionIOManager(storage_options=)",
    "SparkResource(storage_options=) [s3]",
    "SparkResource(storage_options=)",
)
def test_the_store_is_reached_through_the_storage_options(
    shop: dict[str, Any], s3: S3Server
) -> None:
    """No endpoint in the environment: delta-rs (the IO manager's commits and plans) and Spark
    (s3a reads of the sources) found the server through the options the code gives them, the
    keys through the environment, and no key is printed."""
    project: UserProject = shop["project"]
    endpoints = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT")
    assert not [name for name in endpoints if name in project.env]
    assert shop["run"].returncode == 0
    printed = shop["run"].stdout + shop["run"].stderr
    logs = "".join(p.read_text() for p in (project.lake / "logs").glob("*.log"))
    assert s3.secret_key not in printed + logs


def _list(server: S3Server, prefix: str) -> dict[str, tuple[int, object]]:
    listed = server.client().list_objects_v2(Bucket=server.bucket, Prefix=prefix)
    return {o["Key"]: (o["Size"], o["LastModified"]) for o in listed.get("Contents", [])}


def test_the_state_cache_tells_two_servers_apart(
    shop: dict[str, Any], s3: S3Server, tmp_path: Path
) -> None:
    """A second server holds the same bucket and paths (a replica of the lake), except that
    there orders' day 2024-01-02 is 2024-01-03: a commit of the same size and time (S3 gives
    times in whole seconds) at the same version. Planned with the state cache the first
    server's plans filled, the second server's orders are read, not the cached ones."""
    project: UserProject = shop["project"]
    prefix = shop["prefix"]
    with s3_server(tmp_path) as other:
        replica = other.data / other.bucket / prefix
        shutil.copytree(s3.data / s3.bucket / prefix, replica)  # times kept
        orders = replica / "exports" / "orders"
        commit = orders / "_delta_log" / "00000000000000000000.json"
        kept = commit.stat()
        commit.write_bytes(commit.read_bytes().replace(b"2024-01-02", b"2024-01-03"))
        os.utime(commit, ns=(kept.st_atime_ns, kept.st_mtime_ns))
        (orders / "date=2024-01-02").rename(orders / "date=2024-01-03")
        key = f"{prefix}/exports/orders/_delta_log/00000000000000000000.json"
        assert _list(other, key) == _list(s3, key)  # the same size and time on both
        second = UserProject(project.root, extra_env=_user_env(other))
        plan = second.ok("partlake", "plan", "-m", MODULE)
    assert "order_lines:" in plan, plan
    assert "2024-01-03  missing           because orders[2024-01-03]" in plan, plan
    # The first server's lake is as it was.
    project.assert_fresh(MODULE)
