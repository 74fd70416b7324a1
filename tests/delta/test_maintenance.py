"""Table maintenance against real Delta tables: compaction (Spark), vacuum and checkpoints
(delta-rs only), and `partlake maintain` on the example lake through the real CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from benchmarks.state_sync_commits import build_table
from dagster_partlake.delta import (
    StateCache,
    checkpoint_table,
    commit_staged,
    compact_table,
    stage_partitions,
    vacuum_table,
    write_partitions,
)
from dagster_partlake.delta import writer as writer_module
from dagster_partlake.delta.snapshot import Snapshot
from dagster_partlake.delta.table import log_versions
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.layout import STAGING_DIR
from dagster_partlake.records.queries import latest_records, read_record
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.storage.location import TableLocation
from tests.conftest import cli_env, delta_rows, run_partlake
from tests.delta.test_writer import COLUMNS, box, frame, rows_for

DAY = 24 * 3600


def by_partition(root: Path) -> dict[tuple, list[tuple]]:
    """Every row of the table per (date, region), sorted: an order-independent checksum."""
    grouped: dict[tuple, list[tuple]] = {}
    for row in delta_rows(root, COLUMNS):
        grouped.setdefault((row[3], row[4]), []).append(row)
    return grouped


def files_per_partition(root: Path) -> Counter:
    actions = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True))
    dates = actions.column("partition.date").to_pylist()
    regions = actions.column("partition.region").to_pylist()
    return Counter((str(d), r) for d, r in zip(dates, regions, strict=True))


def live_paths(root: Path) -> set[str]:
    return {os.path.basename(u) for u in DeltaTable(str(root)).file_uris()}


def stage(spark, root: Path, rows, days, regions, *, files: int, removal="selection", **kw):
    return stage_partitions(
        frame(spark, rows).repartition(files),
        str(root),
        partition_by=["date", "region"],
        selection=box(days, regions),
        partition_ids=[f"{days[0]}|{r}" for r in sorted(regions)],
        removal=removal,
        **kw,
    )


def big_partition(n: int) -> list[tuple]:
    return [
        (100_000 + i, Decimal(f"{i % 97}.5"), dt.datetime(2024, 1, 3, i % 24, tzinfo=dt.UTC))
        + (dt.date(2024, 1, 3), "eu")
        for i in range(n)
    ]


@pytest.fixture
def small_files(spark, tmp_path: Path) -> Path:
    """2024-01-02|eu: 6 small files; 2024-01-02|us: 1 file; 2024-01-03|eu: one big file plus 3
    small ones appended; merge-style min/max statistics on `id`."""
    root = tmp_path / "t"
    for rows, days, regions, files, removal in [
        (rows_for([2], ["eu", "us"], n=30), (2, 3), {"eu", "us"}, 1, "selection"),
        (rows_for([2], ["eu"], n=60), (2, 3), {"eu"}, 6, "selection"),
        (big_partition(3000), (3, 4), {"eu"}, 1, "selection"),
        (rows_for([3], ["eu"], n=30, offset=500_000), (3, 4), {"eu"}, 3, "none"),
    ]:
        staged = stage(
            spark, root, rows, days, regions, files=files, removal=removal, stats_columns=["id"]
        )
        commit_staged(staged, record=CommitRecord("t", staged.partition_ids, "1", "run"))
    assert files_per_partition(root) == {
        ("2024-01-02", "eu"): 6,
        ("2024-01-02", "us"): 1,
        ("2024-01-03", "eu"): 4,
    }
    return root


@pytest.mark.spark
def test_compaction_keeps_rows_last_updated_and_records(spark, small_files: Path) -> None:
    root = small_files
    table = DeltaTable(str(root))
    sizes = {
        os.path.basename(p): s
        for p, s in zip(
            pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist(),
            pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist(),
            strict=True,
        )
    }
    big = max(sizes, key=sizes.__getitem__)
    untouched = {big} | {
        os.path.basename(u) for u in table.file_uris() if "region=us" in u
    }  # above target, and a partition with one file
    rows = by_partition(root)
    state = StateCache().sync(str(root))
    records = latest_records(str(root), ["2|eu", "2|us", "3|eu"])

    target = sizes[big]  # the big file is at the target, every other file below it
    result = compact_table(spark, str(root), target_file_bytes=target)

    assert result.skipped is None and result.version == DeltaTable(str(root)).version()
    assert {tuple(p.partition_values.values()) for p in result.partitions} == {
        ("2024-01-02", "eu"),
        ("2024-01-03", "eu"),
    }
    assert files_per_partition(root) == {
        ("2024-01-02", "eu"): 1,
        ("2024-01-02", "us"): 1,
        ("2024-01-03", "eu"): 2,  # the big file, and the 3 small ones as one
    }
    assert untouched <= live_paths(root)
    assert by_partition(root) == rows
    after = StateCache().sync(str(root))
    assert after.last_updated == state.last_updated
    assert after.touched_in == state.touched_in
    assert latest_records(str(root), ["2|eu", "2|us", "3|eu"]) == records
    assert read_record(str(root), result.version) is None  # no partlake record in the commit
    with open(root / "_delta_log" / f"{result.version:020d}.json") as log:
        actions = [json.loads(line) for line in log]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["partlake_maintenance"]["operation"] == "compact"
    changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert len(changes) == 2 + 6 + 3 and not any(c["dataChange"] for c in changes)
    # The new files carry min/max statistics on `id`, as the merge writer's files had.
    adds = [json.loads(a["add"]["stats"]) for a in actions if "add" in a]
    assert all("id" in s["minValues"] and "id" in s["maxValues"] for s in adds)

    again = compact_table(spark, str(root), target_file_bytes=target)
    assert again.version is None and again.partitions == ()


@pytest.mark.spark
def test_compaction_writes_ceil_total_over_target_files(spark, small_files: Path) -> None:
    table = DeltaTable(str(small_files))
    actions = pa.table(table.get_add_actions(flatten=True))
    eu2 = [
        s
        for s, p in zip(
            actions.column("size_bytes").to_pylist(),
            actions.column("path").to_pylist(),
            strict=True,
        )
        if "2024-01-02/region=eu" in p
    ]
    rows = by_partition(small_files)
    # 6 files in 3 output files: each about 2 input files big.
    target = sum(eu2) // 3 + 1
    result = compact_table(
        spark,
        str(small_files),
        target_file_bytes=target,
        selection=box((2, 3), {"eu"}),
    )
    assert [(p.files_before, p.files_after) for p in result.partitions] == [(6, 3)]
    assert files_per_partition(small_files)[("2024-01-02", "eu")] == 3
    assert by_partition(small_files) == rows


@pytest.mark.spark
def test_a_partition_replaced_during_compaction_is_not_brought_back(
    spark, small_files: Path, monkeypatch
) -> None:
    """A writer replaces 2024-01-02|eu after the compaction read it: the compaction commits
    nothing and removes its files; the writer's rows stay."""
    from dagster_partlake.maintenance import compact

    new_rows = rows_for([2], ["eu"], n=4, offset=900_000)
    original = compact.commit

    def writer_first(*args, **kwargs):
        write_partitions(
            frame(spark, new_rows),
            str(small_files),
            partition_by=["date", "region"],
            selection=box((2, 3), {"eu"}),
            partition_ids=["2|eu"],
        )
        return original(*args, **kwargs)

    monkeypatch.setattr(compact, "commit", writer_first)
    version = DeltaTable(str(small_files)).version()
    result = compact_table(spark, str(small_files), target_file_bytes=10**9)
    assert result.version is None and "concurrent commit" in (result.skipped or "")
    assert DeltaTable(str(small_files)).version() == version + 1  # the writer's commit only
    assert by_partition(small_files)[(dt.date(2024, 1, 2), "eu")] == sorted(new_rows)
    on_disk = {n for _, _, names in os.walk(small_files) for n in names if n.endswith(".parquet")}
    assert not on_disk - live_paths(small_files) - removed_before(small_files)


