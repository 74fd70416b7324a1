"""Several processes writing one table at once, and a writer killed before it commits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from dagster_partlake.delta import PartitionSelection, read_partitions
from tests.conftest import REPO_ROOT, delta_files, delta_rows, spark_rows, subprocess_env

pytestmark = pytest.mark.spark


def start_writer(
    root: Path, date: str, region: str, rows: int, offset: int, mode: str, sync: Path, parties: int
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.delta.writer_process",
            str(root),
            date,
            region,
            str(rows),
            str(offset),
            mode,
            str(sync),
            str(parties),
        ],
        cwd=REPO_ROOT,
        env=subprocess_env(SPARK_LOCAL_IP="127.0.0.1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_four_processes_write_different_partitions_of_one_table(tmp_path: Path) -> None:
    root, sync = tmp_path / "t", tmp_path / "sync"
    sync.mkdir()
    parts = [
        ("2024-01-02", "eu"),
        ("2024-01-02", "us"),
        ("2024-01-03", "eu"),
        ("2024-01-03", "apac"),
    ]
    procs = [
        start_writer(root, d, r, 100, i * 1000, "commit", sync, len(parts))
        for i, (d, r) in enumerate(parts)
    ]
    results = [finish(p) for p in procs]
    table = DeltaTable(str(root))
    # Every writer committed exactly once, each in its own version after the table's creation,
    # nothing lost.
    versions = sorted(r["version"] for r in results)
    assert len(set(versions)) == len(parts) and versions[0] >= 1
    assert table.version() == versions[-1]
    rows = delta_rows(root, ["id", "region"])
    assert len(rows) == 400
    expected = sorted((i * 1000 + n, r) for i, (_, r) in enumerate(parts) for n in range(100))
    assert rows == expected
    print("commit attempts:", [r["attempts"] for r in results])


def test_two_writers_of_the_same_partition_last_commit_wins_whole(tmp_path: Path) -> None:
    root, sync = tmp_path / "t", tmp_path / "sync"
    sync.mkdir()
    procs = [
        start_writer(root, "2024-01-02", "eu", 50, offset, "commit", sync, 2)
        for offset in (0, 10_000)
    ]
    results = [finish(p) for p in procs]
    winner = max(results, key=lambda r: r["version"])
    offset = 0 if winner["record"]["run_id"] == str(procs[0].pid) else 10_000
    # Exactly the rows of the last commit: never both writers' rows, never a mix.
    assert delta_rows(root, ["id"]) == [(offset + n,) for n in range(50)]


@pytest.mark.parametrize("mode", ["hang-staged", "hang-published"])
def test_writer_killed_before_commit_leaves_table_unchanged(
    spark, tmp_path: Path, mode: str
) -> None:
    root, sync = tmp_path / "t", tmp_path / "sync"
    sync.mkdir()
    seed = start_writer(root, "2024-01-02", "eu", 20, 0, "commit", sync, 1)
    finish(seed)
    for f in sync.iterdir():
        f.unlink()
    before = (DeltaTable(str(root)).version(), delta_files(root), delta_rows(root, ["id"]))

    victim = start_writer(root, "2024-01-02", "eu", 70, 5000, mode, sync, 1)
    deadline = time.time() + 300
    while not any(sync.iterdir()):
        assert victim.poll() is None, victim.stderr.read()[-3000:]
        assert time.time() < deadline, "writer never got ready"
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL

    # The files it wrote exist on disk but no reader sees them.
    on_disk = [p for p in root.rglob("*.parquet")]
    assert len(on_disk) > len(before[1])
    assert (DeltaTable(str(root)).version(), delta_files(root), delta_rows(root, ["id"])) == before
    df = read_partitions(spark, str(root), PartitionSelection.everything()).df
    assert spark_rows(df, ["id"]) == before[2]


def test_two_writers_adding_the_same_column_both_commit(tmp_path: Path) -> None:
    """Two writers of different partitions whose data brings the same new column (schema_mode
    add_columns), each on a snapshot taken before the other added it: the second finds the
    column there and commits, instead of failing on delta-rs' "Metadata changed since last
    commit" (seen with `partlake run` running two partitions at once)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from dagster_partlake.delta.payload import CommitPayload
    from dagster_partlake.delta.snapshot import open_snapshot
    from dagster_partlake.delta.transaction import Actions, commit
    from dagster_partlake.errors import SchemaMismatchError
    from dagster_partlake.storage.location import as_location

    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"p": ["a"], "v": [1]}), partition_by=["p"])
    location = as_location(str(root))
    snapshots = [open_snapshot(location, table_name="t") for _ in range(3)]
    payload = CommitPayload(partition_keys=("a",))

    def write(snapshot: object, note: pa.DataType) -> int:
        return commit(
            location,
            snapshot,  # type: ignore[arg-type]
            lambda _snapshot: Actions(),
            payload=lambda commit_id, now: payload.committed(
                write_id=commit_id, commit_time_ms=now
            ).to_commit_info(),
            name="t",
            schema=pa.schema([("p", pa.string()), ("v", pa.int64()), ("note", note)]),
        ).version

    # One metadata commit added the column; both data commits landed after it.
    assert [write(snapshots[0], pa.string()), write(snapshots[1], pa.large_string())] == [2, 3]
    assert DeltaTable(str(root)).schema().to_arrow().names == ["p", "v", "note"]
    # A third writer's data has the column with another type: refused, nothing committed.
    with pytest.raises(SchemaMismatchError, match=r"other types: note \(string, this write: int64"):
        write(snapshots[2], pa.int64())
    assert DeltaTable(str(root)).version() == 3
