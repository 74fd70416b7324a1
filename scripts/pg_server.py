"""A PostgreSQL server on 127.0.0.1 for the demo of PostgreSQL sources (`make demo-sources`):
Debian's `postgresql` binaries (`make test-deps` installs them), a cluster of its own.

    python3 scripts/pg_server.py start [--port 5433] [--state DIR]
    python3 scripts/pg_server.py status | stop

`start` creates the cluster in `--state` (default `.partlake/pg` of the checkout) when it is
new, with the user `partlake` whose password is checked on TCP connections (scram-sha-256; the
demo's password is fixed and local), and the database `shop`; then starts it and waits until it
answers. `stop` is PostgreSQL's fast shutdown by the server's PID. As root, the cluster belongs
to the `postgres` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_STATE = REPO / ".partlake" / "pg"
USER = "partlake"
DATABASE = "shop"
DEMO_PASSWORD = "partlake-demo"  # a local demo server's password, not a credential


def _bindir() -> str:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if not found:
        raise SystemExit(
            "Error: PostgreSQL's server binaries are missing: make test-deps (Debian's postgresql)."
        )
    return os.path.dirname(found[-1])


def _as_owner(data: Path) -> list[str]:
    if os.geteuid() != 0:
        return []
    owner = pwd.getpwnam("postgres")
    os.chown(data, owner.pw_uid, owner.pw_gid)
    return ["runuser", "-u", "postgres", "--"]


def _check_reachable(state: Path) -> None:
    """As root, the cluster runs as `postgres`, which must be able to enter `state`: a folder
    above it closed to other users (root's home, a `mktemp -d` folder) makes initdb fail."""
    if os.geteuid() != 0:
        return
    entered = subprocess.run(
        ["runuser", "-u", "postgres", "--", "test", "-x", str(state)], timeout=60
    )
    if entered.returncode != 0:
        raise SystemExit(
            f"Error: as root, PostgreSQL runs as the user postgres, which cannot enter {state} "
            "(a folder above it is closed to other users); give a --state under a folder "
            "every user may enter, such as /tmp or /srv, or run as another user."
        )


def start(state: Path = DEFAULT_STATE, port: int = 5433, password: str = DEMO_PASSWORD) -> None:
    bindir = _bindir()
    data = state / "data"
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o755)
    _check_reachable(state)
    fresh = not (data / "PG_VERSION").is_file()
    if fresh:
        data.mkdir(mode=0o700, exist_ok=True)
        as_owner = _as_owner(data)
        secret = state / "pwfile"
        secret.write_text(password)
        os.chmod(secret, 0o644)
        try:
            created = subprocess.run(
                [*as_owner, f"{bindir}/initdb", "-D", str(data), "-U", USER,
                 "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={secret}",
                 "--no-sync"],
                capture_output=True, text=True, timeout=180,
            )  # fmt: skip
        finally:
            secret.unlink()
        if created.returncode != 0:
            raise SystemExit(f"Error: initdb failed: {created.stderr.strip()[-500:]}")
    as_owner = _as_owner(data)
    options = f"-h 127.0.0.1 -p {port} -k {data}"
    started = subprocess.run(
        [*as_owner, f"{bindir}/pg_ctl", "-D", str(data), "-o", options, "-l",
         str(data / "server.log"), "-w", "start"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    if started.returncode != 0:
        raise SystemExit(f"Error: PostgreSQL did not start: {started.stderr.strip()[-500:]}")
    (state / "port").write_text(str(port))
    if fresh:
        subprocess.run(
            [f"{bindir}/createdb", "-h", str(data), "-p", str(port), "-U", USER, DATABASE],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    print(f"PostgreSQL running on 127.0.0.1:{port}, database {DATABASE}, user {USER}")


def _pid(state: Path) -> int | None:
    try:
        return int((state / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop(state: Path = DEFAULT_STATE) -> bool:
    pid = _pid(state)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGINT)  # fast shutdown
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/pg_server.py", description=__doc__)
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help="state folder")
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("start", help="start the server (create it first when new)")
    go.add_argument("--port", type=int, default=5433)
    sub.add_parser("stop", help="stop the server")
    sub.add_parser("status", help="say whether it runs (exit 3 if not)")
    sub.add_parser("remove", help="stop the server and delete its cluster")
    args = parser.parse_args(argv)
    if args.command == "start":
        start(args.state, args.port)
    elif args.command == "stop":
        print("PostgreSQL stopped." if stop(args.state) else "No PostgreSQL was running.")
    elif args.command == "remove":
        stop(args.state)
        shutil.rmtree(args.state, ignore_errors=True)
    else:
        pid = _pid(args.state)
        if pid is None:
            print("not running")
            return 3
        print(f"running: pid {pid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
