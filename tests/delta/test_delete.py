"""Row deletes (`delta.delete`) on real Delta tables written by partlake's writers: one commit,
only the files holding matching rows rewritten, the predicate and row count recorded, every bad
predicate refused with the table unchanged. Read back by delta-rs and DuckDB."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from dagster_partlake.delta import PartitionSelection
from dagster_partlake.delta.payload import DeleteRecord
from dagster_partlake.delta.selection import Box
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import commit_info
from dagster_partlake.errors import InvalidPredicateError
from dagster_partlake.kinds.merge import merge_rows
from dagster_partlake.kinds.scd2 import apply_snapshot
from dagster_partlake.maintenance.delete import delete_rows
from dagster_partlake.records.history import table_history
from dagster_partlake.records.record import CommitRecord
from tests.conftest import delta_files, delta_rows

pytestmark = pytest.mark.spark


def users_table(spark, root: Path) -> None:
    """A merge table keyed on id: four batches of 25 ids, so each file holds one id range."""
    for low in range(0, 100, 25):
        rows = [
            (i, "eu" if i % 2 else "us", f"n{i}" if i % 10 else None) for i in range(low, low + 25)
        ]
        merge_rows(
            spark.createDataFrame(rows, "id long, region string, name string"),
            str(root),
            unique_key=["id"],
            partition_by=["region"],
            selection=PartitionSelection.everything(),
            record_for=lambda _b: CommitRecord("users", (), None, "r"),
        )


def duckdb_ids(root: Path) -> list[int]:
    uris = DeltaTable(str(root)).file_uris()
    found = duckdb.sql(f"select id from read_parquet({uris!r}, hive_partitioning=true)")
    return sorted(r[0] for r in found.fetchall())


def test_a_delete_rewrites_only_the_file_holding_the_row_in_one_commit(spark, tmp_path: Path):
    root = tmp_path / "users"
    users_table(spark, root)
    before_files = delta_files(root)
    before = DeltaTable(str(root)).version()
    state_before = StateCache().sync(str(root))

    result = delete_rows(spark, str(root), "id = 42")

    assert result.rows_deleted == 1
    assert [f.rows_matching for f in result.files] == [1]
    assert result.partitions == ("region=us",)
    # The key statistics ruled out every file of other id ranges without reading it: Spark read
    # only files of the batch that wrote ids 25..49, in the partition region=us.
    assert result.files_scanned + result.files_skipped == len(before_files) == 16
    assert 1 <= result.files_scanned <= 2
    assert result.version == before + 1 == DeltaTable(str(root)).version()
    after_files = delta_files(root)
    assert len(before_files - after_files) == 1 and len(after_files - before_files) == 1
    assert [r[0] for r in delta_rows(root, ["id"])] == [i for i in range(100) if i != 42]
    assert duckdb_ids(root) == [i for i in range(100) if i != 42]
    # The commit carries the predicate and row count, and no partlake write record.
    info = commit_info(str(root), result.version)
    assert "partlake" not in info
    assert DeleteRecord.from_commit_info(info) == DeleteRecord(
        predicate="id = 42",
        rows_deleted=1,
        files_removed=1,
        files_added=1,
        partitions=("region=us",),
        delete_id=DeleteRecord.from_commit_info(info).delete_id,
    )
    history = table_history(str(root))
    assert history[0].operation == "delete"
    assert history[0].to_json()["predicate"] == "id = 42"
    assert history[0].to_json()["rows_deleted"] == 1
    # Only the touched table partition's lastUpdated moved.
    state = StateCache().sync(str(root))
    assert state.last_updated[("us",)] > state_before.last_updated[("us",)]
    assert state.last_updated[("eu",)] == state_before.last_updated[("eu",)]


def test_a_dry_run_lists_files_and_counts_and_commits_nothing(spark, tmp_path: Path):
    root = tmp_path / "users"
    users_table(spark, root)
    before = DeltaTable(str(root)).version()
    result = delete_rows(spark, str(root), "id IN (3, 42, 77) OR name IS NULL", dry_run=True)
    assert result.dry_run and result.version is None
    # ids 3 and 77 (eu), 42 (us), and the null names of ids 0, 10, ..., 90.
    assert result.rows_deleted == 3 + 10
    assert sum(f.rows for f in result.files) >= result.rows_deleted
    assert set(result.partitions) == {"region=eu", "region=us"}
    assert DeltaTable(str(root)).version() == before
    assert len(delta_rows(root, ["id"])) == 100


def test_null_predicates_keep_their_rows_and_a_fully_matched_file_is_dropped(spark, tmp_path: Path):
    root = tmp_path / "users"
    users_table(spark, root)
    # name <> 'n2' is null for the rows without a name: they stay, as in SQL.
    result = delete_rows(
        spark,
        str(root),
        "region = 'us' AND name <> 'n2'",
        selection=PartitionSelection((Box({"region": frozenset({"us"})}),)),
    )
    ids = [r[0] for r in delta_rows(root, ["id"])]
    assert result.rows_deleted == 50 - 1 - 10  # every us row but id 2 and the 10 nameless ones
    assert sorted(i for i in ids if i % 2 == 0) == [0, 2, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert len([i for i in ids if i % 2]) == 50  # eu untouched
    # Deleting every remaining us row leaves the partition without files.
    delete_rows(spark, str(root), "region = 'us'")
    assert {r[1] for r in delta_rows(root, ["id", "region"])} == {"eu"}
    assert not any("region=us" in uri for uri in delta_files(root))


def test_the_partition_limits_what_is_deleted(spark, tmp_path: Path):
    root = tmp_path / "users"
    users_table(spark, root)
    eu = PartitionSelection((Box({"region": frozenset({"eu"})}),))
    result = delete_rows(spark, str(root), "id < 10", selection=eu)
    assert result.rows_deleted == 5  # 1, 3, 5, 7, 9
    assert [r[0] for r in delta_rows(root, ["id"]) if r[0] < 10] == [0, 2, 4, 6, 8]
    nothing = delete_rows(spark, str(root), "id = 4", selection=eu)
    assert nothing.rows_deleted == 0 and nothing.version is None


@pytest.fixture(scope="module")
def shared_users(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One table for the tests that must leave it unchanged."""
    root = tmp_path_factory.mktemp("delete") / "users"
    users_table(spark, root)
    return root