def removed_before(root: Path) -> set[str]:
    """Files removed by earlier commits (still on disk until a vacuum)."""
    names = set()
    for version in log_versions(str(root)):
        with open(root / "_delta_log" / f"{version:020d}.json") as log:
            for line in log:
                action = json.loads(line)
                if "remove" in action:
                    names.add(os.path.basename(action["remove"]["path"]))
    return names


@pytest.mark.spark
def test_a_writer_on_a_snapshot_from_before_a_compaction_retries(
    spark, small_files: Path, monkeypatch
) -> None:
    """A writer loaded the table just before a compaction of the same partition committed:
    delta-rs alone would let its commit land and keep the compacted copy of the old rows next to
    the new ones; the shared application transaction makes it retry on the new snapshot."""
    stale = Snapshot(TableLocation.parse(small_files), "t", DeltaTable(str(small_files)))
    compact_table(spark, str(small_files), target_file_bytes=10**9)
    monkeypatch.setattr(writer_module, "open_snapshot", lambda *args, **kwargs: stale)
    new_rows = rows_for([2], ["eu"], n=4, offset=900_000)
    staged = stage(spark, small_files, new_rows, (2, 3), {"eu"}, files=1)
    result = commit_staged(staged)
    assert result.attempts == 2
    assert by_partition(small_files)[(dt.date(2024, 1, 2), "eu")] == sorted(new_rows)


