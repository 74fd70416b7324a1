"""A user's project for the surface tests: a folder with their code location, a lake, a Dagster
home set up as the docs say, and the real commands run from that folder.

The commands are the virtualenv's `partlake`, `dagster` and `python`, called by their paths with
the virtualenv NOT on the PATH (as from a shell where it is not activated: Spark's workers then
find no pyarrow on the PATH's Python). The package under test is the checkout's: its directory
goes on PYTHONPATH only when the installed package is another checkout's (a worktree).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from tests.conftest import REPO_ROOT, none_first

BIN = Path(sys.executable).parent
# What a shell without the virtualenv activated has on its PATH (Java is found there).
PLAIN_PATH = os.pathsep.join(["/usr/local/bin", "/usr/bin", "/bin"])


@functools.cache
def _installed_elsewhere() -> bool:
    """Whether `import dagster_partlake` outside this checkout finds another checkout's."""
    found = subprocess.run(
        [sys.executable, "-c", "import dagster_partlake; print(dagster_partlake.__file__)"],
        cwd="/",
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return not found.stdout.strip().startswith(str(REPO_ROOT))


@dataclass
class UserProject:
    """The folder a user works in: `code/` holds their modules (the working directory of every
    command), `lake/` is `$PARTLAKE_HOME`, `dagster_home/` is `$DAGSTER_HOME`."""

    root: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for folder in (self.code, self.lake, self.dagster_home):
            folder.mkdir(parents=True, exist_ok=True)
        # As the docs say: the instance's settings in $DAGSTER_HOME/dagster.yaml.
        shutil.copy(REPO_ROOT / "scripts" / "dagster.yaml", self.dagster_home / "dagster.yaml")

    @property
    def code(self) -> Path:
        return self.root / "code"

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    @property
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PARTLAKE_", "DAGSTER_", "PYSPARK_", "VIRTUAL_ENV"))
            and k != "PYTHONPATH"
        }
        # The test session's warm Spark (tests/conftest.py), not the user's machine-wide one.
        env["PARTLAKE_SPARK_WARM_DIR"] = os.environ["PARTLAKE_SPARK_WARM_DIR"]
        env.update(
            PATH=PLAIN_PATH,
            PARTLAKE_HOME=str(self.lake),
            DAGSTER_HOME=str(self.dagster_home),
            PARTLAKE_CACHE_DIR=str(self.root / "state-cache"),
            SPARK_LOCAL_IP="127.0.0.1",
            # The tests' own check: every incremental plan is also planned in full.
            PARTLAKE_CHECK_REPLAN="1",
        )
        if _installed_elsewhere():
            env["PYTHONPATH"] = str(REPO_ROOT)
        env.update(self.extra_env)
        return env

    def write(self, module: str, source: str, **values: object) -> str:
        """Write the module `module` (a name free of clashes with the repository's packages)
        from `source`, dedented, with `{name}` placeholders filled from `values`; its name."""
        text = textwrap.dedent(source)
        for name, value in values.items():
            text = text.replace("{" + name + "}", str(value))
        (self.code / f"{module}.py").write_text(text, encoding="utf-8")
        return module

    def run(
        self, program: str, *args: str, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """`program` (`partlake`, `dagster`, `python`) of the virtualenv, from `code/`."""
        return subprocess.run(
            [str(BIN / program), *args],
            cwd=self.code,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, program: str, *args: str, timeout: float = 600) -> str:
        """`run`, which must succeed; its stdout."""
        proc = self.run(program, *args, timeout=timeout)
        assert proc.returncode == 0, (
            f"{program} {' '.join(args)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
        )
        return proc.stdout

    def start(self, program: str, *args: str, log: Path) -> subprocess.Popen[Any]:
        """`program` in the background (its own process group, SIGINT as a terminal sends it)."""

        def default_signals() -> None:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.setsid()

        handle = log.open("w")
        return subprocess.Popen(
            [str(BIN / program), *args],
            cwd=self.code,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
        )

    def assert_fresh(self, module: str) -> None:
        """`partlake plan` finds nothing to run."""
        out = self.ok("partlake", "plan", "-m", module)
        assert "Everything is fresh" in out, out


def table_rows(where: str | Path, columns: list[str], **options: str) -> list[tuple[Any, ...]]:
    """All rows of a Delta table read by delta-rs (no Spark), sorted; `options`: storage
    options of an object store."""
    table = DeltaTable(str(where), storage_options=options or None)
    rows = table.to_pyarrow_dataset().to_table(columns=columns).to_pylist()
    return sorted((tuple(row[c] for c in columns) for row in rows), key=none_first)


def outcome_lines(out: str) -> list[str]:
    """The `[OK]` / `[FAILED]` / `[SKIPPED]` lines of `partlake run`'s output, sorted."""
    return sorted(line for line in out.splitlines() if line.startswith("["))
