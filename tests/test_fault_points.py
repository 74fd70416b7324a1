"""Fault points (`dagster_partlake.faults`): where a drill stops a process to kill it there.

Real processes: two take passes through one point at once, each pass is taken once, a paused
process says what it waits for and goes on when released."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.faults import DIR_ENV, fault_point
from tests.conftest import REPO_ROOT, subprocess_env

PASS = "from dagster_partlake.faults import fault_point; fault_point('before_commit'); print('on')"


def passing(drill: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PASS],
        cwd=REPO_ROOT,
        env=subprocess_env(**{DIR_ENV: str(drill)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_one_pass_pauses_one_process_until_released(tmp_path: Path) -> None:
    (tmp_path / "points").write_text("before_commit:1,after_commit:1")
    first, second = passing(tmp_path), passing(tmp_path)
    # Exactly one takes the pass and waits; the other goes on at once.
    done = []
    deadline = time.monotonic() + 60
    while not done and time.monotonic() < deadline:
        done = [p for p in (first, second) if p.poll() is not None]
        time.sleep(0.1)
    [went_on] = done
    paused = second if went_on is first else first
    assert went_on.communicate()[0] == "on\n"
    [marker] = tmp_path.glob("before_commit.*.paused")
    assert marker.name == "before_commit.1.paused"
    assert marker.read_text() == str(paused.pid)
    time.sleep(1)
    assert paused.poll() is None  # still waiting
    (tmp_path / "before_commit.1.release").touch()
    out, err = paused.communicate(timeout=60)
    assert out == "on\n"
    assert err == (
        f"partlake fault drill: paused at before_commit (pass 1, pid {paused.pid}) until "
        f"{tmp_path / 'before_commit.1.release'} exists\n"
    )
    # The pass is spent: the next process goes on at once.
    again = passing(tmp_path)
    assert again.communicate(timeout=60)[0] == "on\n"


def test_without_a_drill_or_an_armed_point_nothing_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DIR_ENV, raising=False)
    fault_point("before_commit")
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    fault_point("before_commit")  # no points file yet
    (tmp_path / "points").write_text("after_commit:1")
    fault_point("before_commit")  # not armed
    (tmp_path / "points").write_text("before_comit:1")
    with pytest.raises(PartlakeConfigError, match="unknown fault point 'before_comit'"):
        fault_point("before_commit")


def test_a_point_for_one_table_lets_the_others_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    (tmp_path / "points").write_text("before_commit@clean_events:1")
    fault_point("before_commit", "staging/events")  # another table's commit goes on
    fault_point("before_commit")
    assert not list(tmp_path.glob("*.paused"))
    (tmp_path / "before_commit.1.release").touch()  # released beforehand: it pauses and goes on
    fault_point("before_commit", "clean_events")
    assert (tmp_path / "before_commit.1.paused").read_text() == str(os.getpid())
