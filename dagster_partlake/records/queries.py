"""Queries over a table's commit records: a commit's record, a run's or a write's commits, the
newest record per partition, and a commit of the same inputs by another run.

They read payloads through the storage adapter (`delta.table.read_payload`,
`Snapshot.newest_first`, `Snapshot.latest_payloads`) and decode them (`CommitRecord.from_payload`)
only where a record's fields are asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster_partlake.delta.snapshot import Snapshot, open_snapshot
from dagster_partlake.delta.table import (
    Where,
    changes_data,
    log_versions,
    newest_per_id,
    read_payload,
)
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.storage.location import TableLocation


def record_at(snapshot: Snapshot, version: int) -> CommitRecord | None:
    """The partlake record of one commit of `snapshot` (its payload, read once per snapshot)."""
    payload = snapshot.payload(version)
    return None if payload is None else CommitRecord.from_payload(payload)


def latest_records_in(
    snapshot: Snapshot, partition_ids: Sequence[str], *, named: bool = False
) -> dict[str, CommitRecord]:
    """The newest record that wrote each of `partition_ids` (`Snapshot.latest_payloads`, with
    its `named`), decoded once per commit."""
    found = snapshot.latest_payloads(partition_ids, named=named)
    decoded = {id(p): CommitRecord.from_payload(p) for p in found.values()}
    return {pid: decoded[id(p)] for pid, p in found.items()}


def read_record(
    root: Where, version: int, *, compact: bool = False, missing_ok: bool = True
) -> CommitRecord | None:
    """The partlake record of one commit (`read_payload`, decoded).

    Raises:
        FileNotFoundError: the log has no such commit (without `missing_ok`).
    """
    payload = read_payload(root, version, compact=compact, missing_ok=missing_ok)
    return None if payload is None else CommitRecord.from_payload(payload)


def find_record(
    root: Where, *, since: int = 0, write_id: str | None = None, run_id: str | None = None
) -> CommitRecord | None:
    """The newest partlake record at version `since` or later with this write id or run id.

    The version a commit got is known only from the log (delta-rs does not return it, and
    `history()` misnumbered versions under concurrent writers), so it is searched newest first,
    back to `since`: the table version before the commit, or 0.
    """
    for version in reversed(log_versions(root)):
        if version < since:
            break
        record = read_record(root, version)
        if record is None:
            continue
        if (write_id is not None and record.write_id == write_id) or (
            run_id is not None and record.run_id == run_id
        ):
            return record
    return None


def run_records(
    root: Where, run_id: str, *, since: int = 0, covering: Sequence[str] | None = None
) -> list[CommitRecord]:
    """The records of run `run_id`'s commits at version `since` or later, oldest first (a run
    of an in-order kind commits each of its partitions on its own). Read newest first, back to
    `since`, or until they name every partition id of `covering`."""
    found: list[CommitRecord] = []
    wanted = set(covering) if covering is not None else None
    for version in reversed(log_versions(root)):
        if version < since or (wanted is not None and found and not wanted):
            break
        record = read_record(root, version)
        if record is not None and record.run_id == run_id:
            found.append(record)
            if wanted is not None:
                wanted.difference_update(record.partition_ids)
    return found[::-1]


def newest_record(root: Where) -> CommitRecord | None:
    """The newest partlake record in the table's log (None: partlake never wrote it)."""
    for version in reversed(log_versions(root)):
        record = read_record(root, version)
        if record is not None:
            return record
    return None


def same_inputs_commit(
    snapshot: Snapshot | str | TableLocation, record: CommitRecord
) -> CommitRecord | None:
    """The newest commit of `record`'s partitions, if another run made it from the same inputs:
    the same code version, the same lastUpdated of every upstream partition `record` read, the
    same watermarks and landing files. Writing `record` as well would commit those partitions
    twice for the same upstream versions.

    Reads the snapshot's records newest first, only back to the oldest lastUpdated `record`
    consumed: no commit before it can have read that data. A record that read nothing (an asset
    without upstream data) never matches: running it again is how it refreshes."""
    floor = min((t for parts in record.consumed.values() for t in parts.values()), default=None)
    if floor is None:
        return None
    opened = (
        snapshot if isinstance(snapshot, Snapshot) else open_snapshot(snapshot, must_exist=False)
    )
    if opened is None:
        return None
    wanted = set(record.partition_ids)
    for version, payload in opened.newest_first():
        if payload is None:
            if changes_data(opened.location, version):
                # Another writer changed data since (an out-of-band rewrite): writing again is
                # the repair, not a second commit of the same.
                return None
            continue  # maintenance (compaction, checkpoint): no partition's data changed
        if payload.commit_time_ms is not None and payload.commit_time_ms < floor:
            return None
        touched = wanted.intersection(payload.partition_ids)
        if not touched:
            continue
        found = CommitRecord.from_payload(payload)
        same = (
            touched == wanted
            and found.run_id != record.run_id
            and found.code_version == record.code_version
            and all(
                found.consumed.get(asset, {}).get(pid) == updated
                for asset, parts in record.consumed.items()
                for pid, updated in parts.items()
            )
            and dict(found.watermarks) == dict(record.watermarks)
            and dict(found.consumed_files) == dict(record.consumed_files)
        )
        return found if same else None
    return None


def latest_records(root: Where, partition_ids: Sequence[str]) -> dict[str, CommitRecord]:
    """The newest partlake record that wrote each of `partition_ids` (absent: none did), read
    from the log newest first until every id is found."""
    records = (read_record(root, version) for version in reversed(log_versions(root)))
    return newest_per_id(records, partition_ids)
