"""Replays the shell sessions shown in README.md and docs/ and writes what the code prints now.

    python scripts/docs_sessions.py                   # replay everything, rewrite the docs
    python scripts/docs_sessions.py --check           # replay, change nothing, exit 1 on drift
    python scripts/docs_sessions.py --only lint,dg    # some scenarios (see SCENARIOS)

`make docs-sessions` runs the first form. A session block in the docs is a fenced block right
after an HTML comment naming its sessions, `<!-- session: refresh-plan refresh-run -->`: its
content is the transcripts of those sessions, one after the other. A transcript is each command
as `$ command` followed by what it printed (standard output and standard error, in the order
written; standard output only for `dg`), and `$ echo $?` prints the exit code of the command
before it.

The sessions come from scenarios, each replayed in a fresh temporary folder: its own lake
(`PARTLAKE_HOME`), Dagster instance (`DAGSTER_HOME`, with `scripts/dagster.yaml` as `make demo`
copies it) and state cache (`PARTLAKE_CACHE_DIR`), the commands run from the repository (they
name `-m definitions` and `definitions/sql`) through the virtualenv's `partlake`, `dagster` and
`dg`. `demo` is the flow of `make demo` (the demo's source data, the same materializations, the
SQL models, the rewrite of source partition `2024-01-02|eu`, the model kinds' exports), then the
feeds, quality gates, maintenance, history and restore, row deletes and a damaged log, in that
order; `dimensions`, `stream`, `lint` and `dg` have their own small lakes or folders; `servers`
starts the S3 server, a Kafka broker and PostgreSQL from their scripts on 127.0.0.1 (on the ports
the Local servers guide shows, stopped by their PIDs at the end whatever happens) and plans and
runs a code location on them (`tests/local_servers_defs.py`). Hidden steps (the source systems'
writes, the runs that bring a lake to the state a session starts from) run without being shown.

What the docs show is real output, with the temporary folder shown as the scenario's display
folder (`/tmp/partlake-demo`, ...). Comparing a block with a replay normalizes what changes from
one replay to the next (`normalize`):

- milliseconds (`planned in 198 ms`, `5,872 ms`), sizes (`5.9 KB`) and a server's start
  (`answered after 2.13 s`) become `N`;
- UUIDs (run ids, Spark's file names), partlake's file names (`part-<8 hex>-<32 hex>`), times
  (ISO, or `2026-11-24 09:39:36 UTC`), epoch milliseconds, process ids and log file names
  (`partlake-run-<stamp>-<pid>.log`) become placeholders;
- the `[OK]` / `[FAILED]` / `[SKIPPED]` / `[UNCHANGED]` lines between a `partlake run`'s first
  line and its summary are sorted: runs executed at once finish in either order; so are the
  assets `partlake plan` lists under a stale stream (their order follows Dagster's set of asset
  keys, which differs between processes).

A block whose normalized content equals the replay's is left as it is (its numbers are from an
earlier replay; no churn); any other is rewritten with the replay's output.

The full replay takes 14 to 22 minutes on 2 busy cores (the demo alone runs Spark some twenty
times; the servers about 1.5 more), so CI (`tests/test_docs_sessions.py`) replays the cheap
scenarios (`CHEAP`: no Spark; `SERVERS_CHEAP`: the servers without the run) and checks the
others by their structure (`check_structure`): each block's commands are exactly its sessions'
commands here, every `partlake plan` output re-renders equal through the CLI's own renderer,
every `partlake run` output's lines are the CLI's line kinds and its counts add up, and JSON
outputs have the CLI's keys. `make docs-sessions` replays everything.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MARKER = re.compile(r"^<!-- session: ([\w\- ]+) -->$")
FENCE = re.compile(r"^(\s*)```")
TIMEOUT = 900


def doc_files() -> list[Path]:
    """README.md and every page of docs/."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    """A fenced block of a doc page marked as sessions; `lines` is its content (fences
    excluded), `start` the index of its first content line in the page."""

    path: Path
    names: tuple[str, ...]
    start: int
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def commands(self) -> list[str]:
        return [line[2:] for line in self.lines if line.startswith("$ ")]

    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.start}"


def session_blocks(path: Path) -> list[Block]:
    """The session blocks of a page, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for i, line in enumerate(lines):
        found = MARKER.match(line)
        if not found:
            continue
        if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
            raise ValueError(f"{path}:{i + 1}: a session marker must be right before a fence")
        end = next(j for j in range(i + 2, len(lines)) if FENCE.match(lines[j]))
        blocks.append(Block(path, tuple(found.group(1).split()), i + 2, tuple(lines[i + 2 : end])))
    return blocks