# --- vacuum and checkpoints: delta-rs only -----------------------------------------------------


def parquet(path: Path, value: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": [value]}), path)
    return path.stat().st_size


def age(path: Path, hours: float) -> None:
    then = time.time() - hours * 3600
    os.utime(path, (then, then))


def test_vacuum_removes_exactly_the_unreferenced_old_files(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = DeltaTable.create(
        str(root), pa.schema([("x", pa.int64()), ("p", pa.string())]), partition_by=["p"]
    )

    def add(name: str) -> AddAction:
        size = parquet(root / name, 1)
        return AddAction(
            path=name,
            size=size,
            partition_values={"p": name[2]},
            modification_time=1000,
            data_change=True,
            stats=json.dumps({"numRecords": 1}),
        )

    def remove(name: str, hours_ago: float) -> RemoveAction:
        return RemoveAction(
            path=name,
            data_change=True,
            deletion_timestamp=int((time.time() - hours_ago * 3600) * 1000),
            size=1,
            partition_values={"p": name[2]},
        )

    names = ["p=a/live.parquet", "p=a/gone_long_ago.parquet", "p=b/gone_recently.parquet"]
    record = CommitRecord("t", ("a", "b"), "1", "run").committed(write_id="w", commit_time_ms=1000)
    table.create_write_transaction(
        [add(n) for n in names],
        mode="append",
        schema=table.schema(),
        partition_by=["p"],
        commit_properties=CommitProperties(custom_metadata=record.to_commit_info()),
    )
    table = DeltaTable(str(root))
    table.create_write_transaction(
        [remove(names[1], 10), remove(names[2], 0.5)],
        mode="append",
        schema=table.schema(),
        partition_by=["p"],
    )
    orphan_old = parquet(root / "p=b/orphan_old.parquet", 2)
    parquet(root / "p=b/orphan_new.parquet", 3)
    staged_old = parquet(root / STAGING_DIR / "dead" / "p=a" / "s.parquet", 4)
    parquet(root / STAGING_DIR / "alive" / "p=a" / "s.parquet", 5)
    for path in root.rglob("*"):
        if "_delta_log" not in path.parts and "alive" not in path.parts and "new" not in path.name:
            if "recently" not in path.name:
                age(path, 20)
    gone_size = (root / names[1]).stat().st_size
    state = StateCache().sync(str(root))
    rows = delta_rows(root)

    with pytest.raises(PartlakeConfigError, match=r"0 hours .* force=True"):
        vacuum_table(str(root), retention_hours=0)
    dry = vacuum_table(str(root), retention_hours=5, dry_run=True)
    assert dry.files == ("p=a/gone_long_ago.parquet", "p=b/orphan_old.parquet")
    assert dry.staging_dirs == (f"{STAGING_DIR}/dead",)
    assert (root / names[1]).exists() and (root / STAGING_DIR / "dead").exists()

    done = vacuum_table(str(root), retention_hours=5)
    assert (done.files, done.staging_dirs) == (dry.files, dry.staging_dirs)
    assert done.bytes == dry.bytes == gone_size + orphan_old + staged_old
    left = {str(p.relative_to(root)) for p in root.rglob("*.parquet")}
    assert left == {
        "p=a/live.parquet",
        "p=b/gone_recently.parquet",  # removed within the retention
        "p=b/orphan_new.parquet",  # never committed, but may be a writer's about to commit
        f"{STAGING_DIR}/alive/p=a/s.parquet",
    }
    assert delta_rows(root) == rows
    assert StateCache().sync(str(root)).last_updated == state.last_updated
    assert latest_records(str(root), ["a", "b"])["a"].table_version == 1

    forced = vacuum_table(str(root), retention_hours=0, force=True)
    assert forced.files == ("p=b/gone_recently.parquet", "p=b/orphan_new.parquet")
    assert delta_rows(root) == rows


def test_checkpoint_keeps_records_and_state_and_trims_the_log(tmp_path: Path) -> None:
    root = str(tmp_path / "t")
    build_table(root, commits=120, partitions=7)
    # A partition written once, long ago: its record must survive any trimming.
    table = DeltaTable(root)
    size = parquet(Path(root) / "part=once" / "f.parquet", 1)
    record = CommitRecord("bench", ("once",), "1", "r").committed(write_id="w", commit_time_ms=5)
    table.create_write_transaction(
        [
            AddAction(
                path="part=once/f.parquet",
                size=size,
                partition_values={"part": "once"},
                modification_time=5,
                data_change=True,
                stats=json.dumps({"numRecords": 1}),
            )
        ],
        mode="append",
        schema=table.schema(),
        partition_by=["part"],
        commit_properties=CommitProperties(custom_metadata=record.to_commit_info()),
    )
    once_version = DeltaTable(root).version()
    build_more = DeltaTable(root)
    for _ in range(3):  # later commits without records
        build_more.create_write_transaction(
            [], mode="append", schema=build_more.schema(), partition_by=["part"]
        )
        build_more.update_incremental()
    pids = [f"p{i:03d}" for i in range(7)] + ["once"]
    state = StateCache().sync(root)
    records = latest_records(root, pids)
    files = DeltaTable(root).file_uris()
    version = DeltaTable(root).version()
    json_before = len(log_versions(root))

    fresh = checkpoint_table(root)  # every log file is younger than 30 days: nothing goes
    assert fresh.version == version and fresh.json_removed == ()
    assert len(log_versions(root)) == json_before

    result = checkpoint_table(root, keep_log_hours=0)
    assert result.version == version
    assert once_version in result.json_kept_for_records
    assert len(result.json_kept_for_records) == 8  # one per partition: the newest record
    assert result.json_remaining == len(log_versions(root)) == 8 + 1  # and the newest commit
    assert len(result.json_removed) == json_before - result.json_remaining
    assert DeltaTable(root).version() == version and DeltaTable(root).file_uris() == files
    after = StateCache().sync(root)
    assert after.last_updated == state.last_updated and after.touched_in == state.touched_in
    assert latest_records(root, pids) == records
    # The table keeps working: a new commit lands on top of the checkpoint.
    table = DeltaTable(root)
    table.create_write_transaction([], mode="append", schema=table.schema(), partition_by=["part"])
    assert DeltaTable(root).version() == version + 1


# --- the CLI on the example lake ----------------------------------------------------------------


def split_a_file(root: str) -> None:
    """Split one live file of the table in two (same rows, same modification time, no data
    change), so that there is something to compact without anything becoming stale."""
    table = DeltaTable(root)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    first = actions[0]
    rows = pq.read_table(os.path.join(root, first["path"]))
    half = rows.num_rows // 2
    adds = []
    for n, part in enumerate([rows.slice(0, half), rows.slice(half)]):
        relative = f"{os.path.dirname(first['path'])}/split-{n}.parquet"
        pq.write_table(part, os.path.join(root, relative))
        adds.append(
            AddAction(
                path=relative,
                size=os.path.getsize(os.path.join(root, relative)),
                partition_values={
                    k.removeprefix("partition."): None if v is None else str(v)
                    for k, v in first.items()
                    if k.startswith("partition.")
                },
                modification_time=first["modification_time"],
                data_change=False,
                stats=json.dumps({"numRecords": part.num_rows}),
            )
        )
    remove = RemoveAction(
        path=first["path"],
        data_change=False,
        deletion_timestamp=int(time.time() * 1000),
        size=first["size_bytes"],
        partition_values=adds[0].partition_values,
    )
    table.create_write_transaction(
        [*adds, remove],
        mode="append",
        schema=table.schema(),
        partition_by=table.metadata().partition_columns,
    )


@pytest.mark.spark
def test_partlake_maintain_on_the_example_lake_leaves_nothing_stale(
    example, lake: Path, tmp_path: Path
) -> None:
    from dagster_partlake.planning.session import make_plan

    defs, graph = example
    split_a_file(graph.assets["clean_events"].path)
    assert not make_plan(graph, StateCache()).plan
    managed = sorted(n for n, a in graph.assets.items() if not a.is_source and not a.is_folder)
    tables = {n: graph.assets[n].path for n in managed if os.path.isdir(graph.assets[n].path)}
    states = {n: StateCache().sync(p).last_updated for n, p in tables.items()}
    rows = {n: delta_rows(p) for n, p in tables.items()}
    env = cli_env(tmp_path, lake)

    bad = run_partlake("maintain", "-m", "definitions", "--select", "nope", "compact", env=env)
    assert bad.returncode == 1 and "nope" in bad.stderr and "clean_events" in bad.stderr
    compact = run_partlake(
        "maintain", "-m", "definitions", "compact", "--target-file-mb", "64", env=env, timeout=600
    )
    assert compact.returncode == 0, compact.stdout + compact.stderr
    assert compact.stderr == ""  # quiet: the engines' output goes to the command's log file
    lines = dict(line.split(": ", 1) for line in compact.stdout.splitlines() if ": " in line)
    assert set(lines) == set(managed), compact.stdout
    assert lines["clean_events"].startswith("compacted 1 partition(s): 2 -> 1 file(s)"), lines
    vacuum = run_partlake(
        "maintain", "-m", "definitions", "vacuum", "--retention-hours", "0", "--force", env=env
    )
    assert vacuum.returncode == 0, vacuum.stdout + vacuum.stderr
    assert vacuum.stderr == ""
    assert "clean_events: removed " in vacuum.stdout
    checkpoint = run_partlake(
        "maintain", "-m", "definitions", "--json", "checkpoint", "--keep-log-hours", "0", env=env
    )
    assert checkpoint.returncode == 0, checkpoint.stdout + checkpoint.stderr
    results = {r["asset"]: r for r in map(json.loads, checkpoint.stdout.splitlines())}
    assert results["clean_events"]["status"] == "ok"

    assert {n: StateCache().sync(p).last_updated for n, p in tables.items()} == states
    assert {n: delta_rows(p) for n, p in tables.items()} == rows
    assert not make_plan(graph, StateCache()).plan
    plan = run_partlake("plan", "-m", "definitions", env=env)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.strip() == "Everything is fresh: no asset partition needs to run."
