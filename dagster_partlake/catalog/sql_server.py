"""The SQL endpoint: Spark's Thrift JDBC/ODBC server (HiveServer2's protocol) on the lake's
metastore, on 127.0.0.1 only, so a BI tool, a JDBC client, beeline or dbt-spark
(`method: thrift`) query the lake's tables by name.

It is `HiveThriftServer2` from pyspark's own JARs (`spark-hive-thriftserver`), started with
`spark-submit` as the Spark Connect server is (`dagster_partlake.spark.server.start_connect`):
partlake's Spark defaults, the fetched JARs and Delta's catalog (the tables are `USING delta`),
the public `s3a` settings of the lake's storage options, and the catalog's `hive` settings. The
storage secrets reach it through its environment only, never its command line. Its PID file and
log are `<home>/catalog/sql-server.{pid,log}`; `query` runs beeline from pyspark's JARs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from dagster_partlake.errors import CatalogError, PartlakeError
from dagster_partlake.spark.conf import DEFAULT_CONF
from dagster_partlake.spark.jars import local_jars, pyspark_jars_dir
from dagster_partlake.spark.server import HOST, ServerInfo, spark_home, spawn, status, stop
from dagster_partlake.spark.storage import check_options, delta_conf, jars_conf, s3a_settings

if TYPE_CHECKING:
    from dagster_partlake.catalog.config import LakeCatalog

KIND = "catalog"
NAME = "sql-server"
THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
BEELINE_CLASS = "org.apache.hive.beeline.BeeLine"
DEFAULT_PORT = 10000
MASTER = "local[*]"
STOP_HINT = "partlake sql-server stop"
_PROMPT = re.compile(r"^\d+: jdbc:hive2://\S+> ", re.MULTILINE)


def jdbc_url(port: int = DEFAULT_PORT, schema: str = "default") -> str:
    """The endpoint's JDBC URL (`jdbc:hive2://127.0.0.1:<port>/<schema>`)."""
    return f"jdbc:hive2://{HOST}:{port}/{schema}"


def sql_server_status(home: str, port: int | None = None) -> ServerInfo:
    """Whether the endpoint of this lake home runs (by its PID file), its URL and its log."""
    return status(home, NAME, port or DEFAULT_PORT, kind=KIND)


def sql_server_port(info: ServerInfo) -> int:
    """The port a running endpoint listens on (recorded in its PID file)."""
    return int(info.url.rsplit(":", 1)[1])


def start_sql_server(
    catalog: LakeCatalog,
    *,
    port: int = DEFAULT_PORT,
    storage_options: dict[str, str] | None = None,
    driver_memory: str = "1g",
    jars_dir: str | None = None,
    timeout: float = 180,
    say: Callable[[str], object] | None = None,
) -> ServerInfo:
    """Start the SQL endpoint of `catalog` on 127.0.0.1:`port`; partlake's own metastore is
    started first when the catalog names no other and it is not running.

    Raises:
        CatalogError: the metastore does not answer, the Delta JARs were not fetched, the
            endpoint already runs, or it did not listen within `timeout` (its log named).
    """
    check_options(storage_options or {})
    home = catalog.lake_home
    # The endpoint's first query would otherwise fail after a long start, with Hive's 10k lines.
    with catalog.connect(start=True, say=say) as metastore:
        metastore.entries(["__partlake_probe__"])  # a CatalogError naming it when it does not
    jars = local_jars(jars_dir)
    if not jars:
        raise CatalogError(
            "the SQL endpoint reads the lake's tables with Delta's Spark catalog, whose JARs "
            "were not fetched; run `make install` (or set PARTLAKE_JARS_DIR to where they are)."
        )
    folder = Path(home).resolve() / KIND
    # partlake's Spark defaults, except what the server sets itself (memory by flag).
    conf = {k: v for k, v in DEFAULT_CONF.items() if k != "spark.driver.memory"}
    conf.update(jars_conf(jars, MASTER, {}))
    conf.update(delta_conf({}))
    s3a = s3a_settings(storage_options)
    conf.update(s3a.spark_conf())
    conf.update(catalog.spark_conf())
    # Spark's warehouse and Hive's scratch folders in the lake home, not the working folder
    # or /tmp.
    conf["spark.sql.warehouse.dir"] = str(folder / "warehouse")
    scratch = folder / "sql-server-scratch"
    hive = {
        "hive.server2.thrift.bind.host": HOST,
        "hive.server2.thrift.port": str(port),
        "hive.server2.logging.operation.log.location": str(scratch / "operations"),
        "hive.exec.local.scratchdir": str(scratch / "local"),
        "hive.downloaded.resources.dir": str(scratch / "resources"),
    }
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        MASTER,
        "--driver-memory",
        driver_memory,
        "--class",
        THRIFT_SERVER_CLASS,
        *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
        "spark-internal",
        *(arg for key, value in hive.items() for arg in ("--hiveconf", f"{key}={value}")),
    ]
    if say is not None:
        say(f"starting the SQL endpoint on {HOST}:{port} (log: {folder / f'{NAME}.log'})")
    try:
        return spawn(
            home,
            NAME,
            command,
            port,
            timeout,
            env=s3a.secret_env(),
            kind=KIND,
            stop_hint=STOP_HINT,
        )
    except PartlakeError as error:
        raise CatalogError(f"the SQL endpoint did not start: {error}") from error


