"""partlake's own Hive metastore: one service per lake home, on 127.0.0.1.

Hive 2.3's metastore (in pyspark's JARs) runs as a Thrift service in one JVM; every other
process (runs, `partlake`, a Spark Connect server, the SQL endpoint) reaches it at
`thrift://127.0.0.1:<port>`. Only that JVM opens the backing database, so the default, embedded
Derby under `<home>/catalog/metastore_db`, serves any number of processes (Derby's embedded mode
admits one JVM per database). `database_url` backs it with PostgreSQL instead, to share one
catalog between machines.

Settings reach the JVM in `<home>/catalog/conf/hive-site.xml` (mode 0600: it may hold the
database password), never its command line. `PartlakeMetastore.java` is compiled once, with the
JDK's `javac`, into `<home>/catalog/classes`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from xml.sax.saxutils import escape

from dagster_partlake.errors import CatalogError
from dagster_partlake.processes import file_lock
from dagster_partlake.spark.jars import local_jars, pyspark_jars_dir
from dagster_partlake.spark.server import HOST, ServerInfo, listening, spawn, status, stop

KIND = "catalog"
NAME = "metastore"
_MAIN = "PartlakeMetastore"
_SOURCE = Path(__file__).with_name(f"{_MAIN}.java")


def catalog_dir(home: str) -> Path:
    """`<home>/catalog`: the metastore's database, settings, class and log."""
    path = Path(home).resolve() / KIND
    path.mkdir(parents=True, exist_ok=True)
    return path


def metastore_status(home: str, port: int) -> ServerInfo:
    """Whether this home's metastore runs (by its PID file), its URI and its log."""
    return status(home, NAME, port, kind=KIND)


def hive_settings(
    home: str,
    *,
    database_url: str | None = None,
    database_user: str | None = None,
    database_password: str | None = None,
) -> dict[str, str]:
    """The metastore's hive-site.xml settings: embedded Derby under `<home>/catalog` unless
    `database_url` names another database (PostgreSQL's JDBC URL)."""
    folder = catalog_dir(home)
    url = database_url or f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
    settings = {
        "javax.jdo.option.ConnectionURL": url,
        "javax.jdo.option.ConnectionDriverName": _driver(url),
        # The schema is created on first use; Hive's schema tool is not in pyspark's JARs.
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        # Where databases get a folder: partlake's tables are external (their own location).
        "hive.metastore.warehouse.dir": str(folder / "warehouse"),
        "hive.metastore.event.db.notification.api.auth": "false",
    }
    if database_user:
        settings["javax.jdo.option.ConnectionUserName"] = database_user
    if database_password:
        settings["javax.jdo.option.ConnectionPassword"] = database_password
    return settings


def _driver(url: str) -> str:
    if url.startswith("jdbc:derby:"):
        return "org.apache.derby.jdbc.EmbeddedDriver"
    if url.startswith("jdbc:postgresql:"):
        return "org.postgresql.Driver"
    raise CatalogError(
        f"the metastore's database_url {url.split('?')[0]!r} is neither Derby (jdbc:derby:) nor "
        "PostgreSQL (jdbc:postgresql://host:port/database); use one of those."
    )


def start_metastore(
    home: str,
    *,
    port: int,
    settings: Mapping[str, str],
    timeout: float = 120,
    say: Callable[[str], object] | None = None,
) -> ServerInfo:
    """Start this home's metastore on 127.0.0.1:`port` unless it runs: one starter at a time
    (a file lock), the others wait for it and find it running.

    Raises:
        CatalogError: no `java`/`javac`, the port is taken by another program, or the service
            did not listen within `timeout` (its log named).
    """
    folder = catalog_dir(home)
    with file_lock(folder / "start.lock", f"the metastore of {home} to start", say):
        info = metastore_status(home, port)
        if info.running and listening(_port_of(info)):
            return info
        if info.running:
            stop(home, NAME, kind=KIND)
        if listening(port):
            raise CatalogError(
                f"port {port} on {HOST} is already in use by another program, so partlake's "
                f"metastore for {home} cannot start there; choose another with "
                "LakeCatalog(port=...) or `partlake catalog start --port`."
            )
        classes = _compiled(folder)
        conf_dir = folder / "conf"
        conf_dir.mkdir(exist_ok=True)
        site = conf_dir / "hive-site.xml"
        site.touch(mode=0o600)
        os.chmod(site, 0o600)
        site.write_text(_site_xml(settings))
        class_path = [str(conf_dir), str(classes), f"{pyspark_jars_dir()}/*"]
        class_path += [str(jar) for jar in local_jars(roles=("jdbc",))]
        command = [
            _java("java"),
            "-Xmx512m",
            # Derby's own log (derby.log) beside the database, not in the working directory.
            f"-Dderby.stream.error.file={folder / 'derby.log'}",
            "-cp",
            os.pathsep.join(class_path),
            _MAIN,
            HOST,
            str(port),
        ]
        if say is not None:
            say(f"starting partlake's metastore on {HOST}:{port} (log: {folder / 'metastore.log'})")
        try:
            return spawn(
                home,
                NAME,
                command,
                port,
                timeout,
                kind=KIND,
                stop_hint="partlake catalog stop",
            )
        except CatalogError:
            raise
        except Exception as error:  # a PartlakeError naming the log
            raise CatalogError(f"partlake's metastore for {home} did not start: {error}") from error


def stop_metastore(home: str) -> bool:
    """Stop this home's metastore by its PID; True if it was running."""
    return stop(home, NAME, kind=KIND)


def _port_of(info: ServerInfo) -> int:
    return int(info.url.rsplit(":", 1)[1])


def _site_xml(settings: Mapping[str, str]) -> str:
    body = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in settings.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


def _java(tool: str) -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / tool) if home else shutil.which(tool)
    if not found or not Path(found).exists():
        raise CatalogError(
            f"partlake's metastore needs the JDK's `{tool}` (Java 17 or 21), which is not on the "
            "PATH or in $JAVA_HOME; install a JDK (Debian: openjdk-17-jdk-headless), or name a "
            "running metastore with LakeCatalog(metastore_uri='thrift://host:port')."
        )
    return found


def _compiled(folder: Path) -> Path:
    """The launcher's class, compiled from its source when missing or older than it."""
    classes = folder / "classes"
    target = classes / f"{_MAIN}.class"
    if target.exists() and target.stat().st_mtime >= _SOURCE.stat().st_mtime:
        return classes
    classes.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            _java("javac"),
            "-nowarn",
            "-cp",
            f"{pyspark_jars_dir()}/*",
            "-d",
            str(classes),
            str(_SOURCE),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise CatalogError(
            f"compiling partlake's metastore launcher ({_SOURCE}) failed: "
            f"{done.stderr.strip()[-500:]}"
        )
    return classes
