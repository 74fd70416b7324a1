"""A lake on the real S3 server (s3proxy, the session's `s3` fixture), through the real `partlake`
CLI in subprocesses (tests/s3_defs.py): two concurrent runs on different partitions of one table
both land, on the same partition the last one wins whole; `plan`, `run` and `history` on S3; a
plan with nothing changed makes at most one LIST per table and no GET of a data file (counted at
the server's door by scripts/s3_counter.py); on the lake the concurrent runs filled, `maintain`
(compact, vacuum, checkpoint: nothing stale), `delete`, `history`, `restore` and `sql render`,
then Dagster's automation evaluation of `partlake_stale()` finds what `partlake plan` finds; wrong
credentials, a missing bucket and a wrong endpoint each give one clear line naming the table.
In real Dagster runs on the shared Spark (`make test-extended`): incremental inputs (log-based,
watermark) and a stream (landing folder, checkpoint and tables on S3) read exactly what is new.
The fault drill (`make test-faults`, marker `faults`): the S3 server stopped during a run and
started again."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest
from dagster import (
    AssetIn,
    AssetsDefinition,
    DagsterInstance,
    Definitions,
    asset,
    materialize,
)
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    model_kind_metadata,
    partlake_source,
)
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import log_versions
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from dagster_partlake.records.queries import newest_record, read_record
from dagster_partlake.storage.location import table_location
from tests import stream_defs
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


@dataclass(frozen=True)
class DiffLake:
    """The lake `s3://lake/diff` two concurrent `partlake run`s filled, one partition each."""

    tmp: Path  # the processes' Dagster instances and state caches
    runs: list[subprocess.CompletedProcess[str]]
    original: list[tuple[str, int, str]]  # `parts`' rows as the runs left them


@pytest.fixture(scope="module")
def diff_lake(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> DiffLake:
    """Filled once for the module: the concurrent-writers test checks how, the CLI test then
    maintains, deletes and restores on it (two files per partition: compaction has work)."""
    tmp = tmp_path_factory.mktemp("s3-diff")
    first = s3_env(tmp, s3, "diff", "first", S3_TEST_PARTS="p1", S3_TEST_TAG="first")
    second = s3_env(tmp, s3, "diff", "second", S3_TEST_PARTS="p2", S3_TEST_TAG="second")
    runs = run_together({**first, "S3_TEST_FILES": "2"}, {**second, "S3_TEST_FILES": "2"})
    filled = all(r.returncode == 0 for r in runs)
    return DiffLake(tmp, runs, rows(table(s3, "diff/warehouse/parts")) if filled else [])


def test_concurrent_runs_on_different_partitions_both_land_then_plan_history_requests(
    s3: S3Server, diff_lake: DiffLake
) -> None:
    for done in diff_lake.runs:
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
    both = s3_env(diff_lake.tmp, s3, "diff", "both", S3_TEST_PARTS="p1,p2")
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


def live_files(delta: DeltaTable) -> set[str]:
    """The table's live data files, relative to its root."""
    base = delta.table_uri.rstrip("/") + "/"
    return {uri.removeprefix(base) for uri in delta.file_uris()}


def objects(s3: S3Server, path: str, log: bool = False) -> set[str]:
    """The data files (or with `log`, the log's files) of the table at `path` as the server
    lists them."""
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"{path}/")
    keys = {o["Key"].removeprefix(f"{path}/") for o in listed.get("Contents", [])}
    assert not listed["IsTruncated"], "more than one page of objects"
    return {k for k in keys if k.startswith("_delta_log/") == log}


