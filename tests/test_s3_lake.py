"""A lake on the real S3 server (s3proxy, the session's `s3` fixture), through the real `partlake`
CLI in subprocesses (tests/s3_defs.py): two concurrent runs on different partitions of one table
both land, on the same partition the last one wins whole; `plan`, `run` and `history` on S3; a
plan with nothing changed makes at most one LIST per table and no GET of a data file (counted at
the server's door by scripts/s3_counter.py); wrong credentials, a missing bucket and a wrong
endpoint each give one clear line naming the table. The fault drill (`make test-faults`, marker
`faults`): the S3 server stopped during a run and started again."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
from deltalake import DeltaTable

from tests.conftest import REPO_ROOT, run_partlake, subprocess_env
from tests.servers import S3Server, free_port, s3_script, s3_server, wait_until

pytestmark = [pytest.mark.s3, pytest.mark.dagster_cli]

MODULE = "tests.s3_defs"


def s3_env(tmp_path: Path, s3: S3Server, lake: str, name: str, **extra: str) -> dict[str, str]:
    """A `partlake` process on the S3 lake `s3://lake/<lake>`: its own Dagster instance and
    state cache under `tmp_path/name`, the server's AWS variables."""
    home = tmp_path / name / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").touch()
    return subprocess_env(
        **s3.storage_options(),
        PARTLAKE_LAKE_ROOT=s3.uri(lake),
        PARTLAKE_HOME=str(tmp_path / name / "partlake"),
        PARTLAKE_CACHE_DIR=str(tmp_path / name / "state-cache"),
        DAGSTER_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        **extra,
    )