@pytest.mark.parametrize(
    ("predicate", "message"),
    [
        ("id = = 42", "does not parse as a Spark SQL condition"),
        ("user_idd = 42", "names column `user_idd`, which the table does not have"),
        ("id + 1", "is a bigint, not a condition"),
        ("count(*) > 1", "cannot be evaluated on the rows"),
        ("  ", "is empty"),
    ],
)
def test_a_bad_predicate_is_refused_and_changes_nothing(
    spark, shared_users: Path, predicate: str, message: str
):
    root = shared_users
    version, files = DeltaTable(str(root)).version(), delta_files(root)
    with pytest.raises(InvalidPredicateError, match=message):
        delete_rows(spark, str(root), predicate)
    assert DeltaTable(str(root)).version() == version
    assert delta_files(root) == files
    staging = root / "_partlake_staging"
    assert not staging.exists() or not list(staging.glob("*"))


def test_scd2_history_rows_of_a_key_go_too(spark, tmp_path: Path):
    root = tmp_path / "history"

    def apply(day: int, rows: list[tuple[int, str]]) -> None:
        apply_snapshot(
            spark.createDataFrame(rows, "user_id long, plan string"),
            str(root),
            unique_key=["user_id"],
            snapshot_time=dt.datetime(2024, 1, day, tzinfo=dt.UTC),
            newest_applied=None if day == 1 else dt.datetime(2024, 1, day - 1, tzinfo=dt.UTC),
            record_for=lambda _m: CommitRecord("history", (f"2024-01-0{day}",), None, "r"),
        )

    apply(1, [(42, "free"), (7, "free")])
    apply(2, [(42, "pro"), (7, "free")])
    apply(3, [(42, "team"), (7, "pro")])
    rows = delta_rows(root, ["user_id", "plan", "is_current"])
    assert [r for r in rows if r[0] == 42] == [
        (42, "free", False),
        (42, "pro", False),
        (42, "team", True),
    ]

    result = delete_rows(spark, str(root), "user_id = 42")

    assert result.rows_deleted == 3  # the current row and both closed versions
    assert delta_rows(root, ["user_id", "plan", "is_current"]) == [
        (7, "free", False),
        (7, "pro", True),
    ]
    # Applying the next snapshot still works on the rewritten files.
    apply(4, [(7, "pro"), (8, "free")])
    assert [r[0] for r in delta_rows(root, ["user_id", "is_current"]) if r[1]] == [7, 8]