def unmarked_sessions(path: Path) -> list[int]:
    """Line numbers (1-based) of `$ ` lines outside any marked session block: every shell
    session shown must be replayed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    marked: set[int] = set()
    for block in session_blocks(path):
        marked.update(range(block.start, block.start + len(block.lines)))
    inside, found = False, []
    for i, line in enumerate(lines):
        if FENCE.match(line):
            inside = not inside
            continue
        if inside and line.lstrip().startswith("$ ") and i not in marked:
            found.append(i + 1)
    return found


# What changes from one replay to the next (see the module docstring).
_VOLATILE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"partlake-([a-z-]+)-\d{8}-\d{6}-\d+\.log"), r"partlake-\1-<stamp>.log"),
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
        "<uuid>",
    ),
    (re.compile(r"\bpart-[0-9a-f]{8}-[0-9a-f]{32}\b"), "part-<id>"),  # partlake's file names
    (re.compile(r"\b[0-9a-f]{32}\b"), "<hex>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"), "<time>"),
    (re.compile(r"\b\d{13}\b"), "<ms>"),
    (re.compile(r"\bpid \d+"), "pid <pid>"),
    (re.compile(r"\bprocess \d+"), "process <pid>"),
    (re.compile(r"\bup \d+ (s|min|h)\b"), "up N"),  # the warm Spark's status
    (re.compile(r"\bidle \d+ s\b"), "idle N s"),
    (re.compile(r"\bmemory [\d,]+ MiB\b"), "memory N MiB"),
    (re.compile(r"spark-warm/[0-9a-f]{16}\b"), "spark-warm/<key>"),
    (re.compile(r"planned in \d+ ms"), "planned in N ms"),
    (re.compile(r"answered after [\d.]+ s"), "answered after N s"),  # a server's start
    (re.compile(r"\b\d[\d,]* ms\b"), "N ms"),
    (re.compile(r"\b\d+(\.\d+)? (B|KB|MB|GB)\b"), "N B"),
    (re.compile(r"\(\d+ row groups?\)"), "(N row groups)"),
]
_OUTCOME = re.compile(r"^\[(OK|FAILED|SKIPPED|UNCHANGED)\] ")
_MAYBE_STALE = re.compile(r"^(  then, where its new rows land, maybe stale: )(.+?)( \(planned .*)$")


def normalize(text: str) -> str:
    """`text` without what changes from one replay to the next: volatile values become
    placeholders, trailing spaces go, and outcome lines between a run's first line and its
    summary are sorted."""
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    lines = [_sorted_maybe_stale(line.rstrip()) for line in text.strip("\n").splitlines()]
    out: list[str] = []
    run: list[str] = []
    for line in lines:
        if _OUTCOME.match(line):
            run.append(line)
            continue
        out.extend(sorted(run))
        run = []
        out.append(line)
    out.extend(sorted(run))
    return "\n".join(out)


def _sorted_maybe_stale(line: str) -> str:
    # The assets under a stale stream come in the code location's asset order, which follows
    # Dagster's set of asset keys: it differs from one process to the next.
    found = _MAYBE_STALE.match(line)
    if not found:
        return line
    head, listed, tail = found.groups()
    return head + ", ".join(sorted(listed.split(", "))) + tail


@dataclass
class Replay:
    """One scenario's folder, environment and transcripts. With `dry`, commands are only
    recorded (what `commands` returns), nothing runs."""

    name: str
    display: str  # the temporary folder as the docs show it
    dry: bool = False
    root: Path = field(default_factory=Path)
    env: dict[str, str] = field(default_factory=dict)
    transcripts: dict[str, str] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    last_code: int = 0
    base: Path = field(default_factory=Path)  # the temporary folder, removed at the end

    def __post_init__(self) -> None:
        if self.dry:
            self.root = Path(self.display)
            return
        self.root = self.base = Path(tempfile.mkdtemp(prefix=f"partlake-docs-{self.name}-"))
        self.env = scenario_env(self.root)

    def move(self, root: Path, display: str) -> None:
        """Go on in another folder (inside this one) with its own environment."""
        self.display = display
        if not self.dry:
            self.root = root
            self.env = scenario_env(root)

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    def shown(self, text: str) -> str:
        """`text` with the temporary folder as the docs show it."""
        return text.replace(str(self.root), self.display)

    def hidden(self, *commands: str, cwd: Path | None = None) -> None:
        """Setup steps, not shown; a failure stops the scenario."""
        for command in commands:
            if self.dry:
                continue
            done = self._run(command, cwd)
            if done.returncode != 0:
                raise RuntimeError(
                    f"scenario {self.name}: `{command}` failed ({done.returncode}):\n"
                    + done.stdout[-4000:]
                )

    def session(
        self, name: str, *commands: str, cwd: Path | None = None, stdout_only: bool = False
    ) -> None:
        """Commands shown in the docs as the session `name` (`{root}` is the scenario folder)."""
        shown_commands = [c.replace("{root}", self.display) for c in commands]
        self.commands[name] = shown_commands
        if self.dry:
            return
        parts = []
        for command, shown in zip(commands, shown_commands, strict=True):
            if command == "echo $?":
                output = str(self.last_code)
            else:
                done = self._run(command.replace("{root}", str(self.root)), cwd, stdout_only)
                self.last_code = done.returncode
                output = done.stdout.rstrip("\n")
            output = "\n".join(line.rstrip() for line in self.shown(output).splitlines())
            parts.append(f"$ {shown}" + (f"\n{output}" if output else ""))
        self.transcripts[name] = "\n".join(parts)

    def python(self, action: Callable[[Replay], None]) -> None:
        """A setup step in Python (a file damaged, a folder copied), not shown."""
        if not self.dry:
            action(self)

    def _run(
        self, command: str, cwd: Path | None, stdout_only: bool = False
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=cwd or REPO_ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if stdout_only else subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT,
        )

    def cleanup(self) -> None:
        if not self.dry:
            # No warm Spark outlives its scenario (each folder the scenario moved to has one).
            for folder in self.base.rglob("spark-warm"):
                subprocess.run(
                    [str(BIN / "partlake"), "spark", "stop", "--warm"],
                    env={**self.env, "PARTLAKE_SPARK_WARM_DIR": str(folder)},
                    capture_output=True,
                    timeout=120,
                )
            shutil.rmtree(self.base, ignore_errors=True)


def scenario_env(root: Path) -> dict[str, str]:
    """The environment of a scenario in `root`: its own lake, instance and state cache; the
    checkout's package and the virtualenv's commands first; nothing of the caller's lake."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PARTLAKE_", "DAGSTER_", "AWS_", "STREAM_", "S3_TEST"))
    }
    home = root / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "scripts" / "dagster.yaml", home / "dagster.yaml")  # as make demo
    env.update(
        PARTLAKE_HOME=str(root / "lake"),
        DAGSTER_HOME=str(home),
        PARTLAKE_CACHE_DIR=str(root / "cache"),
        # Its own warm Spark, stopped when the scenario ends (`Replay.cleanup`).
        PARTLAKE_SPARK_WARM_DIR=str(root / "spark-warm"),
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        PATH=os.pathsep.join([str(BIN), env.get("PATH", "")]),
        PYTHONUNBUFFERED="1",  # stdout and stderr in the order they were written
        SPARK_LOCAL_IP="127.0.0.1",
        COLUMNS="100",
        # Every plan also planned in full, as in the tests: a replay never shows a wrong answer.
        PARTLAKE_CHECK_REPLAN="1",
    )
    return env


