"""Runs whose process died: marked failed, their pool slots freed, and no wait without a word.

The production outage: two `partlake run` processes killed with SIGKILL inside their steps left
both slots of the `partlake` pool claimed by runs that stayed STARTED forever, and the next run
of the pool waited for them without printing anything. These tests drive the real `partlake`
CLI in subprocesses against one Dagster instance whose pool holds 2 slots.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from dagster_partlake import POOL
from tests.conftest import REPO_ROOT, cli_env
from tests.hold_defs import HOLD_ENV

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "tests.hold_defs"


@pytest.fixture
def env(tmp_path: Path, lake: Path) -> dict[str, str]:
    env = cli_env(tmp_path, lake)
    home = Path(env["DAGSTER_HOME"])
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\n"
        "concurrency:\n  pools:\n    granularity: op\n    default_limit: 2\n"
    )
    return env


def start(env: dict[str, str], *args: str, log: Path) -> subprocess.Popen[str]:
    handle = open(log, "w")  # noqa: SIM115 - the process writes it until it ends
    return subprocess.Popen(
        [sys.executable, "-m", "dagster_partlake.cli", "run", "-m", MODULE, *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_for(check, *, timeout: float, what: str, logs: tuple[Path, ...] = ()):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    tails = "".join(f"\n--- {log}:\n{log.read_text()[-4000:]}" for log in logs if log.exists())
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{tails}")


def held_pids(hold: Path) -> set[int]:
    return {int(p.name.split(".")[0]) for p in hold.glob("*.started")}


def test_two_runs_killed_in_their_steps_do_not_hang_the_next_run(
    env: dict[str, str], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.mkdir()
    holding = {**env, HOLD_ENV: str(hold)}
    first = start(holding, "--max-parallel", "1", log=tmp_path / "first.log")
    second = start(holding, "--max-parallel", "1", log=tmp_path / "second.log")
    # Both steps run: each claimed one of the pool's two slots.
    # Started together on a new instance: both open it (they once raced to create its tables).
    wait_for(
        lambda: held_pids(hold) >= {first.pid, second.pid},
        timeout=120,
        what="both steps",
        logs=(tmp_path / "first.log", tmp_path / "second.log"),
    )
    for proc in (first, second):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    dead = list(instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED])))
    assert len(dead) == 2
    assert len(instance.event_log_storage.get_concurrency_info(POOL).claimed_slots) == 2

    # The next run: before the fix it waited for those slots forever, saying nothing.
    third = subprocess.run(
        [sys.executable, "-m", "dagster_partlake.cli", "run", "-m", MODULE],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = third.stdout
    assert third.returncode == 0, out + third.stderr[-3000:]
    print(out)  # what a user sees (docs/guides/daemon.md shows it)
    for run in dead:
        line = next(line_ for line_ in out.splitlines() if run.run_id in line_)
        assert line.startswith("[FAILED] Run ") and "is gone" in line, out
        pid = run.tags["partlake/pid"]
        assert f"process {pid} on host" in line
    assert sum(line_.startswith("[OK] held ") for line_ in out.splitlines()) == 3, out
    for run in dead:
        now = instance.get_run_by_id(run.run_id)
        assert now is not None and now.status == DagsterRunStatus.FAILURE
    info = instance.event_log_storage.get_concurrency_info(POOL)
    assert info.claimed_slots == [] and info.pending_steps == []
    assert not list((Path(env["DAGSTER_HOME"]) / "partlake_run_processes").glob("*"))


def partlake(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dagster_partlake.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_no_op_run_marks_the_runs_of_a_dead_process_failed(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Even with nothing to run, the next `partlake run` finds the dead process's run."""
    first = partlake(env, "run", "-m", MODULE, "--select", "quiet")
    assert first.returncode == 0 and "[OK] quiet" in first.stdout, first.stdout + first.stderr
    hold = tmp_path / "hold"
    hold.mkdir()
    victim = start(
        {**env, HOLD_ENV: str(hold)},
        "--select",
        "held",
        "--max-parallel",
        "1",
        log=tmp_path / "victim.log",
    )
    wait_for(lambda: victim.pid in held_pids(hold), timeout=120, what="the step")
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    (dead,) = instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED]))

    no_op = partlake(env, "run", "-m", MODULE, "--select", "quiet")
    assert no_op.returncode == 0, no_op.stdout + no_op.stderr[-3000:]
    lines = no_op.stdout.splitlines()
    assert lines[0].startswith(f"[FAILED] Run {dead.run_id} was still STARTED but its process")
    assert lines[-1] == "Everything is fresh: nothing to run."
    now = instance.get_run_by_id(dead.run_id)
    assert now is not None and now.status == DagsterRunStatus.FAILURE
    assert instance.event_log_storage.get_concurrency_info(POOL).claimed_slots == []
    # Said once: the next no-op run has nothing to mark.
    assert partlake(env, "run", "-m", MODULE, "--select", "quiet").stdout.splitlines() == [
        "Everything is fresh: nothing to run."
    ]