def stop_sql_server(home: str) -> bool:
    """Stop this lake home's endpoint by its PID; True if it was running."""
    return stop(home, NAME, kind=KIND)


def beeline_command(
    sql: str,
    *,
    port: int = DEFAULT_PORT,
    schema: str = "default",
    user: str | None = None,
    output: Literal["table", "csv2"] = "table",
) -> list[str]:
    """beeline (from pyspark's JARs) running `sql` against the endpoint on `port`, with
    `schema` the current one."""
    return [
        _java(),
        "-cp",
        f"{pyspark_jars_dir()}/*",
        BEELINE_CLASS,
        "-u",
        jdbc_url(port, schema),
        "-n",
        user or _user(),
        "--silent=true",
        "--showHeader=true",
        f"--outputformat={output}",
        "-e",
        sql,
    ]


def run_query(
    home: str,
    sql: str,
    *,
    port: int | None = None,
    schema: str = "default",
    output: Literal["table", "csv2"] = "table",
    timeout: float = 300,
) -> str:
    """Run `sql` on this lake home's running endpoint with beeline, `schema` the current one;
    what beeline printed.

    Raises:
        CatalogError: no endpoint runs, or the statement failed (beeline's error named).
    """
    info = sql_server_status(home, port)
    if not info.running:
        raise CatalogError(
            f"no SQL endpoint is running for {home}; start it with `partlake sql-server start` "
            "(with -m MODULE for a code location's catalog)."
        )
    recorded = sql_server_port(info)
    if port is not None and port != recorded:
        raise CatalogError(
            f"the SQL endpoint of {home} listens on port {recorded}, not {port}; query it "
            f"with --port {recorded} or leave --port out."
        )
    done = subprocess.run(
        beeline_command(sql, port=recorded, schema=schema, output=output),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    # beeline -e exits 0 after some failed statements: its "Error:" lines tell.
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    if done.returncode != 0 or errors:
        detail = "; ".join(errors) or done.stderr.strip()[-1000:]
        raise CatalogError(f"the query failed on {info.url}: {detail}")
    # beeline prints its prompt before the result even when silent.
    return _PROMPT.sub("", done.stdout).strip("\n") + "\n"


def _user() -> str:
    import getpass

    return getpass.getuser()


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        raise CatalogError(
            "beeline needs `java` (Java 17 or 21), which is not on the PATH or in $JAVA_HOME; "
            "install one (Debian: openjdk-17-jre-headless)."
        )
    return found