# The scenarios. Each is a function of a Replay; SCENARIOS lists them with their display folder.

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
LAKEHOUSE = "clean_events,daily_region_stats,monthly_region_stats"


def demo(r: Replay) -> None:
    """`make demo`, then the guides' sessions on the same lake."""
    dates = " ".join(f"--date {d}" for d in DAYS)
    r.hidden(
        f"python -m definitions.ingest {dates} --region eu --region us --region apac --rows 1000",
        "dagster asset materialize -m definitions --select clean_events,daily_region_stats "
        "--partition-range '2024-01-01|eu...2024-01-03|apac'",
        "dagster asset materialize -m definitions --select monthly_region_stats "
        "--partition-range '2024-01|eu...2024-01|apac'",
    )
    r.session("demo-sql-lint", "partlake sql lint definitions/sql -m definitions")
    r.session(
        "demo-sql-run",
        "partlake run -m definitions --select "
        "staging/events,marts/user_activity,marts/monthly_region_summary",
    )
    sql_render(r)
    r.hidden("python -m definitions.ingest --date 2024-01-02 --region eu --rows 1000 --seed 1")
    r.session("refresh-plan", "partlake plan -m definitions")
    r.session("refresh-plan-json", f"partlake plan -m definitions --select {LAKEHOUSE} --json")
    r.session("refresh-runs-json", f"partlake plan -m definitions --select {LAKEHOUSE} --runs-json")
    r.session("refresh-run", "partlake run -m definitions")
    r.session("refresh-noop", "partlake run -m definitions")
    r.session("warm-spark", "partlake spark status", "partlake spark stop --warm")
    # The model kinds: three days of exports, then day 2's again, unchanged.
    r.hidden(f"python -m definitions.exports {dates}", "partlake run -m definitions")
    r.hidden("python -m definitions.exports --date 2024-01-02")
    r.session("kinds-again-plan", "partlake plan -m definitions")
    r.session("kinds-again", "partlake run -m definitions")
    # Incremental inputs: a first run over change batch 1 and payment file 1, then more.
    r.hidden(
        "python -m definitions.feeds changes --batch 1",
        "python -m definitions.feeds payments --file 1",
        "partlake run -m definitions --select user_plans,payments",
        "python -m definitions.feeds changes --batch 2",
        "python -m definitions.feeds payments --file 2",
    )
    feeds = "partlake {} -m definitions --select user_plans,payments"
    r.session("feeds", feeds.format("plan"), feeds.format("run"), feeds.format("run"))
    # A warn gate: a day of 300 rows instead of 1,000 drops daily_region_stats' revenue.
    r.hidden("python -m definitions.ingest --date 2024-01-03 --region us --rows 300")
    r.session("gates-warn", "partlake run -m definitions --select clean_events,daily_region_stats")
    r.hidden("partlake run -m definitions")  # the SQL models and the monthly rollups too
    # Maintenance: a third payment file (an append table: one file per run), then compact.
    r.hidden(
        "python -m definitions.feeds payments --file 3",
        "partlake run -m definitions --select payments",
    )
    r.session(
        "maintain",
        "partlake maintain -m definitions compact",
        f"partlake plan -m definitions --select {LAKEHOUSE},payments",
        "partlake maintain -m definitions vacuum --retention-hours 0",
        "partlake maintain -m definitions vacuum --retention-hours 0 --force --dry-run",
        "partlake maintain -m definitions --select clean_events checkpoint",
    )
    r.session(
        "history-restore",
        "partlake history -m definitions clean_events --partition '2024-01-02|eu'",
        "partlake restore -m definitions clean_events --version 1 --partition '2024-01-02|eu'",
        f"partlake plan -m definitions --select {LAKEHOUSE}",
    )
    r.hidden("partlake run -m definitions")
    r.python(damaged_copy)  # a copy of the fresh lake for the damaged log
    # Row deletes: a user's rows leave the source, then a managed table.
    delete = "partlake delete -m definitions raw_events --where"
    r.session(
        "delete-source",
        f'{delete} "user_id = 4042" --dry-run',
        f'{delete} "user_id = 4042"',
        f"partlake plan -m definitions --select {LAKEHOUSE}",
        f"partlake run -m definitions --select {LAKEHOUSE}",
        "partlake history -m definitions raw_events --partition '2024-01-02|eu'",
    )
    r.session(
        "delete-managed",
        'partlake delete -m definitions clean_events --where "user_id = 2638" '
        "--partition '2024-01-01|us'",
        f"partlake plan -m definitions --select {LAKEHOUSE}",
    )
    r.session("delete-bad", f'{delete} "userid = 4042"', f'{delete} "user_id = = 4042"')
    r.hidden("partlake run -m definitions")
    # A bad batch: three rows without an event id; clean_events' gate stops it.
    r.hidden(
        "python -m definitions.ingest --date 2024-01-02 --region eu --rows 1000 --seed 2 "
        "--missing-ids 3"
    )
    gates = "partlake {} -m definitions --select clean_events,daily_region_stats"
    r.session("gates-failed", gates.format("run"), gates.format("plan"))
    r.move(r.root / "damaged", "/tmp/rd")
    r.hidden("python -m definitions.ingest --date 2024-01-01 --region us --rows 1000 --seed 1")
    r.python(damage_commit)
    r.session("damaged-log", "partlake plan -m definitions", "echo $?")


