"""A real S3 server on 127.0.0.1 for the tests, CI and the demo: s3proxy with its filesystem
backend (objects are files under a data folder), AWS signatures checked, conditional writes
(`If-None-Match: *`) honoured.

Needs only Python's standard library and Java 17, so it runs before (and without) partlake:

    python3 scripts/s3_server.py install           # s3proxy from Maven Central (mvn), once
    python3 scripts/s3_server.py start [--port 9000] [--bucket lake]
    eval "$(python3 scripts/s3_server.py env)"     # AWS_ENDPOINT_URL, keys, region for clients
    python3 scripts/s3_server.py status | stop

State lives in `--state` (default `.partlake/s3` of the checkout): `data/` (one folder per
bucket), `s3proxy.properties` (mode 0600: it holds the secret), `server.pid`, `server.log`.
The demo keys are fixed and local (`partlake` / `partlake-local-secret`); tests pass their own.
`start` waits until the port answers (up to `--timeout` s, saying so) and `stop` ends the
server's process group by its PID: SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from server_process import HOST, alive, listening, read_info, read_pid, stop_group

S3PROXY = ("org.gaul", "s3proxy", "4.1.0", "jar-with-dependencies")
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_JAR_DIR = REPO / ".partlake" / "jars" / "tools"
DEFAULT_STATE = REPO / ".partlake" / "s3"
DEMO_ACCESS_KEY = "partlake"
DEMO_SECRET_KEY = "partlake-local-secret"  # a local test server's key, not a credential
REGION = "us-east-1"


def jar_path(jar_dir: Path = DEFAULT_JAR_DIR) -> Path:
    group, artifact, version, classifier = S3PROXY
    return jar_dir / f"{artifact}-{version}-{classifier}.jar"


def install(jar_dir: Path = DEFAULT_JAR_DIR) -> Path:
    """Copy s3proxy's self-contained JAR from Maven Central (through Maven's local repository)
    into `jar_dir`, unless it is there already."""
    target = jar_path(jar_dir)
    if target.is_file():
        return target
    if shutil.which("mvn") is None:
        raise SystemExit("Error: `mvn` (Apache Maven) is missing: apt-get install maven")
    jar_dir.mkdir(parents=True, exist_ok=True)
    group, artifact, version, classifier = S3PROXY
    with tempfile.TemporaryDirectory(dir=jar_dir, prefix=".fetch-") as scratch:
        done = subprocess.run(
            ["mvn", "-q", "-B", f"{MAVEN_DEPENDENCY_PLUGIN}:copy",
             f"-Dartifact={group}:{artifact}:{version}:jar:{classifier}",
             f"-DoutputDirectory={scratch}"],
            cwd=scratch, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise SystemExit(f"Error: mvn could not fetch s3proxy from Maven Central: {tail}")
        os.replace(Path(scratch) / target.name, target)
    return target


def start(
    *,
    state: Path = DEFAULT_STATE,
    port: int = 9000,
    buckets: list[str] | None = None,
    access_key: str = DEMO_ACCESS_KEY,
    secret_key: str = DEMO_SECRET_KEY,
    jar: Path | None = None,
    timeout: float = 120,
    full_jit: bool = False,
) -> dict[str, object]:
    """Start s3proxy on 127.0.0.1:`port`, storing under `state`/data, with `buckets` created;
    returns what `env` prints (endpoint, keys, region, pid, seconds until it answered). The JVM
    compiles with C1 only (starts faster, for tests) unless `full_jit` (for benchmarks)."""
    jar = jar or jar_path()
    if not jar.is_file():
        raise SystemExit(f"Error: {jar} is missing: run `make test-deps` (s3_server.py install).")
    running = read_pid(state)
    if running is not None and alive(running):
        raise SystemExit(f"Error: an S3 server already runs from {state} (pid {running}).")
    if listening(port):
        raise SystemExit(f"Error: port {port} on {HOST} is in use by another program: --port.")
    data = state / "data"
    for bucket in buckets or ["lake"]:
        # The filesystem backend keeps a bucket as a folder: no client needed to create one.
        (data / bucket).mkdir(parents=True, exist_ok=True)
    properties = state / "s3proxy.properties"
    fd = os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(
            f"s3proxy.endpoint=http://{HOST}:{port}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={access_key}\n"
            f"s3proxy.credential={secret_key}\n"
            "jclouds.provider=filesystem-nio2\n"
            f"jclouds.filesystem.basedir={data}\n"
        )
    log = state / "server.log"
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["java", "-Xmx512m", *([] if full_jit else ["-XX:TieredStopAtLevel=1"]),
             "-jar", str(jar), "--properties", str(properties)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, stopped as one
        )  # fmt: skip
    (state / "server.pid").write_text(f"{proc.pid}\n")
    print(f"waiting for s3proxy (pid {proc.pid}) to answer on {HOST}:{port}...", file=sys.stderr)
    deadline = started + timeout
    while not listening(port):
        if proc.poll() is not None:
            raise SystemExit(f"Error: s3proxy exited with code {proc.returncode}; see {log}.")
        if time.monotonic() > deadline:
            stop(state)
            raise SystemExit(
                f"Error: s3proxy did not answer on {HOST}:{port} in {timeout:.0f} s; see {log}."
            )
        time.sleep(0.1)
    info: dict[str, object] = {
        "endpoint": f"http://{HOST}:{port}",
        "port": port,
        "pid": proc.pid,
        "region": REGION,
        "access_key": access_key,
        "data": str(data),
        "started_seconds": round(time.monotonic() - started, 2),
    }
    (state / "server.json").write_text(json.dumps(info))
    return info


def env_lines(state: Path = DEFAULT_STATE) -> list[str]:
    """`export` lines for the AWS settings delta-rs, Spark (through partlake) and boto3 read."""
    info = read_info(state)
    try:
        lines = (state / "s3proxy.properties").read_text().splitlines()
    except OSError:
        lines = []
    secret = [line.split("=", 1)[1] for line in lines if line.startswith("s3proxy.credential=")]
    if not info or not secret:
        raise SystemExit(f"Error: no S3 server was started from {state}.")
    values = {
        "AWS_ENDPOINT_URL": info["endpoint"],
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": info["region"],
        "AWS_ACCESS_KEY_ID": info["access_key"],
        "AWS_SECRET_ACCESS_KEY": secret[0],
    }
    return [f"export {key}={value}" for key, value in values.items()]


def stop(state: Path = DEFAULT_STATE, grace: float = 20) -> bool:
    """Stop the server started from `state` by its PID; True if one was running."""
    return stop_group(state, grace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/s3_server.py", description=__doc__)
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help="state folder")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="fetch s3proxy from Maven Central")
    go = sub.add_parser("start", help="start the server")
    go.add_argument("--port", type=int, default=9000)
    go.add_argument("--bucket", action="append", help="bucket to create (default: lake)")
    go.add_argument("--access-key", default=DEMO_ACCESS_KEY)
    go.add_argument("--secret-key", default=os.environ.get("PARTLAKE_S3_SECRET", DEMO_SECRET_KEY))
    go.add_argument("--timeout", type=float, default=120)
    go.add_argument(
        "--full-jit", action="store_true", help="the JVM's full JIT (benchmarks), not C1 only"
    )
    sub.add_parser("stop", help="stop the server")
    sub.add_parser("status", help="say whether it runs (exit 3 if not)")
    sub.add_parser("env", help="print export lines for AWS clients")
    args = parser.parse_args(argv)
    state: Path = args.state
    if args.command == "install":
        print(install())
    elif args.command == "start":
        state.mkdir(parents=True, exist_ok=True)
        info = start(
            state=state, port=args.port, buckets=args.bucket, access_key=args.access_key,
            secret_key=args.secret_key, timeout=args.timeout, full_jit=args.full_jit,
        )  # fmt: skip
        print(f"s3proxy running: pid {info['pid']}, {info['endpoint']}, data {info['data']} "
              f"(answered after {info['started_seconds']} s)")  # fmt: skip
    elif args.command == "stop":
        print("S3 server stopped." if stop(state) else "No S3 server was running.")
    elif args.command == "status":
        pid = read_pid(state)
        if pid is None or not alive(pid):
            print("not running")
            return 3
        print(f"running: pid {pid}, {read_info(state).get('endpoint')}")
    else:
        print("\n".join(env_lines(state)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
