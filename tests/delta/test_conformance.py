"""partlake's Delta log reader against delta-rs, on public Delta test tables.

The tables are delta-rs' test tables and Delta's golden tables (`tests/data/delta_conformance`,
see its README). For each, partlake's state (version, partitions, live files per partition)
must be delta-rs' reading of the table, and following the log from every earlier version the
log can still rebuild, through the in-memory and the on-disk state cache, must give the state a
full read gives. Logs delta-rs refuses are refused by partlake too, each with the message its
cause calls for: a valid table with a feature partlake lacks is told which, a broken log is told
to restore a file from a backup.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from dagster_partlake.delta import state as state_module
from dagster_partlake.delta.log_state import read_log_state
from dagster_partlake.delta.state import StateCache, TableState
from dagster_partlake.errors import TableUnreadableError, UnreadableTableFeatureError

DATA = Path(__file__).resolve().parents[1] / "data" / "delta_conformance"
READ = [
    "delta-rs/table_with_partitioning_mapping",
    "delta-rs/table-with-dv-small",
    "delta-rs/checkpoint-v2-table",
    "delta-rs/cdf-table",
    "delta-rs/checkpoint-cdf-table",
    "delta-rs/cdc_ict_table",
    "delta-rs/partition-type-primitives",
    "delta-rs/checkpoints",
    "delta-rs/table-with-domain-metadata",
    "delta-rs/delta-0.8.0-special-partition",
    "delta-rs/delta-0.8.0-null-partition",
    "delta/dv-partitioned-with-checkpoint",
    "delta/dv-with-columnmapping",
    "delta/log-replay-dv-key-cases",
    "delta/v2-checkpoint-parquet",
    "delta/v2-checkpoint-json",
    "delta/multi-part-checkpoint",
    "delta/data-reader-timestamp_ntz",
    "delta/data-reader-timestamp_ntz-name-mode",
    "delta/data-reader-partition-values",
    "delta/kernel-timestamp-partition-col-ISO8601",
    "delta/delete-re-add-same-file-different-transactions",
    "delta/basic-with-vacuum-protocol-check-feature",
    "delta/type-widening",
    "delta/data-reader-escaped-chars",
    "delta/time-travel-partition-changes-b",
    "delta/snapshot-repartitioned",
]
# Logs delta-rs refuses: partlake's error and the words its message must hold.
REFUSED = {
    "delta-rs/simple_table_features": (
        UnreadableTableFeatureError,
        "is a valid Delta table, but it needs Delta reader version 5",
    ),
    "delta/deltalog-invalid-protocol-version": (
        UnreadableTableFeatureError,
        "is a valid Delta table, but it needs Delta reader version 99",
    ),
    "delta/versions-not-contiguous": (
        TableUnreadableError,
        "commit 1 is missing .* Restore the file from a backup",
    ),
    "delta/deltalog-state-reconstruction-without-protocol": (
        TableUnreadableError,
        "No protocol found in delta log.* Restore the file from a backup",
    ),
}


def delta_rs_reading(root: Path) -> tuple[int, dict[tuple[str | None, ...], int]]:
    """(version, live files per partition) as delta-rs reads the table, values as text."""
    table = DeltaTable(str(root))
    actions = pa.table(table.get_add_actions(flatten=True))
    columns = [
        pc.cast(actions.column(f"partition.{c}"), pa.string()).to_pylist()
        for c in table.metadata().partition_columns
    ]
    files: dict[tuple[str | None, ...], int] = {}
    for values in zip(*columns, strict=True) if columns else [()] * actions.num_rows:
        key = tuple(v or None for v in values)
        files[key] = files.get(key, 0) + 1
    return table.version(), files


def comparable(state: TableState) -> dict[str, object]:
    """A state's contents, without what it was derived from."""
    found = dataclasses.asdict(state)
    for derived in ("follows", "moved"):
        found.pop(derived)
    return found


def caught_up(root: str, version: int, persist_dir: str | None) -> TableState | None:
    """The state a cache holding `root` at `version` reaches by following its log (None: the
    log can no longer rebuild that version); through the disk when `persist_dir` is given."""
    try:
        replayed = read_log_state(root, version=version)
    except TableUnreadableError:
        return None
    assert replayed is not None
    start = state_module._state_of_log(root, replayed, with_commits=True)
    assert start.version == version
    cache = StateCache(persist_dir)
    cache._keep(root, start, with_commits=True)
    following = StateCache(persist_dir) if persist_dir is not None else cache
    return following.sync(root)


@pytest.mark.parametrize("name", READ)
def test_partlake_reads_a_public_table_as_delta_rs_does(name: str, tmp_path: Path) -> None:
    root = str(DATA / name)
    state = StateCache().sync(root, name=name)
    assert state is not None
    version, files = delta_rs_reading(DATA / name)
    assert (state.version, dict(state.file_counts or {})) == (version, files)
    assert set(state.last_updated) == set(files)
    full = comparable(state)
    followed_from = []
    for earlier in range(state.version):
        for persist_dir in (None, str(tmp_path / f"cache-{earlier}")):
            followed = caught_up(root, earlier, persist_dir)
            if followed is None:
                break
            assert comparable(followed) == full, (earlier, persist_dir)
            followed_from.append(earlier)
    commits = map(_commit_version, os.listdir(Path(root, "_delta_log")))
    if any(0 <= v < state.version for v in commits):
        assert followed_from, "no earlier version was followed from"


def _commit_version(name: str) -> int:
    head, _, rest = name.partition(".")
    return int(head) if rest == "json" and head.isdigit() else -1


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_partlake_refuses_what_delta_rs_refuses(name: str) -> None:
    root = str(DATA / name)
    with pytest.raises(Exception):  # noqa: B017, PT011 - delta-rs' own errors vary
        DeltaTable(root)
    error, words = REFUSED[name]
    with pytest.raises(error, match=words) as refused:
        StateCache().sync(root, name=name)
    if error is UnreadableTableFeatureError:
        assert "backup" not in str(refused.value)


def test_a_v2_checkpoint_under_the_classic_name_is_read_with_its_sidecars(tmp_path: Path) -> None:
    """The protocol lets a V2 checkpoint be published as `n.checkpoint.parquet`: its files are
    listed in sidecar files, which must be read (with the commits before it gone, the
    checkpoint alone holds the table)."""
    root = tmp_path / "t"
    shutil.copytree(DATA / "delta/v2-checkpoint-parquet", root)
    log = root / "_delta_log"
    (v2,) = [p for p in log.glob("*.checkpoint.*.parquet") if not p.name.startswith(".")]
    version = int(v2.name.split(".")[0])
    v2.rename(log / f"{version:020d}.checkpoint.parquet")
    for older in range(version + 1):
        (log / f"{older:020d}.json").unlink()
    (log / "_last_checkpoint").unlink()
    state = StateCache().sync(str(root))
    assert state is not None
    assert (state.version, dict(state.file_counts or {})) == delta_rs_reading(root)
    assert dict(state.file_counts or {}) == {(): 4}


def test_the_conformance_data_stays_small() -> None:
    size = sum(os.path.getsize(p) for p in DATA.rglob("*") if p.is_file())
    assert size < 5 * 2**20
