"""The persisted partition-state cache: right after changes, re-creations and damage."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from dagster_partlake.delta.state import StateCache, TableState


def write(table: Path, day: str, n: int, mode: str = "append") -> None:
    data = pa.table({"day": [day] * n, "v": list(range(n))})
    if mode == "overwrite":
        write_deltalake(
            str(table), data, partition_by=["day"], mode="overwrite", predicate=f"day = '{day}'"
        )
    else:
        write_deltalake(str(table), data, partition_by=["day"], mode="append")


def fresh(table: Path) -> TableState:
    state = StateCache().sync(str(table))
    assert state is not None
    return state


def delta_rs_files(table: Path) -> dict[tuple[str | None, ...], int]:
    """Live files per partition as delta-rs reads the table (values as Delta text)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    loaded = DeltaTable(str(table))
    actions = pa.table(loaded.get_add_actions(flatten=True))
    columns = [
        pc.cast(actions.column(f"partition.{c}"), pa.string()).to_pylist()
        for c in loaded.metadata().partition_columns
    ]
    found: dict[tuple[str | None, ...], int] = {}
    for values in zip(*columns, strict=True) if columns else [()] * actions.num_rows:
        key = tuple(v or None for v in values)
        found[key] = found.get(key, 0) + 1
    return found


def same(a: TableState | None, b: TableState) -> None:
    assert a is not None
    # What the state was derived from is not part of the state; file counts are known only
    # to states read (or followed) in this process.
    ignored = {"follows", "moved"}
    if a.file_counts is None or b.file_counts is None:
        ignored.add("file_counts")
    assert {k: v for k, v in dataclasses.asdict(a).items() if k not in ignored} == {
        k: v for k, v in dataclasses.asdict(b).items() if k not in ignored
    }


def test_a_new_process_gets_the_state_from_disk_and_follows_new_commits(tmp_path: Path) -> None:
    table, cache_dir = tmp_path / "t", str(tmp_path / "cache")
    write(table, "2024-01-01", 3)
    write(table, "2024-01-02", 2)
    first = StateCache(cache_dir).sync(str(table))
    same(first, fresh(table))
    assert len(list(Path(cache_dir).glob("*.state"))) == 1

    # Another process, nothing changed: the same state without reading the table.
    same(StateCache(cache_dir).sync(str(table)), fresh(table))

    # The table moves on: the persisted state is the starting point, the result is exact.
    write(table, "2024-01-02", 5, mode="overwrite")
    moved = StateCache(cache_dir).sync(str(table))
    same(moved, fresh(table))
    assert moved is not None and first is not None and moved.version == first.version + 1


def test_a_table_recreated_at_the_same_path_is_not_mistaken_for_the_old_one(
    tmp_path: Path,
) -> None:
    table, cache_dir = tmp_path / "t", str(tmp_path / "cache")
    write(table, "2024-01-01", 3)
    old = StateCache(cache_dir).sync(str(table))
    shutil.rmtree(table)
    write(table, "2024-02-01", 3)  # version 0 again, a commit file of the same size
    new = StateCache(cache_dir).sync(str(table))
    assert old is not None and new is not None and new.version == old.version == 0
    assert set(new.last_updated) == {("2024-02-01",)}
    same(new, fresh(table))


def test_a_damaged_or_missing_cache_only_costs_a_read(tmp_path: Path) -> None:
    table, cache_dir = tmp_path / "t", tmp_path / "cache"
    write(table, "2024-01-01", 3)
    StateCache(str(cache_dir)).sync(str(table))
    for cached in cache_dir.glob("*.state"):
        cached.write_text('{"root": ')
    same(StateCache(str(cache_dir)).sync(str(table)), fresh(table))
    shutil.rmtree(cache_dir)
    same(StateCache(str(cache_dir)).sync(str(table)), fresh(table))
    assert StateCache(str(cache_dir)).sync(str(tmp_path / "missing")) is None


