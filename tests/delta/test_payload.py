"""The commit payload: what the storage layer reads, caches and commits of a partlake record,
its opaque parts kept as they were, and the bytes on disk those of every earlier writer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dagster_partlake.columnar.interner import KeyList
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.delta.payload import WHOLE_TABLE_ID, CommitPayload, to_user_metadata
from dagster_partlake.delta.snapshot import open_snapshot
from dagster_partlake.delta.transaction import Actions, commit
from dagster_partlake.errors import PartlakeError
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.storage.location import as_location

RECORD = CommitRecord(
    asset_key="stats",
    partition_keys=("2024-01-02|eu", "2024-01-02|us", "2024-01-03|eu"),
    code_version="3",
    run_id="run-9",
    consumed={"raw": {"2024-01-02|eu": 1700, "2024-01-02|us": 1800}, "dim": {}},
    upstream_versions={"raw": 7, "dim": 2},
    rows_by_partition={"2024-01-02|eu": 5, "2024-01-02|us": 0, "2024-01-03|eu": 2},
    kind="tracked",
    kept={"2024-01-03|eu": 1600},
    content_hashes={"2024-01-02|eu": "5:1:2"},
    metrics={"rows_inserted": 5},
    snapshot_ms=1650,
    watermarks={"raw": {"value": "2024-01-02 10:00:00", "type": "timestamp"}},
    consumed_files={"landing": ("a/1.json", "b/2.json")},
    stream_query="q-1",
    stream_batch=4,
).committed(write_id="w-9", commit_time_ms=1_700_000_000_000)

# The record above exactly as dagster_partlake wrote it before the payload existed (619fb1b).
BEFORE = (
    '{"partlake":{"format":2,"run_id":"run-9","asset_key":"stats","partition_keys":'
    '["2024-01-02|eu","2024-01-02|us","2024-01-03|eu"],"code_version":"3","upstream_versions":'
    '{"raw":7,"dim":2},"consumed":{"raw":{"2024-01-02|eu":1700,"2024-01-02|us":1800},"dim":{}},'
    '"rows_by_partition":{"2024-01-02|eu":5,"2024-01-02|us":0,"2024-01-03|eu":2},'
    '"empty_partition_keys":["2024-01-02|us"],"write_id":"w-9","commit_time_ms":1700000000000,'
    '"kind":"tracked","kept":{"2024-01-03|eu":1600},"content_hashes":{"2024-01-02|eu":"5:1:2"},'
    '"metrics":{"rows_inserted":5},"snapshot_ms":1650,"watermarks":{"raw":{"value":'
    '"2024-01-02 10:00:00","type":"timestamp"}},"consumed_files":{"landing":["a/1.json",'
    '"b/2.json"]},"stream":{"query":"q-1","batch_id":4}}}'
)
BARE_BEFORE = (
    '{"partlake":{"format":2,"run_id":null,"asset_key":"t","partition_keys":[],'
    '"code_version":null,"upstream_versions":{},"consumed":{},"rows_by_partition":null,'
    '"empty_partition_keys":[],"write_id":""}}'
)


def _compact(info: object) -> str:
    return json.dumps(info, separators=(",", ":"))


def test_the_bytes_are_those_written_before_the_payload() -> None:
    assert _compact(RECORD.to_commit_info()) == BEFORE
    assert _compact(RECORD.to_payload().to_commit_info()) == BEFORE
    assert _compact(CommitRecord("t", (), None, None).to_commit_info()) == BARE_BEFORE
    # delta-spark's form: the same object, first in userMetadata.
    text = to_user_metadata({**RECORD.to_commit_info(), "partlake_commit": "c"})
    assert text == BEFORE[:-1] + ',"partlake_commit":"c"}'


def test_a_payload_read_back_writes_the_same_bytes_and_keeps_what_it_does_not_know() -> None:
    info = json.loads(BEFORE)
    info["partlake"]["future_field"] = {"x": [1, 2]}
    for compact in (False, True):
        payload = CommitPayload.from_commit_info(info, table_version=4, compact=compact)
        assert payload is not None
        if compact:
            # A compact read lists a column's partitions in the interner's order, which other
            # reads in the process decide (writers never write a read-back payload again): the
            # same content, not always the same bytes.
            assert json.loads(_compact(payload.to_commit_info())) == info
        else:
            assert _compact(payload.to_commit_info()) == _compact(info)
        assert payload.small["future_field"] == {"x": [1, 2]}
        assert set(payload.columns) == {"consumed"}
        assert payload.table_version == 4 and payload.write_id == "w-9"
        assert payload.empty_partition_ids == {"2024-01-02|us"}
        assert payload.written_last_updated("2024-01-03|eu") == 1600
        assert payload.written_last_updated("2024-01-02|us") is None
        assert payload.written_last_updated("2024-01-02|eu") == 1_700_000_000_000
        assert isinstance(payload.partition_keys, KeyList if compact else tuple)
        assert isinstance(payload.columns["consumed"]["raw"], IntMap if compact else dict)
        record = CommitRecord.from_payload(payload)
        assert record == dataclasses.replace(RECORD, table_version=4)
        assert CommitRecord.from_commit_info(info, table_version=4, compact=compact) == record


def test_a_record_converts_to_a_payload_and_back() -> None:
    payload = RECORD.to_payload()
    assert payload.partition_keys == RECORD.partition_keys and payload.kept == RECORD.kept
    assert payload.small["run_id"] == "run-9" and payload.columns == {"consumed": RECORD.consumed}
    assert CommitRecord.from_payload(payload) == RECORD
    assert CommitPayload(()).partition_ids == (WHOLE_TABLE_ID,)
    bare = CommitRecord("t", (), None, None)
    assert CommitRecord.from_payload(bare.to_payload()) == bare


def test_newer_or_foreign_payloads_are_refused_clearly() -> None:
    assert CommitPayload.from_commit_info({"operation": "WRITE"}) is None
    newer = json.loads(BEFORE)
    newer["partlake"]["format"] = 3
    with pytest.raises(
        PartlakeError, match="commit 7 carries a partlake record of format 3, newer"
    ):
        CommitPayload.from_commit_info(newer, table_version=7)
    with pytest.raises(PartlakeError, match="a commit carries a partlake record without partit"):
        CommitPayload.from_commit_info({"partlake": {"asset_key": "t"}})
    # The storage layer reads a payload without an asset key; the record layer refuses it.
    unkeyed = CommitPayload.from_commit_info({"partlake": {"partition_keys": []}}, table_version=2)
    assert unkeyed is not None
    with pytest.raises(PartlakeError, match="commit 2 carries a partlake record without asset_key"):
        CommitRecord.from_payload(unkeyed)


def test_a_committed_payload_is_the_commit_info_on_disk(tmp_path: Path) -> None:
    """A real delta-rs commit through the one transaction: its commitInfo line holds the
    payload's bytes as before, and the transaction's count of its actions right after its
    format (`with_actions`: no action here)."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"p": ["a"], "v": [1]}), partition_by=["p"])
    location = as_location(str(root))
    payload = RECORD.to_payload()
    landed = commit(
        location,
        open_snapshot(location, table_name="t"),
        lambda _snapshot: Actions(),
        payload=lambda commit_id, now_ms: payload.committed(
            write_id=commit_id, commit_time_ms=now_ms
        ).to_commit_info(),
        name="t",
    )
    line = next(
        line
        for line in (root / "_delta_log" / f"{landed.version:020d}.json").open()
        if line.startswith('{"commitInfo"')
    )
    info = json.loads(line)["commitInfo"]
    before = json.loads(BEFORE)["partlake"]
    before.update(write_id=landed.commit_id, commit_time_ms=landed.commit_time_ms)
    counts = {"adds": 0, "removes": 0, "data_change": True}
    expected = {"format": before.pop("format"), "actions": counts, **before}
    assert info["partlake"] == expected
    assert list(info["partlake"]) == list(expected)  # and in the same order
    read = CommitPayload.from_commit_info(info, table_version=landed.version)
    assert read is not None and CommitRecord.from_payload(read) == dataclasses.replace(
        RECORD,
        write_id=landed.commit_id,
        commit_time_ms=landed.commit_time_ms,
        table_version=landed.version,
    )


