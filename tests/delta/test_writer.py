"""The storage adapter against real Spark and real Delta tables on disk."""

from __future__ import annotations

import datetime as dt
import json
import os
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from dagster_partlake.delta import (
    Box,
    DateRanges,
    PartitionSelection,
    read_partitions,
    stage_partitions,
    vacuum_table,
    write_partitions,
)
from dagster_partlake.errors import PartitionMismatchError, SchemaMismatchError
from dagster_partlake.records.record import CommitRecord
from tests.conftest import delta_files, delta_rows, spark_rows

pytestmark = pytest.mark.spark

COLUMNS = ["id", "amount", "ts", "date", "region"]


def day(n: int) -> dt.date:
    return dt.date(2024, 1, n)


def box(days: tuple[int, int], regions: set[str]) -> PartitionSelection:
    return PartitionSelection(
        (Box({"date": DateRanges(((day(days[0]), day(days[1])),)), "region": frozenset(regions)}),)
    )


def rows_for(days: list[int], regions: list[str], n: int = 5, offset: int = 0) -> list[tuple]:
    return [
        (
            offset + d * 1000 + i * 10 + ri,
            Decimal(f"{i}.25"),
            dt.datetime(2024, 1, d, 12, i, tzinfo=dt.UTC),
            day(d),
            r,
        )
        for d in days
        for ri, r in enumerate(regions)
        for i in range(n)
    ]


def frame(spark, rows: list[tuple]):
    return spark.createDataFrame(
        rows, "id long, amount decimal(10,2), ts timestamp, date date, region string"
    )


def write(
    spark, root: Path, rows: list[tuple], selection: PartitionSelection, ids: list[str], **kw
):
    return write_partitions(
        frame(spark, rows),
        str(root),
        partition_by=["date", "region"],
        selection=selection,
        partition_ids=ids,
        **kw,
    )


def as_expected(rows: list[tuple]) -> list[tuple]:
    return sorted(rows)


def test_write_then_read_round_trip_with_every_reader(spark, tmp_path: Path) -> None:
    root = tmp_path / "t"
    rows = rows_for([2, 3], ["eu", "us"])
    result = write(
        spark,
        root,
        rows,
        box((2, 4), {"eu", "us"}),
        ["2|eu", "2|us", "3|eu", "3|us"],
        record=CommitRecord(
            asset_key="t",
            partition_keys=("2|eu", "2|us", "3|eu", "3|us"),
            code_version=None,
            run_id="r1",
        ),
    )
    # Version 0 is the empty table the first write creates; the data is version 1.
    assert result.version == 1 and result.num_records == len(rows)

    # Spark, through our reader, all partitions and one partition.
    everything = read_partitions(spark, str(root), PartitionSelection.everything())
    assert spark_rows(everything.df, COLUMNS) == as_expected(rows)
    one = read_partitions(spark, str(root), box((3, 4), {"us"}))
    assert spark_rows(one.df, COLUMNS) == as_expected(
        [r for r in rows if r[3] == day(3) and r[4] == "us"]
    )
    assert one.df.schema["date"].dataType.typeName() == "date"

    # delta-rs alone.
    assert delta_rows(root, COLUMNS) == as_expected(rows)

    # DuckDB over the live files (its delta extension cannot be downloaded offline).
    files = sorted(DeltaTable(str(root)).file_uris())
    got = duckdb.sql(
        f"select id, amount, ts, date, region from read_parquet({files!r}, hive_partitioning=true, "
        "hive_types={'date': 'DATE'})"
    ).fetchall()
    assert sorted((i, a, t.astimezone(dt.UTC), dd, r) for i, a, t, dd, r in got) == as_expected(
        rows
    )

    info = DeltaTable(str(root)).history(1)[0]
    assert info["partlake"]["run_id"] == "r1"