def test_a_long_lived_cache_sees_a_recreated_table_and_a_damaged_commit(tmp_path: Path) -> None:
    """As in the sensor's code server: one StateCache kept across ticks."""
    import pytest

    from dagster_partlake.errors import TableUnreadableError

    table = tmp_path / "t"
    write(table, "2024-01-01", 3)
    cache = StateCache()
    assert set(cache.sync(str(table)).last_updated) == {("2024-01-01",)}
    shutil.rmtree(table)
    write(table, "2024-02-01", 3)  # version 0 again
    same(cache.sync(str(table)), fresh(table))

    newest = table / "_delta_log" / f"{0:020d}.json"
    original = newest.read_bytes()
    newest.write_bytes(original[: len(original) // 2])
    with pytest.raises(TableUnreadableError, match=f"commit file _delta_log/{newest.name} is dam"):
        cache.sync(str(table), name="t")
    newest.write_bytes(original)
    same(cache.sync(str(table)), fresh(table))


def test_a_state_followed_commit_by_commit_equals_a_fresh_read(tmp_path: Path, monkeypatch) -> None:
    """The cache updates only the partitions new commits touched: after appends, partition
    overwrites, deletes, a compaction, checkpoints and a schema change, it equals a state read
    from scratch, and a read from scratch (the log replayed) equals delta-rs' reading."""
    import datetime as dt
    import random

    from deltalake import DeltaTable

    table = str(tmp_path / "t")
    rng = random.Random(5)
    days = [dt.date(2024, 1, d) for d in range(1, 5)]
    regions = ["eu", "us", "a b:c%", None]

    def rows(n: int, day: dt.date | None = None, region: str | None = "?") -> pa.Table:
        return pa.table(
            {
                "day": pa.array([day or rng.choice(days) for _ in range(n)], pa.date32()),
                "region": pa.array(
                    [rng.choice(regions) if region == "?" else region for _ in range(n)],
                    pa.string(),
                ),
                "v": pa.array([rng.randrange(100) for _ in range(n)], pa.int64()),
            }
        )

    from dagster_partlake.delta import state as state_module

    # Per sync with a previous state: followed from the new commits alone, or read anew.
    incremental: list[bool] = []
    follow_log = state_module._follow_log

    def recording_log(*args: object, **kwargs: object) -> object:
        followed = follow_log(*args, **kwargs)  # type: ignore[arg-type]
        incremental.append(followed is not None)
        return followed

    monkeypatch.setattr(state_module, "_follow_log", recording_log)
    replays: list[bool] = []  # per cold read: the log replayed
    read_log_state = state_module.read_log_state

    def recording_replay(root: str, **kwargs: object) -> object:
        replayed = read_log_state(root, **kwargs)  # type: ignore[arg-type]
        replays.append(replayed is not None)
        return replayed

    monkeypatch.setattr(state_module, "read_log_state", recording_replay)

    def checked_fresh(path: Path) -> TableState:
        """A cold read, which replays the log itself, has delta-rs' partitions and live files
        (lastUpdated is partlake's own: the time of the commit that changed a partition)."""
        replayed = fresh(path)
        assert replayed.version == DeltaTable(str(path)).version()
        assert dict(replayed.file_counts or {}) == delta_rs_files(path)
        assert set(replayed.last_updated) == set(delta_rs_files(path))
        return replayed

    write_deltalake(table, rows(20), partition_by=["day", "region"])
    cache = StateCache()
    same(cache.sync(table), checked_fresh(Path(table)))
    operations = ["append", "overwrite", "delete", "delete_partition", "compact", "checkpoint"]
    for step in range(30):
        operation = operations[step % len(operations)] if step < 10 else rng.choice(operations)
        day = rng.choice(days)
        if operation == "append":
            write_deltalake(table, rows(rng.randrange(1, 6)), mode="append")
        elif operation == "overwrite":  # one partition replaced
            write_deltalake(
                table,
                rows(3, day, "eu"),
                mode="overwrite",
                predicate=f"day = '{day}' AND region = 'eu'",
            )
        elif operation == "delete":  # rows of some partitions rewritten
            DeltaTable(table).delete(f"v < {rng.randrange(30)}")
        elif operation == "delete_partition":
            DeltaTable(table).delete(f"day = '{day}'")
        elif operation == "compact":  # dataChange=false, new modification times
            DeltaTable(table).optimize.compact()
        else:  # the next cold read starts from the checkpoint
            DeltaTable(table).create_checkpoint()
            write_deltalake(table, rows(2), mode="append")
        same(cache.sync(table), checked_fresh(Path(table)))
    # Several commits between two syncs, one adding and then removing the same partition's file.
    day = days[0]
    write_deltalake(table, rows(2, day, "us"), mode="append")
    write_deltalake(table, rows(3, day, "us"), mode="overwrite", predicate=f"day = '{day}'")
    write_deltalake(table, rows(1), mode="append")
    same(cache.sync(table), checked_fresh(Path(table)))
    # A schema change (a metaData action) makes the next sync read the table in full.
    extra = rows(2).append_column("w", pa.array([1, 2], pa.int64()))
    write_deltalake(table, extra, mode="append", schema_mode="merge")
    same(cache.sync(table), checked_fresh(Path(table)))
    write_deltalake(
        table, rows(3).append_column("w", pa.array([3, 4, 5], pa.int64())), mode="append"
    )
    same(cache.sync(table), checked_fresh(Path(table)))
    # Every cold read replayed the log (with and without checkpoints).
    assert len(replays) > 30 and all(replays), replays
    # Every sync followed the new commits from their JSON alone (appends, replacements, partial
    # rewrites, compactions), except the one after the schema change.
    assert len(incremental) > 20 and incremental.count(False) == 1, incremental


def test_a_large_log_gets_a_checkpoint_and_a_cold_read_starts_from_it(tmp_path: Path) -> None:
    """partlake's writer checkpoints when the JSON commits since the last checkpoint are large;
    a cold read then replays the checkpoint (Arrow columns) and the commits after it, and still
    equals delta-rs' reading of the table."""
    import os

    from deltalake import DeltaTable

    from dagster_partlake.delta import state as state_module
    from dagster_partlake.delta.log_state import read_log_state
    from dagster_partlake.delta.transaction import checkpoint_when_due

    table = tmp_path / "t"
    for day in range(1, 4):
        write(table, f"2024-01-0{day}", 3)
    log = table / "_delta_log"
    assert not checkpoint_when_due(str(table))  # three small commits: far below the default
    assert not any(".checkpoint." in name for name in os.listdir(log))
    assert checkpoint_when_due(str(table), log_bytes=100)
    assert "00000000000000000002.checkpoint.parquet" in os.listdir(log)
    write(table, "2024-01-01", 2, mode="overwrite")  # after the checkpoint: a replacement
    write(table, "2024-01-04", 2)
    assert not checkpoint_when_due(str(table), log_bytes=10**6)  # two small commits since
    replayed = read_log_state(str(table))
    assert replayed is not None and replayed.version == 4
    cold = fresh(table)
    assert cold.version == DeltaTable(str(table)).version()
    assert dict(cold.file_counts or {}) == delta_rs_files(table)
    # The partitions changed before the checkpoint keep the time of the commit that changed
    # them (the log still holds it): the same as a cache that followed every commit.
    same(state_module._state_of_log(str(table), replayed, with_commits=True), cold)


def test_a_cold_read_does_not_import_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas (about 110 MB of memory) for `to_numpy`, `group_by`,
    `pyarrow.parquet.read_table`, `pa.array` and Python scalars: the log replay reads Arrow
    columns through their buffers instead, from a checkpoint and from JSON commits with a
    remove after it."""
    import subprocess
    import sys

    from dagster_partlake.delta.transaction import checkpoint_when_due

    table = tmp_path / "t"
    for day in range(1, 4):
        write(table, f"2024-01-0{day}", 3)
    assert checkpoint_when_due(str(table), log_bytes=100)
    write(table, "2024-01-01", 2, mode="overwrite")
    code = (
        "import sys\n"
        "from dagster_partlake.delta.log_state import read_log_state\n"
        "before = 'pandas' in sys.modules\n"
        f"state = read_log_state({str(table)!r})\n"
        "assert state is not None and state.version == 3, state\n"
        "print(before, 'pandas' in sys.modules, 'pyarrow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"], out.stdout + out.stderr
