"""The folders a write makes for its files (`delta.file_writer.make_folders`) and removes when it
is not committed (`storage.store.LocalStore.remove_empty_folders`): pure, no Spark."""

from __future__ import annotations

from pathlib import Path

from dagster_partlake.delta.file_writer import make_folders
from dagster_partlake.storage.store import LocalStore


def test_a_write_reports_and_removes_only_the_folders_it_made(tmp_path: Path) -> None:
    root = tmp_path / "lake" / "warehouse" / "t"
    # A new table: its root and partition folders are the write's; the lake's are not.
    assert make_folders(str(root), ["date=1", "region=eu"]) == ["", "date=1", "date=1/region=eu"]
    assert make_folders(str(root), ["date=1", "region=eu"]) == []
    assert make_folders(str(root), ["date=1", "region=us"]) == ["date=1/region=us"]
    LocalStore(str(root)).remove_empty_folders(["", "date=1", "date=1/region=eu"])
    # date=1 still holds region=us (another write's): it and the root stay.
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "date=1",
        "date=1/region=us",
    ]


def test_a_folder_holding_a_file_or_there_before_stays(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "date=1").mkdir(parents=True)  # an existing table's partition
    made = make_folders(str(root), ["date=1", "region=eu"])
    made += make_folders(str(root), ["date=2", "region=eu"])
    assert made == ["date=1/region=eu", "date=2", "date=2/region=eu"]
    (root / "date=2" / "region=eu" / "other.parquet").write_bytes(b"")  # another write's file
    store = LocalStore(str(root))
    assert store.remove_empty_folders(made) == 1
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "date=1",
        "date=2",
        "date=2/region=eu",
        "date=2/region=eu/other.parquet",
    ]
    # A new table's write that made everything leaves nothing.
    new = tmp_path / "new"
    made = make_folders(str(new), ["date=1"])
    assert LocalStore(str(new)).remove_empty_folders(made) == 2 and not new.exists()
