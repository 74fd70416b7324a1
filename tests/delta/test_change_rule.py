"""What counts as a change of a partition, and when (issue 34's cases), read cold and followed.

A partition changed when a commit changed its set of live files with `dataChange: true` actions
(a file is its path plus its deletion vector); its lastUpdated is that commit's time, not the
files' `modificationTime`: a deletion-vector DELETE and a remove-only commit change it,
maintenance (`dataChange: false`) does not, and partlake's own commits keep the time their
records carry. Every case is checked twice: following the new commits from a cached state, and
reading the log cold, which must agree.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from dagster_partlake.delta.change_rule import commit_clock
from dagster_partlake.delta.payload import MAINTENANCE_KEY
from dagster_partlake.delta.protocol import (
    Protocol,
    check_readable,
    check_table_writable,
    check_writable,
)
from dagster_partlake.delta.state import StateCache, TableState
from dagster_partlake.errors import (
    TableFeatureError,
    TableUnreadableError,
    UnreadableTableFeatureError,
)
from dagster_partlake.records.record import CommitRecord
from tests.delta.test_conformance import DATA, comparable, delta_rs_reading


def table(root: Path, *values: str, first: int = 0) -> None:
    """An append with delta-rs of one file per partition value (`p`), rows numbered `v` from
    `first`."""
    data = pa.table({"p": list(values), "v": list(range(first, first + len(values)))})
    write_deltalake(str(root), data, partition_by=["p"], mode="append")


def followed_and_cold(cache: StateCache, root: Path) -> TableState:
    """The cache's state after following the new commits, checked against a cold read and
    delta-rs' live files."""
    followed = cache.sync(str(root))
    cold = StateCache().sync(str(root))
    assert followed is not None and cold is not None
    assert followed.follows is not None, "the new commits were not followed"
    assert comparable(followed) == comparable(cold)
    assert (cold.version, dict(cold.file_counts or {})) == delta_rs_reading(root)
    return cold


def commit(root: Path, version: int, *actions: dict[str, object]) -> None:
    """A commit written by hand (what other writers put in a log)."""
    lines = [json.dumps(action) for action in actions]
    path = root / "_delta_log" / f"{version:020d}.json"
    path.write_text("\n".join(lines) + "\n")


def add_action(root: Path, version: int, value: str | None = None) -> dict[str, Any]:
    """The add action of version `version` (of partition `p=value`, or its first one)."""
    path = root / "_delta_log" / f"{version:020d}.json"
    adds = [json.loads(line)["add"] for line in path.open() if line.startswith('{"add"')]
    return next(a for a in adds if value is None or a["partitionValues"] == {"p": value})


