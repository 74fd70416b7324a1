"""What `partlake run` and `partlake plan` print, line by line, through the real CLI: a success,
a no-op and a failed quality gate. Only partlake's own lines reach the terminal; Dagster's event
lines, Spark's and log4j's output and Python warnings go to a log file under PARTLAKE_HOME, whose
path a failure prints."""

from __future__ import annotations

import datetime as dt
import re
import sys
from pathlib import Path

import pytest

from definitions.ingest import write_partition
from tests.conftest import REPO_ROOT, cli_env, run_partlake

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

SELECT = "clean_events,daily_region_stats"
DAY = dt.date(2024, 1, 1)
START = re.compile(
    r"Running (\d+) stale asset partition\(s\) in (\d+) run\(s\)\. Executing up to \d+ run\(s\) "
    r"at a time.*\.$"
)
MS = r"\d[\d,]* ms"


def test_run_prints_one_line_per_partition_a_summary_and_nothing_else(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    env = cli_env(tmp_path, lake)
    for region in ("eu", "us"):
        write_partition(DAY, region, 100, root=str(lake))

    # A success: the start line, one line per asset partition, the summary.
    first = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stderr == ""
    lines = first.stdout.splitlines()
    started = START.match(lines[0])
    assert started and started.group(1) == "4", lines[0]
    done = sorted(lines[1:-1])
    assert [re.sub(r"\d+ rows", "N rows", re.sub(MS, "T ms", line)) for line in done] == [
        f"[OK] {asset} 2024-01-01|{region} (missing, N rows, T ms)"
        for asset in ("clean_events", "daily_region_stats")
        for region in ("eu", "us")
    ]
    assert lines[-1] == "4 asset partition(s) refreshed, 0 failed."

    # A no-op: one line.
    again = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)
    assert (again.returncode, again.stdout, again.stderr) == (
        0,
        "Everything is fresh: nothing to run.\n",
        "",
    )
    plan = run_partlake("plan", "-m", "definitions", "--select", SELECT, env=env)
    assert (plan.returncode, plan.stderr) == (0, "")
    assert plan.stdout == "Everything is fresh: no asset partition needs to run.\n"

    # A failed gate: the failed partition with its error once, the one behind it skipped.
    write_partition(DAY, "eu", 100, seed=3, root=str(lake), missing_ids=3)
    failed = run_partlake("run", "-m", "definitions", "--select", SELECT, env=env, timeout=900)
    assert failed.returncode == 1
    assert failed.stderr == ""
    lines = failed.stdout.splitlines()
    assert START.match(lines[0]) and START.match(lines[0]).group(1) == "2", lines[0]  # type: ignore[union-attr]
    assert re.fullmatch(
        rf"\[FAILED\] clean_events 2024-01-01\|eu \(upstream_changed, {MS}, error: quality gate "
        r"failed on clean_events: constraint not_null_user_id_event_id failed: 1 of \d+ rows "
        r"violate 'user_id, event_id not null'\. Nothing was committed; .*\)",
        lines[1],
    ), lines[1]
    assert lines[2] == (
        "[SKIPPED] daily_region_stats 2024-01-01|eu (upstream clean_events 2024-01-01|eu failed)"
    )
    assert lines[3] == (
        "0 asset partition(s) refreshed, 1 failed, 1 skipped because an upstream failed, "
        "0 unchanged (2 in all)."
    )
    prefix = "Full output (Dagster, Spark) of the failed runs: "
    assert lines[4].startswith(prefix) and len(lines) == 5, lines
    log = Path(lines[4][len(prefix) :])
    assert log.parent == lake / "logs"
    text = log.read_text()
    assert "STEP_FAILURE" in text and "GateFailedError" in text  # the engines' output is kept
    assert failed.stdout.count("quality gate failed") == 1

    # -v shows the engines' output on the terminal again.
    verbose = run_partlake(
        "run", "-m", "definitions", "--select", SELECT, "-v", env=env, timeout=900
    )
    assert verbose.returncode == 1
    assert "STEP_FAILURE" in verbose.stdout + verbose.stderr

    # On a terminal: a progress bar, redrawn in place, and the partition lines whole above it.
    write_partition(DAY, "eu", 100, seed=4, root=str(lake))
    shown = run_on_a_terminal(
        [sys.executable, "-m", "dagster_partlake.cli", "run", "-m", "definitions", "--select"]
        + [SELECT],
        env,
    )
    screen = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", part) for part in re.split(r"[\r\n]+", shown)]
    bars = [s for s in screen if "asset partitions/s" in s]  # tqdm: ' 0%|  | 0/2 [00:00<?, ...'
    assert bars and any(re.search(r"\| 0/2 \[", s) for s in bars), shown
    assert sorted(
        re.sub(MS, "T ms", re.sub(r"\d+ rows", "N rows", s)) for s in screen if s.startswith("[")
    ) == [
        "[OK] clean_events 2024-01-01|eu (upstream_changed, N rows, T ms)",
        "[OK] daily_region_stats 2024-01-01|eu (upstream_changed, N rows, T ms)",
    ], shown
    assert "2 asset partition(s) refreshed, 0 failed." in screen


def run_on_a_terminal(command: list[str], env: dict[str, str]) -> str:
    """Everything `command` writes to a pseudo-terminal (its stdout and stderr) until it exits."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    leader, follower = pty.openpty()
    # A terminal of 40 rows and 120 columns, as a user's.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=follower, stderr=follower, stdin=follower
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process and its children are done
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=900) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")
