"""Start, stop and inspect Spark servers from the pip-installed pyspark, on 127.0.0.1 only.

- A Spark Connect server (`partlake spark start|stop|status`): every run's Spark work goes to one
  JVM, so runs pay a 0.1 s client connection instead of a JVM start. It starts with the lake's
  storage, as `SparkResource` gives a local session: the fetched JARs, Delta's SQL
  extension and catalog, and the public `s3a` settings from storage options or the AWS
  environment variables; the access keys reach it through its environment only (never its
  command line), where s3a's default credential chain reads them. Its clients cannot add JARs
  or static settings: those it needs more, such as a catalog's (`partlake spark start -m`, the
  lake's tables by name), it gets when it starts (`spark_conf`).
- A standalone cluster (one master, N workers), used by the tests and the benchmark.

Each server runs in its own session (process group) with its PID in a file under
`<root>/spark/`; stopping sends SIGTERM to the group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.spark.conf import DEFAULT_CONF
from dagster_partlake.spark.jars import local_jars
from dagster_partlake.spark.storage import check_options, delta_conf, jars_conf, s3a_settings

CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST = "127.0.0.1"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass(frozen=True)
class ServerInfo:
    name: str
    pid: int | None
    url: str
    running: bool
    log: Path


def server_dir(root: str, kind: str = "spark") -> Path:
    """`<root>/<kind>/`: where servers of one kind keep their PID files and logs."""
    path = Path(root).resolve() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pid_file(root: str, name: str, kind: str = "spark") -> Path:
    return server_dir(root, kind) / f"{name}.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as stopped.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def listening(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def spawn(
    root: str,
    name: str,
    command: Sequence[str],
    port: int,
    timeout: float,
    env: dict[str, str] | None = None,
    *,
    kind: str = "spark",
    stop_hint: str = "partlake spark stop",
) -> ServerInfo:
    """Start `command` in its own process group, its output in `<root>/<kind>/<name>.log`,
    its PID and port in `<name>.pid`, and wait until it listens on 127.0.0.1:`port`.

    Raises:
        PartlakeError: it is already running, exited, or did not listen within `timeout`.
    """
    info = status(root, name, port, kind=kind)
    if info.running:
        raise PartlakeError(
            f"{name} is already running (pid {info.pid}, {info.url}); stop it first with "
            f"`{stop_hint}`."
        )
    if listening(port):
        raise PartlakeConfigError(
            f"port {port} on {HOST} is already in use by another program; choose another with "
            "--port."
        )
    log = server_dir(root, kind) / f"{name}.log"
    # The server's Python workers write the tables' Parquet files with pyarrow
    # (`delta.file_writer`): they run this interpreter, with its packages, unless told otherwise,
    # not the first `python3` on the PATH (as `SparkResource` does for a local session).
    env = {
        "PYSPARK_PYTHON": sys.executable,
        **os.environ,
        **(env or {}),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_HOME": str(spark_home()),
    }
    with open(log, "w") as out:
        proc = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    _pid_file(root, name, kind).write_text(f"{proc.pid} {port}\n")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise PartlakeError(
                f"{name} exited with code {proc.returncode} while starting; see {log}."
            )
        if listening(port):
            return ServerInfo(name, proc.pid, _url(name, port), True, log)
        time.sleep(0.2)
    stop(root, name, kind=kind)
    raise PartlakeError(
        f"{name} did not listen on {HOST}:{port} within {timeout:.0f} s; see {log}."
    )


_SCHEMES = {"connect": "sc", "metastore": "thrift", "sql-server": "jdbc:hive2"}


def _url(name: str, port: int) -> str:
    return f"{_SCHEMES.get(name, 'spark')}://{HOST}:{port}"


def start_connect(
    root: str,
    *,
    port: int = 15002,
    master: str = "local[*]",
    driver_memory: str = "2g",
    timeout: float = 120,
    storage_options: dict[str, str] | None = None,
    jars_dir: str | None = None,
    add_jars: bool = True,
    spark_conf: Mapping[str, str] | None = None,
) -> ServerInfo:
    """Start a Spark Connect server listening on 127.0.0.1:`port`, with the fetched JARs
    (from `jars_dir`, default the project's; none with `add_jars=False`), Delta's settings and
    the s3a settings from `storage_options` (else the AWS environment variables).

    `spark_conf`: more settings, applied last; the static ones that its clients cannot set,
    such as a catalog's (`LakeCatalog.spark_conf()`: its tables by name), belong here."""
    check_options(storage_options or {})
    # partlake's Spark defaults, except what a server sets itself (memory by flag).
    conf = {k: v for k, v in DEFAULT_CONF.items() if k != "spark.driver.memory"}
    conf["spark.connect.grpc.binding.address"] = HOST
    conf["spark.connect.grpc.binding.port"] = str(port)
    s3a = s3a_settings(storage_options)
    conf.update(s3a.spark_conf())
    jars = local_jars(jars_dir) if add_jars else []
    if jars:
        conf.update(jars_conf(jars, master, {}))
        conf.update(delta_conf({}))
    conf.update(spark_conf or {})
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        master,
        "--driver-memory",
        driver_memory,
        "--class",
        CONNECT_CLASS,
        *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
        "spark-internal",
    ]
    return spawn(root, "connect", command, port, timeout, env=s3a.secret_env())


def start_standalone(
    root: str,
    *,
    port: int = 7077,
    workers: int = 2,
    cores: int = 1,
    memory: str = "2g",
    timeout: float = 120,
) -> list[ServerInfo]:
    """Start a standalone master on 127.0.0.1:`port` and `workers` workers attached to it."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    master = spawn(
        root,
        "master",
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            HOST,
            "--port",
            str(port),
            "--webui-port",
            "0",
        ],
        port,
        timeout,
    )
    started = [master]
    for i in range(workers):
        worker_port = _free_port()
        started.append(
            spawn(
                root,
                f"worker{i}",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    master.url,
                    "--host",
                    HOST,
                    "--port",
                    str(worker_port),
                    "--webui-port",
                    "0",
                    # Applications' folders (the JARs they ship, executor logs) under `root`,
                    # not inside the pip-installed pyspark.
                    "--work-dir",
                    str(server_dir(root) / f"worker{i}-work"),
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                ],
                worker_port,
                timeout,
            )
        )
    return started


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def status(
    root: str, name: str = "connect", port: int | None = None, *, kind: str = "spark"
) -> ServerInfo:
    pid_file = _pid_file(root, name, kind)
    log = server_dir(root, kind) / f"{name}.log"
    if not pid_file.exists():
        return ServerInfo(name, None, _url(name, port or 15002), False, log)
    pid_text, _, port_text = pid_file.read_text().strip().partition(" ")
    pid, recorded_port = int(pid_text), int(port_text or port or 15002)
    return ServerInfo(name, pid, _url(name, recorded_port), _alive(pid), log)


def stop(root: str, name: str = "connect", grace: float = 20, *, kind: str = "spark") -> bool:
    """Stop a server started here, by its PID; True if one was running."""
    info = status(root, name, kind=kind)
    pid_file = _pid_file(root, name, kind)
    if info.pid is None:
        return False
    was_running = info.running
    if was_running:
        try:
            os.killpg(info.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.time() + grace
        while time.time() < deadline and _alive(info.pid):
            time.sleep(0.2)
        if _alive(info.pid):
            try:
                os.killpg(info.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    pid_file.unlink(missing_ok=True)
    return was_running
