"""The no-op `partlake run` answered from the last plan (`dagster_partlake.cli.shortcut`).

Through the real CLI in subprocesses, on a copy of the example code location over a filled lake:
a no-op imports neither Dagster nor the code location and prints exactly what the full path
prints; and it plans again once anything the plan depends on moved: a code file, a SQL model, a
new model file, the environment, a new time window, a `partlake run` process registered in the
Dagster instance, a source table's commit. Whether a process planned is read from its import
profile (`-X importtime`): planning imports the code location, `definitions.assets` with it.
"""

from __future__ import annotations

import datetime as dt
import marshal
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from dagster_partlake.cli.output import NOTHING_TO_RUN, PLAN_FRESH
from dagster_partlake.layout import RUN_REGISTRY_DIR, commit_file
from tests.conftest import REPO_ROOT, cli_env
from tests.test_cli import imported_modules

MODULE = "definitions"
CODE_LOCATION = {"dagster", "pyspark", "definitions", "definitions.assets"}


@dataclass(frozen=True)
class Answer:
    stdout: str
    stderr: str  # without the import profile
    returncode: int
    imported: set[str]

    @property
    def planned(self) -> bool:
        """Whether the process imported the code location (the full path). (The profile
        names a package's modules, not always the package.)"""
        return f"{MODULE}.assets" in self.imported


@dataclass(frozen=True)
class Code:
    """A copy of the example code location in `folder` (the tests change its files), run by
    the CLI with `env`."""

    folder: Path
    env: dict[str, str]
    lake: Path

    def partlake(self, *args: str, **extra_env: str) -> Answer:
        """`partlake ARGS -m definitions -v` (-v: the whole import profile on stderr)."""
        done = subprocess.run(
            [sys.executable, "-m", "dagster_partlake.cli", *args, "-m", MODULE, "-v"],
            cwd=self.folder,
            env={**self.env, **extra_env},
            capture_output=True,
            text=True,
            timeout=600,
        )
        stderr = "".join(
            line for line in done.stderr.splitlines(True) if not line.startswith("import time:")
        )
        return Answer(done.stdout, stderr, done.returncode, imported_modules(done.stderr))

    def edit(self, relative: str, old: str, new: str) -> str:
        """Replace `old` by `new` in a file of the copy; its text before."""
        path = self.folder / MODULE / relative
        before = path.read_text()
        assert old in before
        path.write_text(before.replace(old, new))
        return before

    def kept(self) -> Path:
        (found,) = Path(self.env["PARTLAKE_CACHE_DIR"]).glob("shortcut-*.marshal")
        return found


@pytest.fixture
def code(example: object, lake: Path, tmp_path: Path) -> Code:
    folder = tmp_path / "code"
    shutil.copytree(
        REPO_ROOT / MODULE, folder / MODULE, ignore=shutil.ignore_patterns("__pycache__")
    )
    env = cli_env(tmp_path, lake)
    # The replan check plans in full after every answer from the shortcut (see below).
    env.pop("PARTLAKE_CHECK_REPLAN", None)
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    return Code(folder, env, lake)