def damaged_copy(r: Replay) -> None:
    """The lake as it is now, copied for the damaged-log session (its own instance, state
    cache and folder)."""
    shutil.copytree(r.lake, r.root / "damaged" / "lake", ignore=shutil.ignore_patterns("logs"))


def damage_commit(r: Replay) -> None:
    """Commit 1 of daily_region_stats cut in its third line: a writer interrupted mid-write."""
    path = r.root / "lake" / "warehouse" / "daily_region_stats" / "_delta_log"
    commit = path / "00000000000000000001.json"
    lines = commit.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2][:15]
    commit.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")


def sql_render(r: Replay) -> None:
    r.session(
        "sql-render",
        "partlake sql render -m definitions marts/monthly_region_summary --partition '2024-01|eu'",
    )


def render_only(r: Replay) -> None:
    """`partlake sql render` reads no table: the demo's render on an empty lake."""
    sql_render(r)


def dimensions(r: Replay) -> None:
    """tests/dimensions_defs.py: filled, then one (date, region, product) partition of
    clean_sales rewritten by someone else."""
    r.hidden("python -m tests.dimensions_defs", "partlake run -m tests.dimensions_defs")
    r.hidden(
        'python -c "import os; from tests.dimensions_defs import rewrite_out_of_band; '
        "rewrite_out_of_band(os.environ['PARTLAKE_HOME'], 'clean_sales', '2024-01-02', 'eu', "
        "'shoes')\""
    )
    r.session(
        "dimensions",
        "partlake plan -m tests.dimensions_defs",
        "partlake plan -m tests.dimensions_defs --json",
        "partlake run -m tests.dimensions_defs",
    )


def stream(r: Replay) -> None:
    """tests/stream_defs.py: a feed drops one file of ten events of 2024-01-02."""
    r.hidden(
        'python -c "import os; from tests.stream_defs import drop_events; '
        "drop_events(os.environ['PARTLAKE_HOME'], 'events-0001.json', range(10))\""
    )
    r.session("stream", "partlake plan -m tests.stream_defs", "partlake run -m tests.stream_defs")


