"""A table's past (`dagster_partlake.delta.history`) against real Spark and Delta tables on disk."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from dagster_partlake.delta import (
    MAINTENANCE_KEY,
    Box,
    CommitRecord,
    PartitionSelection,
    StateCache,
    read_partitions,
    restore_partitions,
    table_history,
    write_partitions,
)
from dagster_partlake.delta.table import commit_info
from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.layout import commit_file
from dagster_partlake.records.queries import read_record
from tests.conftest import delta_rows, spark_rows

pytestmark = pytest.mark.spark


def region(*names: str) -> PartitionSelection:
    return PartitionSelection((Box({"region": frozenset(names)}),))


def write(spark, root: Path, rows: dict[str, int], run_id: str, offset: int = 0) -> int:
    """Replace the given regions with `rows[region]` rows each; the committed version."""
    data = [(offset + i, r) for r, n in rows.items() for i in range(n)]
    df = spark.createDataFrame(data, "id long, region string")
    result = write_partitions(
        df,
        str(root),
        partition_by=["region"],
        selection=region(*rows),
        partition_ids=list(rows),
        record=CommitRecord(
            asset_key="t",
            partition_keys=tuple(rows),
            code_version=f"code-{run_id}",
            run_id=run_id,
            rows_by_partition=dict(rows),
            upstream_versions={"up": len(run_id)},
        ),
    )
    return result.version


def checksum(rows: list[tuple]) -> str:
    return hashlib.sha256(repr(sorted(rows)).encode()).hexdigest()


def rows_of(root: Path, name: str) -> list[tuple]:
    return [r for r in delta_rows(root, ["id", "region"]) if r[1] == name]


@pytest.fixture
def table(spark, tmp_path: Path) -> tuple[Path, list[int]]:
    """eu+us written by run r1, eu rewritten by r2, us by r3: (root, [v1, v2, v3])."""
    root = tmp_path / "t"
    v1 = write(spark, root, {"eu": 3, "us": 4}, "r1")
    v2 = write(spark, root, {"eu": 5}, "r2", offset=100)
    v3 = write(spark, root, {"us": 2}, "r3", offset=200)
    return root, [v1, v2, v3]


def test_history_lists_the_commits_of_one_partition_newest_first(table) -> None:
    root, (v1, v2, v3) = table
    eu = table_history(str(root), selection=region("eu"), partition_id="eu")
    assert [(e.version, e.run_id, e.rows) for e in eu] == [(v2, "r2", 5), (v1, "r1", 3)]
    assert [e.operation for e in eu] == ["write", "write"]
    assert eu[0].code_version == "code-r2"
    assert eu[0].upstream_versions == {"up": 2}
    us = table_history(str(root), selection=region("us"), partition_id="us")
    assert [(e.version, e.run_id, e.rows) for e in us] == [(v3, "r3", 2), (v1, "r1", 4)]
    whole = table_history(str(root))
    # The table's creation (version 0, no files) changed no data: not listed.
    assert [(e.version, e.rows) for e in whole] == [(v3, 2), (v2, 5), (v1, 7)]
    info = commit_info(str(root), v2)
    assert whole[1].timestamp_ms == info["timestamp"]
    assert whole[1].to_json() == {
        "version": v2,
        "timestamp": dt.datetime.fromtimestamp(info["timestamp"] / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "operation": "write",
        "run_id": "r2",
        "code_version": "code-r2",
        "rows": 5,
        "upstream_versions": {"up": 2},
    }


def test_restore_of_one_partition_brings_back_its_rows_in_one_commit(table) -> None:
    root, (v1, _v2, v3) = table
    eu_at_v1 = [r for r in _rows_at(root, v1) if r[1] == "eu"]
    us_files = {p for p in DeltaTable(str(root)).file_uris() if "region=us" in p}
    eu_files_now = [p for p in DeltaTable(str(root)).file_uris() if "region=eu" in p]
    eu_files_v1 = [p for p in DeltaTable(str(root), version=v1).file_uris() if "region=eu" in p]
    before = StateCache().sync(str(root))
    assert before is not None and before.version == v3
    time.sleep(0.01)

    result = restore_partitions(str(root), v1, selection=region("eu"))

    assert result.version == v3 + 1 and result.partition_ids == ("region=eu",)
    assert (result.files_added, result.files_removed) == (len(eu_files_v1), len(eu_files_now))
    assert sorted(p for p in DeltaTable(str(root)).file_uris() if "region=eu" in p) == sorted(
        eu_files_v1
    )
    assert checksum(rows_of(root, "eu")) == checksum(eu_at_v1)
    assert rows_of(root, "eu") != [r for r in _rows_at(root, v3) if r[1] == "eu"]
    assert {p for p in DeltaTable(str(root)).file_uris() if "region=us" in p} == us_files
    # No partlake record: the planner sees a change outside its writer.
    assert read_record(str(root), result.version) is None
    info = commit_info(str(root), result.version)
    assert info[MAINTENANCE_KEY]["operation"] == "restore"
    assert info[MAINTENANCE_KEY]["version"] == v1
    assert info[MAINTENANCE_KEY]["partitions"] == ["region=eu"]
    assert CommitRecord.from_commit_info(info) is None
    # The same application transaction ids as a writer of that partition: its partlake
    # partition, and the files of its table partition (which a compaction names too).
    with open(commit_file(str(root), result.version), encoding="utf-8") as log_file:
        txns = [json.loads(line)["txn"] for line in log_file if line.startswith('{"txn"')]
    assert sorted(t["appId"] for t in txns) == [
        "partlake-files:" + json.dumps([["region", "eu"]]),
        "partlake:region=eu",
    ]
    # lastUpdated of eu moved; us kept its own.
    after = StateCache().sync(str(root))
    assert after is not None
    assert after.last_updated[("eu",)] > before.last_updated[("eu",)]
    assert after.last_updated[("us",)] == before.last_updated[("us",)]
    # It shows in the partition's history as a restore with the rows it brought back.
    newest = table_history(str(root), selection=region("eu"), partition_id="eu")[0]
    assert (newest.version, newest.operation, newest.run_id, newest.rows) == (
        result.version,
        "restore",
        None,
        3,
    )
    assert [e.version for e in table_history(str(root), selection=region("us"))][0] == v3

    again = restore_partitions(str(root), v1, selection=region("eu"))
    assert again.version is None and again.partition_ids == ()
    assert DeltaTable(str(root)).version() == result.version


def test_restore_of_the_whole_table_restores_every_partition_that_differs(spark, table) -> None:
    root, (v1, v2, _v3) = table
    v4 = write(spark, root, {"apac": 2}, "r4", offset=300)
    result = restore_partitions(str(root), v2, partition_id=lambda values: values["region"])
    # eu is as at v2 already; us goes back to v1's files; apac did not exist at v2.
    assert result.version == v4 + 1
    assert result.partition_ids == ("apac", "us")
    assert checksum(delta_rows(root, ["id", "region"])) == checksum(_rows_at(root, v2))
    assert read_record(str(root), result.version) is None
    whole = table_history(str(root))
    assert (whole[0].version, whole[0].operation) == (result.version, "restore")
    assert [e.version for e in table_history(str(root), selection=region("eu"))] == [v2, v1]


def test_restore_with_a_vacuumed_file_fails_and_changes_nothing(table) -> None:
    root, (v1, _v2, v3) = table
    DeltaTable(str(root)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    # delta-rs records a vacuum as two commits of its own (VACUUM START, VACUUM END).
    vacuumed = DeltaTable(str(root)).version()
    assert vacuumed > v3
    assert table_history(str(root))[0].version == v3  # they change no data
    files = DeltaTable(str(root)).file_uris()
    with pytest.raises(PartlakeError, match=r"region=eu/.*\.parquet no longer exist.*vacuum"):
        restore_partitions(str(root), v1, selection=region("eu"))
    assert DeltaTable(str(root)).version() == vacuumed
    assert DeltaTable(str(root)).file_uris() == files


def test_a_version_that_does_not_exist_is_refused(spark, table) -> None:
    root, (_v1, _v2, v3) = table
    with pytest.raises(
        PartlakeError, match=rf"table t has no version 99: its versions are 0 to {v3}"
    ):
        restore_partitions(str(root), 99, selection=region("eu"))
    with pytest.raises(PartlakeError, match="has no version 99"):
        read_partitions(spark, str(root), region("eu"), version=99)
    with pytest.raises(PartlakeConfigError, match="no Delta table"):
        table_history(str(root.parent / "missing"))


def test_read_partitions_travels_to_a_version_or_a_time(spark, table) -> None:
    root, (v1, v2, v3) = table
    old = read_partitions(spark, str(root), region("eu"), version=v1)
    assert old.version == v1
    assert spark_rows(old.df, ["id", "region"]) == [(i, "eu") for i in range(3)]
    latest = read_partitions(spark, str(root), region("eu"))
    assert latest.version == v3
    assert spark_rows(latest.df, ["id", "region"]) == [(100 + i, "eu") for i in range(5)]

    # A time between v1 and v2 reads v1; the commit times come from the log itself.
    at_v1 = commit_info(str(root), v1)["timestamp"]
    at_v2 = commit_info(str(root), v2)["timestamp"]
    assert at_v1 < at_v2
    between = dt.datetime.fromtimestamp(at_v1 / 1000, dt.UTC).isoformat().replace("+00:00", "Z")
    by_time = read_partitions(spark, str(root), region("eu"), timestamp=between)
    assert by_time.version == v1
    assert spark_rows(by_time.df, ["id", "region"]) == [(i, "eu") for i in range(3)]
    exact = dt.datetime.fromtimestamp(at_v2 / 1000, dt.UTC)
    assert read_partitions(spark, str(root), region("eu"), timestamp=exact).version == v2
    with pytest.raises(PartlakeError, match="no version at 2000-01-01T00:00:00.000Z"):
        read_partitions(spark, str(root), region("eu"), timestamp="2000-01-01T00:00:00Z")
    with pytest.raises(ValueError, match="not both"):
        read_partitions(spark, str(root), region("eu"), version=v1, timestamp=between)


def test_a_maintenance_commit_is_not_a_partlake_record() -> None:
    info = {
        "operation": "WRITE",
        MAINTENANCE_KEY: {"operation": "restore", "version": 3, "partitions": ["a"]},
    }
    assert CommitRecord.from_commit_info(info, table_version=5) is None


def _rows_at(root: Path, version: int) -> list[tuple]:
    table = DeltaTable(str(root), version=version).to_pyarrow_table(columns=["id", "region"])
    return sorted((row["id"], row["region"]) for row in table.to_pylist())


def test_history_skips_commits_without_a_data_change(table) -> None:
    root, (_v1, _v2, v3) = table
    from deltalake import Field

    DeltaTable(str(root)).alter.add_columns([Field("note", "string")])
    assert DeltaTable(str(root)).version() == v3 + 1
    assert [e.version for e in table_history(str(root))][0] == v3
