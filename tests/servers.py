"""Real servers for end-to-end tests: `dagster dev` (webserver + daemon), PostgreSQL and an S3
server (s3proxy).

Each listens on 127.0.0.1 only, on a free port, and is stopped by its PID (process group) when
the context manager exits, whatever happened inside.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests

from tests.conftest import REPO_ROOT, run_partlake

BIN = Path(sys.executable).parent
T = TypeVar("T")


def process_gone(pid: int) -> bool:
    """No such process, or only its zombie: a server whose starter (`partlake ... start`) has
    exited is reparented, and stays a zombie until reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] == "Z"
    except FileNotFoundError:
        return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(
    check: Callable[[], T | None], *, timeout: float, interval: float = 2.0, what: str
) -> T:
    """Call `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def ended_runs(
    find: Callable[[], list[dict[str, Any]]], *, timeout: float = 120, what: str
) -> list[dict[str, Any]]:
    """The runs `find` returns (GraphQL run dicts with `endTime`), once there are some and every
    one has ended: a partition is fresh once its commit lands, and its run ends a moment later."""

    def ended() -> list[dict[str, Any]] | None:
        found = find()
        return found if found and all(r["endTime"] is not None for r in found) else None

    return wait_until(ended, timeout=timeout, interval=1, what=what)


def _own_session_default_signals() -> None:
    # A process started from a script may inherit ignored SIGINT/SIGTERM (GOTCHAS: `dagster dev`
    # then outlives its parent); restore the defaults and give it its own process group.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setsid()


def stop_group(proc: subprocess.Popen[Any], grace: float = 30) -> None:
    """Stop the process group `proc` leads: SIGTERM, then SIGKILL after `grace` seconds."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# GraphQL: launch a run as the UI does (`executionParams`: selector, mode, tags, ...).
LAUNCH_RUN = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
  }
}"""


@dataclass(frozen=True)
class DagsterDev:
    """A running `dagster dev` on the example code location."""

    port: int
    env: dict[str, str]
    log: Path
    pid: int = 0  # of `dagster dev`, whose process group holds the webserver, daemon, code server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        reply = requests.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables}, timeout=30
        )
        reply.raise_for_status()
        body = reply.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

    def dagster(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """The real `dagster` CLI against the same instance and workspace."""
        return subprocess.run(
            [str(BIN / "dagster"), *args],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stale(self, module: str = "definitions") -> list[dict[str, Any]]:
        """`partlake plan --json` as a user would run it next to the server."""
        import json

        plan = run_partlake("plan", "-m", module, "--json", env=self.env, timeout=180)
        assert plan.returncode == 0, plan.stderr[-3000:]
        return json.loads(plan.stdout)


@contextmanager
def dagster_dev(
    env: dict[str, str],
    log: Path,
    *,
    timeout: float = 240,
    target: tuple[str, ...] = ("-w", "workspace.yaml"),
    modules: Sequence[str] = (),
) -> Iterator[DagsterDev]:
    """`dagster dev -w workspace.yaml` (webserver, daemon, code server) on a free port;
    `target` another code location (e.g. `("-m", "tests.automation_defs")`); `modules`,
    `dagster dev -m MODULE ...` (those code locations instead)."""
    port = free_port()
    handle = open(log, "w")  # noqa: SIM115 - closed below, after the process group is gone
    location = [a for m in modules for a in ("-m", m)] or list(target)
    proc = subprocess.Popen(
        [str(BIN / "dagster"), "dev", *location, "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        preexec_fn=_own_session_default_signals,
    )
    server = DagsterDev(port, env, log, proc.pid)
    try:

        def loaded() -> bool:
            assert proc.poll() is None, log.read_text()[-4000:]
            try:
                data = server.graphql("{ assetNodes { id } }")
            except (requests.RequestException, AssertionError, ValueError, KeyError):
                return False
            return bool(data["assetNodes"])

        wait_until(loaded, timeout=timeout, what=f"dagster dev on port {port} (log {log})")
        yield server
    finally:
        stop_group(proc)
        handle.close()


def initdb_path() -> str:
    """Debian's PostgreSQL server binaries (package `postgresql`), newest major version."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if not found:
        raise AssertionError(
            "PostgreSQL server binaries are missing: install Debian's `postgresql` package "
            "(scripts/install_test_deps.sh does, and .ci/run calls it)."
        )
    return found[-1]


