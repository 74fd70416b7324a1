"""The commit record: one typed definition, written and read back the same, old records kept."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.errors import PartlakeError
from dagster_partlake.records.record import CommitRecord

RECORD = CommitRecord(
    asset_key="clean_events",
    partition_keys=("2024-01-02|eu", "2024-01-02|us"),
    code_version="1",
    run_id="run-1",
    consumed={"raw_events": {"2024-01-02|eu": 1700, "2024-01-02|us": 1800}},
    upstream_versions={"raw_events": 7},
    rows_by_partition={"2024-01-02|eu": 977, "2024-01-02|us": 0},
)


def test_a_record_round_trips_through_the_commit_info() -> None:
    written = RECORD.committed(write_id="w1", commit_time_ms=1_700_000_000_000)
    info = written.to_commit_info()
    assert info["partlake"]["format"] == 2
    assert info["partlake"]["empty_partition_keys"] == ["2024-01-02|us"]
    assert CommitRecord.from_commit_info(info, table_version=3) == dataclasses.replace(
        written, table_version=3
    )
    assert written.empty_partition_ids == {"2024-01-02|us"}
    assert CommitRecord("t", (), None, None).partition_ids == (WHOLE_TABLE_ID,)
    assert written.written_last_updated("2024-01-02|eu") == 1_700_000_000_000
    assert written.written_last_updated("2024-01-02|us") is None


def test_format_2_fields_round_trip_and_kept_partitions_keep_their_time() -> None:
    written = CommitRecord(
        asset_key="tracked_stats",
        partition_keys=("2024-01-02|eu", "2024-01-02|us"),
        code_version="1",
        run_id="run-2",
        rows_by_partition={"2024-01-02|eu": 3, "2024-01-02|us": 4},
        kind="tracked",
        kept={"2024-01-02|us": 1_600_000_000_000},
        content_hashes={"2024-01-02|eu": "3:1:2", "2024-01-02|us": "4:5:6"},
        metrics={"rows_inserted": 3, "rows_deleted": 2, "rows_unchanged": 4},
    ).committed(write_id="w2", commit_time_ms=1_700_000_000_000)
    read = CommitRecord.from_commit_info(written.to_commit_info(), table_version=9)
    assert read == dataclasses.replace(written, table_version=9)
    assert read.written_last_updated("2024-01-02|us") == 1_600_000_000_000
    assert read.written_last_updated("2024-01-02|eu") == 1_700_000_000_000


def test_records_written_before_the_format_field_stay_readable() -> None:
    """A commit info exactly as the writer produced it before `CommitRecord` existed."""
    legacy = {
        "partlake": {
            "run_id": "r0",
            "asset_key": "daily_region_stats",
            "partition_keys": ["2024-01-01|eu"],
            "code_version": "1",
            "upstream_versions": {"clean_events": 2},
            "consumed": {"clean_events": {"2024-01-01|eu": 1234}},
            "rows_by_partition": {"2024-01-01|eu": 1},
            "empty_partition_keys": [],
            "write_id": "abc",
            "commit_time_ms": 1_700_000_000_123,
        }
    }
    record = CommitRecord.from_commit_info(legacy, table_version=5)
    assert record is not None
    assert record.consumed == {"clean_events": {"2024-01-01|eu": 1234}}
    assert record.commit_time_ms == 1_700_000_000_123 and record.table_version == 5
    # Benchmarks and early writers left rows_by_partition out but listed empty partitions.
    early = {"partlake": {**legacy["partlake"], "rows_by_partition": None}}
    early["partlake"]["empty_partition_keys"] = ["2024-01-01|eu"]
    assert CommitRecord.from_commit_info(early).empty_partition_ids == {"2024-01-01|eu"}
    # Before partlake recorded what it consumed, there was no commit time: known, not judged.
    no_time = {"partlake": {k: v for k, v in legacy["partlake"].items() if k != "commit_time_ms"}}
    assert CommitRecord.from_commit_info(no_time).commit_time_ms is None


def test_foreign_or_malformed_records_are_refused_clearly() -> None:
    assert CommitRecord.from_commit_info({"operation": "WRITE"}) is None
    with pytest.raises(PartlakeError, match="commit 4 carries a partlake record without asset_key"):
        CommitRecord.from_commit_info({"partlake": {"partition_keys": []}}, table_version=4)
    newer = RECORD.to_commit_info()
    newer["partlake"]["format"] = 3
    with pytest.raises(PartlakeError, match="format 3, newer than this dagster_partlake reads"):
        CommitRecord.from_commit_info(newer)


_keys = st.lists(
    st.sampled_from(["a", "b", "|", "-", "é", '"', "\\", "/", " ", "\x01", "2024-01-0", "\u2028"]),
    max_size=6,
).map("".join)
_ints = st.integers(min_value=-(2**63) + 2, max_value=2**63 - 1)


@st.composite
def _commit_lines(draw: st.DrawFn) -> bytes:
    """A commitInfo line with a partlake record, large or small, compact or spaced, with
    escapes, control characters, duplicate keys and numbers of 19 digits."""
    plain = draw(st.integers(0, 3)) > 0  # mostly the form read in bulk
    keys = [] if plain else draw(st.lists(_keys, min_size=0, max_size=300))
    if plain or draw(st.booleans()):  # large enough to be read in bulk
        size = draw(st.integers(0, 3000))
        keys = keys + [f"2024-01-{i % 28 + 1:02d}|r{i // 28:03d}" for i in range(size)]
    consumed = {
        name: [
            (k, draw(_ints) if draw(st.booleans()) else 1_700_000_000_000 + i)
            for i, k in enumerate(draw(st.permutations(keys))[: draw(st.integers(0, len(keys)))])
        ]
        for name in draw(st.lists(st.sampled_from(["src", 'a\\"b', "up"]), max_size=2, unique=True))
    }
    rows = [(k, draw(st.integers(0, 5))) for k in keys] if draw(st.booleans()) else None
    separators = (",", ":") if plain or draw(st.booleans()) else (", ", ": ")
    body = {
        "format": 2,
        "asset_key": "a1",
        "partition_keys": keys,
        "code_version": "1",
        "run_id": "r",
        "commit_time_ms": 1_700_000_000_000,
        "consumed": "CONSUMED",
        "rows_by_partition": "ROWS",
    }
    text = json.dumps(
        {
            "commitInfo": {
                "timestamp": 1,
                "operationParameters": {"x": '{"a":"\\"}'},
                "partlake": body,
            }
        },
        separators=separators,
        ensure_ascii=draw(st.booleans()),
    )

    def pairs(items: list[tuple[str, int]]) -> str:
        inner = separators[0].join(json.dumps(k) + separators[1] + str(v) for k, v in items)
        return "{" + inner + "}"

    consumed_text = (
        "{"
        + separators[0].join(
            json.dumps(n) + separators[1] + pairs(items) for n, items in consumed.items()
        )
        + "}"
    )
    text = text.replace('"CONSUMED"', consumed_text)
    text = text.replace('"ROWS"', "null" if rows is None else pairs(rows))
    return text.encode()


@settings(max_examples=150, deadline=None)
@given(_commit_lines())
def test_a_large_record_read_with_numpy_is_the_record_json_reads(line: bytes) -> None:
    """`commit_scan` reads the per-partition values of a large record in bulk where they have
    the compact form, and gives the record `json` gives, in its compact form (`KeyList`,
    `IntMap`s), whatever the form (escapes, spaces, duplicate keys, long numbers)."""
    from dagster_partlake.delta.commit_scan import scan_commit_info
    from dagster_partlake.delta.payload import compact_pairs

    expected = dict(json.loads(line, object_pairs_hook=compact_pairs)["commitInfo"])
    scanned = scan_commit_info(line)
    a = CommitRecord.from_commit_info(scanned, table_version=1, compact=True)
    b = CommitRecord.from_commit_info(expected, table_version=1, compact=True)
    assert a == b
    assert list(a.partition_keys) == list(b.partition_keys)
    assert {k: dict(v) for k, v in a.consumed.items()} == {
        k: dict(v) for k, v in b.consumed.items()
    }
    assert dict(a.rows_by_partition or {}) == dict(b.rows_by_partition or {})
    assert a.empty_partition_ids == b.empty_partition_ids


def test_a_damaged_large_record_is_an_error_as_json_says() -> None:
    from dagster_partlake.columnar.interner import KeyList
    from dagster_partlake.delta.commit_scan import scan_commit_info

    keys = [f"2024-01-01|r{i:04d}" for i in range(3000)]
    record = {"asset_key": "a", "partition_keys": keys}
    line = json.dumps({"commitInfo": {"partlake": record}}, separators=(",", ":"))
    with pytest.raises(ValueError):
        scan_commit_info(line.encode()[: len(line) // 2])
    info = scan_commit_info(line.encode())
    assert isinstance(info["partlake"]["partition_keys"], KeyList)  # read in bulk
    assert list(info["partlake"]["partition_keys"]) == keys


@pytest.mark.parametrize("compact", [False, True])
def test_a_whole_table_write_of_no_rows_is_an_empty_partition_in_either_form(
    compact: bool,
) -> None:
    """A skipped incremental run records a whole-table write of no rows: compact or not, its
    one partition (`WHOLE_TABLE_ID`) is empty, so the planner never sees it as out of band."""
    info = {
        "partlake": {
            "format": 2,
            "asset_key": "event_log",
            "partition_keys": [],
            "code_version": None,
            "run_id": "r",
            "consumed": {"events": {WHOLE_TABLE_ID: 1}},
            "rows_by_partition": {WHOLE_TABLE_ID: 0},
            "empty_partition_keys": [WHOLE_TABLE_ID],
            "commit_time_ms": 5,
        }
    }
    record = CommitRecord.from_commit_info(info, table_version=1, compact=compact)
    assert record is not None
    assert record.empty_partition_ids == {WHOLE_TABLE_ID}