def test_a_state_cache_keeps_payloads_as_the_log_has_them(tmp_path: Path) -> None:
    """Payloads read from the log, kept on disk by a persisted state and loaded back by a new
    cache are the same payloads, and decode to the same records (a stream's query and batch
    too, which the format-4 state file dropped)."""
    from dagster_partlake.delta.state import StateCache

    root = tmp_path / "t"
    keys = [f"2024-01-{i % 28 + 1:02d}|r{i // 28:03d}" for i in range(300)]  # read compactly
    write_deltalake(str(root), pa.table({"p": keys[:1], "v": [1]}), partition_by=["p"])
    location = as_location(str(root))
    big = dataclasses.replace(
        RECORD,
        partition_keys=tuple(keys),
        consumed={"raw": {k: 1700 + i for i, k in enumerate(keys)}, "dim": {}},
        rows_by_partition={k: i % 3 for i, k in enumerate(keys)},
        kept={keys[1]: 1600},
    )
    for record in (RECORD, big):
        commit(
            location,
            open_snapshot(location, table_name="t"),
            lambda _snapshot: Actions(),
            payload=lambda commit_id, now_ms, record=record: record.committed(
                write_id=commit_id, commit_time_ms=now_ms
            ).to_commit_info(),
            name="t",
        )
    cold = StateCache().sync(str(root))
    assert cold is not None and [p.table_version for p in cold.commits] == [1, 2]
    StateCache(persist_dir=str(tmp_path / "cache")).sync(str(root))
    loaded = StateCache(persist_dir=str(tmp_path / "cache")).persisted(str(root))
    assert loaded is not None and loaded.commits == cold.commits
    for payload, record in zip(loaded.commits, (RECORD, big), strict=True):
        decoded = CommitRecord.from_payload(payload)
        assert decoded == dataclasses.replace(
            record,
            write_id=payload.write_id,
            commit_time_ms=payload.commit_time_ms,
            table_version=payload.table_version,
        )
    assert isinstance(loaded.commits[1].columns["consumed"]["raw"], IntMap)
    assert loaded.commits[1].empty_partition_ids == {k for i, k in enumerate(keys) if i % 3 == 0}