def run_together(*envs: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """`partlake run` in one process per environment, all started at once."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "dagster_partlake.cli", "run", "-m", MODULE],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for env in envs
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def table(s3: S3Server, path: str, version: int | None = None) -> DeltaTable:
    return DeltaTable(s3.uri(path), storage_options=s3.storage_options(), version=version)


def rows(dt: DeltaTable) -> list[tuple[str, int, str]]:
    got = dt.to_pyarrow_table(columns=["part", "n", "tag"]).to_pylist()
    return sorted((r["part"], r["n"], r["tag"]) for r in got)


def _counter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("s3_counter", REPO_ROOT / "scripts/s3_counter.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def counting_proxy(s3: S3Server) -> Iterator[str]:
    """The counting proxy in front of the server; yields its endpoint."""
    counter = _counter()
    port = free_port()
    proxy = counter.serve(s3.endpoint.removeprefix("http://"), port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proxy.shutdown()
        proxy.server_close()


def requests_of(endpoint: str, reset: bool = False) -> list[list[object]]:
    if reset:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/_counter/reset", method="POST"))
        return []
    with urllib.request.urlopen(f"{endpoint}/_counter") as answer:
        return json.loads(answer.read())


def test_concurrent_runs_on_different_partitions_both_land_then_plan_history_requests(
    s3: S3Server, tmp_path: Path
) -> None:
    first = s3_env(tmp_path, s3, "diff", "first", S3_TEST_PARTS="p1", S3_TEST_TAG="first")
    second = s3_env(tmp_path, s3, "diff", "second", S3_TEST_PARTS="p2", S3_TEST_TAG="second")
    for done in run_together(first, second):
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "2 asset partition(s) refreshed, 0 failed." in done.stdout, done.stdout
    # Both commits landed: each run's partition, whole, in the newest version.
    parts = table(s3, "diff/warehouse/parts")
    assert rows(parts) == [("p1", n, "first") for n in range(3)] + [
        ("p2", n, "second") for n in range(3)
    ]
    writes = [h for h in parts.history() if h["operation"] != "CREATE TABLE"]
    assert len(writes) == 2, writes
    assert (s3.data / "lake" / "diff" / "warehouse" / "parts" / "_delta_log").is_dir()

    # A third process sees both partitions fresh, and their history.
    both = s3_env(tmp_path, s3, "diff", "both", S3_TEST_PARTS="p1,p2")
    plan = run_partlake("plan", "-m", MODULE, "--json", env=both, timeout=180)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert json.loads(plan.stdout) == []
    history = run_partlake("history", "-m", MODULE, "parts", env=both, timeout=180)
    assert history.returncode == 0, history.stderr[-3000:]
    assert "parts: 2 commit(s) that changed its data" in history.stdout, history.stdout
    assert s3.secret_key not in plan.stdout + plan.stderr + history.stdout + history.stderr

    # Requests at the server's door: the first plan of a process reads each log once (one LIST
    # per table); a plan with nothing changed after it lists nothing and reads no data file.
    with counting_proxy(s3) as endpoint:
        counted = {**both, "AWS_ENDPOINT_URL": endpoint}
        counts = []
        for _ in range(2):
            requests_of(endpoint, reset=True)
            plan = run_partlake("plan", "-m", MODULE, "--json", env=counted, timeout=180)
            assert plan.returncode == 0 and json.loads(plan.stdout) == [], plan.stderr[-3000:]
            counts.append(requests_of(endpoint))
    counter = _counter()
    for records in counts:
        lists = [r for r in records if counter.kind_of(*map(str, r[:3])) == "list"]
        assert len(lists) <= 2, lists  # at most one LIST per table (parts, part_totals)
        assert counter.summary(records).get("get_data", 0) == 0, records
    assert counter.summary(counts[1]).get("list", 0) == 0, counts[1]


def test_concurrent_runs_on_one_partition_the_last_wins_whole(s3: S3Server, tmp_path: Path) -> None:
    envs = [
        s3_env(tmp_path, s3, "same", tag, S3_TEST_PARTS="p1", S3_TEST_TAG=tag) for tag in ("x", "y")
    ]
    for done in run_together(*envs):
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    parts = table(s3, "same/warehouse/parts")
    newest = parts.version()
    last = rows(parts)
    before = rows(table(s3, "same/warehouse/parts", version=newest - 1))
    # Both commits landed, one after the other; the newest holds one run's rows only.
    tags = {r[2] for r in last}, {r[2] for r in before}
    assert tags in (({"x"}, {"y"}), ({"y"}, {"x"})), (last, before)
    assert [r[:2] for r in last] == [("p1", n) for n in range(3)]
    assert [r[:2] for r in before] == [("p1", n) for n in range(3)]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "the credentials were refused"),
        ({"PARTLAKE_LAKE_ROOT": "s3://no-such-bucket/lake"}, "the bucket does not exist"),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}, "the endpoint does not answer"),
    ],
    ids=["wrong-credentials", "missing-bucket", "wrong-endpoint"],
)
def test_a_bad_s3_setting_is_one_clear_line_naming_the_table(
    s3: S3Server, tmp_path: Path, change: dict[str, str], says: str
) -> None:
    env = {**s3_env(tmp_path, s3, "bad", "bad"), **change}
    plan = run_partlake("plan", "-m", MODULE, env=env, timeout=180)
    assert plan.returncode == 1
    errors = [line for line in plan.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, plan.stderr[-3000:]
    assert errors[0].startswith("Error: table part"), errors
    assert says in errors[0], errors
    assert "Traceback" not in plan.stderr and "at org." not in plan.stderr, plan.stderr[-3000:]
    assert s3.secret_key not in plan.stdout + plan.stderr


@pytest.mark.faults
def test_the_s3_server_stopped_during_a_run_then_started_again(tmp_path: Path) -> None:
    """A run that loses the server fails naming the endpoint, commits nothing; with the server
    back, the next run refreshes what was due."""
    with s3_server(tmp_path / "own-server") as s3:
        ok = s3_env(tmp_path, s3, "drill", "fill", S3_TEST_PARTS="p1", S3_TEST_TAG="first")
        done = run_partlake("run", "-m", MODULE, env=ok, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        version = table(s3, "drill/warehouse/parts").version()

        started = tmp_path / "parts-started"
        lost = s3_env(
            tmp_path, s3, "drill", "lost", S3_TEST_PARTS="p1,p2", S3_TEST_TAG="second",
            S3_TEST_STARTED=str(started), S3_TEST_SLEEP="20",
        )  # fmt: skip
        run = subprocess.Popen(
            [sys.executable, "-m", "dagster_partlake.cli", "run", "-m", MODULE],
            cwd=REPO_ROOT, env=lost, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_until(started.exists, timeout=600, what="the run's parts step to start")
            stopped = s3_script(s3.state, "stop", timeout=60)
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
            out, err = run.communicate(timeout=600)
        finally:
            if run.poll() is None:
                run.kill()
        assert run.returncode != 0, out[-2000:]
        failed = [line for line in out.splitlines() if line.startswith("[FAILED]")]
        assert failed and s3.endpoint in out, out[-3000:] + err[-3000:]
        assert s3.secret_key not in out + err

        port = s3.endpoint.rsplit(":", 1)[1]
        again = s3_script(
            s3.state, "start", "--port", port, "--bucket", s3.bucket,
            "--access-key", s3.access_key, "--secret-key", s3.secret_key,
        )  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        # Nothing half-committed: the table is as the first run left it.
        parts = table(s3, "drill/warehouse/parts")
        assert parts.version() == version
        assert rows(parts) == [("p1", n, "first") for n in range(3)]
        back = {**lost, "S3_TEST_SLEEP": "0", "S3_TEST_STARTED": ""}
        done = run_partlake("run", "-m", MODULE, env=back, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert rows(table(s3, "drill/warehouse/parts")) == [
            ("p1", n, "first") for n in range(3)
        ] + [("p2", n, "second") for n in range(3)]


def test_a_failed_runs_line_shows_partlakes_error_not_the_oserror_it_wraps() -> None:
    """What the stopped-server drill meets: Dagster's wrapper, then partlake's `StorageError`
    naming the table and endpoint, then pyarrow's bare `OSError`."""
    from dagster._utils.error import SerializableErrorInfo as Info

    from dagster_partlake.orchestration.runner import _root_cause

    bare = Info("OSError: Kernel error -> Generic S3 error\n", [], "OSError")
    ours = Info(
        "dagster_partlake.errors.StorageError: cannot access s3://lake/t (endpoint "
        "http://127.0.0.1:9): the endpoint does not answer\n",
        [],
        "StorageError",
        cause=bare,
    )
    wrapped = Info("DagsterExecutionHandleOutputError: Error occurred\n", [], "X", cause=ours)
    assert _root_cause(wrapped) == (
        "cannot access s3://lake/t (endpoint http://127.0.0.1:9): the endpoint does not answer"
    )
    # Without a partlake error on the way, the innermost cause, as before.
    assert _root_cause(Info("X: wrapper\n", [], "X", cause=bare)) == bare.message.strip()