def test_a_run_waiting_for_a_pool_slot_says_which_pool_and_who_holds_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A live holder: the waiting run says what it waits for, on the terminal and in its log."""
    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    instance.event_log_storage.set_concurrency_slots(POOL, 1)
    hold = tmp_path / "hold"
    hold.mkdir()
    holder = start({**env, HOLD_ENV: str(hold)}, "--max-parallel", "1", log=tmp_path / "h.log")
    wait_for(lambda: holder.pid in held_pids(hold), timeout=120, what="the holder's step")
    (holding,) = instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED]))
    waiter_log = tmp_path / "waiter.log"
    waiter = start(env, "--max-parallel", "1", log=waiter_log)
    said = wait_for(
        lambda: [
            line_ for line_ in waiter_log.read_text().splitlines() if line_.startswith("[WAITING]")
        ],
        timeout=120,
        what="the waiting run to say why",
    )
    print(said[0])  # what a user sees (docs/guides/daemon.md shows it)
    assert f"for a slot of Dagster pool {POOL} (limit 1)" in said[0]
    assert f"held by run(s) {holding.run_id[:8]} (STARTED, process {holder.pid} on host" in said[0]
    (hold / "release").touch()
    assert waiter.wait(timeout=300) == 0, waiter_log.read_text()
    assert holder.wait(timeout=300) == 0
    waiting_run = next(
        r
        for r in instance.get_runs()
        if r.run_id != holding.run_id and said[0].split("(", 2)[1].startswith(r.run_id[:8])
    )
    logged = [e.message for e in instance.all_logs(waiting_run.run_id)]
    assert any(m.startswith("[WAITING]") and holding.run_id[:8] in m for m in logged)


def _worker_started(instance, run, pid: int) -> None:  # type: ignore[no-untyped-def]
    """What a run worker records as it starts: its RUN_START event, which Dagster stores with the
    pid of the process that emitted it."""
    from dagster import DagsterEvent, DagsterEventType

    event = DagsterEvent(DagsterEventType.RUN_START.value, job_name=run.job_name, pid=pid)
    instance.report_dagster_event(event, run.run_id)


def test_the_launcher_tells_run_monitoring_whether_a_run_worker_lives(instance) -> None:  # type: ignore[no-untyped-def]
    """What the daemon's run monitoring asks `MonitoredRunLauncher` about a launched run: its
    worker recorded itself at start; alive -> RUNNING; killed -> FAILED, and its pool slots are
    freed. A log line naming a pid is not read."""
    import json as json_module

    from dagster._core.events import EngineEventData
    from dagster._core.test_utils import create_run_for_test

    from dagster_partlake import MonitoredRunLauncher
    from dagster_partlake.compat import GRPC_INFO_TAG, WorkerStatus

    launcher = MonitoredRunLauncher()
    launcher.register_instance(instance)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        run = create_run_for_test(
            instance,
            job_name="held_job",
            status=DagsterRunStatus.STARTED,
            tags={GRPC_INFO_TAG: json_module.dumps({"host": "localhost", "port": 4000})},
        )
        assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING  # no pid yet
        # Dagster's log line alone says nothing to partlake: no worker known, still RUNNING.
        instance.report_engine_event(
            "Started process for run (pid: 1).", run, EngineEventData.in_process(1)
        )
        health = launcher.check_run_worker_health(run)
        assert health.status == WorkerStatus.RUNNING and "no worker" in (health.msg or "")
        _worker_started(instance, run, worker.pid)
        instance.event_log_storage.set_concurrency_slots(POOL, 2)
        instance.event_log_storage.claim_concurrency_slot(POOL, run.run_id, "held")
        assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING
        worker.kill()
        worker.wait(timeout=30)
        health = launcher.check_run_worker_health(run)
        assert health.status == WorkerStatus.FAILED
        assert f"process {worker.pid} on host" in (health.msg or "")
        assert instance.event_log_storage.get_concurrency_info(POOL).claimed_slots == []
        # A code server on another machine: this one cannot tell, so it never fails the run.
        remote = create_run_for_test(
            instance,
            job_name="held_job",
            status=DagsterRunStatus.STARTED,
            tags={GRPC_INFO_TAG: json_module.dumps({"host": "etl-7.example", "port": 4000})},
        )
        _worker_started(instance, remote, worker.pid)
        assert launcher.check_run_worker_health(remote).status == WorkerStatus.RUNNING
    finally:
        worker.kill()


def test_a_worker_names_itself_on_its_run_and_a_parents_tags_do_not_mislead(instance) -> None:  # type: ignore[no-untyped-def]
    """The tags a worker writes at start (`record_worker`, from DeltaPartitionIOManager's set-up)
    add its start time, so a reused pid is told apart; a re-execution carrying its parent's tags
    (a dead worker's) is judged by its own worker's RUN_START."""
    import json as json_module

    from dagster._core.test_utils import create_run_for_test

    from dagster_partlake.compat import GRPC_INFO_TAG
    from dagster_partlake.orchestration.workers import worker_of_run
    from dagster_partlake.processes import PID_TAG, PROCESS_START_TAG, process_tags, record_worker

    launched = {GRPC_INFO_TAG: json_module.dumps({"host": "localhost", "port": 4000})}
    run = create_run_for_test(
        instance, job_name="held_job", status=DagsterRunStatus.STARTED, tags=launched
    )
    assert record_worker(instance, run) is True
    run = instance.get_run_by_id(run.run_id)
    assert run.tags[PID_TAG] == str(os.getpid()) and PROCESS_START_TAG in run.tags
    assert record_worker(instance, run) is False  # names this process already
    _worker_started(instance, run, os.getpid())
    worker = worker_of_run(instance, run)
    assert worker is not None and worker.pid == os.getpid() and worker.started is not None

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    child = create_run_for_test(
        instance,
        job_name="held_job",
        status=DagsterRunStatus.STARTED,
        tags={**launched, **process_tags(os.getpid()), PID_TAG: str(gone.pid)},
    )
    _worker_started(instance, child, os.getpid())
    worker = worker_of_run(instance, child)
    assert worker is not None and worker.pid == os.getpid()


def test_a_reused_pid_is_not_the_runs_process() -> None:
    from dagster_partlake.orchestration.workers import Worker, alive, this_host, this_process

    me = this_process()
    assert alive(me) is True
    assert alive(Worker(me.host, me.pid, started=(me.started or 0) - 3600)) is False
    newcomer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # The run's worker logged this pid before the process now holding it started.
        assert alive(Worker(this_host(), newcomer.pid, not_after=time.time() - 600)) is False
        assert alive(Worker(this_host(), newcomer.pid, not_after=time.time() + 1)) is True
    finally:
        newcomer.kill()
        newcomer.wait(timeout=30)
    assert alive(Worker(this_host(), newcomer.pid)) is False
    assert alive(Worker("etl-7.example", me.pid)) is None


def test_slots_of_a_run_another_process_marked_failed_are_freed(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A dead run that the code server, the UI or a user marked failed keeps its pool slot
    (Dagster frees it only from its daemon's run monitoring): with no daemon, the next
    `partlake run` frees it, says so, and runs instead of waiting for a run that ended."""
    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    instance.event_log_storage.set_concurrency_slots(POOL, 1)
    hold = tmp_path / "hold"
    hold.mkdir()
    victim = start({**env, HOLD_ENV: str(hold)}, "--max-parallel", "1", log=tmp_path / "v.log")
    wait_for(lambda: victim.pid in held_pids(hold), timeout=120, what="the step")
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    (dead,) = instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED]))
    # Marked failed the way the code server marks a worker killed by a signal: slots stay held.
    instance.report_run_failed(dead, "Run execution process was terminated by signal 9.")
    info = instance.event_log_storage.get_concurrency_info(POOL)
    assert [s.run_id for s in info.claimed_slots] == [dead.run_id]

    time.sleep(10)  # the run ended more than ENDED_GRACE_SECONDS ago
    after = partlake(env, "run", "-m", MODULE, "--select", "held")
    assert after.returncode == 0, after.stdout + after.stderr[-3000:]
    lines = after.stdout.splitlines()
    print(after.stdout)
    freed = [line for line in lines if dead.run_id in line]
    assert len(freed) == 1 and freed[0].startswith(f"[FREED] Run {dead.run_id} ended FAILURE")
    assert "slots of Dagster pool partlake" in freed[0]
    assert sum(line.startswith("[OK] held ") for line in lines) == 3, after.stdout
    assert instance.event_log_storage.get_concurrency_info(POOL).claimed_slots == []