LINT_MODELS = {
    "revenue.sql": """
        -- @description: Revenue per day and region.
        select
            region,
            date_trunc(event_ts) as day,
            sum(amount) as revenue
        from staging.orders
        group by region, date_trunc(event_ts)
    """,
    "staging/orders.sql": """
        -- @description: Orders with a positive amount.
        -- @constraint: not_null(order_id)
        -- @audit: row_count_change(0.5)
        -- @audit: no_partition_emptied()
        -- @audit: row_count(>, 0)
        select order_id, customer_id, region, amount, event_ts from raw_orders where amount > 0
    """,
    "customers.sql": """
        -- @description: Customers and how many orders each made.
        select customer_id, count(*) as orders
        from customer_orders
        group by customer_id
    """,
    "customer_orders.sql": """
        select o.order_id, o.customer_id
        from staging.orders o join customers c on o.customer_id = c.customer_id
    """,
}


def lint(r: Replay) -> None:
    """`partlake sql lint` over a folder of four models with three problems."""

    def write(r: Replay) -> None:
        for name, text in LINT_MODELS.items():
            path = r.root / "models" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")

    r.python(write)
    r.session("sql-lint-problems", "partlake sql lint {root}/models")


DG_PROJECT = {
    "pyproject.toml": """
        [project]
        name = "shop"
        version = "0.1.0"
        requires-python = ">=3.11"

        [tool.dg]
        directory_type = "project"

        [tool.dg.project]
        root_module = "shop"
    """,
    "src/shop/__init__.py": "",
    "src/shop/definitions.py": """
        from pathlib import Path

        import dagster as dg


        @dg.definitions
        def defs():
            return dg.load_from_defs_folder(path_within_project=Path(__file__).parent.parent.parent)
    """,
    "src/shop/partitions.py": """
        from dagster import DailyPartitionsDefinition

        daily = DailyPartitionsDefinition(start_date="2024-01-01")
    """,
    "src/shop/defs/raw/assets.py": """
        from dagster_partlake import partlake_source
        from shop.partitions import daily

        orders = partlake_source("raw_orders", partitions_def=daily)
    """,
    # As the SQL models page shows it.
    "src/shop/defs/models/defs.yaml": """
        type: dagster_partlake.SqlModels
        attributes:
          path: models
          partitions:
            daily: shop.partitions:daily
          upstream: [shop.defs.raw.assets]
          group_name: sql
          io_manager:
            root: lake
          sensor: true
    """,
    "src/shop/defs/models/models/staging/orders.sql": """
        -- @partitions: daily
        -- @constraint: not_null(order_id)
        select order_id, amount, date from raw_orders where amount > 0
    """,
    "src/shop/defs/models/models/order_totals.sql": """
        -- @description: Orders and revenue over all days.
        select count(*) as orders, sum(amount) as revenue from staging.orders
    """,
}


def dg(r: Replay) -> None:
    """The SqlModels component of the SQL models page under `dg` (standard output)."""
    project = r.root / "shop"

    def write(r: Replay) -> None:
        for name, text in DG_PROJECT.items():
            path = project / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        r.env["PYTHONPATH"] = os.pathsep.join([str(project / "src"), r.env["PYTHONPATH"]])

    r.python(write)
    r.session("dg-defs", "dg check defs", "dg list defs", cwd=project, stdout_only=True)


# The Local servers guide: each server started from its script in the scenario's folder, on the
# ports the guide shows, then a code location on all three (tests/local_servers_defs.py).
SERVER_SCRIPTS = {
    "s3": "python3 scripts/s3_server.py --state {root}/s3",
    "kafka": "python3 scripts/kafka_server.py --state {root}/kafka",
    "pg": "python3 scripts/pg_server.py --state {root}/pg",
}
SERVERS_MODULE = "tests.local_servers_defs"
CREATE_TOPIC = (
    'python -c "from confluent_kafka.admin import AdminClient, NewTopic; '
    "admin = AdminClient({'bootstrap.servers': '127.0.0.1:9092'}); "
    "admin.create_topics([NewTopic('clicks', 2, 1)])['clicks'].result(); "
    'print(sorted(admin.list_topics(timeout=10).topics))"'
)
CREATE_ORDERS = (
    "psql -h 127.0.0.1 -p 5433 -U partlake -d shop "
    '-c "create table orders (id bigint primary key, order_date date not null, '
    'amount numeric(10, 2) not null)" '
    "-c \"insert into orders values (1, '2024-01-01', 10.00), (2, '2024-01-01', 5.50), "
    "(3, '2024-01-02', 7.25)\""
)
SEND_CLICKS = (
    'python -c "import json; from confluent_kafka import Producer; '
    "p = Producer({'bootstrap.servers': '127.0.0.1:9092'}); "
    "[p.produce('clicks', json.dumps({'id': i, 'day': '2024-01-02'})) for i in range(5)]; "
    'p.flush(10)"'
)


