"""The shell sessions of README.md and docs/ are what the code prints now.

`scripts/docs_sessions.py` replays them (`make docs-sessions` rewrites the docs with the
replay). Here, CI replays the cheap scenarios (no Spark: the SQL models' lint and render, the
`dg` project, and the Local servers guide without its run) and compares them with the docs,
normalized as the script describes; every other session is checked by its structure: its
commands are exactly the script's, each `partlake plan` output renders again equal through the
CLI's renderer, each `partlake run` output holds only the CLI's lines with a summary that counts
them, and JSON outputs have the CLI's keys.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_sessions", REPO_ROOT / "scripts" / "docs_sessions.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_sessions"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sessions = load_script()


def all_blocks() -> list:  # type: ignore[type-arg]
    return [b for path in sessions.doc_files() for b in sessions.session_blocks(path)]


def test_every_shell_session_is_replayed() -> None:
    """Each `$ ` line of the docs is in a block marked with its sessions."""
    unmarked = [
        f"{path.relative_to(REPO_ROOT)}:{line}"
        for path in sessions.doc_files()
        for line in sessions.unmarked_sessions(path)
    ]
    assert not unmarked, (
        "shell sessions without `<!-- session: NAME -->` before their fence (add the session "
        "to scripts/docs_sessions.py): " + ", ".join(unmarked)
    )
    assert len(all_blocks()) >= 20


def test_every_session_block_matches_the_script_and_the_cli() -> None:
    commands = sessions.session_commands()
    blocks = all_blocks()
    problems = sessions.check_structure(blocks, commands)
    assert not problems, "\n".join(problems)
    shown = {name for block in blocks for name in block.names}
    assert not set(commands) - shown, f"sessions no page shows: {sorted(set(commands) - shown)}"


def _block(lines: list[str]) -> object:
    return sessions.Block(REPO_ROOT / "README.md", ("refresh-plan",), 1, tuple(lines))


PLAN = [
    "$ partlake plan -m definitions",
    "2 stale asset partition(s) in 2 asset(s) (planned in 12 ms), upstream first:",
    "",
    "clean_events: 1 stale (upstream_changed 1)",
    "  2024-01-02|eu  upstream_changed  because raw_events[2024-01-02|eu]",
    "",
    "daily_region_stats: 1 stale (upstream_changed 1)",
    "  2024-01-02|eu  upstream_changed  because clean_events[2024-01-02|eu]",
    "",
    "Runs: 1, upstream first (one Dagster run each):",
    "  run 1: clean_events, daily_region_stats  2024-01-02|eu",
]


def test_the_structure_check_finds_outputs_the_cli_does_not_print() -> None:
    commands = {"refresh-plan": ["partlake plan -m definitions"]}
    assert sessions.check_structure([_block(PLAN)], commands) == []
    miscounted = [PLAN[0], PLAN[1].replace("2 stale", "3 stale"), *PLAN[2:]]
    assert sessions.check_structure([_block(miscounted)], commands)
    unpadded = [*PLAN[:4], "  2024-01-02|eu  upstream_changed because raw_events[2024-01-02|eu]"]
    assert sessions.check_structure([_block([*unpadded, *PLAN[5:]])], commands)
    other = {"refresh-plan": ["partlake plan -m definitions --json"]}
    assert sessions.check_structure([_block(PLAN)], other)
    run = ["$ partlake run -m definitions", "[OK] a - (missing, 1 rows, 5 ms)"]
    run_commands = {"refresh-plan": ["partlake run -m definitions"]}
    counted = [*run, "1 asset partition(s) refreshed, 0 failed."]
    assert sessions.check_structure([_block(counted)], run_commands) == []
    assert sessions.check_structure(
        [_block([*run, "2 asset partition(s) refreshed, 0 failed."])], run_commands
    )


def test_normalize_drops_what_changes_between_replays() -> None:
    one = (
        "Running 2 ...\n[OK] b 1 (missing, 1 rows, 1,204 ms)\n[OK] a 1 (missing, 3 rows, 90 ms)\n"
        "2 asset partition(s) refreshed, 0 failed.\nrun 745b99e3-cfd4-49e1-9715-40b0f93c465b at "
        "2026-11-23T09:20:35.272Z (planned in 198 ms), 5.9 KB"
    )
    two = (
        "Running 2 ...\n[OK] a 1 (missing, 3 rows, 7 ms)\n[OK] b 1 (missing, 1 rows, 15 ms)\n"
        "2 asset partition(s) refreshed, 0 failed.\nrun 43de30eb-9464-43d5-8e7a-244946d99e22 at "
        "2026-11-24T17:01:34.088Z (planned in 3 ms), 6.1 KB"
    )
    assert sessions.normalize(one) == sessions.normalize(two)
    assert sessions.normalize(one) != sessions.normalize(two.replace("3 rows", "4 rows"))
    stream = "  then, where its new rows land, maybe stale: {} (planned once the stream has run)"
    assert sessions.normalize(stream.format("b, a")) == sessions.normalize(stream.format("a, b"))
    written = (
        "date=2024-01-01/region=us/part-{}-d7e6b0c599534b758efc9140561b1989.c000.snappy.parquet"
    )
    assert sessions.normalize(written.format("6c9a5ad7")) == sessions.normalize(
        written.format("32feb29a")
    )


@pytest.mark.dagster_cli
def test_cheap_sessions_are_what_the_code_prints_now() -> None:
    """The scenarios without Spark, replayed: their blocks equal the replay, normalized."""
    transcripts = sessions.replay(sessions.CHEAP, log=lambda _: None)
    assert set(transcripts) == {"sql-render", "sql-lint-problems", "dg-defs"}
    found = list(sessions.drifts(transcripts))
    assert not found, "\n\n".join(d.diff() for d in found) + (
        "\n\n`make docs-sessions` (or python scripts/docs_sessions.py --only render,lint,dg) "
        "rewrites them"
    )
    replayed = [
        b for b in all_blocks() if all(name in transcripts for name in b.names)
    ]  # the blocks compared
    assert len(replayed) == 3


@pytest.mark.dagster_cli
@pytest.mark.s3
@pytest.mark.kafka
@pytest.mark.postgres
def test_local_servers_sessions_are_what_the_scripts_print_now() -> None:
    """The Local servers guide's sessions, replayed without its `partlake run` (Spark): each
    server started from its script on the guide's ports, status and settings, a topic and a
    table made, the code location planned against all three, then every server stopped by its
    PID (whatever fails)."""
    transcripts = sessions.replay([sessions.SERVERS_CHEAP], log=lambda _: None)
    assert set(transcripts) == {
        "servers-s3",
        "servers-kafka",
        "servers-pg",
        "servers-plan",
        "servers-stop",
    }
    found = list(sessions.drifts(transcripts))
    assert not found, "\n\n".join(d.diff() for d in found) + (
        "\n\n`python scripts/docs_sessions.py --only servers` rewrites them"
    )
    for port in (9000, 9092, 5433):  # nothing left listening
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"a server still listens on {port}"