def test_rewrite_is_idempotent_and_leaves_other_partitions_untouched(spark, tmp_path: Path) -> None:
    root = tmp_path / "t"
    rows = rows_for([2, 3], ["eu", "us"])
    write(spark, root, rows, box((2, 4), {"eu", "us"}), ["a"])
    other_files = {f for f in delta_files(root) if "date=2024-01-02/region=eu" not in f}

    target = [r for r in rows if r[3] == day(2) and r[4] == "eu"]
    for _ in range(2):
        result = write(spark, root, target, box((2, 3), {"eu"}), ["2024-01-02|eu"])
        assert delta_rows(root, COLUMNS) == as_expected(rows)  # no duplicates, same rows
    assert result.files_removed >= 1
    assert other_files <= delta_files(root)  # the other partitions' files are the same files

    replacement = rows_for([2], ["eu"], n=3, offset=500)
    write(spark, root, replacement, box((2, 3), {"eu"}), ["2024-01-02|eu"])
    expected = [r for r in rows if not (r[3] == day(2) and r[4] == "eu")] + replacement
    assert delta_rows(root, COLUMNS) == as_expected(expected)


def test_partition_range_is_one_commit(spark, tmp_path: Path) -> None:
    root = tmp_path / "t"
    write(spark, root, rows_for([1], ["eu"]), box((1, 2), {"eu"}), ["seed"])
    rows = rows_for([2, 3, 4], ["eu", "us", "apac"])
    keys = [f"2024-01-0{d}|{r}" for d in (2, 3, 4) for r in ("eu", "us", "apac")]
    result = write(
        spark,
        root,
        rows,
        box((2, 5), {"eu", "us", "apac"}),
        keys,
        record=CommitRecord(
            asset_key="t", partition_keys=tuple(keys), code_version=None, run_id=None
        ),
    )
    table = DeltaTable(str(root))
    assert result.version == table.version() == 2
    commit = table.history(1)[0]
    assert commit["partlake"]["partition_keys"] == keys
    assert json.loads(commit["operationParameters"]["partitionBy"]) == ["date", "region"]