@pytest.mark.extended  # CI: the commands on local disk, S3 runs above, surface/test_storage_s3.py
def test_maintain_delete_history_restore_and_sql_on_s3(s3: S3Server, diff_lake: DiffLake) -> None:
    """Every table command on the lake the concurrent runs filled, one process each, the Delta
    table on the server checked after each: compaction, vacuum and a checkpoint invalidate
    nothing; a delete of rows shows in the history and the plan; a restore brings the rows
    back."""
    assert diff_lake.original, "the concurrent runs that fill the lake failed"
    env = s3_env(diff_lake.tmp, s3, "diff", "cli", S3_TEST_PARTS="p1,p2")
    path = "diff/warehouse/parts"
    before = table(s3, path)
    assert len(live_files(before)) == 4  # two files per partition

    def partlake(*args: str) -> subprocess.CompletedProcess[str]:
        done = run_partlake(*args, env=env, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert s3.secret_key not in done.stdout + done.stderr
        return done

    def plan() -> set[tuple[str, str, str]]:
        found = json.loads(partlake("plan", "-m", MODULE, "--json").stdout)
        return {(i["asset"], i["partition"], i["reason"]) for i in found}

    # Compaction: one file per partition, the same rows, in one commit.
    done = partlake("maintain", "-m", MODULE, "--select", "parts", "--json", "compact")
    [compacted] = [json.loads(line) for line in done.stdout.splitlines()]
    assert (compacted["status"], compacted["version"]) == ("ok", before.version() + 1), compacted
    parts = table(s3, path)
    assert len(live_files(parts)) == 2 and rows(parts) == diff_lake.original
    # Vacuum without retention: exactly the four replaced files leave the server.
    assert objects(s3, path) == live_files(before) | live_files(parts)
    done = partlake(
        "maintain", "-m", MODULE, "--select", "parts", "--json", "vacuum",
        "--retention-hours", "0", "--force",
    )  # fmt: skip
    [vacuumed] = [json.loads(line) for line in done.stdout.splitlines()]
    assert set(vacuumed["files"]) == live_files(before), vacuumed
    assert objects(s3, path) == live_files(parts)
    # A checkpoint, and the JSON commits no partlake reader needs any more deleted.
    compacted_version = table(s3, path).version()  # after the vacuum's own commits
    done = partlake(
        "maintain", "-m", MODULE, "--select", "parts", "--json", "checkpoint",
        "--keep-log-hours", "0",
    )  # fmt: skip
    [checkpointed] = [json.loads(line) for line in done.stdout.splitlines()]
    assert checkpointed["version"] == compacted_version and checkpointed["json_removed"]
    log = {k.removeprefix("_delta_log/") for k in objects(s3, path, log=True)}
    assert f"{compacted_version:020d}.checkpoint.parquet" in log, sorted(log)
    assert not {f"{v:020d}.json" for v in checkpointed["json_removed"]} & log
    assert plan() == set()  # maintenance made nothing stale

    # A delete of rows of one partition, in the history, then in the plan after a restore.
    done = partlake(
        "delete", "-m", MODULE, "parts", "--where", "n = 0", "--partition", "p1", "--json"
    )
    deleted = json.loads(done.stdout)
    assert (deleted["rows_deleted"], deleted["partitions"]) == (1, ["p1"]), deleted
    assert deleted["version"] == compacted_version + 1
    without = [r for r in diff_lake.original if r[:2] != ("p1", 0)]
    assert rows(table(s3, path)) == without
    history = json.loads(partlake("history", "-m", MODULE, "parts", "--json").stdout)
    assert (history[0]["version"], history[0]["operation"]) == (deleted["version"], "delete")
    assert history[0]["predicate"] == "n = 0" and history[0]["rows_deleted"] == 1, history[0]
    done = partlake(
        "restore", "-m", MODULE, "parts", "--version", str(compacted_version), "--partition", "p1"
    )
    assert done.stdout.startswith(
        f"Restored parts partition p1 to version {compacted_version} in version "
        f"{deleted['version'] + 1}"
    ), done.stdout
    assert rows(table(s3, path)) == diff_lake.original
    assert plan() == {("parts", "p1", "out_of_band"), ("part_totals", "p1", "upstream_changed")}

    # `partlake sql` reads no table (render and lint run nothing): the example's SQL model
    # rendered with its lake on S3. Its runs on S3 are the daemon test's (test_daemon.py).
    example = {**env, "PARTLAKE_LAKE_ROOT": s3.uri("diff-example")}
    rendered = run_partlake(
        "sql", "render", "-m", "definitions", "marts/monthly_region_summary",
        "--partition", "2024-01|us", env=example, timeout=300,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    assert "31 partition(s): 2024-01-01|us, 2024-01-02|us ... 2024-01-31|us" in rendered.stdout, (
        rendered.stdout
    )


def test_partlake_stale_on_s3_finds_what_partlake_plan_finds(
    s3: S3Server, diff_lake: DiffLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dagster's own automation evaluation of `partlake_stale()` over the S3 lake after a delete
    of rows from outside partlake (in this process: the condition runs in the code server, not
    in a subprocess of ours): exactly the partitions `partlake plan` finds, each under its
    reason."""
    import importlib

    from dagster import AssetKey, AssetsDefinition, DagsterInstance, evaluate_automation_conditions

    from dagster_partlake import partlake_stale
    from tests.test_freshness import _true_labels

    assert diff_lake.original, "the concurrent runs that fill the lake failed"
    # A change of its own, so the test holds alone: a delete by another Delta writer.
    parts = table(s3, "diff/warehouse/parts")
    first = min(n for part, n, _ in rows(parts) if part == "p1")
    parts.delete(f"part = 'p1' AND n = {first}")
    env = s3_env(diff_lake.tmp, s3, "diff", "stale", S3_TEST_PARTS="p1,p2")
    plan = run_partlake("plan", "-m", MODULE, "--json", env=env, timeout=180)
    assert plan.returncode == 0, plan.stderr[-3000:]
    found = {(i["asset"], i["partition"], i["reason"]) for i in json.loads(plan.stdout)}
    assert found == {("parts", "p1", "out_of_band"), ("part_totals", "p1", "upstream_changed")}
    for name in ("PARTLAKE_LAKE_ROOT", "PARTLAKE_HOME", "S3_TEST_PARTS", *s3.storage_options()):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("PARTLAKE_CACHE_DIR", str(tmp_path / "state-cache"))
    defs = importlib.reload(importlib.import_module(MODULE)).defs  # its lake root from the env
    stale = partlake_stale()
    automated = Definitions(
        assets=[
            a.map_asset_specs(lambda spec: spec.replace_attributes(automation_condition=stale))
            if isinstance(a, AssetsDefinition)
            else a
            for a in defs.assets  # type: ignore[union-attr]
        ],
        resources=defs.resources,
    )
    with DagsterInstance.ephemeral() as instance:
        result = evaluate_automation_conditions(automated, instance)
    requested = {
        (name, partition)
        for name in ("parts", "part_totals")
        for partition in result.get_requested_partitions(AssetKey(name))
    }
    assert requested == {(name, partition) for name, partition, _ in found}
    for name, _, reason in found:
        (evaluated,) = [r for r in result.results if r.key == AssetKey(name)]
        assert reason in _true_labels(evaluated), (name, reason)


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


def s3_table(s3: S3Server, root: str, name: str) -> DeltaTable:
    """The table of asset `name` in the lake `root` (an `s3://` URI), through its location."""
    where = table_location(root, [name], storage_options=s3.storage_options())
    return DeltaTable(where.delta_uri, storage_options=where.delta_options)


def ids_in(delta: DeltaTable, column: str = "id") -> list[int]:
    return sorted(r[column] for r in delta.to_pyarrow_table(columns=[column]).to_pylist())


@pytest.mark.spark
@pytest.mark.extended  # outside CI: CI has the local stream and incremental tests
def test_incremental_inputs_on_s3_read_exactly_the_new_rows(
    spark_s3: object, s3: S3Server, instance: DagsterInstance, tmp_path: Path, monkeypatch
) -> None:
    """A log-based and a watermark input over a source table on S3, in real Dagster runs on the
    shared Spark, their own tables and records (versions read, watermarks) on S3 too: each run
    reads exactly the new rows; with nothing new nothing is stale and a run reads nothing."""
    monkeypatch.setenv("PARTLAKE_HOME", str(tmp_path / "partlake"))
    root, options = s3.uri("incremental"), s3.storage_options()
    events = partlake_source("events")
    consumers = [
        _incremental_consumer("event_log", "log"),
        _incremental_consumer("event_marks", {"column": "updated_at"}),
    ]
    spark = SparkResource(master="local[2]", storage_options=options)
    resources = {
        "spark": spark,
        "io_manager": DeltaPartitionIOManager(spark=spark, root=root, storage_options=options),
    }
    graph = LakeGraph(Definitions(assets=[events, *consumers], resources=resources))
    source = table_location(root, ["events"], storage_options=options)

    def append(ids: range, hour: int) -> None:
        at = dt.datetime(2024, 1, 1, hour, tzinfo=dt.UTC)
        rows = pa.table(
            {
                "id": pa.array(list(ids), pa.int64()),
                "updated_at": pa.array([at] * len(ids), pa.timestamp("us", tz="UTC")),
            }
        )
        write_deltalake(source.delta_uri, rows, mode="append", storage_options=source.delta_options)

    def run() -> None:
        result = materialize(
            [events, *consumers],
            selection=[c.key for c in consumers],
            resources=resources,
            instance=instance,
        )
        assert result.success

    def stale() -> list[tuple[str, str]]:
        return sorted((i.asset, i.reason) for i in make_plan(graph, StateCache()).plan.items)

    append(range(0, 5), hour=1)
    run()
    append(range(5, 8), hour=2)
    assert stale() == [("event_log", "upstream_changed"), ("event_marks", "upstream_changed")]
    run()
    for name in ("event_log", "event_marks"):  # each row once: the second run read three
        assert ids_in(s3_table(s3, root, name)) == list(range(8)), name
    assert stale() == []
    # Nothing new: a forced run reads nothing, and the records still point at the newest data.
    run()
    for name in ("event_log", "event_marks"):
        assert ids_in(s3_table(s3, root, name)) == list(range(8)), name
    log = newest_record(table_location(root, ["event_log"], storage_options=options))
    marks = newest_record(table_location(root, ["event_marks"], storage_options=options))
    assert log is not None and marks is not None
    assert log.upstream_versions["events"] == s3_table(s3, root, "events").version()
    assert marks.watermarks["events"] == {"value": "2024-01-01 02:00:00", "type": "timestamp"}
    assert stale() == []


def _incremental_consumer(name: str, incremental: object) -> AssetsDefinition:
    @asset(
        name=name,
        ins={"events": AssetIn(metadata={"partlake/incremental": incremental})},
        metadata=model_kind_metadata("append"),
    )
    def consumer(events: DataFrame) -> DataFrame:
        return events.select("id", "updated_at")

    return consumer


@pytest.mark.spark
@pytest.mark.extended  # outside CI: CI has the local stream and incremental tests
def test_a_stream_on_s3_commits_each_landed_row_once_then_nothing_new(
    spark_s3: object, s3: S3Server, instance: DagsterInstance, tmp_path: Path, monkeypatch
) -> None:
    """tests/stream_defs.py's lake on S3: files put in the landing folder on the server, the
    stream's table and its checkpoint on S3, a stream of that table's commits and a batch asset
    downstream; a new file streams its rows only (resuming from the checkpoint on S3) and
    refreshes exactly its day downstream; with nothing new the next refresh runs nothing."""
    monkeypatch.setenv("PARTLAKE_HOME", str(tmp_path / "partlake"))
    root, options = s3.uri("stream"), s3.storage_options()
    spark = SparkResource(master="local[2]", storage_options=options)
    assets = stream_defs.build()
    defs = stream_defs.definitions(assets, spark, root=root, storage_options=options)
    client = s3.client()

    def land(name: str, ids: range, day: str) -> None:
        body = stream_defs.json_events(ids, day)
        client.put_object(Bucket=s3.bucket, Key=f"stream/warehouse/landing/{name}", Body=body)

    def stale() -> list[tuple[str, str | None, str]]:
        items = make_plan(LakeGraph(defs), StateCache()).plan.items
        return sorted(((i.asset, i.partition, i.reason) for i in items), key=str)

    def batches() -> list[int | None]:
        where = table_location(root, ["events"], storage_options=options)
        records = [read_record(where, v) for v in log_versions(where)]
        return [r.stream_batch for r in records if r is not None and r.stream_batch is not None]

    land("a.json", range(0, 30), "2024-01-02")
    land("b.json", range(30, 50), "2024-01-03")
    assert ("events", None, "missing") in stale()
    outcomes = refresh(LakeGraph(defs), instance)
    assert outcomes and all(o.ok for o in outcomes), outcomes
    assert stale() == []
    assert ids_in(s3_table(s3, root, "events"), "event_id") == list(range(50))
    first_batches = batches()
    assert first_batches
    # The query's checkpoint is on the server, beside the table.
    listed = client.list_objects_v2(
        Bucket=s3.bucket, Prefix="stream/warehouse/events/_partlake_stream/"
    )
    assert any("/offsets/" in o["Key"] for o in listed.get("Contents", [])), listed

    land("c.json", range(50, 60), "2024-01-03")
    assert stale() == [("events", None, "upstream_changed")]
    outcomes = refresh(LakeGraph(defs), instance)
    ran = sorted((o.asset, o.partition) for o in outcomes)
    assert ran == [("daily_totals", "2024-01-03"), ("event_copy", None), ("events", None)]
    assert [o.rows for o in outcomes if o.asset == "events"] == [10]
    assert ids_in(s3_table(s3, root, "event_copy"), "event_id") == list(range(60))
    totals = s3_table(s3, root, "daily_totals").to_pyarrow_table().to_pylist()
    assert sorted((str(r["date"]), r["events"]) for r in totals) == [
        ("2024-01-02", 30),
        ("2024-01-03", 30),
    ]
    assert len(batches()) == len(first_batches) + 1  # the new file, one batch
    # Nothing new: the next refresh (what `partlake run` does) runs nothing.
    assert refresh(LakeGraph(defs), instance) == []


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
