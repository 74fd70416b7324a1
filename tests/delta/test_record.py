"""The commit record: one typed definition, written and read back the same, old records kept."""

from __future__ import annotations

import dataclasses

import pytest

from dagster_partlake.delta.record import WHOLE_TABLE_ID, CommitRecord
from dagster_partlake.errors import PartlakeError

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