def test_rows_outside_the_partitions_are_rejected_and_nothing_changes(
    spark, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    write(spark, root, rows_for([2], ["eu"]), box((2, 3), {"eu"}), ["a"])
    before = (DeltaTable(str(root)).version(), delta_files(root), delta_rows(root, COLUMNS))
    stray = rows_for([2], ["eu"]) + rows_for([2], ["us"], n=1) + rows_for([9], ["eu"], n=1)
    with pytest.raises(
        PartitionMismatchError,
        match=r"outside the partitions being written: date=2024-01-02\|region=us, "
        r"date=2024-01-09\|region=eu; this write may only contain \(date in \[2024-01-02, "
        r"2024-01-03\) and region in \{eu\}\)",
    ):
        write(spark, root, stray, box((2, 3), {"eu"}), ["2024-01-02|eu"])
    assert (DeltaTable(str(root)).version(), delta_files(root), delta_rows(root, COLUMNS)) == before
    # The rejected files are gone too: every data file on disk is a live one.
    assert {str(p) for p in root.rglob("*.parquet")} == delta_files(root)


def test_incompatible_schema_is_rejected_naming_columns(spark, tmp_path: Path) -> None:
    root = tmp_path / "t"
    write(spark, root, rows_for([2], ["eu"]), box((2, 3), {"eu"}), ["a"])
    before = (DeltaTable(str(root)).version(), delta_files(root))
    bad = spark.createDataFrame(
        [("x", dt.date(2024, 1, 2), "eu", 1)], "id string, date date, region string, extra int"
    )
    with pytest.raises(
        SchemaMismatchError,
        match=r"missing columns: amount, ts; changed types: id \(long -> string\); "
        r"new columns: extra",
    ):
        write_partitions(
            bad,
            str(root),
            partition_by=["date", "region"],
            selection=box((2, 3), {"eu"}),
            partition_ids=["a"],
        )
    with pytest.raises(SchemaMismatchError, match=r"partitioned by \(date, region\).*\(date\)"):
        write_partitions(
            frame(spark, rows_for([2], ["eu"])),
            str(root),
            partition_by=["date"],
            selection=box((2, 3), {"eu"}),
            partition_ids=["a"],
        )
    assert (DeltaTable(str(root)).version(), delta_files(root)) == before


def test_new_columns_only_when_allowed(spark, tmp_path: Path) -> None:
    root = tmp_path / "t"
    write(spark, root, rows_for([2], ["eu"]), box((2, 3), {"eu"}), ["a"])
    wider = frame(spark, rows_for([3], ["eu"])).selectExpr("*", "'note' as comment")
    kwargs = dict(
        partition_by=["date", "region"], selection=box((3, 4), {"eu"}), partition_ids=["b"]
    )
    with pytest.raises(SchemaMismatchError, match="new columns: comment"):
        write_partitions(wider, str(root), **kwargs)
    write_partitions(wider, str(root), allow_new_columns=True, **kwargs)
    table = DeltaTable(str(root))
    assert "comment" in table.schema().to_arrow().names
    comments = delta_rows(root, ["date", "comment"])
    assert {c for d, c in comments if d == day(2)} == {None}
    assert {c for d, c in comments if d == day(3)} == {"note"}


def test_empty_dataframe_empties_exactly_its_partition(spark, tmp_path: Path) -> None:
    root = tmp_path / "t"
    rows = rows_for([2], ["eu", "us"])
    write(spark, root, rows, box((2, 3), {"eu", "us"}), ["a"])
    write(spark, root, [], box((2, 3), {"eu"}), ["2024-01-02|eu"])
    assert delta_rows(root, COLUMNS) == as_expected([r for r in rows if r[4] == "us"])


def test_unpartitioned_table(spark, tmp_path: Path) -> None:
    root = tmp_path / "plain"
    df = spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string")
    for _ in range(2):
        write_partitions(
            df,
            str(root),
            partition_by=[],
            selection=PartitionSelection.everything(),
            partition_ids=["__all__"],
        )
    assert delta_rows(root) == [(1, "a"), (2, "b")]
    assert DeltaTable(str(root)).version() == 2
    assert spark_rows(
        read_partitions(spark, str(root), PartitionSelection.everything()).df, ["k", "v"]
    ) == [(1, "a"), (2, "b")]


def test_a_files_rows_go_into_large_row_groups_not_one_per_arrow_batch(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mapInArrow hands the writer batches of 10,000 rows: a file gets row groups of up to
    ROW_GROUP_ROWS rows, not one per batch, and its rows, statistics and counts stay exact."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from dagster_partlake.delta import file_writer
    from dagster_partlake.records.writes import commit_staged

    root = tmp_path / "groups"
    rows = 45_000
    # Two row groups of 25,000 and 20,000 rows (the limit lowered: pickled by value with the
    # writer, so Spark's workers see it too).
    monkeypatch.setattr(file_writer, "ROW_GROUP_ROWS", 25_000)
    df = spark.range(rows).coalesce(1).select(F.col("id"), (F.col("id") % 7).alias("v"))
    staged = stage_partitions(
        df,
        str(root),
        partition_by=[],
        selection=PartitionSelection.everything(),
        partition_ids=["__all__"],
        stats_columns=["id"],
    )
    assert commit_staged(staged).num_records == rows
    [path] = delta_files(root)
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [25_000, 20_000]
    [add] = [
        json.loads(line)["add"]
        for commit in sorted((root / "_delta_log").glob("*.json"))
        for line in commit.read_text().splitlines()
        if line.startswith('{"add"')
    ]
    stats = json.loads(add["stats"])
    assert (stats["numRecords"], stats["minValues"]["id"], stats["maxValues"]["id"]) == (
        rows,
        0,
        rows - 1,
    )
    assert delta_rows(root, ["id"]) == [(i,) for i in range(rows)]


def test_extreme_timestamps_are_readable_by_delta_rs(spark, tmp_path: Path) -> None:
    root = tmp_path / "t"
    far = [(1, Decimal("1.00"), dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.UTC), day(2), "eu")]
    write(spark, root, far, box((2, 3), {"eu"}), ["a"])
    assert delta_rows(root, ["ts"]) == [(far[0][2],)]


def test_uncommitted_files_are_invisible_and_vacuum_removes_them(spark, tmp_path: Path) -> None:
    """Spark writes a write's files where they will live (no staging folder, no rename): until
    the commit no reader sees them, and a write that never commits leaves files that vacuum
    removes, with the table as it was."""
    root = tmp_path / "t"
    write(spark, root, rows_for([2], ["eu"]), box((2, 3), {"eu"}), ["a"])
    before = delta_rows(root, ["id"])
    staged = stage_partitions(
        frame(spark, rows_for([2], ["eu"]) + rows_for([2], ["eu"])),
        str(root),
        partition_by=["date", "region"],
        selection=box((2, 3), {"eu"}),
        partition_ids=["a"],
    )
    paths = [root / f.relative_path for f in staged.files]
    assert paths and all(p.is_file() for p in paths)
    assert all(p.parent == root / "date=2024-01-02" / "region=eu" for p in paths)
    assert not (root / "_partlake_staging").exists()
    assert delta_rows(root, ["id"]) == before  # written, not committed: invisible
    vacuum_table(str(root), retention_hours=0, force=True)
    assert not any(p.exists() for p in paths)
    assert delta_rows(root, ["id"]) == before


def test_a_commit_finds_its_version_behind_many_later_commits(
    spark, tmp_path: Path, monkeypatch
) -> None:
    """70 other commits land right after ours, before we look for our version: the commit
    landed, so the write succeeds and reports its own version (it used to search only the 64
    newest commits and fail although data and record were committed)."""
    root = tmp_path / "t"
    write(spark, root, rows_for([1], ["eu"]), box((1, 2), {"eu"}), ["seed"])
    original = DeltaTable.create_write_transaction

    def then_seventy_more(table, *args, **kwargs):
        original(table, *args, **kwargs)
        for _ in range(70):  # another writer's commits (empty ones take a version too)
            other = DeltaTable(str(root))
            original(
                other, [], mode="append", schema=other.schema(), partition_by=["date", "region"]
            )

    monkeypatch.setattr(DeltaTable, "create_write_transaction", then_seventy_more)
    result = write(
        spark,
        root,
        rows_for([2], ["us"]),
        box((2, 3), {"us"}),
        ["2024-01-02|us"],
        record=CommitRecord("t", ("2024-01-02|us",), None, "the-run"),
    )
    monkeypatch.undo()
    assert DeltaTable(str(root)).version() == result.version + 70
    assert DeltaTable(str(root)).history(71)[-1]["partlake"]["run_id"] == "the-run"
    assert result.record.run_id == "the-run" and result.record.table_version == result.version


def test_a_file_must_lie_in_exactly_its_partition_folder(spark, tmp_path: Path) -> None:
    """A file whose log entry says region=eu but that lies in 'region=eu2/' would make Spark read
    eu2 from the path; a substring test of the path let it through."""
    from deltalake.transaction import AddAction

    from dagster_partlake.errors import PartlakeConfigError

    root = tmp_path / "t"
    write(spark, root, rows_for([2], ["eu2"]), box((2, 3), {"eu2"}), ["2|eu2"])
    table = DeltaTable(str(root))
    misplaced = next(f for f in table.file_uris() if "region=eu2" in f)
    relative = os.path.relpath(misplaced.removeprefix("file://"), root)
    table.create_write_transaction(
        [
            AddAction(
                path=relative,
                size=os.path.getsize(misplaced.removeprefix("file://")),
                partition_values={"date": "2024-01-02", "region": "eu"},
                modification_time=0,
                data_change=True,
                stats=json.dumps({"numRecords": 5}),
            )
        ],
        mode="append",
        schema=table.schema(),
        partition_by=["date", "region"],
    )
    with pytest.raises(
        PartlakeConfigError, match="is not in the folder 'date=2024-01-02/region=eu/'"
    ):
        read_partitions(spark, str(root), box((2, 3), {"eu"}))


def test_replacing_a_partition_whose_value_needs_url_encoding_removes_its_old_files(
    spark, tmp_path: Path
) -> None:
    """The log stores paths URL-encoded and delta-rs encodes a remove's path again: a value such
    as 'a b:c%' once kept its old file live next to the new one (duplicated rows)."""
    root = str(tmp_path / "t")
    values = ["a b:c%", "eu/2", "plain"]
    selection = PartitionSelection((Box({"region": frozenset(values)}),))
    for run in range(2):
        df = spark.createDataFrame([(v, run) for v in values], "region string, x long")
        write_partitions(
            df, root, partition_by=["region"], selection=selection, partition_ids=values
        )
    assert delta_rows(root, ["region", "x"]) == sorted((v, 1) for v in values)
    assert len(DeltaTable(root).file_uris()) == 3


def test_a_planned_write_commits_nothing_another_run_committed_from_the_same_inputs(
    spark, tmp_path: Path
) -> None:
    """`once_per_inputs`: two runs planned on the same stale partition, each reading upstream
    partition u|1 at lastUpdated 1000 with code version 1. The first commits; the second finds
    that commit (same code version, same upstream lastUpdated) and commits nothing, leaving no
    file behind. A different input, a run that reads nothing, or a write without the rule
    commits as before."""
    from dagster_partlake.delta import stage_partitions
    from dagster_partlake.records.queries import same_inputs_commit
    from dagster_partlake.records.writes import AlreadyWritten, commit_staged

    root = tmp_path / "t"

    def staged(rows: list[tuple]):
        return stage_partitions(
            frame(spark, rows),
            str(root),
            partition_by=["date", "region"],
            selection=box((2, 3), {"eu"}),
            partition_ids=["2|eu"],
        )

    def record(run: str, read: dict[str, dict[str, int]], code: str = "1") -> CommitRecord:
        return CommitRecord("t", ("2|eu",), code, run, consumed=read)

    read = {"up": {"u|1": 1000}}
    first = commit_staged(staged(rows_for([2], ["eu"])), record=record("r1", read))
    files_before = sorted(str(p) for p in root.rglob("*.parquet"))
    assert same_inputs_commit(str(root), record("r2", read)) is not None
    with pytest.raises(AlreadyWritten) as already:
        commit_staged(
            staged(rows_for([2], ["eu"], offset=7)), record=record("r2", read), once_per_inputs=True
        )
    assert already.value.record.run_id == "r1"
    assert DeltaTable(str(root)).version() == first.version  # nothing committed
    assert sorted(str(p) for p in root.rglob("*.parquet")) == files_before  # no orphan left
    everything = read_partitions(spark, str(root), PartitionSelection.everything())
    assert sorted(spark_rows(everything.df, COLUMNS)) == as_expected(rows_for([2], ["eu"]))

    # The run's own earlier commit (a retried step), new upstream data, another code version,
    # and a write that read nothing are not "the same inputs".
    assert same_inputs_commit(str(root), record("r1", read)) is None
    assert same_inputs_commit(str(root), record("r2", {"up": {"u|1": 2000}})) is None
    assert same_inputs_commit(str(root), record("r2", read, code="2")) is None
    assert same_inputs_commit(str(root), record("r2", {})) is None
    second = commit_staged(
        staged(rows_for([2], ["eu"], offset=9)),
        record=record("r3", {"up": {"u|1": 2000}}),
        once_per_inputs=True,
    )
    assert second.version == first.version + 1
    # Without the rule (a run a user started), the same inputs are committed again.
    third = commit_staged(staged(rows_for([2], ["eu"])), record=record("r4", {"up": {"u|1": 2000}}))
    assert third.version == second.version + 1

    # Compaction changes no data: the same inputs are still those of r4's commit. Another
    # writer's rewrite of the partition does: writing again is the repair, not a repeat.
    r5 = record("r5", {"up": {"u|1": 2000}})
    assert same_inputs_commit(str(root), r5) is not None
    DeltaTable(str(root)).optimize.compact()
    found = same_inputs_commit(str(root), r5)
    assert found is not None and found.run_id == "r4"
    from deltalake import write_deltalake

    rows = DeltaTable(str(root)).to_pyarrow_table().slice(0, 1)
    write_deltalake(str(root), rows, mode="append")
    assert same_inputs_commit(str(root), r5) is None