def test_a_large_payload_read_in_bulk_is_what_json_reads_of_any_group() -> None:
    """The bulk reader takes any group of int columns (not only a record's), and leaves large
    objects of strings and of small objects to `json`."""
    from dagster_partlake.delta.commit_scan import scan_commit_info

    keys = [f"2024-01-{i % 28 + 1:02d}|r{i // 28:03d}" for i in range(3000)]
    body = json.loads(BARE_BEFORE)["partlake"]
    body.update(
        partition_keys=keys,
        rows_by_partition={k: i % 4 for i, k in enumerate(keys)},
        empty_partition_keys=sorted(k for i, k in enumerate(keys) if i % 4 == 0),
        consumed={"raw": {k: 1700 + i for i, k in enumerate(keys)}},
        future_group={"a": {k: i for i, k in enumerate(keys)}, "b": {}},
        content_hashes={k: f"{i}:1:2" for i, k in enumerate(keys)},
        watermarks={f"up{i}": {"value": str(i), "type": "long"} for i in range(300)},
    )
    line = json.dumps({"commitInfo": {"timestamp": 1, "partlake": body}}, separators=(",", ":"))
    scanned = CommitPayload.from_commit_info(scan_commit_info(line.encode()), compact=True)
    parsed = CommitPayload.from_commit_info(json.loads(line)["commitInfo"], compact=True)
    assert scanned is not None and parsed is not None
    assert isinstance(scanned.partition_keys, KeyList)
    assert isinstance(scanned.columns["future_group"]["a"], IntMap)
    assert set(scanned.columns) == {"consumed", "future_group"}
    assert scanned == parsed
    # The same entries (a compact payload lists a column's partitions in interned order).
    assert json.loads(_compact(scanned.to_commit_info())) == {"partlake": body}