@dataclass(frozen=True)
class Postgres:
    port: int
    user: str
    db: str
    # How it was started, so that it can be restarted.
    data: str = ""
    pg_ctl: str = ""
    options: str = ""
    as_user: tuple[str, ...] = ()

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: every client connection is cut, the server is back."""
        subprocess.run(
            [*self.as_user, self.pg_ctl, "-D", self.data, "-o", self.options, "-m", "fast",
             "-l", os.path.join(self.data, "server.log"), "-w", "restart"],
            check=True,
            capture_output=True,
            timeout=120,
        )  # fmt: skip

    def dagster_yaml(self) -> str:
        """The `storage:` section of a Dagster instance on this server."""
        return (
            "storage:\n"
            "  postgres:\n"
            "    postgres_db:\n"
            "      hostname: 127.0.0.1\n"
            f"      port: {self.port}\n"
            f"      username: {self.user}\n"
            "      password: unused-with-trust-auth\n"
            f"      db_name: {self.db}\n"
            # SQLAlchemy 2.1 defaults to the psycopg 3 driver; dagster-postgres installs
            # psycopg2.
            "      scheme: postgresql+psycopg2\n"
        )


@contextmanager
def postgres_server(
    settings: Sequence[str] = (), password: str | None = None
) -> Iterator[Postgres]:
    """A throwaway PostgreSQL cluster in a temporary directory, on 127.0.0.1 and a free port.

    PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user.

    Args:
        settings: more server settings, `name=value` (e.g. `log_statement=all`).
        password: the user's password, checked on TCP connections (scram-sha-256); without
            one, every login is trusted.
    """
    initdb = initdb_path()
    bindir = os.path.dirname(initdb)
    base = tempfile.mkdtemp(prefix="partlake-pg-")
    data = os.path.join(base, "data")
    as_user: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chmod(base, 0o755)
        os.mkdir(data, 0o700)
        os.chown(data, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    log = os.path.join(data, "server.log")
    pid_file = os.path.join(data, "postmaster.pid")
    options = " ".join(
        [f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off", *(f"-c {s}" for s in settings)]
    )
    pg_ctl = os.path.join(bindir, "pg_ctl")
    server = Postgres(port, "dagster", "dagster", data, pg_ctl, options, tuple(as_user))
    try:
        auth = ["-A", "trust"]
        if password is not None:
            secret = os.path.join(base, "pwfile")
            with open(secret, "w") as handle:
                handle.write(password)
            os.chmod(secret, 0o644)
            auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={secret}"]
        subprocess.run(
            [*as_user, initdb, "-D", data, "-U", server.user, *auth, "--no-sync"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [
                *as_user,
                pg_ctl,
                "-D",
                data,
                "-o",
                options,
                "-l",
                log,
                "-w",
                "start",
            ],  # fmt: skip
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [
                os.path.join(bindir, "createdb"),
                "-h",
                data if password is not None else "127.0.0.1",
                "-p",
                str(port),
                "-U",
                server.user,
                server.db,
            ],  # fmt: skip
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield server
    finally:
        _stop_postgres(pid_file)
        shutil.rmtree(base, ignore_errors=True)


def _stop_postgres(pid_file: str) -> None:
    try:
        with open(pid_file, encoding="utf-8") as handle:
            pid = int(handle.readline())
    except (OSError, ValueError):
        return
    os.kill(pid, signal.SIGINT)  # "fast" shutdown: disconnect clients, stop
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


@contextmanager
def spark_connect(root: Path, env: dict[str, str]) -> Iterator[str]:
    """A shared Spark Connect server started with `partlake spark start` (as a user would),
    stopped with `partlake spark stop`; yields its `sc://` URL."""
    port = free_port()
    started = run_partlake(
        "spark", "start", "--port", str(port), "--master", "local[2]", "--driver-memory", "1g",
        "--root", str(root), env=env, timeout=300,
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        yield f"sc://127.0.0.1:{port}"
    finally:
        run_partlake("spark", "stop", "--root", str(root), env=env, timeout=120)


@dataclass(frozen=True)
class S3Server:
    """A running s3proxy (`scripts/s3_server.py`): endpoint, keys, its data folder on disk."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str
    bucket: str
    data: Path
    state: Path
    pid: int
    started_seconds: float

    def storage_options(self) -> dict[str, str]:
        """delta-rs' storage options for this server (SparkResource takes the same)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def uri(self, path: str, scheme: str = "s3") -> str:
        """`s3://lake/<path>` (delta-rs) or, with scheme='s3a', what Spark reads."""
        return f"{scheme}://{self.bucket}/{path.lstrip('/')}"

    def client(self) -> Any:
        """A boto3 S3 client on this server (path-style addressing, no retries)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )


S3_SCRIPT = REPO_ROOT / "scripts" / "s3_server.py"


def s3_script(state: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`scripts/s3_server.py --state STATE ARGS...`, as a person runs it."""
    return subprocess.run(
        [sys.executable, str(S3_SCRIPT), "--state", str(state), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def running_s3_server(state: Path, bucket: str = "lake") -> S3Server:
    """The s3proxy that `scripts/s3_server.py --state <state> start` started (`.ci/run` does, and
    stops it by its PID when the tests end); its secret from the state's properties file."""
    import json

    info = json.loads((state / "server.json").read_text())
    lines = (state / "s3proxy.properties").read_text().splitlines()
    secret = next(x.split("=", 1)[1] for x in lines if x.startswith("s3proxy.credential="))
    running = s3_script(state, "status")
    assert running.returncode == 0, f"the S3 server of {state} is not running: {running.stdout}"
    return S3Server(
        endpoint=info["endpoint"],
        access_key=info["access_key"],
        secret_key=secret,
        region=info["region"],
        bucket=bucket,
        data=Path(info["data"]),
        state=state,
        pid=info["pid"],
        started_seconds=info["started_seconds"],
    )


@contextmanager
def s3_server(root: Path, bucket: str = "lake") -> Iterator[S3Server]:
    """s3proxy on 127.0.0.1 and a free port, its data under `root`, with `bucket`; a fresh
    random secret key; stopped by its PID (the script's `stop`) whatever happens inside."""
    import secrets

    state = root / "s3-state"
    state.mkdir(parents=True)
    secret = secrets.token_hex(16)
    port = free_port()
    started = s3_script(
        state, "start", "--port", str(port), "--bucket", bucket, "--access-key", "partlake-test",
        "--secret-key", secret,
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield running_s3_server(state, bucket)
    finally:
        s3_script(state, "stop", timeout=60)


KAFKA_SCRIPT = REPO_ROOT / "scripts" / "kafka_server.py"


@dataclass(frozen=True)
class KafkaBroker:
    """A running Kafka broker (`scripts/kafka_server.py`): its address and state folder."""

    bootstrap_servers: str
    state: Path

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(KAFKA_SCRIPT), "--state", str(self.state), *args],
            capture_output=True,
            text=True,
            timeout=180,
        )

    def stop(self) -> None:
        assert self.script("stop").returncode == 0

    def start(self) -> None:
        """Start it again on the same port, with its topics and messages."""
        port = self.bootstrap_servers.rsplit(":", 1)[1]
        started = self.script("start", "--port", port)
        assert started.returncode == 0, started.stdout + started.stderr

    def create_topic(self, name: str, partitions: int = 2) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=60)

    def produce(self, topic: str, messages: Sequence[tuple[str, str]]) -> None:
        """Send (key, value) messages and wait until the broker has them all."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        for key, value in messages:
            producer.produce(topic, key=key, value=value)
        left = producer.flush(60)
        assert left == 0, f"{left} message(s) not delivered to {self.bootstrap_servers}"


@contextmanager
def kafka_broker(root: Path) -> Iterator[KafkaBroker]:
    """One Kafka broker (KRaft) on 127.0.0.1 and a free port, its log under `root`; stopped by
    its PID whatever happens inside."""
    state = root / "kafka-state"
    state.mkdir(parents=True)
    broker = KafkaBroker(f"127.0.0.1:{free_port()}", state)
    try:
        broker.start()
        yield broker
    finally:
        broker.script("stop")