def servers(r: Replay, *, run: bool = True) -> None:
    """The three servers started, used by a code location (planned; run when `run`), stopped."""
    s3, kafka, pg = (SERVER_SCRIPTS[name] for name in ("s3", "kafka", "pg"))
    r.python(lambda r: r.root.chmod(0o755))  # as root, PostgreSQL's user must enter the folder
    try:
        r.session("servers-s3", f"{s3} start --port 9000", f"{s3} status", f"{s3} env")
        r.python(_export_s3_env)  # what `eval "$(... env)"` and `export PGPASSWORD` do
        r.session("servers-kafka", f"{kafka} start --port 9092", CREATE_TOPIC, f"{kafka} status")
        r.session("servers-pg", f"{pg} start --port 5433", f"{pg} status", CREATE_ORDERS)
        r.hidden(SEND_CLICKS)  # a web server's five clicks of 2024-01-02
        r.session("servers-plan", f"partlake plan -m {SERVERS_MODULE}")
        if run:
            r.session(
                "servers-run",
                f"partlake run -m {SERVERS_MODULE}",
                f"partlake plan -m {SERVERS_MODULE}",
            )
        r.session(
            "servers-stop",
            f"{s3} stop",
            f"{kafka} stop",
            f"{pg} stop",
            f"{s3} status",
            "echo $?",
        )
    finally:  # whatever failed, no server outlives the scenario
        r.python(_stop_servers)


def servers_cheap(r: Replay) -> None:
    """The Local servers guide without its `partlake run` (Spark): what CI replays."""
    servers(r, run=False)


def _export_s3_env(r: Replay) -> None:
    for line in r.transcripts["servers-s3"].splitlines():
        if line.startswith("export AWS_"):
            name, value = line.removeprefix("export ").split("=", 1)
            r.env[name] = value
    r.env["PGPASSWORD"] = "partlake-demo"


def _stop_servers(r: Replay) -> None:
    for script in SERVER_SCRIPTS.values():
        command = f"{script.replace('{root}', str(r.root))} stop"
        subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, capture_output=True, timeout=120)


@dataclass(frozen=True)
class Scenario:
    name: str
    replay: Callable[[Replay], None]
    display: str


SCENARIOS = [
    Scenario("demo", demo, "/tmp/partlake-demo"),
    Scenario("dimensions", dimensions, "/tmp/partlake-dimensions"),
    Scenario("stream", stream, "/tmp/partlake-stream"),
    Scenario("lint", lint, "/tmp/lintdemo"),
    Scenario("dg", dg, "/tmp/shop"),
    Scenario("servers", servers, "/tmp/partlake-servers"),
]
# No Spark, a few seconds each: the scenarios CI replays (the demo's `partlake sql render`, from
# an empty lake, as `render`).
CHEAP = [
    Scenario("render", render_only, "/tmp/partlake-demo"),
    Scenario("lint", lint, "/tmp/lintdemo"),
    Scenario("dg", dg, "/tmp/shop"),
]
# No Spark either, but the S3 server, a Kafka broker and PostgreSQL (tests marked so): the Local
# servers guide without its `partlake run`.
SERVERS_CHEAP = Scenario("servers", servers_cheap, "/tmp/partlake-servers")


def session_commands() -> dict[str, list[str]]:
    """Every session's commands as the docs must show them, from a dry pass of the scenarios."""
    commands: dict[str, list[str]] = {}
    for scenario in SCENARIOS:
        dry = Replay(scenario.name, scenario.display, dry=True)
        scenario.replay(dry)
        for name, shown in dry.commands.items():
            if name in commands and commands[name] != shown:
                raise ValueError(f"session {name} is replayed with other commands twice")
            commands[name] = shown
    return commands


def replay(scenarios: Sequence[Scenario], log: Callable[[str], None] = print) -> dict[str, str]:
    """The transcripts of every session of `scenarios`, replayed now."""
    transcripts: dict[str, str] = {}
    for scenario in scenarios:
        log(f"== {scenario.name}")
        run = Replay(scenario.name, scenario.display)
        try:
            scenario.replay(run)
        finally:
            run.cleanup()
        transcripts.update(run.transcripts)
    return transcripts


@dataclass(frozen=True)
class Drift:
    block: Block
    expected: str  # the replay's transcript

    def diff(self) -> str:
        import difflib

        lines = difflib.unified_diff(
            normalize(self.block.text).splitlines(),
            normalize(self.expected).splitlines(),
            f"{self.block.where()} (docs)",
            "replayed now",
            lineterm="",
        )
        return "\n".join(lines)


def drifts(transcripts: dict[str, str]) -> Iterator[Drift]:
    """The session blocks whose sessions were all replayed and whose content differs from the
    replay, normalized."""
    for path in doc_files():
        for block in session_blocks(path):
            if not all(name in transcripts for name in block.names):
                continue
            expected = "\n".join(transcripts[name] for name in block.names)
            if normalize(block.text) != normalize(expected):
                yield Drift(block, expected)


