"""A real Apache Kafka broker on 127.0.0.1 for the tests, CI and the demo: Kafka 4.4 in KRaft
mode (one process is broker and controller; no ZooKeeper), from Maven Central.

Needs only Python's standard library and Java 17, so it runs before (and without) partlake:

    python3 scripts/kafka_server.py install            # Kafka's JARs from Maven Central, once
    python3 scripts/kafka_server.py start [--port 9092]
    python3 scripts/kafka_server.py status | stop

`install` copies `org.apache.kafka:kafka_2.13` and its runtime dependencies (with `mvn
dependency:copy-dependencies`) into `.partlake/jars/tools/kafka-<version>/`, apart from Spark's
JARs: the broker's kafka-clients is not the one Spark's Kafka source uses. State lives in
`--state` (default `.partlake/kafka` of the checkout): `data/` (the log), `server.properties`,
`server.pid`, `server.log`, `server.json`. `start` formats a new state folder's storage with a
fresh cluster id, then waits until the port answers (up to `--timeout` s, saying so); `stop`
ends the broker's process group by its PID: SIGTERM (a clean shutdown keeps the log), then
SIGKILL after a grace period; `start` on a stopped state folder starts the same broker again
with its topics and messages.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from server_process import HOST, alive, listening, read_info, read_pid, stop_group

KAFKA = ("org.apache.kafka", "kafka_2.13", "4.4.0")
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_JAR_DIR = REPO / ".partlake" / "jars" / "tools"
DEFAULT_STATE = REPO / ".partlake" / "kafka"
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>partlake</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>
      <version>{version}</version></dependency>
  </dependencies>
</project>
"""


def jar_folder(jar_dir: Path = DEFAULT_JAR_DIR) -> Path:
    return jar_dir / f"kafka-{KAFKA[2]}"


def install(jar_dir: Path = DEFAULT_JAR_DIR) -> Path:
    """Copy Kafka's broker and its runtime dependencies from Maven Central (through Maven's
    local repository) into `jar_folder(jar_dir)`, unless they are there already."""
    target = jar_folder(jar_dir)
    if (target / ".complete").is_file():
        return target
    if shutil.which("mvn") is None:
        raise SystemExit("Error: `mvn` (Apache Maven) is missing: apt-get install maven")
    jar_dir.mkdir(parents=True, exist_ok=True)
    group, artifact, version = KAFKA
    with tempfile.TemporaryDirectory(dir=jar_dir, prefix=".fetch-") as scratch:
        (Path(scratch) / "pom.xml").write_text(
            _POM.format(group=group, artifact=artifact, version=version)
        )
        jars = Path(scratch) / "jars"
        done = subprocess.run(
            ["mvn", "-q", "-B", f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={jars}"],
            cwd=scratch, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise SystemExit(f"Error: mvn could not fetch Kafka from Maven Central: {tail}")
        (jars / ".complete").write_text(f"{group}:{artifact}:{version}\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(jars, target)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _java(jars: Path, main: str, *args: str, heap: str) -> list[str]:
    return [
        "java", f"-Xmx{heap}", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
        "-cp", f"{jars}/*", main, *args,
    ]  # fmt: skip


def _properties(state: Path, port: int, controller_port: int) -> str:
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{HOST}:{controller_port}",
            f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={state / 'data'}",
            "num.partitions=1",
            # One broker: every internal topic has one replica.
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "",
        ]
    )


def start(
    *,
    state: Path = DEFAULT_STATE,
    port: int = 9092,
    jars: Path | None = None,
    timeout: float = 120,
    heap: str = "512m",
) -> dict[str, object]:
    """Start the broker on 127.0.0.1:`port` with its log under `state`/data (formatted first
    when the folder is new); returns what `server.json` holds (bootstrap servers, pid, seconds
    until it answered)."""
    jars = jars or jar_folder()
    if not (jars / ".complete").is_file():
        raise SystemExit(
            f"Error: {jars} is incomplete: run `make install` (kafka_server.py install)."
        )
    running = read_pid(state)
    if running is not None and alive(running):
        raise SystemExit(f"Error: a Kafka broker already runs from {state} (pid {running}).")
    previous = read_info(state)
    if previous and int(previous.get("port", port)) != port:
        port = int(previous["port"])  # a restart keeps the address clients know
    if listening(port):
        raise SystemExit(f"Error: port {port} on {HOST} is in use by another program: --port.")
    controller_port = int(previous.get("controller_port", 0)) or free_port()
    properties = state / "server.properties"
    properties.write_text(_properties(state, port, controller_port))
    log = state / "server.log"
    if not (state / "data" / "meta.properties").is_file():
        formatted = subprocess.run(
            _java(jars, "kafka.tools.StorageTool", "format", "-t", uuid.uuid4().hex[:22],
                  "-c", str(properties), "--ignore-formatted", heap="256m"),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if formatted.returncode != 0:
            tail = (formatted.stdout + formatted.stderr).strip().splitlines()[-5:]
            raise SystemExit(f"Error: formatting the broker's storage failed: {' | '.join(tail)}")
    started = time.monotonic()
    with open(log, "a") as out:
        proc = subprocess.Popen(
            _java(jars, "kafka.Kafka", str(properties), heap=heap),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, stopped as one
        )  # fmt: skip
    (state / "server.pid").write_text(f"{proc.pid}\n")
    print(
        f"waiting for the Kafka broker (pid {proc.pid}) to answer on {HOST}:{port}...",
        file=sys.stderr,
    )
    deadline = started + timeout
    while not listening(port):
        if proc.poll() is not None:
            raise SystemExit(
                f"Error: the Kafka broker exited with code {proc.returncode}; see {log}."
            )
        if time.monotonic() > deadline:
            stop(state)
            raise SystemExit(
                f"Error: the Kafka broker did not answer on {HOST}:{port} in {timeout:.0f} s; "
                f"see {log}."
            )
        time.sleep(0.1)
    info: dict[str, object] = {
        "bootstrap_servers": f"{HOST}:{port}",
        "port": port,
        "controller_port": controller_port,
        "pid": proc.pid,
        "data": str(state / "data"),
        "started_seconds": round(time.monotonic() - started, 2),
    }
    (state / "server.json").write_text(json.dumps(info))
    return info


def stop(state: Path = DEFAULT_STATE, grace: float = 30) -> bool:
    """Stop the server started from `state` by its PID; True if one was running."""
    return stop_group(state, grace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/kafka_server.py", description=__doc__)
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help="state folder")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="fetch Kafka from Maven Central")
    go = sub.add_parser("start", help="start the broker")
    go.add_argument("--port", type=int, default=9092)
    go.add_argument("--timeout", type=float, default=120)
    sub.add_parser("stop", help="stop the broker")
    sub.add_parser("status", help="say whether it runs (exit 3 if not)")
    args = parser.parse_args(argv)
    state: Path = args.state
    if args.command == "install":
        print(install())
    elif args.command == "start":
        state.mkdir(parents=True, exist_ok=True)
        info = start(state=state, port=args.port, timeout=args.timeout)
        print(f"Kafka running: pid {info['pid']}, {info['bootstrap_servers']}, data {info['data']} "
              f"(answered after {info['started_seconds']} s)")  # fmt: skip
    elif args.command == "stop":
        print("Kafka broker stopped." if stop(state) else "No Kafka broker was running.")
    else:
        pid = read_pid(state)
        if pid is None or not alive(pid):
            print("not running")
            return 3
        print(f"running: pid {pid}, {read_info(state).get('bootstrap_servers')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
