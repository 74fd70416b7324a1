"""One warm local Spark for every run of the machine: runs attach to it instead of starting a JVM.

A local session used to be a new JVM in every run's process: about 4 s to start and 5 s more for
Spark's first, cold jobs, paid by each `dagster asset materialize`, each sensor run and each
`partlake run`. Now the first run starts a host (`python -m dagster_partlake.spark.host`,
detached): a Python process that starts the JVM with the resource's settings (the lake's JARs,
Delta, partlake's defaults), warms it with a small workload, and keeps it up. Every later run
process attaches to that JVM over py4j (pyspark's own gateway, the way a notebook's Python
attaches to a driver) and gets a session of its own (`SparkSession.newSession()`): its SQL
settings, temporary views and registered functions are its own, and each run is its own Python
process as before, so nothing of a run's Python state reaches another. What a run caches is
dropped when it ends. The classic API stays whole (`sparkContext`, RDDs, an asset's own
`SparkSession.builder.getOrCreate()`), which a Spark Connect server would not give.

A host is keyed by everything a JVM is started with (master, application name, every static
setting, the JARs, the s3a secrets' digest, the Python and pyspark): resources that would have
started the same JVM share one; another setting starts another host. Its files are under
`$PARTLAKE_SPARK_WARM_DIR` (default `dagster_partlake/spark-warm` in the user's cache folder),
one folder per key: `state.json` (pid, the gateway's port and secret; mode 0600), `spark.log`
(everything the host and its JVM print), `clients/` (one file per attached process), `active`
(touched while a process is attached). A host stops itself after `idle_seconds` without an
attached process; `partlake spark status|stop` show and stop hosts. Starting, attaching and the
host's decision to stop take the folder's lock one at a time, so a process never attaches to a
host that is stopping, and two runs never start two hosts.

A host that died (killed, out of memory) is found by the next run, which starts another and
says so in one line; a run whose host dies under it fails as with a lost Spark Connect server.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster_partlake.errors import SparkUnavailableError
from dagster_partlake.processes import file_lock
from dagster_partlake.spark.server import _alive

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

WARM_DIR_ENV = "PARTLAKE_SPARK_WARM_DIR"
STATE = "state.json"
CONF = "conf.json"
LOG = "spark.log"
CLIENTS = "clients"
ACTIVE = "active"
# How long a run waits for a host to start (a JVM and its warm-up; 44 s were seen for one JVM
# when eight start at once on 2 cores).
START_TIMEOUT_SECONDS = 300.0
# SQL settings a session cannot change once the JVM runs: they belong to the host's key.
STATIC_SQL = (
    "spark.sql.extensions",
    "spark.sql.warehouse.dir",
    "spark.sql.catalogImplementation",
    "spark.sql.ui.retainedExecutions",
    "spark.sql.codegen.cache.maxEntries",
)


def warm_dir() -> Path:
    """`$PARTLAKE_SPARK_WARM_DIR`, else `dagster_partlake/spark-warm` in the user's cache folder."""
    explicit = os.environ.get(WARM_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dagster_partlake" / "spark-warm"


def is_session_setting(key: str) -> bool:
    """Whether a setting applies per session (a runtime SQL setting) rather than to the JVM."""
    return key.startswith("spark.sql.") and key not in STATIC_SQL


@dataclass(frozen=True)
class WarmSpec:
    """What a host's JVM is started with, and what each attached session sets for itself."""

    master: str
    app_name: str
    launch_conf: Mapping[str, str]  # everything but runtime SQL settings (no secrets)
    session_conf: Mapping[str, str]  # runtime SQL settings, set on each run's session
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)  # s3a keys
    idle_seconds: int = 600
    # Start the JVM from the class-data-sharing archive if there is one (not in the key: the
    # archive appears after the first start, and the same JVM is wanted either way).
    class_data_sharing: bool = True

    @classmethod
    def of(
        cls,
        master: str,
        app_name: str,
        conf: Mapping[str, str],
        secrets: Mapping[str, str],
        idle_seconds: int,
        class_data_sharing: bool = True,
    ) -> WarmSpec:
        launch = {k: v for k, v in conf.items() if not is_session_setting(k)}
        session = {k: v for k, v in conf.items() if is_session_setting(k)}
        return cls(
            master, app_name, launch, session, dict(secrets), idle_seconds, class_data_sharing
        )

    @property
    def key(self) -> str:
        """The same for every resource that would start the same JVM."""
        import pyspark

        secret = hashlib.sha256(json.dumps(sorted(self.secrets.items())).encode()).hexdigest()
        described = json.dumps(
            [
                self.master,
                self.app_name,
                sorted(self.launch_conf.items()),
                secret,
                sys.executable,
                pyspark.__version__,
            ]
        )
        return hashlib.sha1(described.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class HostInfo:
    """A host as its folder describes it."""

    folder: Path
    pid: int
    jvm_pid: int | None
    port: int
    secret: str = field(repr=False)
    started: float
    idle_seconds: int
    master: str
    app_name: str

    @property
    def log(self) -> Path:
        return self.folder / LOG

    @property
    def running(self) -> bool:
        return _alive(self.pid) and (self.jvm_pid is None or _alive(self.jvm_pid))

    def clients(self) -> list[int]:
        """The pids of the processes attached now."""
        return [pid for pid, _ in _clients(self.folder) if _alive(pid)]

    def idle_for(self) -> float:
        """Seconds since a process was last attached (0 while one is)."""
        if self.clients():
            return 0.0
        try:
            return max(0.0, time.time() - (self.folder / ACTIVE).stat().st_mtime)
        except OSError:
            return max(0.0, time.time() - self.started)

    def memory_bytes(self) -> int | None:
        """The JVM's resident memory, from /proc (None where there is no /proc)."""
        pid = self.jvm_pid or self.pid
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None


def hosts(folder: Path | None = None) -> list[HostInfo]:
    """Every host with a state file under `folder` (default `warm_dir()`), running or not."""
    base = folder or warm_dir()
    found = []
    for child in sorted(base.glob("*/" + STATE)) if base.is_dir() else []:
        info = read_state(child.parent)
        if info is not None:
            found.append(info)
    return found


def read_state(folder: Path) -> HostInfo | None:
    """The host of `folder` as its state file says (None: no state file, or a torn one)."""
    try:
        data = json.loads((folder / STATE).read_text())
    except (OSError, ValueError):
        return None
    return HostInfo(
        folder,
        int(data["pid"]),
        data.get("jvm_pid"),
        int(data["port"]),
        str(data["secret"]),
        float(data["started"]),
        int(data["idle_seconds"]),
        str(data.get("master", "")),
        str(data.get("app_name", "")),
    )


def write_state(folder: Path, data: Mapping[str, Any]) -> None:
    """The state file, readable by its owner only (it holds the gateway's secret), replaced
    atomically."""
    temp = folder / (STATE + ".tmp")
    handle = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(handle, "w") as out:
        json.dump(dict(data), out)
    os.replace(temp, folder / STATE)


def locked(
    folder: Path, say: Callable[[str], object] | None = None
) -> AbstractContextManager[None]:
    """The folder's lock: one process at a time starts, attaches to or stops its host."""
    return file_lock(folder / "lock", "another process starting or stopping the warm Spark", say)


def _clients(folder: Path) -> list[tuple[int, Path]]:
    found = []
    directory = folder / CLIENTS
    for entry in directory.iterdir() if directory.is_dir() else []:
        try:
            found.append((int(entry.name.split("-")[0]), entry))
        except ValueError:
            continue
    return found


def prune_clients(folder: Path) -> int:
    """Forget the attached processes that are gone; how many are attached."""
    alive = 0
    for pid, entry in _clients(folder):
        if _alive(pid):
            alive += 1
        else:
            entry.unlink(missing_ok=True)
    return alive


# -- a run's side ---------------------------------------------------------------------------------


class _Attached:
    """This process's attachment: the host, the SparkContext wrapper and the sessions made."""

    def __init__(self, info: HostInfo, context: SparkContext, client: Path, server: Any) -> None:
        self.info = info
        self.context = context
        self.client = client
        self.server = server  # this process's py4j server in the JVM
        self.sessions: list[SparkSession] = []
        self.lock = threading.Lock()


_attached: _Attached | None = None
_process_lock = threading.Lock()


def attached_host() -> HostInfo | None:
    """The host this process is attached to, if any."""
    return _attached.info if _attached is not None else None


def session(spec: WarmSpec, log: logging.Logger) -> SparkSession:
    """A new session of its own on the warm Spark of `spec`, attaching this process (and
    starting the host) if needed; `log` gets a start (info: the command's log file), and a
    restart or a wait (warning: its terminal), one line each.

    Raises:
        SparkUnavailableError: the host could not be started or reached.
    """
    global _attached
    with _process_lock:
        if _attached is None or not _attached.info.running:
            if _attached is not None:  # its host died under this process
                _detach_quietly()
            _attached = _attach(spec, log)
        context = _attached.context
        made = _new_session(context, spec.session_conf)
        _attached.sessions.append(made)
        return made


def release(made: SparkSession) -> None:
    """A run's session is done: what it cached is dropped (the cache is the JVM's, shared by
    every session) and it is forgotten; the process stays attached."""
    attached = _attached
    if attached is None or made not in attached.sessions:
        return
    attached.sessions.remove(made)
    try:
        made.catalog.clearCache()
    except Exception as error:  # the host is gone: nothing is cached any more
        _log.debug(f"clearing the run's cache failed: {error}")


def detach() -> None:
    """End this process's attachment: the gateway connection closes, the host stays up."""
    global _attached
    with _process_lock:
        _detach_quietly()
        _attached = None


def _detach_quietly() -> None:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    attached = _attached
    if attached is None:
        return
    attached.client.unlink(missing_ok=True)
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    # This process's own py4j server in the JVM goes, and its connections with it (closing
    # them from here blocks while a callback thread reads one); the host's stays.
    accumulators = getattr(attached.context, "_accumulatorServer", None)
    for stopping in (attached.server.shutdown, accumulators.shutdown if accumulators else None):
        if stopping is None:
            continue
        try:
            stopping()
        except Exception as error:
            _log.debug(f"detaching from the warm Spark: {error}")


def _attach(spec: WarmSpec, log: logging.Logger) -> _Attached:
    folder = warm_dir() / spec.key
    with locked(folder, log.warning):
        info = read_state(folder)
        if info is not None and not info.running:
            log.warning(
                f"the warm Spark (pid {info.pid}) is gone; starting a new one (log {folder / LOG})"
            )
            (folder / STATE).unlink(missing_ok=True)
            info = None
        if info is None:
            info = _start(folder, spec, log.info)
        client = folder / CLIENTS / f"{os.getpid()}-{int(time.time() * 1000)}"
        client.parent.mkdir(parents=True, exist_ok=True)
        client.write_text(" ".join(sys.argv)[:500])
        (folder / ACTIVE).touch()
    atexit.register(client.unlink, missing_ok=True)
    try:
        context, server = _connect(info)
    except Exception as error:
        client.unlink(missing_ok=True)
        raise SparkUnavailableError(
            f"could not attach to the warm Spark (pid {info.pid}, port {info.port}): {error}. "
            f"Its log: {info.log}. `partlake spark stop --warm` stops it; the next run starts "
            "another."
        ) from error
    return _Attached(info, context, client, server)


def _start(folder: Path, spec: WarmSpec, say: Callable[[str], None]) -> HostInfo:
    """Start the host of `spec` in `folder` and wait until it is ready (the caller holds the
    folder's lock)."""
    say(
        f"starting the warm Spark ({spec.master}), kept up between runs until "
        f"{spec.idle_seconds} s without one; log {folder / LOG}"
    )
    conf = {
        "master": spec.master,
        "app_name": spec.app_name,
        "launch_conf": dict(spec.launch_conf),
        "session_conf": dict(spec.session_conf),  # for its own warm-up
        "idle_seconds": spec.idle_seconds,
        "class_data_sharing": spec.class_data_sharing,
    }
    (folder / CONF).write_text(json.dumps(conf, indent=1))
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    with open(folder / LOG, "a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster_partlake.spark.host", str(folder)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,  # Spark's own files (a warehouse, Derby) land here, not in the project
            env=env,
            start_new_session=True,  # Ctrl-C in the run's terminal does not reach it
            text=True,
        )
    assert proc.stdin is not None
    # The s3a keys reach the host through a pipe, never a file or its command line.
    proc.stdin.write(json.dumps(dict(spec.secrets)) + "\n")
    proc.stdin.close()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        info = read_state(folder)
        if info is not None and info.pid == proc.pid:
            return info
        if proc.poll() is not None:
            raise SparkUnavailableError(
                f"the warm Spark exited with code {proc.returncode} while starting; see "
                f"{folder / LOG}. Set SparkResource(warm=False) to start Spark in each run as "
                "before."
            )
        time.sleep(0.1)
    _terminate(proc.pid)
    raise SparkUnavailableError(
        f"the warm Spark did not start within {START_TIMEOUT_SECONDS:.0f} s; see {folder / LOG}."
    )


def _connect(info: HostInfo) -> tuple[SparkContext, Any]:
    """A SparkContext wrapper of this process over the host's running JVM, through a py4j
    server of this process's own in that JVM; that server (to shut down at the end).

    The JVM's gateway sends every callback (a stream's `foreachBatch`) to the one Python
    process it was last told of: each attached process gets a gateway server of its own, so
    its callbacks come back to it while other processes stream too."""
    from pyspark import SparkContext

    first = _gateway(info.port, info.secret)
    server = first.jvm.org.apache.spark.api.python.Py4JServer(
        first.jvm.org.apache.spark.SparkConf()
    )
    server.start()
    gateway = _gateway(server.getListeningPort(), server.secret())
    jvm = gateway.jvm
    java_context = jvm.org.apache.spark.SparkContext.getOrCreate()
    jsc = jvm.org.apache.spark.api.java.JavaSparkContext.fromSparkContext(java_context)
    context = SparkContext(gateway=gateway, jsc=jsc)
    _confine(context)
    return context, server


def _gateway(port: int, secret: str) -> Any:
    """pyspark's gateway client to the py4j server at `port` (pyspark connects instead of
    launching a JVM when the port is in its environment)."""
    from pyspark.java_gateway import launch_gateway

    saved = {k: os.environ.get(k) for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
    os.environ["PYSPARK_GATEWAY_PORT"] = str(port)
    os.environ["PYSPARK_GATEWAY_SECRET"] = secret
    try:
        return launch_gateway()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _python_path() -> str:
    """Where this process's Python finds its modules: its path, and the folder of every
    top-level module it imported from elsewhere (Dagster imports a code location with its
    folder on the path only while it loads it)."""
    found = [os.path.abspath(p or os.curdir) for p in sys.path]
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if "." in name or not where:
            continue
        folder = os.path.dirname(os.path.abspath(where))
        if os.path.basename(where) == "__init__.py":
            folder = os.path.dirname(folder)
        if folder not in found:
            found.append(folder)
    return os.pathsep.join(found)


def _confine(context: SparkContext) -> None:
    """What a process's SparkContext wrapper does to the whole JVM is kept to the process:
    `stop()` detaches instead of stopping Spark for every run, and cancelling (Ctrl-C, a run
    terminated) interrupts only this process's sessions."""

    def interrupt_own() -> None:
        attached = _attached
        for made in list(attached.sessions) if attached is not None else []:
            try:
                made.interruptAll()
            except Exception as error:
                _log.debug(f"interrupting a session failed: {error}")

    def stop() -> None:
        detach()

    context.cancelAllJobs = interrupt_own  # type: ignore[method-assign]
    context.stop = stop  # type: ignore[method-assign]
    if threading.current_thread() is threading.main_thread():

        def on_interrupt(signum: int, frame: Any) -> None:
            interrupt_own()
            raise KeyboardInterrupt()

        signal.signal(signal.SIGINT, on_interrupt)


def _new_session(context: SparkContext, conf: Mapping[str, str]) -> SparkSession:
    from pyspark.sql import SparkSession

    jvm = context._jvm
    assert jvm is not None
    base = jvm.org.apache.spark.sql.SparkSession.getDefaultSession()
    if base.isDefined():
        java_session = base.get().newSession()
    else:
        java_session = jvm.org.apache.spark.sql.SparkSession.builder().getOrCreate().newSession()
    # Python workers import what this process imports (the code location's modules, for a
    # UDF pickled by reference), from its folders: the JVM's own working directory is the
    # host's. Spark keeps a worker daemon per environment, so a code location gets its own.
    context.environment["PYTHONPATH"] = _python_path()
    made = SparkSession(context, jsparkSession=java_session)
    # As its SparkContext's: stopping a run's session detaches this process; pyspark's own
    # would also clear the JVM's default session, every other process's too.
    made.stop = detach  # type: ignore[method-assign]
    for key, value in conf.items():
        made.conf.set(key, value)
    # The session this process's own `SparkSession.builder.getOrCreate()` returns.
    SparkSession._instantiatedSession = made
    SparkSession._activeSession = made
    return made


# -- the operator's side --------------------------------------------------------------------------


def stop(info: HostInfo, timeout: float = 30.0) -> bool:
    """Stop a host; whether it was running. Its state goes first, under its folder's lock, so
    no process attaches to it on its way out."""
    with locked(info.folder):
        running = info.running
        (info.folder / STATE).unlink(missing_ok=True)
        if running:
            os.kill(info.pid, signal.SIGTERM)
    if running:
        _terminate(info.pid, timeout)
        if info.jvm_pid is not None and _alive(info.jvm_pid):
            _terminate(info.jvm_pid, timeout)
    return running


def _terminate(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after `timeout` s."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def stop_all(folder: Path | None = None) -> list[HostInfo]:
    """Stop every host under `folder` (default `warm_dir()`); those that were running."""
    return [info for info in hosts(folder) if stop(info)]
