"""The Python code of README.md and docs/ runs.

Every ```python block is marked on the line right before its fence:

- `<!-- run: NAME -->`: run here as a user's code location. The scenario NAME writes the block as
  a module into a temporary folder (`my_project/...`) with the small lake it needs, runs the real
  commands in subprocesses (`partlake run -m ...`, `dagster definitions validate -m ...`,
  `python -m ...`, or the docs' own shell block, marked the same way), checks the rows with
  deltalake and that `partlake plan` then finds nothing stale. Blocks of one NAME are the same
  code (the README's example and Your code location's).
- `<!-- fragment: PATH -->`: a part of PATH, a code location or test module the test suite runs.
  PATH must hold each significant line of the block (comments, blank lines and `...` aside;
  whitespace and a trailing comment do not count; an import line holds when PATH imports those
  names from that module), so the fragment cannot drift from tested code.

One workspace (a folder holding `my_project/` and a lake with a few partitions of `raw_events`) is
shared by the scenarios over the README's assets; the others get their own folder. Each command
that runs assets starts its own local Spark, as a user's would.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.conftest import REPO_ROOT, subprocess_env

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!-- (run|fragment|session): (.+) -->$")
FENCE = re.compile(r"^```(\w*)\s*$")
BIN = Path(sys.executable).parent
# Dagster's words when $DAGSTER_HOME has no dagster.yaml.
NO_CONFIG_WARNING = "No dagster instance configuration file"
# The run scenarios of this module, by the name their blocks are marked with.
SCENARIOS = {
    "code-location",  # README, Your code location: my_project/definitions.py
    "code-location-shell",  # Your code location: the setup and the commands, in bash
    "code-location-plan",  # Your code location: plan(defs) from Python
    "monthly",  # Your code location: the Spark session in an asset, monthly keys
    "quality-gates",  # Quality gates: constraints and audits as dicts
    "maintenance",  # Maintenance: the job in a code location
    "maintenance-config",  # Maintenance: its run config (YAML)
    "maintenance-command",  # Maintenance: `dagster job execute` with that config
    "delta-spark",  # delta-spark: Spark's Delta reading a partlake table
    "streaming",  # Streaming assets: a landing folder streamed, a batch asset downstream
    "object-stores",  # Object stores: the storage options, on the S3 server
}
RAW_PARTITIONS = [("2024-01-01", "eu"), ("2024-01-02", "us")]
ROWS = 50


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    kind: str | None  # "run", "fragment", "session" or None (unmarked)
    value: str | None
    text: str

    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def code_blocks() -> list[Block]:
    """Every fenced block of the README and the docs, with the marker right before it."""
    blocks = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            opening = FENCE.match(lines[i])
            if not opening:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            marker = MARKER.match(lines[i - 1]) if i else None
            blocks.append(
                Block(
                    path,
                    i + 1,
                    opening.group(1),
                    marker.group(1) if marker else None,
                    marker.group(2).strip() if marker else None,
                    "\n".join(lines[i + 1 : end]) + "\n",
                )
            )
            i = end + 1
    return blocks


def run_block(name: str) -> str:
    """The code of the blocks marked `run: name` (one text: they must agree)."""
    texts = {b.text for b in code_blocks() if b.kind == "run" and b.value == name}
    assert len(texts) == 1, f"the blocks marked run: {name} differ (or there is none)"
    return texts.pop()


# Fragments.


def significant_lines(text: str) -> list[str]:
    """The lines of `text` that carry code: whitespace collapsed, a trailing `  # comment`
    dropped; blank lines, comments and `...` left out."""
    found = []
    for raw in text.splitlines():
        line = re.sub(r"\s+#\s.*$", "", raw).strip()
        line = re.sub(r"\s+", " ", line)
        if line and not line.startswith("#") and line != "...":
            found.append(line)
    return found


def imported_names(tree: ast.Module) -> set[tuple[str, str, str]]:
    """(module, name, bound as) of every import of a module."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.update((node.module, a.name, a.asname or a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            found.update((a.name, "", a.asname or a.name) for a in node.names)
    return found