def fresh_again(code: Code) -> None:
    """The full path finds everything fresh and keeps the shortcut; the next process answers
    from it."""
    planned = code.partlake("plan")
    assert planned.planned and planned.stdout == PLAN_FRESH + "\n", planned.stdout
    answered = code.partlake("plan")
    assert not answered.planned and answered.stdout == PLAN_FRESH + "\n", answered.stderr


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_a_no_op_run_is_answered_without_importing_the_code_location(code: Code) -> None:
    first = code.partlake("run")
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.planned and first.stdout == NOTHING_TO_RUN + "\n"

    again = code.partlake("run")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == NOTHING_TO_RUN + "\n"
    assert sorted(again.imported & CODE_LOCATION) == []
    assert "dagster_partlake.cli.shortcut" in again.imported

    # Byte for byte what the full path says, for a run, a plan, its JSON and a selection.
    for args in (
        ["run"],
        ["run", "--select", "clean_events,marts/user_activity"],
        ["plan"],
        ["plan", "--json"],
        ["plan", "--select", "monthly_region_stats"],
    ):
        answered = code.partlake(*args)
        full = code.partlake(*args, PARTLAKE_PLAN_SHORTCUT="0")
        assert not answered.planned and full.planned, args
        assert (answered.stdout, answered.stderr, answered.returncode) == (
            full.stdout,
            full.stderr,
            full.returncode,
        ), args
    # An unknown asset is the full path's error to name.
    unknown = code.partlake("run", "--select", "no_such_asset")
    assert unknown.planned and unknown.returncode == 1
    assert "unknown asset(s) no_such_asset" in unknown.stderr


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_a_changed_code_file_sql_model_or_new_model_file_plans_again(code: Code) -> None:
    fresh_again(code)

    # A code file: the lakehouse assets' code version.
    before = code.edit("assets.py", '"code_version": "1",', '"code_version": "2",')
    changed = code.partlake("plan")
    assert changed.planned and "code_changed" in changed.stdout, changed.stdout
    assert "clean_events: 4 stale (code_changed 4)" in changed.stdout
    (code.folder / MODULE / "assets.py").write_text(before)
    fresh_again(code)  # the same text again, but a file that moved: planned once more

    # A SQL model file: its query.
    before = code.edit("sql/marts/monthly_region_summary.sql", "sum(events) as", "max(events) as")
    changed = code.partlake("plan")
    assert changed.planned, changed.stdout
    assert "marts/monthly_region_summary: 2 stale (code_changed 2)" in changed.stdout
    (code.folder / MODULE / "sql/marts/monthly_region_summary.sql").write_text(before)
    fresh_again(code)

    # A new model file in a folder the code location lists.
    new_model = code.folder / MODULE / "sql/marts/region_events.sql"
    new_model.write_text(
        "-- @partitions: daily_region\nselect date, region, events from daily_region_stats\n"
    )
    added = code.partlake("plan")
    assert added.planned and "marts/region_events: " in added.stdout, added.stderr[-3000:]
    assert "missing" in added.stdout
    new_model.unlink()
    fresh_again(code)


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_the_environment_time_instance_or_a_source_commit_plan_again(code: Code) -> None:
    from definitions.ingest import write_partition

    fresh_again(code)

    # Another environment (any variable: the code location may read it).
    other = code.partlake("plan", PARTLAKE_SOME_SETTING="1")
    assert other.planned and other.stdout == PLAN_FRESH + "\n"
    fresh_again(code)

    # A new time window began since the plan (here: the kept one says so).
    path = code.kept()
    data = marshal.loads(path.read_bytes())
    assert data["valid_until"] > time.time()  # daily partitions: the next midnight (UTC)
    data["valid_until"] = time.time() - 1
    path.write_bytes(marshal.dumps(data))
    assert code.partlake("plan").planned
    assert not code.partlake("plan").planned  # kept anew, until the next window

    # A `partlake run` process registered in the Dagster instance (running, or dead with runs
    # to mark failed): the full path looks.
    registry = Path(code.env["DAGSTER_HOME"]) / RUN_REGISTRY_DIR
    registry.mkdir()
    (registry / "1-gone.json").write_text("{}")
    registered = code.partlake("run")
    assert registered.planned and registered.stdout == NOTHING_TO_RUN + "\n"
    (registry / "1-gone.json").unlink()
    assert not code.partlake("run").planned

    # A source table's new commit: the plan is no longer the kept one.
    write_partition(dt.date(2024, 1, 2), "eu", 200, seed=7, root=str(code.lake))
    rewritten = code.partlake("plan")
    assert rewritten.planned
    assert "clean_events: 1 stale (upstream_changed 1)" in rewritten.stdout, rewritten.stdout


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_the_replan_check_fails_loudly_when_the_shortcut_is_wrong(code: Code) -> None:
    """With PARTLAKE_CHECK_REPLAN (the tests), every answer from the shortcut is checked by
    the full path: a kept shortcut that missed a commit (forged here) fails the command."""
    from definitions.ingest import write_partition

    env = {"PARTLAKE_CHECK_REPLAN": "1"}
    assert code.partlake("run", **env).stdout == NOTHING_TO_RUN + "\n"
    checked = code.partlake("run", **env)  # answered, then planned in full: the same
    assert checked.planned and checked.returncode == 0 and checked.stdout == NOTHING_TO_RUN + "\n"

    table = write_partition(dt.date(2024, 1, 1), "us", 200, seed=3, root=str(code.lake))
    path = code.kept()
    data = marshal.loads(path.read_bytes())
    (entry,) = [e for e in data["tables"] if Path(e[0]) == Path(table)]
    entry[1] += 1  # the new commit, as if the plan had seen it
    stat = Path(commit_file(table, entry[1])).stat()
    entry[2:] = [stat.st_size, stat.st_mtime_ns]
    path.write_bytes(marshal.dumps(data))
    wrong = code.partlake("run", **env)
    assert wrong.returncode != 0 and wrong.stdout == ""
    assert "AssertionError: the plan shortcut answered 'fresh'" in wrong.stderr