def test_a_deletion_vector_delete_changes_the_partition_at_its_commit(tmp_path: Path) -> None:
    """A DV DELETE re-adds the file with a deletion vector and its old modificationTime."""
    root = tmp_path / "t"
    table(root, "a", "b")
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7}
    features = {"readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}
    commit(root, 1, {"commitInfo": {"timestamp": 1}}, {"protocol": {**protocol, **features}})
    cache = StateCache()
    before = cache.sync(str(root))
    assert before is not None
    old = add_action(root, 0, "a")
    vector = {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@fTw",
        "sizeInBytes": 34,
        "cardinality": 1,
    }
    deleted_at = before.last_updated[("a",)] + 60_000  # type: ignore[operator]
    commit(
        root,
        2,
        {"commitInfo": {"timestamp": deleted_at, "operation": "DELETE"}},
        {
            "remove": {
                **{k: old[k] for k in ("path", "partitionValues", "size")},
                "dataChange": True,
                "deletionTimestamp": deleted_at,
            }
        },  # noqa: E501
        {"add": {**old, "deletionVector": vector, "dataChange": True}},
    )
    after = followed_and_cold(cache, root)
    assert old["partitionValues"] == {"p": "a"}
    assert after.last_updated[("a",)] == deleted_at  # not the file's unchanged time
    assert after.last_updated[("b",)] == before.last_updated[("b",)]
    assert after.changed_in is not None and after.changed_in[("a",)] == 2
    assert dict(after.file_counts or {}) == {("a",): 1, ("b",): 1}


def test_a_remove_only_commit_changes_the_partition(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table(root, "a", "b")
    table(root, "a", first=10)
    cache = StateCache()
    before = cache.sync(str(root))
    assert before is not None
    DeltaTable(str(root)).delete("p = 'a' AND v = 0")  # one of a's two files, nothing added
    after = followed_and_cold(cache, root)
    timestamp = DeltaTable(str(root)).history(1)[0]["timestamp"]
    assert after.last_updated[("a",)] == timestamp != before.last_updated[("a",)]
    assert after.last_updated[("b",)] == before.last_updated[("b",)]
    assert dict(after.file_counts or {}) == {("a",): 1, ("b",): 1}


def test_maintenance_changes_no_partition(tmp_path: Path) -> None:
    """A compaction rewrites files with `dataChange: false` (and new modification times)."""
    root = tmp_path / "t"
    for _ in range(3):
        table(root, "a", "b")
    cache = StateCache()
    before = cache.sync(str(root))
    assert before is not None
    time.sleep(0.01)
    DeltaTable(str(root)).optimize.compact()
    after = followed_and_cold(cache, root)
    assert dict(after.file_counts or {}) == {("a",): 1, ("b",): 1}
    assert after.last_updated == before.last_updated
    assert after.changed_in == before.changed_in


def test_partlake_commits_keep_the_time_their_records_carry(tmp_path: Path) -> None:
    """A partlake write stamps its files with its record's commit time; a partlake row delete
    that removes a whole file stamps its remove (and carries no `CommitRecord`)."""
    root = tmp_path / "t"
    table(root, "a", "b")
    cache = StateCache()
    cache.sync(str(root))
    loaded = DeltaTable(str(root))
    written_at = 1_700_000_000_000
    record = CommitRecord("t", ("a",), "1", "run").committed(
        write_id="w", commit_time_ms=written_at
    )
    old = add_action(root, 0, "a")
    stats = json.dumps({"numRecords": 1})
    new = AddAction("p=a/new.parquet", 1, {"p": "a"}, written_at, True, stats)
    loaded.create_write_transaction(
        [new, RemoveAction(old["path"], True, written_at, 1, {"p": "a"})],
        mode="append",
        schema=loaded.schema(),
        partition_by=["p"],
        commit_properties=CommitProperties(custom_metadata=record.to_commit_info()),
    )
    written = followed_and_cold(cache, root)
    assert written.last_updated[("a",)] == written_at
    assert [c.commit_time_ms for c in written.commits] == [written_at]
    assert written.touched_in[("a",)] == 1
    deleted_at = written_at + 5
    loaded = DeltaTable(str(root))
    loaded.create_write_transaction(
        [RemoveAction(add_action(root, 0, "b")["path"], True, deleted_at, 1, {"p": "b"})],
        mode="append",
        schema=loaded.schema(),
        partition_by=["p"],
        commit_properties=CommitProperties(custom_metadata={MAINTENANCE_KEY: {"rows": 1}}),
    )
    emptied = followed_and_cold(cache, root)
    assert set(emptied.last_updated) == {("a",)}  # b lost its only file
    table(root, "b")  # b has files again: its time is this append's file time
    again = followed_and_cold(cache, root)
    assert again.last_updated[("b",)] == add_action(root, 3)["modificationTime"]
    assert again.last_updated[("a",)] == written_at


def test_a_remove_only_partlake_commit_takes_its_stamp(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table(root, "a", "a")  # one file holding two rows of a
    table(root, "a")
    cache = StateCache()
    cache.sync(str(root))
    loaded = DeltaTable(str(root))
    deleted_at = 1_800_000_000_000
    loaded.create_write_transaction(
        [RemoveAction(add_action(root, 1)["path"], True, deleted_at, 1, {"p": "a"})],
        mode="append",
        schema=loaded.schema(),
        partition_by=["p"],
        commit_properties=CommitProperties(custom_metadata={MAINTENANCE_KEY: {"rows": 1}}),
    )
    after = followed_and_cold(cache, root)
    assert after.last_updated[("a",)] == deleted_at  # partlake's stamp, not delta-rs' clock


def test_other_writers_commit_time() -> None:
    """inCommitTimestamp, else commitInfo.timestamp; partlake's keys mark its own commits."""
    assert commit_clock(b'{"commitInfo":{"timestamp":5,"operation":"WRITE"}}', partlake=False) == (
        commit_clock(b'{"commitInfo":{"operation":"WRITE","timestamp":5}}', partlake=False)
    )
    ict = b'{"commitInfo":{"timestamp":5,"inCommitTimestamp":7}}'
    assert commit_clock(ict, partlake=False).timestamp == 7
    ours = b'{"commitInfo":{"timestamp":5,"partlake":{"format":2}}}'
    assert commit_clock(ours, partlake=False).partlake
    named = b'{"commitInfo":{"timestamp":5,"operationParameters":{"t":"partlake"}}}'
    assert not commit_clock(named, partlake=False).partlake


def test_a_commit_without_commit_info_takes_its_file_time(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table(root, "a", "b")
    cache = StateCache()
    cache.sync(str(root))
    removed = add_action(root, 0)
    commit(
        root,
        1,
        {
            "remove": {
                "path": removed["path"],
                "dataChange": True,
                "partitionValues": removed["partitionValues"],
            }
        },  # noqa: E501
    )
    os.utime(root / "_delta_log" / f"{1:020d}.json", (1_234_567, 1_234_567))
    after = followed_and_cold(cache, root)
    (gone,) = set(removed["partitionValues"].values())  # type: ignore[union-attr]
    assert (gone,) not in after.last_updated  # its only file removed
    kept = DeltaTable(str(root))
    assert kept.version() == 1


def test_following_a_renamed_partition_column_gives_the_full_read(tmp_path: Path) -> None:
    """Column mapping: `id` renamed to `newid` (physical name still `id`), then an append of
    `newid=2`: followed from the version before the append, in memory and through the disk."""
    root = str(DATA / "delta-rs/table_with_partitioning_mapping")
    for persist_dir in (None, str(tmp_path / "cache")):
        cache = StateCache(persist_dir)
        from dagster_partlake.delta import state as state_module
        from dagster_partlake.delta.log_state import read_log_state

        replayed = read_log_state(root, version=3)
        assert replayed is not None and replayed.partition_by == ("newid",)
        cache._keep(
            root, state_module._state_of_log(root, replayed, with_commits=True), with_commits=True
        )
        following = StateCache(persist_dir) if persist_dir else cache
        followed = following.sync(root)
        assert followed is not None and followed.follows == 3
        assert set(followed.last_updated) == {("1",), ("2",)}
        assert comparable(followed) == comparable(StateCache().sync(root))  # type: ignore[arg-type]


def test_an_unknown_reader_protocol_is_refused_as_a_valid_table(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table(root, "a")
    cache = StateCache()
    cache.sync(str(root))
    commit(
        root,
        1,
        {"commitInfo": {"timestamp": 1}},
        {"protocol": {"minReaderVersion": 99, "minWriterVersion": 7, "writerFeatures": []}},
    )  # noqa: E501
    with pytest.raises(UnreadableTableFeatureError, match="reader version 99") as refused:
        cache.sync(str(root), name="events")
    message = str(refused.value)
    assert message.startswith(f"table events at {root} is a valid Delta table")
    assert "backup" not in message
    with pytest.raises(Exception):  # noqa: B017, PT011 - delta-rs refuses it as well
        DeltaTable(str(root))
    features = {"readerFeatures": ["fooBar"], "writerFeatures": ["fooBar"]}
    commit(root, 1, {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, **features}})
    with pytest.raises(UnreadableTableFeatureError, match="the Delta reader feature fooBar"):
        StateCache().sync(str(root), name="events")
    empty = Protocol(min_reader_version=99, min_writer_version=2, reader_features=frozenset())
    with pytest.raises(UnreadableTableFeatureError, match="reader version 99"):
        check_readable(empty, table_name="t", root=str(root))


def test_writer_features_are_refused_for_writes_only(tmp_path: Path) -> None:
    root = tmp_path / "t"
    shutil.copytree(DATA / "delta-rs/table-with-domain-metadata", root)
    state = StateCache().sync(str(root), name="clustered")  # read and planned
    assert state is not None and dict(state.file_counts or {}) == {(): 109}
    with pytest.raises(
        TableFeatureError,
        match=r"uses the Delta writer features clustering, domainMetadata, rowTracking, which "
        r"partlake cannot write; partlake still reads and plans clustered",
    ):
        check_table_writable(DeltaTable(str(root)), table_name="clustered", root=str(root))
    plain = tmp_path / "plain"
    table(plain, "a")
    check_table_writable(DeltaTable(str(plain)), table_name="plain", root=str(plain))
    legacy = Protocol(min_reader_version=1, min_writer_version=4)
    check_writable(legacy, table_name="t", root=str(plain))
    with pytest.raises(TableFeatureError, match=r"changeDataFeed \(delta.enableChangeDataFeed"):
        check_writable(
            legacy,
            table_name="t",
            root=str(plain),
            configuration={"delta.enableChangeDataFeed": "true"},
        )
    mapped = Protocol(2, 5)
    with pytest.raises(TableFeatureError, match=r"columnMapping \(delta.columnMapping.mode=name"):
        check_writable(
            mapped,
            table_name="t",
            root=str(plain),
            configuration={"delta.columnMapping.mode": "name"},
        )
    with pytest.raises(TableFeatureError, match="identityColumns"):
        check_writable(Protocol(1, 6), table_name="t", root=str(plain))


def test_a_follower_reads_anew_once_the_log_drops_a_partition_s_commit(tmp_path: Path) -> None:
    """Log cleanup deletes old JSON commits: a partition whose time came from one (a remove-only
    commit) then takes its files' time in a cold read, and a follower must agree."""
    root = tmp_path / "t"
    table(root, "a", "b")
    table(root, "a", first=10)
    DeltaTable(str(root)).delete("p = 'a' AND v = 0")  # a's time: this commit's (version 2)
    table(root, "b", first=20)
    table(root, "b", first=30)
    cache = StateCache()
    before = cache.sync(str(root))
    assert before is not None and before.changed_in is not None
    assert before.changed_in[("a",)] == 2
    DeltaTable(str(root)).create_checkpoint()
    for version in range(4):  # as a writer's log cleanup does
        (root / "_delta_log" / f"{version:020d}.json").unlink()
    table(root, "b", first=40)
    after = cache.sync(str(root))
    cold = StateCache().sync(str(root))
    assert after is not None and cold is not None
    assert after.follows is None  # read anew: a's commit is gone
    assert comparable(after) == comparable(cold)
    assert cold.last_updated[("a",)] == _modification_times(root, "a")[0]


def test_a_state_at_an_earlier_version(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table(root, "a")
    table(root, "b")
    cache = StateCache()
    at_zero = cache.at_version(str(root), 0)
    assert at_zero.version == 0 and set(at_zero.last_updated) == {("a",)}
    assert cache.at_version(str(root), 1).version == 1


def _modification_times(root: Path, value: str) -> list[int]:
    import pyarrow.compute as pc

    actions = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True))
    chosen = actions.filter(pc.equal(actions.column("partition.p"), value))
    return sorted(chosen.column("modification_time").to_pylist())


def test_a_repartitioned_table(tmp_path: Path) -> None:
    """An overwrite that partitions the table by another column: the older commits' partition
    values name other partitions, and a cache that followed the table reads it anew."""
    root = tmp_path / "t"
    table(root, "a", "b")
    cache = StateCache()
    cache.sync(str(root))
    data = pa.table(
        {"p": ["x", "y"], "v": [1, None]}, schema=pa.schema([("p", pa.string()), ("v", pa.int64())])
    )
    write_deltalake(str(root), data, partition_by=["v"], mode="overwrite", schema_mode="overwrite")
    state = cache.sync(str(root))
    assert state is not None and state.partition_by == ("v",) and state.follows is None
    assert comparable(state) == comparable(StateCache().sync(str(root)))  # type: ignore[arg-type]
    assert (state.version, dict(state.file_counts or {})) == delta_rs_reading(root)
    assert set(state.last_updated) == {("1",), (None,)}
    assert state.changed_in is not None and set(state.changed_in.values()) == {1}


def test_compaction_refuses_a_table_whose_features_its_rewrite_breaks(tmp_path: Path) -> None:
    """Spark rewrites compacted files as plain Parquet: it would bring deleted rows of a deletion
    vector back and write logical column names into a column-mapped table."""
    from dagster_partlake.maintenance.compact import compact_table

    root = tmp_path / "t"
    shutil.copytree(DATA / "delta-rs/table_with_partitioning_mapping", root)
    before = sorted(p.name for p in (root / "_delta_log").iterdir())
    with pytest.raises(
        TableFeatureError,
        match=r"turns on columnMapping \(delta.columnMapping.mode=name\), deletionVectors "
        r"\(delta.enableDeletionVectors=true\), which partlake's writer does not honour",
    ):
        compact_table(None, str(root), table_name="mapped")  # type: ignore[arg-type]
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == before


def test_an_incomplete_multi_part_checkpoint_is_not_used(tmp_path: Path) -> None:
    """A writer may be interrupted between the parts of a checkpoint: without all its parts it
    is not used, and the JSON commits are read instead (as delta-rs does)."""
    root = tmp_path / "t"
    shutil.copytree(DATA / "delta/multi-part-checkpoint", root)
    expected = delta_rs_reading(root)
    (root / "_delta_log" / f"{1:020d}.checkpoint.0000000002.0000000002.parquet").unlink()
    (root / "_delta_log" / "_last_checkpoint").unlink()  # written after every part
    state = StateCache().sync(str(root))
    assert state is not None
    assert (state.version, dict(state.file_counts or {})) == expected == delta_rs_reading(root)


def test_the_log_listing_finds_complete_checkpoints() -> None:
    from dagster_partlake.delta.log_listing import Listing

    names = [
        f"{0:020d}.json",
        f"{1:020d}.json",
        f"{1:020d}.checkpoint.parquet",
        f"{1:020d}.checkpoint.0000000001.0000000002.parquet",  # incomplete: no part 2
        f"{2:020d}.json",
        f"{2:020d}.checkpoint.0000000001.0000000002.parquet",
        f"{2:020d}.checkpoint.0000000002.0000000002.parquet",
        f"{3:020d}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json",
        f"{3:020d}.checkpoint.parquet",
        f"{3:020d}.json",
        f"{3:020d}.crc",
        "_last_checkpoint",
        f".{3:020d}.json.crc",
    ]
    listing = Listing.of(names)
    assert listing.commits == (0, 1, 2, 3)
    assert [(c.version, c.kind) for c in listing.checkpoints] == [
        (1, "classic"),
        (2, "multi-part"),
        (3, "classic"),
        (3, "v2"),
    ]
    newest = listing.newest_checkpoint()
    assert newest is not None and newest.kind == "v2"
    at_two = listing.newest_checkpoint(2)
    assert at_two is not None and len(at_two.files) == 2
    assert listing.newest_version() == 3


def test_a_commit_info_line_past_the_first_still_gives_the_commit_time(tmp_path: Path) -> None:
    """The cold replay looks for a commit's commitInfo line only on its first line when the
    first pass found it there alone; a remove-only commit whose commitInfo comes last still
    takes that line's time."""
    root = tmp_path / "t"
    table(root, "a", "b")
    table(root, "a", first=10)
    cache = StateCache()
    cache.sync(str(root))
    old = add_action(root, 1, "a")
    removed = {k: old[k] for k in ("path", "partitionValues", "size")}
    commit(
        root,
        2,
        {"remove": {**removed, "dataChange": True}},
        {"commitInfo": {"timestamp": 1_234_567_000, "operation": "DELETE"}},
    )
    after = followed_and_cold(cache, root)
    assert after.last_updated[("a",)] == 1_234_567_000
    assert dict(after.file_counts or {}) == {("a",): 1, ("b",): 1}


def test_a_remove_in_another_spelling_is_never_skipped(tmp_path: Path) -> None:
    """The parse leaves the remove columns out only where no line names `"remove"`: a remove
    spelled `{ "remove": ...}` (valid JSON that the scans for line starts miss) is read right
    or the table refused, never skipped."""
    root = tmp_path / "t"
    table(root, "a", "b")
    table(root, "a", first=10)
    old = add_action(root, 1, "a")
    removed = {k: old[k] for k in ("path", "partitionValues", "size")}
    line = json.dumps({"remove": {**removed, "dataChange": True}}, separators=(",", ":"))
    info = json.dumps({"commitInfo": {"timestamp": 1_234_567_000}}, separators=(",", ":"))
    spelled = line.replace('{"remove"', '{ "remove"', 1)
    (root / "_delta_log" / f"{2:020d}.json").write_text(f"{info}\n{spelled}\n")
    assert delta_rs_reading(root)[1] == {("a",): 1, ("b",): 1}
    try:
        cold = StateCache().sync(str(root))
    except TableUnreadableError:
        return  # refused: this reader expects a remove to start its line
    assert cold is not None
    assert (cold.version, dict(cold.file_counts or {})) == delta_rs_reading(root)
