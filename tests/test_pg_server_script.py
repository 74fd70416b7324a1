"""scripts/pg_server.py as a user runs it, where it must refuse: as root, a `--state` under a
folder the user `postgres` cannot enter (root's home, a `mktemp -d` folder) is one line naming
the folder and the fix, with no traceback and no password file left behind. Its working path
(start, status, stop on 127.0.0.1) is replayed with the Local servers guide
(tests/test_docs_sessions.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.servers import free_port


@pytest.mark.postgres
@pytest.mark.skipif(os.geteuid() != 0, reason="only root's clusters run as another user")
def test_as_root_a_state_folder_postgres_cannot_enter_is_refused(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    state = closed / "pg"
    done = subprocess.run(
        [sys.executable, "scripts/pg_server.py", "--state", str(state), "start"]
        + ["--port", str(free_port())],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith(
        f"Error: as root, PostgreSQL runs as the user postgres, which cannot enter {state} "
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert not (state / "pwfile").exists()
    assert not (state / "data").exists()
