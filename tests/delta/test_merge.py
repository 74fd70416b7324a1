"""Merge and scd2 writes against concurrency and crashes: real Spark, real Delta, real processes."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from dagster_partlake.delta import PartitionSelection
from dagster_partlake.kinds.merge import merge_rows
from dagster_partlake.kinds.scd2 import apply_snapshot
from dagster_partlake.records.record import CommitRecord
from tests.conftest import REPO_ROOT, delta_files, delta_rows, subprocess_env

pytestmark = pytest.mark.spark


def merge(spark, root: Path, rows: list[tuple[int, str, str]], run: str = "r"):
    df = spark.createDataFrame(rows, "id long, region string, name string")
    return merge_rows(
        df,
        str(root),
        unique_key=["id"],
        partition_by=["region"],
        selection=PartitionSelection.everything(),
        record_for=lambda _b: CommitRecord("t", (), None, run),
    )


def test_concurrent_merges_into_different_table_partitions_both_land(spark, tmp_path: Path):
    root = tmp_path / "t"
    merge(
        spark,
        root,
        [(i, "eu", "old") for i in range(10)] + [(i, "us", "old") for i in range(10, 20)],
    )
    with ThreadPoolExecutor(2) as pool:
        eu = pool.submit(merge, spark, root, [(3, "eu", "eu3"), (100, "eu", "eu100")], "eu")
        us = pool.submit(merge, spark, root, [(14, "us", "us14"), (200, "us", "us200")], "us")
        results = [eu.result(timeout=300), us.result(timeout=300)]
    assert [r.metrics["rows_updated"] for r in results] == [1, 1]
    assert [r.files_rewritten for r in results] == [1, 1]  # each only its own partition's file
    rows = delta_rows(root, ["id", "region", "name"])
    assert len(rows) == 22
    assert (3, "eu", "eu3") in rows and (4, "eu", "old") in rows
    assert (14, "us", "us14") in rows and (13, "us", "old") in rows
    assert (100, "eu", "eu100") in rows and (200, "us", "us200") in rows


def start_victim(root: Path, kind: str, sync: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.delta.merge_process", str(root), kind, str(sync)],
        cwd=REPO_ROOT,
        env=subprocess_env(SPARK_LOCAL_IP="127.0.0.1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("kind", ["merge", "scd2"])
def test_a_merge_or_scd2_writer_killed_before_its_commit_leaves_the_table_unchanged(
    spark, tmp_path: Path, kind: str
) -> None:
    root, sync = tmp_path / "t", tmp_path / "sync"
    sync.mkdir()
    if kind == "merge":
        merge(spark, root, [(i, "eu", "old") for i in range(10)])
    else:
        apply_snapshot(
            spark.createDataFrame([(i, "old") for i in range(10)], "id long, name string"),
            str(root),
            unique_key=["id"],
            snapshot_time=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
            newest_applied=None,
            record_for=lambda _m: CommitRecord("t", (), None, "seed"),
        )
    before = (DeltaTable(str(root)).version(), delta_files(root), delta_rows(root))

    victim = start_victim(root, kind, sync)
    deadline = time.time() + 300
    while not any(sync.iterdir()):
        assert victim.poll() is None, victim.stderr.read()[-3000:]
        assert time.time() < deadline, "writer never got to its commit"
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL

    # Its rewritten files are on disk, but the table is exactly as before.
    assert len(list(root.rglob("*.parquet"))) > len(before[1])
    assert (DeltaTable(str(root)).version(), delta_files(root), delta_rows(root)) == before
    if kind == "merge":  # and the next merge is exact
        merge(spark, root, [(5, "eu", "five")])
        rows = delta_rows(root, ["id", "name"])
        assert len(rows) == 10 and (5, "five") in rows and (6, "old") in rows


def test_merging_a_day_again_undoes_its_series_merges_since_and_nothing_else(
    spark, tmp_path: Path
) -> None:
    """Units of work `day|region`: merging 1|eu again after 2|eu takes the eu partition back to
    before 1|eu (id 1, gone from 1|eu's input, leaves), us stays; 2|eu then merges on top, as
    from scratch. In a table both series share, 1|us changed the same partition since: merged
    on top, with the reason."""
    from dagster_partlake.kinds.merge import UnitPosition

    def unit(root: Path, key: str, rows: list[tuple[int, str, str]], partition_by: list[str]):
        day, region = key.split("|")

        def position(keys: Sequence[str]) -> UnitPosition:
            days = {k.split("|")[0] for k in keys if k.split("|")[1] == region}
            if not days:
                return "other"
            if all(d < day for d in days):
                return "earlier"
            return "later" if all(d >= day for d in days) else "mixed"

        return merge_rows(
            spark.createDataFrame(rows, "id long, region string, name string"),
            str(root),
            unique_key=["id"],
            partition_by=partition_by,
            selection=PartitionSelection.everything(),
            record_for=lambda _b: CommitRecord("t", (key,), None, "r", kind="merge"),
            units=position,
        )

    root = tmp_path / "by_region"
    unit(root, "1|eu", [(1, "eu", "a1"), (2, "eu", "b1")], ["region"])
    unit(root, "1|us", [(10, "us", "x1")], ["region"])
    unit(root, "2|eu", [(2, "eu", "b2"), (3, "eu", "c2")], ["region"])
    us_files = {f for f in delta_files(root) if "region=us" in f}
    again = unit(root, "1|eu", [(2, "eu", "b1")], ["region"])
    assert again.rolled_back is not None and again.not_rolled_back is None
    assert (again.rolled_back.version, again.rolled_back.undone) == (0, (1, 3))
    assert again.metrics["rows_deleted"] == 3  # eu's rows before the roll back; none after it
    assert delta_rows(root, ["id", "region", "name"]) == [(2, "eu", "b1"), (10, "us", "x1")]
    assert {f for f in delta_files(root) if "region=us" in f} == us_files
    later = unit(root, "2|eu", [(2, "eu", "b2"), (3, "eu", "c2")], ["region"])
    assert later.rolled_back is None and later.not_rolled_back is None
    assert delta_rows(root, ["id", "region", "name"]) == [
        (2, "eu", "b2"),
        (3, "eu", "c2"),
        (10, "us", "x1"),
    ]

    shared = tmp_path / "shared"
    unit(shared, "1|eu", [(1, "eu", "a1")], [])
    unit(shared, "1|us", [(10, "us", "x1")], [])
    on_top = unit(shared, "1|eu", [(2, "eu", "b1")], [])
    assert on_top.rolled_back is None
    assert on_top.not_rolled_back == (
        "version 2, a merge of other units of work, changed the same table partitions (the whole "
        "table) since"
    )
    assert delta_rows(shared, ["id", "name"]) == [(1, "a1"), (2, "b1"), (10, "x1")]


def test_python_workers_rewrite_the_candidate_files_as_spark_would(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A large merge on one data column as key rewrites its candidate files in Python workers
    (`delta.files.rewrite_without_keys`): the rows not in the batch keep their values and types
    (decimal, timestamp, date; written as Spark writes them), a row with a null key stays, a
    column the batch adds is null in the old rows, a file whose every row is replaced leaves no
    file, and Spark and delta-rs read the same table."""
    import pyarrow.parquet as pq

    import dagster_partlake.kinds.merge as merge_module
    from dagster_partlake.records.writes import write_partitions
    from tests.conftest import spark_rows

    rewrites: list[int] = []
    real = merge_module.rewrite_without_keys
    monkeypatch.setattr(merge_module, "WORKER_ROWS", 0)  # (a large rewrite's path)
    monkeypatch.setattr(
        merge_module,
        "rewrite_without_keys",
        lambda *a, **k: rewrites.append(len(a[2])) or real(*a, **k),
    )

    root = tmp_path / "t"
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    schema = "id long, region string, name string, amount decimal(10,2), at timestamp, day date"
    old = [
        (1, "eu", "ann", Decimal("1.50"), when, dt.date(2024, 1, 1)),
        (2, "eu", "bob", Decimal("2.25"), when, dt.date(2024, 1, 2)),
        (None, "eu", "ghost", None, None, None),
        (3, "us", "cy", Decimal("3.00"), when, dt.date(2024, 1, 3)),
    ]
    write_partitions(
        spark.createDataFrame(old, schema).repartition(1),
        str(root),
        partition_by=["region"],
        selection=PartitionSelection.everything(),
        partition_ids=["__all__"],
    )
    before = delta_files(root)
    batch = spark.createDataFrame(
        [
            (1, "eu", "ann2", Decimal("9.99"), when, dt.date(2024, 2, 1), "x"),
            (3, "us", "cy2", Decimal("8.00"), when, dt.date(2024, 2, 3), "y"),
            (9, "eu", "new", Decimal("0.01"), when, dt.date(2024, 2, 9), "z"),
        ],
        f"{schema}, extra string",
    )
    result = merge_rows(
        batch,
        str(root),
        unique_key=["id"],
        partition_by=["region"],
        selection=PartitionSelection.everything(),
        record_for=lambda _b: CommitRecord("t", (), None, "r"),
        allow_new_columns=True,
    )
    assert result.files_rewritten == 2  # eu's and us's files held a batch key
    assert rewrites == [2]  # both by the Python workers
    assert result.metrics["rows_updated"] == 2 and result.metrics["rows_inserted"] == 1
    columns = ["id", "region", "name", "amount", "at", "day", "extra"]
    expected = [
        (1, "eu", "ann2", Decimal("9.99"), when, dt.date(2024, 2, 1), "x"),
        (2, "eu", "bob", Decimal("2.25"), when, dt.date(2024, 1, 2), None),
        (3, "us", "cy2", Decimal("8.00"), when, dt.date(2024, 2, 3), "y"),
        (9, "eu", "new", Decimal("0.01"), when, dt.date(2024, 2, 9), "z"),
        (None, "eu", "ghost", None, None, None, None),
    ]
    assert delta_rows(root, columns) == expected
    live = delta_files(root)
    rewritten = [
        f for f in live - before if "/region=eu/" in f and "ghost" in str(pq.read_table(f))
    ]
    assert len(rewritten) == 1  # eu's rewrite; us's file held id 3 alone: nothing rewritten
    assert not [f for f in live if "/region=us/" in f and "cy2" not in str(pq.read_table(f))]
    stamp = pq.ParquetFile(rewritten[0]).schema_arrow.field("at").type
    assert str(stamp).startswith("timestamp[us")  # microseconds, as Spark writes them
    parquet = spark.read.parquet(*(f"file://{f}" if f.startswith("/") else f for f in live))
    assert sorted(spark_rows(parquet, ["name", "amount", "at"]), key=str) == sorted(
        [(r[2], r[3], r[4]) for r in expected], key=str
    )


@pytest.mark.s3
def test_python_workers_rewrite_a_merge_on_s3(spark_s3, s3, monkeypatch: pytest.MonkeyPatch):
    """The workers' rewrite reads and writes through the table's object store (the real S3
    server), as the writer does: the merged table reads back whole with delta-rs."""
    import dagster_partlake.kinds.merge as merge_module
    from dagster_partlake.storage.location import TableLocation

    monkeypatch.setattr(merge_module, "WORKER_ROWS", 0)
    rewrites: list[int] = []
    real = merge_module.rewrite_without_keys
    monkeypatch.setattr(
        merge_module,
        "rewrite_without_keys",
        lambda *a, **k: rewrites.append(len(a[2])) or real(*a, **k),
    )
    location = TableLocation.parse(s3.uri(f"merge-{time.time_ns()}"), s3.storage_options())
    schema = "id long, region string, name string"

    def merged(rows: list[tuple[int, str, str]]):
        return merge_rows(
            spark_s3.createDataFrame(rows, schema),
            location,
            unique_key=["id"],
            partition_by=["region"],
            selection=PartitionSelection.everything(),
            record_for=lambda _b: CommitRecord("t", (), None, "r"),
        )

    merged([(i, "eu", "old") for i in range(5)] + [(9, "us", "old")])
    result = merged([(2, "eu", "new"), (9, "us", "new"), (10, "us", "ten")])
    assert rewrites == [result.files_rewritten] and result.metrics["rows_updated"] == 2
    table = DeltaTable(location.uri, storage_options=s3.storage_options())
    rows = sorted(
        tuple(r.values())
        for r in table.to_pyarrow_table().select(["id", "region", "name"]).to_pylist()
    )
    assert rows == [
        (0, "eu", "old"),
        (1, "eu", "old"),
        (2, "eu", "new"),
        (3, "eu", "old"),
        (4, "eu", "old"),
        (9, "us", "new"),
        (10, "us", "ten"),
    ]
