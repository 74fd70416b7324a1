"""A checkpoint written after one large commit, read cold (issue 32's plan at 1M partitions).

When the log holds every commit up to a checkpoint and only the checkpoint's own commit adds
files, the cold replay takes the checkpoint's files as that commit's adds instead of parsing its
JSON a second time, once its payload's count of its actions (partlake's own commits) or two
searches of its bytes show it holds data-changing adds alone. Each case here is read twice, with
the checkpoint and from the JSON commits alone, which must agree: the cases the shortcut takes,
and those it must leave to the parse.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from dagster_partlake.delta import log_state
from dagster_partlake.delta.log_files import LogFiles
from dagster_partlake.delta.log_state import _adds_only, read_log_state
from dagster_partlake.delta.payload import to_user_metadata
from dagster_partlake.records.record import CommitRecord

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "v", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ],
}
VECTOR = {
    "storageType": "i",
    "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@fTw",
    "sizeInBytes": 34,
    "cardinality": 1,
}
DV_PROTOCOL = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["deletionVectors"],
    "writerFeatures": ["deletionVectors"],
}


def replayed(root: Path) -> tuple[Any, ...]:
    """A cold read's version, lastUpdated, file counts and change versions per partition."""
    state = read_log_state(str(root))
    assert state is not None
    return (
        state.version,
        dict(state.newest.items()),
        dict(state.counts.items()),
        dict(state.changed_in.items()),
    )


def checkpointed_as_json(root: Path) -> tuple[Any, ...]:
    """The cold read with a checkpoint at the newest version (written now), checked against
    the read of the JSON commits alone (the checkpoint removed again)."""
    DeltaTable(str(root)).create_checkpoint()
    log = root / "_delta_log"
    assert list(log.glob("*.checkpoint.parquet"))
    with_checkpoint = replayed(root)
    for path in [*log.glob("*.checkpoint*.parquet"), log / "_last_checkpoint"]:
        path.unlink()
    assert replayed(root) == with_checkpoint
    return with_checkpoint


def file_add(root: Path, name: str, value: str, when: int, **extra: Any) -> dict[str, Any]:
    """An add action of a real one-row Parquet file of partition `p=value`."""
    relative = f"p={value}/{name}.parquet"
    (root / f"p={value}").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"v": pa.array([1], pa.int64())}), root / relative)
    size = (root / relative).stat().st_size
    add = {"path": relative, "partitionValues": {"p": value}, "size": size}
    return {"add": {**add, "modificationTime": when, "dataChange": True, **extra}}