def missing_lines(fragment: str, source: str) -> list[str]:
    """The significant lines of `fragment` that `source` does not hold."""
    held = set(significant_lines(source))
    imports = imported_names(ast.parse(source))
    missing = []
    for line in significant_lines(fragment):
        if line.startswith(("import ", "from ")):
            try:
                statement = ast.parse(line)
            except SyntaxError:
                missing.append(line)
                continue
            if not imported_names(statement) <= imports:
                missing.append(line)
        elif line not in held:
            missing.append(line)
    return missing


def test_every_python_block_is_run_or_a_fragment() -> None:
    blocks = code_blocks()
    python = [b for b in blocks if b.lang == "python"]
    assert len(python) >= 10, "the docs' Python blocks were not found"
    unmarked = [b.where() for b in python if b.kind not in ("run", "fragment")]
    assert not unmarked, (
        "each ```python block needs `<!-- run: NAME -->` or `<!-- fragment: PATH -->` on the "
        "line before its fence (see this module's docstring): " + ", ".join(unmarked)
    )
    runs = [b for b in blocks if b.kind == "run"]
    unknown = sorted({f"{b.where()} ({b.value})" for b in runs if b.value not in SCENARIOS})
    assert not unknown, f"run markers naming no scenario of this module: {unknown}"
    unused = SCENARIOS - {b.value for b in runs}
    assert not unused, f"scenarios whose docs block is gone: {sorted(unused)}"
    for name in SCENARIOS:
        run_block(name)


def test_fragments_are_in_the_files_that_run_them() -> None:
    fragments = [b for b in code_blocks() if b.kind == "fragment"]
    assert fragments
    problems = []
    for block in fragments:
        assert block.value is not None
        target = REPO_ROOT / block.value
        if not block.value.startswith(("tests/", "definitions/")) or not target.is_file():
            problems.append(
                f"{block.where()}: {block.value} is not a file of tests/ or the example"
            )
            continue
        missing = missing_lines(block.text, target.read_text(encoding="utf-8"))
        if missing:
            problems.append(f"{block.where()}: not in {block.value}: {missing}")
    assert not problems, "\n".join(problems)


def test_a_fragment_that_drifted_is_found() -> None:
    source = (
        'from dagster import asset\n\n\n@asset(code_version="1")\ndef a(b):  # why\n    return b\n'
    )
    assert missing_lines('@asset(code_version="1")\ndef a(b):\n    ...\n', source) == []
    assert missing_lines("from dagster import asset, op\n", source) == [
        "from dagster import asset, op"
    ]
    assert missing_lines('@asset(code_version="2")\n', source) == ['@asset(code_version="2")']


# The runs.