def rewrite(found: Sequence[Drift]) -> None:
    """Each drifted block's content replaced by the replay's transcript."""
    by_path: dict[Path, list[Drift]] = {}
    for drift in found:
        by_path.setdefault(drift.block.path, []).append(drift)
    for path, items in by_path.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for drift in sorted(items, key=lambda d: -d.block.start):  # bottom up: indices hold
            block = drift.block
            lines[block.start : block.start + len(block.lines)] = drift.expected.splitlines()
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# The structure check of sessions that CI does not replay.


def check_structure(blocks: Sequence[Block], commands: dict[str, list[str]]) -> list[str]:
    """Problems of the blocks without replaying them: unknown sessions, commands other than
    the script's, and outputs that are not what the CLI prints (see the module docstring)."""
    problems = []
    for block in blocks:
        unknown = [n for n in block.names if n not in commands]
        if unknown:
            problems.append(f"{block.where()}: unknown session(s) {', '.join(unknown)}")
            continue
        expected = [c for n in block.names for c in commands[n]]
        if block.commands != expected:
            problems.append(
                f"{block.where()}: shows the commands {block.commands}, the sessions "
                f"{' '.join(block.names)} run {expected}"
            )
            continue
        for command, output in split_transcript(block.lines):
            problems.extend(f"{block.where()}: {p}" for p in check_output(command, output))
    return problems