def compact_commit(root: Path, version: int, *actions: dict[str, Any]) -> None:
    """A commit written by hand as writers write them: compact JSON, one action a line."""
    (root / "_delta_log").mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(a, separators=(",", ":")) for a in actions]
    (root / "_delta_log" / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def created(
    *, info: dict[str, Any] | None = None, protocol: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The commitInfo, protocol and metaData lines of a table's first commit."""
    meta = {
        "id": "5a8b0a54-0000-4000-8000-000000000000",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": ["p"],
        "configuration": {},
        "createdTime": 1_000,
    }
    return [
        {"commitInfo": info or {"timestamp": 9_000, "operation": "CREATE TABLE"}},
        {"protocol": protocol or {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": meta},
    ]


def test_one_large_commit_checkpointed_reads_as_its_json(tmp_path: Path) -> None:
    """Files of one commit with their own times: each partition changed at that commit, at the
    newest time of its files, and the replay took the checkpoint's files for the commit."""
    root = tmp_path / "t"
    adds = [
        file_add(root, "a1", "a", 1_000),
        file_add(root, "a2", "a", 3_000),
        file_add(root, "b1", "b", 2_000),
    ]
    compact_commit(root, 0, *created(), *adds)
    assert _adds_only(LogFiles(str(root)), 0) is not None
    version, newest, counts, changed_in = checkpointed_as_json(root)
    assert version == 0
    assert newest == {("a",): 3_000, ("b",): 2_000}
    assert counts == {("a",): 2, ("b",): 1}
    assert changed_in == {("a",): 0, ("b",): 0}


def test_txn_lines_after_the_adds_as_partlake_s_writer_commits(tmp_path: Path) -> None:
    """delta-rs writes a commit's txn actions after its adds (partlake's writer one a
    partition): they change no partition, and the replay still takes the checkpoint's files."""
    root = tmp_path / "t"
    adds = [file_add(root, "a", "a", 1_000), file_add(root, "b", "b", 2_000)]
    txns = [{"txn": {"appId": f"partlake-{v}", "version": 1_000}} for v in ("a", "b")]
    compact_commit(root, 0, *created(), *adds, *txns)
    assert _adds_only(LogFiles(str(root)), 0) is not None
    _, newest, _, changed_in = checkpointed_as_json(root)
    assert (newest, changed_in) == ({("a",): 1_000, ("b",): 2_000}, {("a",): 0, ("b",): 0})


def test_commits_after_the_checkpoint_change_what_they_touch(tmp_path: Path) -> None:
    """The bulk commit's changes under the commits that follow its checkpoint: a remove of one
    of its files (that file then followed one by one), a compaction (no change), an append."""
    root = tmp_path / "t"
    adds = [file_add(root, f"{v}{i}", v, 1_000 * i) for v in "abc" for i in (1, 2)]
    compact_commit(root, 0, *created(), *adds)
    DeltaTable(str(root)).create_checkpoint()
    gone = {k: adds[0]["add"][k] for k in ("path", "partitionValues", "size")}
    compact_commit(
        root,
        1,
        {"commitInfo": {"timestamp": 50_000}},
        {"remove": {**gone, "dataChange": True, "deletionTimestamp": 50_000}},
    )
    compact_commit(
        root,
        2,
        {"commitInfo": {"timestamp": 60_000}},
        *[
            {
                "remove": {
                    **{k: a["add"][k] for k in ("path", "partitionValues", "size")},
                    "dataChange": False,
                }
            }
            for a in adds[2:4]
        ],
        file_add(root, "b3", "b", 60_000, dataChange=False),
    )
    compact_commit(root, 3, {"commitInfo": {"timestamp": 70_000}}, file_add(root, "c3", "c", 7))
    with_checkpoint = replayed(root)
    log = root / "_delta_log"
    for path in [*log.glob("*.checkpoint*.parquet"), log / "_last_checkpoint"]:
        path.unlink()
    assert replayed(root) == with_checkpoint
    _, newest, counts, changed_in = with_checkpoint
    assert newest == {("a",): 50_000, ("b",): 2_000, ("c",): 7}
    assert counts == {("a",): 1, ("b",): 1, ("c",): 3}
    assert changed_in == {("a",): 1, ("b",): 0, ("c",): 3}


def test_a_created_table_filled_by_its_second_commit(tmp_path: Path) -> None:
    """delta-rs' own commits: an empty table, then one write, checkpointed after it."""
    root = tmp_path / "t"
    schema = pa.schema([("p", pa.string()), ("v", pa.int64())])
    DeltaTable.create(str(root), schema, partition_by=["p"])
    data = pa.table({"p": ["a", "b", "b"], "v": [0, 1, 2]}, schema=schema)
    write_deltalake(str(root), data, partition_by=["p"], mode="append")
    assert _adds_only(LogFiles(str(root)), 1) is not None
    version, _, counts, changed_in = checkpointed_as_json(root)
    assert (version, counts, changed_in) == (1, {("a",): 1, ("b",): 1}, {("a",): 1, ("b",): 1})


def _quiet_add(root: Path) -> list[dict[str, Any]]:
    # b's file appears without a data change: b changed in no commit (its files' time).
    return [file_add(root, "a", "a", 1_000), file_add(root, "b", "b", 2_000, dataChange=False)]


def _remove_line(root: Path) -> list[dict[str, Any]]:
    removed = {"path": "p=a/gone.parquet", "partitionValues": {"p": "a"}, "size": 1}
    gone = {"remove": {**removed, "dataChange": True, "deletionTimestamp": 5_000}}
    return [file_add(root, "a", "a", 1_000), gone, file_add(root, "b", "b", 2_000)]


def _deletion_vector(root: Path) -> list[dict[str, Any]]:
    # A file with a deletion vector is no new file: its partition takes the commit's time.
    return [file_add(root, "a", "a", 1_000, deletionVector=VECTOR), file_add(root, "b", "b", 2)]


def _later_line(root: Path) -> list[dict[str, Any]]:
    # A change data file among the adds: the searches find adds and txn lines alone.
    cdc = {"path": "_change_data/c.parquet", "partitionValues": {"p": "a"}, "size": 1}
    return [file_add(root, "a", "a", 1_000), {"cdc": {**cdc, "dataChange": False}}]


SHAPES = {
    "quiet add": (_quiet_add, created()),
    "remove line": (_remove_line, created()),
    "deletion vector": (_deletion_vector, created(protocol=DV_PROTOCOL)),
    "line of another kind after the adds": (_later_line, created()),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_commit_of_more_than_new_files_is_parsed(shape: str, tmp_path: Path) -> None:
    """Quiet adds, removes, deletion vectors, other lines among the adds: the checkpoint's files
    do not say what the commit changed, so its JSON is parsed as before."""
    root = tmp_path / "t"
    actions, head = SHAPES[shape]
    compact_commit(root, 0, *head, *actions(root))
    if shape != "deletion vector":  # (its bytes hold adds alone: the checkpoint shows the vector)
        assert _adds_only(LogFiles(str(root)), 0) is None
    _, newest, _, changed_in = checkpointed_as_json(root)
    if shape == "quiet add":
        assert changed_in == {("a",): 0} and newest[("b",)] == 2_000
    if shape == "deletion vector":
        assert newest[("a",)] == 9_000  # the commit's time, not the file's


def test_a_partlake_commit_made_through_delta_spark_takes_its_own_time(tmp_path: Path) -> None:
    """A partlake record in `userMetadata` (the delta-spark writer): its partitions changed at
    the commit's own time, whatever times its files carry."""
    root = tmp_path / "t"
    record = CommitRecord("t", ("a",), "1", "run").committed(write_id="w", commit_time_ms=7_000)
    payload = record.to_commit_info()
    info = {"timestamp": 7_000, "operation": "WRITE", "userMetadata": to_user_metadata(payload)}
    compact_commit(root, 0, *created(info=info), file_add(root, "a", "a", 1_000))
    assert _adds_only(LogFiles(str(root)), 0) is None
    _, newest, _, _ = checkpointed_as_json(root)
    assert newest == {("a",): 7_000}


def test_an_older_commit_that_adds_keeps_the_parse(tmp_path: Path) -> None:
    """Two commits adding files before the checkpoint: the checkpoint cannot tell which added
    which, so both are parsed (a's time is its newer commit's file, not its newest file)."""
    root = tmp_path / "t"
    compact_commit(root, 0, *created(), file_add(root, "a0", "a", 5_000))
    newer = file_add(root, "a1", "a", 4_000)
    compact_commit(root, 1, {"commitInfo": {"timestamp": 9_500}}, newer)
    _, newest, counts, changed_in = checkpointed_as_json(root)
    assert (newest, counts, changed_in) == ({("a",): 4_000}, {("a",): 2}, {("a",): 1})


@pytest.mark.parametrize("block", [16, 40, 97, 1 << 22])
def test_a_first_line_commit_info_is_dropped_at_any_block_size(
    block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commitInfo that opens a commit is dropped before its chunk is copied (ended in the
    first chunk, or a later one at small blocks): the other lines come out whole and in order,
    the commitInfo counts as the first line, and its bytes reach the `_Seen`."""
    root = tmp_path / "t"
    adds = [file_add(root, f"f{i}", "ab"[i % 2], 1_000 + i) for i in range(5)]
    compact_commit(root, 0, *created(), *adds)
    monkeypatch.setattr(log_state, "_BLOCK", block)
    lines = (root / "_delta_log" / f"{0:020d}.json").read_bytes().splitlines(keepends=True)
    for first_only in (False, True):
        seen, leading = log_state._Seen(), []
        blocks = list(
            log_state._blocks(
                LogFiles(str(root)), f"{0:020d}.json", seen, leading=leading, first_only=first_only
            )
        )
        assert b"".join(blocks) == b"".join(lines[1:])
        assert all(b.endswith(b"\n") for b in blocks)
        info = lines[0].rstrip(b"\n")  # (a line longer than a block: its start, then fed)
        assert leading == [True] and seen.found and info.startswith(seen.head)
        assert seen.head == info or info.endswith(seen.tail)
    assert _adds_only(LogFiles(str(root)), 0) is not None
    monkeypatch.undo()
    assert checkpointed_as_json(root)[2] == {("a",): 3, ("b",): 2}


def test_checkpoint_batches_sharing_dictionaries_code_as_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint read a few rows at a time: each batch's partition value dictionaries are
    coded once and reused for the batches that repeat them (`_Vocabulary.mapping`); the state
    equals the read of the JSON commits."""
    root = tmp_path / "t"
    adds = [file_add(root, f"f{i}", f"v{i % 7}", 1_000 + i) for i in range(40)]
    compact_commit(root, 0, *created(), *adds[:20])
    compact_commit(root, 1, {"commitInfo": {"timestamp": 9_500}}, *adds[20:])
    monkeypatch.setattr(log_state, "_BATCH", 3)
    _, newest, counts, _ = checkpointed_as_json(root)
    assert sum(counts.values()) == 40 and len(counts) == 7
    assert newest[("v5",)] == 1_033  # its newest file, f33 (33 % 7 == 5; 40 is past the last)


def _partlake_commit(root: Path, values: list[str], when: int) -> int:
    """A real commit of partlake's transaction (`delta.transaction.commit`) adding one file per
    value of `p` to a new table; returns its version."""
    from dagster_partlake.delta.files import WrittenFile
    from dagster_partlake.delta.payload import CommitPayload
    from dagster_partlake.delta.transaction import Actions, commit
    from dagster_partlake.storage.location import as_location

    written = []
    for i, value in enumerate(values):
        relative = file_add(root, f"f{i}", value, when)["add"]["path"]
        size = (root / relative).stat().st_size
        written.append(WrittenFile(relative, size, 1, {"p": value}))
    payload = CommitPayload(partition_keys=tuple(sorted(set(values))))
    committed = commit(
        as_location(str(root)),
        None,
        lambda _snapshot: Actions(adds=written),
        payload=lambda commit_id, now: payload.committed(
            write_id=commit_id, commit_time_ms=now
        ).to_commit_info(),
        name="t",
        schema=pa.schema([("v", pa.int64()), ("p", pa.string())]),
        partition_by=["p"],
    )
    return committed.version


def test_partlake_s_own_commit_says_it_holds_adds_alone_in_its_first_bytes(
    tmp_path: Path,
) -> None:
    """partlake's transaction writes the counts of its actions at the start of its payload
    (`payload.with_actions`): the cold read learns from the commitInfo line alone that the
    commit holds data-changing adds alone, checks the count against the checkpoint's files,
    and reads what the parse of the JSON reads."""
    root = tmp_path / "t"
    version = _partlake_commit(root, ["a", "b", "b", "c"], 1_000)
    line = (root / "_delta_log" / f"{version:020d}.json").read_bytes().split(b"\n")[0]
    assert b'"partlake":{"format":2,"actions":{"adds":4,"removes":0,"data_change":true}' in line
    bulk = log_state._declared_bulk(LogFiles(str(root)), version)
    assert bulk is not None and bulk.declared == 4 and bulk.seen.partlake
    _, newest, counts, changed_in = checkpointed_as_json(root)
    assert counts == {("a",): 1, ("b",): 2, ("c",): 1}
    assert changed_in == {("a",): version, ("b",): version, ("c",): version}
    assert set(newest) == {("a",), ("b",), ("c",)}


def test_a_payload_whose_count_the_checkpoint_denies_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A payload that says its commit added more files than the checkpoint holds (the commit
    also removed one, which its counts hide): its bytes decide (`_adds_only` finds the remove)
    and the commit is parsed; the read agrees with the JSON alone."""
    root = tmp_path / "t"
    counts = {"adds": 3, "removes": 0, "data_change": True}
    info = {"timestamp": 9_000, "partlake": {"format": 2, "actions": counts}}
    compact_commit(root, 0, *created(info=info), *_remove_line(root))
    assert log_state._declared_bulk(LogFiles(str(root)), 0) is not None
    searched: list[int] = []
    real = log_state._adds_only
    monkeypatch.setattr(
        log_state, "_adds_only", lambda files, v: searched.append(v) or real(files, v)
    )
    _, newest, counts_of, changed_in = checkpointed_as_json(root)
    assert searched == [0]  # the declared count (3) is not the checkpoint's (2)
    assert counts_of == {("a",): 1, ("b",): 1} and changed_in == {("a",): 0, ("b",): 0}
    assert newest == {("a",): 1_000, ("b",): 2_000}


@pytest.mark.parametrize(
    "counts",
    [
        {"adds": 2, "removes": 1, "data_change": True},
        {"adds": 2, "removes": 0, "data_change": False},
    ],
)
def test_a_payload_that_declares_more_than_adds_is_left_to_the_bytes(
    counts: dict[str, Any], tmp_path: Path
) -> None:
    root = tmp_path / "t"
    info = {"timestamp": 9_000, "partlake": {"format": 2, "actions": counts}}
    compact_commit(root, 0, *created(info=info), *_quiet_add(root))
    assert log_state._declared_bulk(LogFiles(str(root)), 0) is None
    _, newest, _, changed_in = checkpointed_as_json(root)
    assert changed_in == {("a",): 0} and newest[("b",)] == 2_000