@pytest.mark.dagster_cli
def test_a_code_location_with_dynamic_partitions_keeps_no_shortcut(tmp_path: Path) -> None:
    """Dynamic partition keys live in the Dagster instance: such a plan is never kept."""
    env = cli_env(tmp_path, tmp_path / "lake")
    done = subprocess.run(
        [sys.executable, "-m", "dagster_partlake.cli", "plan", "-m", "tests.root_defs"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "missing" in done.stdout
    assert list(Path(env["PARTLAKE_CACHE_DIR"]).glob("shortcut-*")) == []


def test_a_kept_plan_holds_until_the_next_time_window_begins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A time partitions definition gains a partition when a window begins: the kept plan
    holds until the first such moment of any of them (`shortcut._next_window`)."""
    import dagster as dg

    from dagster_partlake.cli.shortcut import _next_window
    from dagster_partlake.planning.graph import LakeGraph

    monkeypatch.setenv("PARTLAKE_HOME", str(tmp_path))
    daily_region = dg.MultiPartitionsDefinition(
        {
            "date": dg.DailyPartitionsDefinition(start_date="2024-01-01"),
            "region": dg.StaticPartitionsDefinition(["eu", "us"]),
        }
    )

    @dg.asset(partitions_def=daily_region)
    def daily() -> None: ...

    @dg.asset(partitions_def=dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00"))
    def hourly() -> None: ...

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["a"]))
    def static() -> None: ...

    @dg.asset(
        partitions_def=dg.DailyPartitionsDefinition(
            start_date="2024-01-01", exclusions=["0 0 * * 6"]
        )
    )
    def weekdays() -> None: ...

    def graph(*assets: dg.AssetsDefinition) -> LakeGraph:
        return LakeGraph(dg.Definitions(assets=list(assets)))

    now = dt.datetime(2024, 3, 5, 10, 20, tzinfo=dt.UTC).timestamp()
    at = dt.datetime(2024, 3, 6, tzinfo=dt.UTC).timestamp()
    assert _next_window(graph(daily, static), now) == (True, at)
    at = dt.datetime(2024, 3, 5, 11, tzinfo=dt.UTC).timestamp()
    assert _next_window(graph(daily, hourly), now) == (True, at)
    assert _next_window(graph(static), now) == (True, None)
    assert _next_window(graph(daily, weekdays), now) == (False, None)


def test_every_command_is_listed_and_loads_its_module() -> None:
    """`main` imports a command's module on first use: each module adds the command it is
    listed under."""
    import click
    from click.testing import CliRunner

    from dagster_partlake.cli import main
    from dagster_partlake.cli.main import COMMAND_MODULES

    shown = CliRunner().invoke(main, ["--help"])
    assert shown.exit_code == 0, shown.output
    for name in COMMAND_MODULES:
        assert f"  {name} " in shown.output
        assert main.get_command(click.Context(main), name) is not None
        assert main.commands[name].name == name