@dataclass
class Workspace:
    """A user's folder: `my_project/` and the lake, with the environment its commands run in."""

    root: Path
    env: dict[str, str]

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """A command of the virtualenv (`partlake`, `dagster`, `python`) in the folder."""
        command = [str(BIN / args[0]) if (BIN / args[0]).exists() else args[0], *args[1:]]
        return subprocess.run(
            command,
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def bash(self, script: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """A shell block of the docs, as a user runs it (stdout and stderr together)."""
        return subprocess.run(
            ["bash", "-e", "-c", script],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )

    def rows(self, *parts: str, version: int | None = None) -> list[dict[str, object]]:
        table = DeltaTable(str(self.lake.joinpath("warehouse", *parts)), version=version)
        return table.to_pyarrow_table().to_pylist()


def make_workspace(root: Path) -> Workspace:
    root.mkdir(parents=True, exist_ok=True)
    (root / "my_project").mkdir(exist_ok=True)
    (root / "my_project" / "__init__.py").write_text("", encoding="utf-8")
    env = subprocess_env(
        PARTLAKE_HOME=str(root / "lake"),
        PARTLAKE_CACHE_DIR=str(root / "cache"),
        SPARK_LOCAL_IP="127.0.0.1",
        PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
    )
    env["PYTHONPATH"] = os.pathsep.join([str(root), env["PYTHONPATH"]])
    for name in ("DAGSTER_HOME", "PARTLAKE_LAKE_ROOT", "PARTLAKE_SPARK_REMOTE"):
        env.pop(name, None)
    home = root / "dagster_home"  # the docs' setup makes it; commands other than its own need it
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    env["DAGSTER_HOME"] = str(home)
    return Workspace(root, env)


def write_raw_events(lake: Path, partitions: list[tuple[str, str]], seed: int = 0) -> None:
    """An upstream system writes partitions of raw_events (the example's schema, delta-rs)."""
    from definitions.ingest import write_partition

    for day, region in partitions:
        write_partition(dt.date.fromisoformat(day), region, ROWS, seed=seed, root=str(lake))


def event_ids(rows: list[dict[str, object]], *, with_user: bool = False) -> set[object]:
    return {r["event_id"] for r in rows if not with_user or r["user_id"] is not None}


def assert_fresh(workspace: Workspace, module: str) -> None:
    plan = workspace.run("partlake", "plan", "-m", module)
    assert plan.returncode == 0, plan.stdout + plan.stderr[-3000:]
    assert "Everything is fresh" in plan.stdout, plan.stdout


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """The README's code location as `my_project/definitions.py`, over a lake holding two
    partitions of raw_events."""
    space = make_workspace(tmp_path_factory.mktemp("docs-code") / "user")
    space.write("my_project/definitions.py", run_block("code-location"))
    space.write("plan_check.py", run_block("code-location-plan"))
    write_raw_events(space.lake, RAW_PARTITIONS)
    return space


@dataclass
class Filled:
    before: subprocess.CompletedProcess[str]  # plan(defs) before the runs
    shell: subprocess.CompletedProcess[str]  # the docs' setup and commands
    after: subprocess.CompletedProcess[str]  # plan(defs) after them


@pytest.fixture(scope="module")
def filled(workspace: Workspace) -> Filled:
    """Your code location's steps: `plan(defs)`, the shell block (setup, `partlake plan`,
    `partlake run`, `dagster asset materialize`), `plan(defs)` again."""
    before = workspace.run("python", "plan_check.py")
    shell = workspace.bash(run_block("code-location-shell"))
    after = workspace.run("python", "plan_check.py")
    return Filled(before, shell, after)


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_your_code_location_runs_as_the_docs_say(workspace: Workspace, filled: Filled) -> None:
    shell = filled.shell
    assert shell.returncode == 0, shell.stdout[-6000:]
    assert "2 stale asset partition(s) in 1 asset(s)" in shell.stdout
    assert "2 asset partition(s) refreshed, 0 failed." in shell.stdout
    assert "RUN_SUCCESS" in shell.stdout  # dagster asset materialize
    raw = workspace.rows("raw_events")
    assert event_ids(workspace.rows("clean_events")) == event_ids(raw, with_user=True)
    assert {(str(r["date"]), r["region"]) for r in workspace.rows("clean_events")} == {
        (d, r) for d, r in RAW_PARTITIONS
    }
    assert_fresh(workspace, "my_project.definitions")


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_the_documented_setup_shows_no_dagster_instance_warning(
    workspace: Workspace, filled: Filled
) -> None:
    """`dagster asset materialize` and `partlake` under the docs' `$DAGSTER_HOME` (its
    dagster.yaml) do not print Dagster's warning, nor does partlake's log file; without the
    file, Dagster does."""
    assert filled.shell.returncode == 0, filled.shell.stdout[-3000:]
    assert "Materialized value clean_events" in filled.shell.stdout
    assert NO_CONFIG_WARNING not in filled.shell.stdout
    # partlake sends the engines' output to its log file: not there either.
    logs = sorted((workspace.lake / "logs").glob("partlake-run-*.log"))
    assert logs, "partlake run kept no log"
    assert all(NO_CONFIG_WARNING not in log.read_text(encoding="utf-8") for log in logs)
    bare = workspace.root / "bare_home"
    bare.mkdir(exist_ok=True)
    without = subprocess.run(
        [str(BIN / "dagster"), "instance", "info"],
        cwd=workspace.root,
        env={**workspace.env, "DAGSTER_HOME": str(bare)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert NO_CONFIG_WARNING in without.stdout + without.stderr


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_plan_from_python(filled: Filled) -> None:
    before = filled.before
    assert before.returncode == 0, before.stderr[-3000:]
    assert before.stdout.splitlines() == [
        "clean_events 2024-01-01|eu missing ('raw_events[2024-01-01|eu]',)",
        "clean_events 2024-01-02|us missing ('raw_events[2024-01-02|us]',)",
        "1 ('clean_events',) 2024-01-01|eu ()",
        "2 ('clean_events',) 2024-01-02|us ()",
    ]
    assert filled.after.returncode == 0, filled.after.stderr[-3000:]
    assert filled.after.stdout == ""  # nothing stale after the runs


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_spark_session_in_an_asset_and_monthly_keys(workspace: Workspace, filled: Filled) -> None:
    workspace.write("my_project/monthly.py", run_block("monthly"))
    done = workspace.run("partlake", "run", "-m", "my_project.monthly")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "[OK] monthly_users 2024-01|eu (missing" in done.stdout
    assert "[OK] monthly_users 2024-01|us (missing" in done.stdout
    names = {r["region"]: r["name"] for r in workspace.rows("region_names")}
    assert names == {"eu": "Europe", "us": "United States", "apac": "Asia-Pacific"}
    raw = workspace.rows("raw_events")
    expected = {
        (region, len({r["user_id"] for r in raw if r["region"] == region and r["user_id"]}))
        for region in ("eu", "us")
    }
    monthly = workspace.rows("monthly_users")
    assert {(r["region"], r["users"]) for r in monthly} == expected
    assert {r["month"] for r in monthly} == {dt.date(2024, 1, 1)}
    assert {r["name"] for r in monthly} == {"Europe", "United States"}
    assert_fresh(workspace, "my_project.monthly")


@pytest.mark.spark
@pytest.mark.dagster_cli  # the filled lake
def test_spark_reads_the_table_with_delta(workspace: Workspace, filled: Filled) -> None:
    workspace.write("read_delta.py", run_block("delta-spark"))
    done = workspace.run("python", "read_delta.py")
    assert done.returncode == 0, done.stderr[-3000:]
    now = len(workspace.rows("clean_events"))
    first = len(workspace.rows("clean_events", version=1))
    assert f"{now} {first}" in done.stdout.splitlines()
    assert "operation" in done.stdout  # DESCRIBE HISTORY's table


@pytest.mark.spark  # the filled lake
@pytest.mark.dagster_cli
def test_maintenance_job_with_its_documented_config(
    workspace: Workspace, filled: Filled, tmp_path: Path
) -> None:
    """The maintenance page's code location (the README's assets and the job) over a copy of
    the filled lake; its YAML config under the op it names, run by its command."""
    space = make_workspace(tmp_path / "maintained")
    shutil.copytree(workspace.lake, space.lake)
    space.write("my_project/definitions.py", run_block("maintenance"))
    space.write("maintenance.yaml", run_block("maintenance-config"))
    valid = space.run("dagster", "definitions", "validate", "-m", "my_project.definitions")
    assert valid.returncode == 0, valid.stderr[-3000:]
    done = space.bash(run_block("maintenance-command"))
    assert done.returncode == 0, done.stdout[-4000:]
    assert "RUN_SUCCESS" in done.stdout
    assert "vacuum clean_events:" in done.stdout  # the config's operations, no others
    assert "compact clean_events:" in done.stdout
    assert "checkpoint clean_events" not in done.stdout
    assert_fresh(space, "my_project.definitions")


@pytest.mark.spark  # the filled lake
@pytest.mark.dagster_cli
def test_declarative_automation_example_requests_the_stale_partition(
    workspace: Workspace, filled: Filled, tmp_path: Path
) -> None:
    """tests/docs_automation_defs.py (the docs' automation fragments) loads, and Dagster's
    evaluation of its condition over the filled lake requests exactly what a source rewrite
    made stale."""
    space = make_workspace(tmp_path / "automated")
    shutil.copytree(workspace.lake, space.lake)
    module = "tests.docs_automation_defs"
    valid = space.run("dagster", "definitions", "validate", "-m", module)
    assert valid.returncode == 0, valid.stderr[-3000:]
    write_raw_events(space.lake, RAW_PARTITIONS[:1], seed=1)
    evaluate = (
        "import dagster as dg\n"
        f"from {module} import defs\n"
        "with dg.DagsterInstance.ephemeral() as instance:\n"
        "    result = dg.evaluate_automation_conditions(defs, instance)\n"
        "print(sorted(result.get_requested_partitions(dg.AssetKey('clean_events'))))\n"
    )
    done = space.run("python", "-c", evaluate)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "['2024-01-01|eu']"


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_quality_gates_example(tmp_path: Path) -> None:
    """The gates of the Quality gates page, plain dicts, each evaluated on every run's batch
    before its commit and recorded as its asset check (stopping a bad batch: the sessions of
    that page, replayed by scripts/docs_sessions.py, and tests/test_gates.py)."""
    from dagster import DagsterEventType, DagsterInstance

    space = make_workspace(tmp_path / "gated")
    space.write("my_project/gates.py", run_block("quality-gates"))
    write_raw_events(space.lake, RAW_PARTITIONS)
    done = space.run("partlake", "run", "-m", "my_project.gates")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert event_ids(space.rows("clean_events")) == event_ids(
        space.rows("raw_events"), with_user=True
    )
    assert_fresh(space, "my_project.gates")
    with DagsterInstance.from_config(space.env["DAGSTER_HOME"]) as instance:
        runs = instance.get_run_records()
        assert len(runs) == len(RAW_PARTITIONS)
        for record in runs:
            evaluations = [
                entry.dagster_event.event_specific_data
                for entry in instance.all_logs(
                    record.dagster_run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
                )
                if entry.dagster_event is not None
                and entry.dagster_event.event_specific_data.check_name != "partlake_fresh"
            ]
            names = {e.check_name for e in evaluations}
            assert len(names) == len(evaluations) == 9, names  # 5 constraints, 4 audits
            assert {"not_null_user_id_event_id", "non_negative"} <= names
            assert all(e.passed for e in evaluations)


@pytest.mark.spark
@pytest.mark.dagster_cli
def test_streaming_example(tmp_path: Path) -> None:
    """The Streaming page's code location: a landing folder's file streamed into `events`,
    then its day in `daily_totals`, in one `partlake run`."""
    from tests.stream_defs import drop_events

    space = make_workspace(tmp_path / "streamed")
    space.write("my_project/streams.py", run_block("streaming"))
    drop_events(space.lake, "events-0001.json", range(10))
    done = space.run("partlake", "run", "-m", "my_project.streams")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert sorted(r["event_id"] for r in space.rows("events")) == list(range(10))
    assert [(str(r["date"]), r["events"]) for r in space.rows("daily_totals")] == [
        ("2024-01-02", 10)
    ]
    assert_fresh(space, "my_project.streams")


@pytest.mark.s3
@pytest.mark.dagster_cli
def test_object_store_settings_plan_a_lake_on_s3(s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The Object stores page's settings, pointed at the test S3 server (its endpoint and a
    prefix of its own replace the page's), with the README's assets: `partlake plan` reads
    the source table on S3 through them (keys from the environment, as the page advises)."""
    from deltalake import write_deltalake

    from definitions.ingest import generate

    space = make_workspace(tmp_path / "s3user")
    prefix = f"docs-{os.getpid()}"
    settings = run_block("object-stores")
    assert '"http://127.0.0.1:9000"' in settings and '"s3://lake/prod"' in settings
    settings = settings.replace('"http://127.0.0.1:9000"', repr(s3.endpoint)).replace(
        '"s3://lake/prod"', repr(s3.uri(prefix))
    )
    settings = settings.replace('"us-east-1"', repr(s3.region))
    assets = run_block("code-location").split("assets = [raw_events, clean_events]")[0]
    space.write(
        "my_project/s3lake.py",
        settings + assets + "assets = [raw_events, clean_events]\n"
        "defs = dg.Definitions(\n"
        "    assets=assets,\n"
        "    asset_checks=partlake_asset_checks(assets),\n"
        '    resources={"spark": spark, "io_manager": io_manager},\n'
        ")\n",
    )
    options = s3.storage_options()
    for day, region in RAW_PARTITIONS:
        write_deltalake(
            s3.uri(f"{prefix}/warehouse/raw_events"),
            generate(dt.date.fromisoformat(day), region, ROWS),
            mode="overwrite",
            partition_by=["date", "region"],
            predicate=f"date = '{day}' AND region = '{region}'",
            storage_options=options,
        )
    keys = {k: options[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    space.env.update(keys)
    valid = space.run("dagster", "definitions", "validate", "-m", "my_project.s3lake")
    assert valid.returncode == 0, valid.stderr[-3000:]
    plan = space.run("partlake", "plan", "-m", "my_project.s3lake", "--json")
    assert plan.returncode == 0, plan.stderr[-3000:]
    found = {(i["asset"], i["partition"], i["reason"]) for i in json.loads(plan.stdout)}
    assert found == {("clean_events", f"{d}|{r}", "missing") for d, r in RAW_PARTITIONS}