def split_transcript(lines: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(command, output lines) of each `$ ` command of a block."""
    found: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("$ "):
            found.append((line[2:], []))
        elif found:
            found[-1][1].append(line)
    return found


def check_output(command: str, output: list[str]) -> list[str]:
    """Problems of one command's output, judged by the CLI's own renderers (a warning of the
    command on standard error, such as a code location without `partlake_fresh`, aside)."""
    words = command.split()
    output = [line for line in output if not line.startswith("Warning: ")]
    if words[:2] == ["partlake", "plan"]:
        if "--json" in words:
            return _check_plan_json(output)
        if "--runs-json" in words:
            return _check_runs_json(output)
        return _check_plan_text(output)
    if words[:2] == ["partlake", "run"]:
        return _check_run(output)
    return []


def _json(output: list[str]) -> list[dict[str, object]] | None:
    try:
        found = json.loads("\n".join(output))
    except ValueError:
        return None
    return found if isinstance(found, list) else None


def _check_plan_json(output: list[str]) -> list[str]:
    items = _json(output)
    if items is None:
        return [f"not the JSON list `partlake plan --json` prints: {output[:2]}"]
    required = {"asset", "partition", "reason", "because"}
    optional = {"dimensions", "last_run_failed"}
    return [
        f"a --json item has keys {sorted(item)}, the CLI prints {sorted(required)} (+ "
        f"{sorted(optional)})"
        for item in items
        if not required <= set(item) <= required | optional
    ]


def _check_runs_json(output: list[str]) -> list[str]:
    from dagster_partlake.planning.definition import Plan, StalePartition
    from dagster_partlake.planning.runs import PlannedRun, RunPlan

    item = StalePartition("a", "k", "missing")
    sample = RunPlan(Plan((item,), ("a",)), (PlannedRun(1, ("a",), ("k",), None, (item,)),))
    keys = set(sample.to_json()[0])
    runs = _json(output)
    if runs is None:
        return [f"not the JSON list `partlake plan --runs-json` prints: {output[:2]}"]
    return [
        f"a --runs-json run has keys {sorted(run)}, the CLI prints {sorted(keys)}"
        for run in runs
        if set(run) != keys
    ]


_PLAN_HEAD = re.compile(r"^(\d+) stale asset partition\(s\) in (\d+) asset\(s\)")
_ASSET = re.compile(r"^(\S+)(?: \((\S+)\))?: (\d+) stale \((.+)\)$")
_ITEM = re.compile(r"^  (\S+)  (\S+)\s*(?:  because (.+?))?(?:  last run failed: (.+))?$")
_RUN = re.compile(r"^  run +(\d+): (.+?)  (\S+(?: \(\d+ partitions\))?)(?:  after run (.+))?$")


def _check_plan_text(output: list[str]) -> list[str]:
    """A `partlake plan` text output, parsed and rendered again by `cli.render.plan_text`:
    both must be equal (times aside)."""
    from dagster_partlake.cli.output import PLAN_FRESH
    from dagster_partlake.cli.render import plan_text
    from dagster_partlake.planning.definition import Plan, StalePartition
    from dagster_partlake.planning.runs import PlannedRun, RunPlan

    text = "\n".join(output)
    if text == PLAN_FRESH:
        return []
    if not output or not _PLAN_HEAD.match(output[0]):
        return [f"not a plan: {output[:1]}"]
    body = list(output)
    held = [i for i, line in enumerate(body) if line.startswith("Not planned until")]
    if held:  # a plan that holds back unreadable tables is checked up to there
        body = body[: held[0] - 1]
    items: list[StalePartition] = []
    order: list[str] = []
    layouts: dict[str, str] = {}
    failures: dict[tuple[str, str | None], list[str]] = {}
    after_streams: dict[str, list[str]] = {}
    runs: list[PlannedRun] = []
    asset = ""
    for line in body[1:]:
        head, item, run = _ASSET.match(line), _ITEM.match(line), _RUN.match(line)
        if head:
            asset = head.group(1)
            order.append(asset)
            if head.group(2):
                layouts[asset] = head.group(2)
        elif line.startswith("  then, where its new rows land, maybe stale: "):
            listed = line.split(": ", 1)[1].split(" (planned once")[0]
            after_streams[asset] = listed.split(", ")
        elif run:
            number, assets, keys, after = run.groups()
            ranged = re.match(r"(\S+)\.\.\.(\S+) \((\d+) partitions\)", keys)
            if ranged:
                first, last, count = ranged.groups()
                key_list: tuple[str | None, ...] = (first, *[""] * (int(count) - 2), last)
                span: tuple[str, str] | None = (first, last)
            else:
                key_list, span = ((None,) if keys == "-" else (keys,)), None
            waits = tuple(int(n) for n in after.split(", ")) if after else ()
            runs.append(
                PlannedRun(int(number), tuple(assets.split(", ")), key_list, span, (), waits)
            )
        elif item and not line.startswith("  run "):
            key, reason, because, failed = item.groups()
            partition = None if key == "-" else key
            items.append(
                StalePartition(
                    asset, partition, reason, tuple(because.split(", ")) if because else ()
                )
            )
            if failed:
                failures[(asset, partition)] = failed.split(", ")
    plan = Plan(tuple(items), tuple(order))
    rendered = plan_text(
        RunPlan(plan, tuple(runs)),
        seconds=0.0,
        failures=failures,
        layouts=layouts,
        after_streams=after_streams,
    )
    if normalize(rendered) != normalize("\n".join(body)):
        return ["the plan's text is not what `partlake plan` renders now:\n" + rendered]
    return []


_RUN_HEAD = re.compile(r"^Running \d+ stale asset partition\(s\) in \d+ run\(s\)\. Executing up to")
_SUMMARY = re.compile(
    r"^(\d+) asset partition\(s\) refreshed, (\d+) failed"
    r"(?:, (\d+) skipped because an upstream failed, (\d+) unchanged \((\d+) in all\))?\.$"
)
_OUTCOME_LINE = re.compile(r"^\[(OK|FAILED|SKIPPED|UNCHANGED)\] (\S+) (\S+) \((.+)\)$")


def _check_run(output: list[str]) -> list[str]:
    """A `partlake run` output: its first line, one known line per asset partition, a summary
    whose counts are the lines'."""
    from dagster_partlake.cli.output import NOTHING_TO_RUN

    if output == [NOTHING_TO_RUN]:
        return []
    problems = []
    counts = {"OK": 0, "FAILED": 0, "SKIPPED": 0, "UNCHANGED": 0}
    summary = None
    for line in output:
        outcome = _OUTCOME_LINE.match(line)
        if outcome:
            counts[outcome.group(1)] += 1
        elif _SUMMARY.match(line):
            summary = _SUMMARY.match(line)
        elif not (
            _RUN_HEAD.match(line)
            or line.startswith(("New data from stream(s): ", "Full output (Dagster, Spark)"))
        ):
            problems.append(f"a line `partlake run` does not print: {line!r}")
    if summary is None:
        return [*problems, "no summary line"]
    ok, failed, skipped, unchanged, total = summary.groups()
    if int(ok) != counts["OK"] or int(failed) != counts["FAILED"]:
        problems.append(f"the summary {summary.group(0)!r} does not count the lines {counts}")
    if skipped is not None and (
        int(skipped) != counts["SKIPPED"]
        or int(unchanged) != counts["UNCHANGED"]
        or int(total) != sum(counts.values())
    ):
        problems.append(f"the summary {summary.group(0)!r} does not count the lines {counts}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    parser.add_argument(
        "--only", help=f"comma-separated scenarios ({', '.join(s.name for s in SCENARIOS)})"
    )
    args = parser.parse_args(argv)
    chosen = SCENARIOS
    if args.only:
        names = args.only.split(",")
        known = {s.name: s for s in [*SCENARIOS, *CHEAP]}
        missing = [n for n in names if n not in known]
        if missing:
            parser.error(f"unknown scenario(s) {', '.join(missing)}")
        chosen = [known[n] for n in names]
    unmarked = [(p, n) for p in doc_files() for n in unmarked_sessions(p)]
    for path, number in unmarked:
        print(f"{path.relative_to(REPO_ROOT)}:{number}: a `$ ` line outside a session block")
    transcripts = replay(chosen)
    found = list(drifts(transcripts))
    for drift in found:
        print(drift.diff())
    if args.check:
        print(f"{len(found)} session block(s) drifted.")
        return 1 if found or unmarked else 0
    rewrite(found)
    print(f"{len(found)} session block(s) rewritten.")
    return 1 if unmarked else 0


if __name__ == "__main__":
    sys.exit(main())
