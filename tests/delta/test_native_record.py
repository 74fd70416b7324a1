"""A partlake record carried in Delta's `userMetadata` (the delta-spark writer's form), read by
every reader as the record delta-rs commits carry, with its commit's own time; and the change
rule for such commits: every partition they changed takes that time, followed as read cold.
No Spark: the commits are written as delta-spark writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagster_partlake.delta.change_rule import commit_clock
from dagster_partlake.delta.payload import commit_metadata, to_user_metadata
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.transaction import COMMIT_ID_KEY, landed_version
from dagster_partlake.errors import PartlakeError
from dagster_partlake.records.history import table_history
from dagster_partlake.records.queries import read_record
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.storage.location import TableLocation, as_location
from tests.delta.test_change_rule import commit, followed_and_cold, table


def native_payload(record: CommitRecord, commit_id: str = "c1") -> str:
    return to_user_metadata({**record.to_commit_info(), COMMIT_ID_KEY: commit_id})


def test_the_user_metadata_form_reads_as_the_record_with_the_commits_time() -> None:
    record = CommitRecord("t", ("a", "b"), "1", "run", consumed={"up": {"a": 5}}, kind="partition")
    text = native_payload(record)
    assert text.startswith('{"partlake":{') and "commit_time_ms" not in text
    info = {"timestamp": 1_700_000_000_123, "operation": "WRITE", "userMetadata": text}
    read = CommitRecord.from_commit_info(info, table_version=3)
    assert read is not None
    assert read.commit_time_ms == 1_700_000_000_123
    assert read.partition_keys == ("a", "b") and read.consumed == {"up": {"a": 5}}
    assert commit_metadata(info)[COMMIT_ID_KEY] == "c1"
    # In-commit timestamps win, as the change rule has it.
    ict = {**info, "inCommitTimestamp": 1_700_000_000_999}
    assert CommitRecord.from_commit_info(ict).commit_time_ms == 1_700_000_000_999  # type: ignore[union-attr]
    # Anyone else's userMetadata is theirs.
    assert CommitRecord.from_commit_info({**info, "userMetadata": "nightly load"}) is None
    assert CommitRecord.from_commit_info({**info, "userMetadata": '{"team":"x"}'}) is None
    with pytest.raises(PartlakeError, match="starts like a partlake record but is not JSON"):
        CommitRecord.from_commit_info({**info, "userMetadata": '{"partlake": oops'})


def test_the_commit_clock_tells_a_native_commit_by_its_user_metadata() -> None:
    record = CommitRecord("t", ("a",), "1", "run")
    line = json.dumps(
        {
            "commitInfo": {
                "timestamp": 42,
                "operation": "WRITE",
                "userMetadata": native_payload(record),
            }
        },
        separators=(",", ":"),
    ).encode()
    clock = commit_clock(line, partlake=False)
    assert (clock.native, clock.partlake, clock.timestamp) == (True, False, 42)
    plain = json.dumps({"commitInfo": {"timestamp": 42, "userMetadata": "x"}}).encode()
    assert not commit_clock(plain, partlake=False).native


def test_a_native_commit_changes_its_partitions_at_its_own_time(tmp_path: Path) -> None:
    """Spark stamps each file with the time it wrote it; the record learns only the commit's
    time, so the partitions it changed take that (cold and followed alike), and a later
    delta-spark commit without a record goes back to the rule for other writers."""
    root = tmp_path / "t"
    table(root, "a", "b")
    cache = StateCache()
    before = cache.sync(str(root))
    assert before is not None
    committed_at = 1_800_000_000_000
    record = CommitRecord("t", ("a", "b"), "1", "run", kind="partition")
    old_a = _add(root, 0, "a")
    old_b = _add(root, 0, "b")
    commit(
        root,
        1,
        {
            "commitInfo": {
                "timestamp": committed_at,
                "operation": "WRITE",
                "userMetadata": native_payload(record, "abc"),
            }
        },
        {"txn": {"appId": "partlake:a", "version": committed_at - 900}},
        *[
            {
                "remove": {
                    **{k: old[k] for k in ("path", "partitionValues", "size")},
                    "dataChange": True,
                    "deletionTimestamp": committed_at,
                }
            }
            for old in (old_a, old_b)
        ],
        # Files written at different moments before the commit.
        {"add": _new("p=a/x.parquet", "a", committed_at - 700)},
        {"add": _new("p=b/y.parquet", "b", committed_at - 300)},
    )
    after = followed_and_cold(cache, root)
    assert after.last_updated[("a",)] == after.last_updated[("b",)] == committed_at
    assert [c.commit_time_ms for c in after.commits] == [committed_at]
    found = read_record(str(root), 1)
    assert found is not None and found.commit_time_ms == committed_at
    assert found.written_last_updated("a") == after.last_updated[("a",)]
    assert landed_version(_location(root), 0, "abc", "t") == 1
    assert [e.operation for e in table_history(str(root))][-1] == "write"

    commit(
        root,
        2,
        {"commitInfo": {"timestamp": committed_at + 10_000, "operation": "WRITE"}},
        {"add": _new("p=a/z.parquet", "a", committed_at + 9_000)},
    )
    again = followed_and_cold(cache, root)
    assert again.last_updated[("a",)] == committed_at + 9_000  # its new file's time
    assert again.last_updated[("b",)] == committed_at


def _add(root: Path, version: int, value: str) -> dict[str, object]:
    path = root / "_delta_log" / f"{version:020d}.json"
    adds = [json.loads(line)["add"] for line in path.open() if line.startswith('{"add"')]
    return next(a for a in adds if a["partitionValues"] == {"p": value})


def _new(path: str, value: str, mtime: int) -> dict[str, object]:
    return {
        "path": path,
        "partitionValues": {"p": value},
        "size": 1,
        "modificationTime": mtime,
        "dataChange": True,
        "stats": json.dumps({"numRecords": 1}),
    }


def _location(root: Path) -> TableLocation:
    return as_location(str(root))
