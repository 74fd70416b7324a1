"""A landing folder consumed once (`partlake_source(..., folder=True, after_commit=...)`), in real
Dagster runs on real Spark and Delta: files move only after the commit, each file is read once,
also when the run is SIGKILLed between its commit and the move."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dagster import Definitions, materialize
from deltalake import DeltaTable

from dagster_partlake.delta.state import StateCache
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.orchestration.sources import partlake_source
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from dagster_partlake.records.queries import newest_record
from tests.conftest import REPO_ROOT, delta_rows, subprocess_env
from tests.landing_defs import consumer, drop_file, landing_assets, resources

pytestmark = pytest.mark.spark


def _run(lake: Path, instance: Any, assets: list[Any]) -> None:
    result = materialize(
        assets, selection=[consumer(assets).key], resources=resources(lake), instance=instance
    )
    assert result.success


def _stale(lake: Path, assets: list[Any]) -> list[tuple[str, str]]:
    graph = LakeGraph(Definitions(assets=assets, resources=resources(lake)))
    return [(i.asset, i.reason) for i in make_plan(graph, StateCache()).plan.items]


def _ids(lake: Path) -> list[int]:
    return [r[0] for r in delta_rows(lake / "warehouse" / "arrivals", ["id"])]


@pytest.mark.parametrize("after_commit", ["archive", "delete"])
def test_files_are_read_once_and_moved_after_the_commit(
    spark, lake: Path, instance, after_commit: str
) -> None:
    assets = landing_assets(after_commit)
    first = drop_file(lake, "a.parquet", range(0, 3))
    _run(lake, instance, assets)
    assert _ids(lake) == [0, 1, 2]
    archived = lake / "warehouse" / "landing" / "_archive" / "a.parquet"
    assert not Path(first).exists()
    assert archived.exists() == (after_commit == "archive")
    assert newest_record(str(lake / "warehouse" / "arrivals")).consumed_files == {
        "landing": ("a.parquet",)
    }
    assert _stale(lake, assets) == []

    drop_file(lake, "b.parquet", range(3, 5))
    assert _stale(lake, assets) == [("arrivals", "upstream_changed")]
    _run(lake, instance, assets)
    assert _ids(lake) == [0, 1, 2, 3, 4]
    assert _stale(lake, assets) == []
    # Nothing new: a forced run reads nothing and adds nothing (with every file deleted there
    # is no schema to read, and it says so).
    forced = materialize(
        assets,
        selection=[consumer(assets).key],
        resources=resources(lake),
        instance=instance,
        raise_on_error=False,
    )
    assert forced.success == (after_commit == "archive")
    assert _ids(lake) == [0, 1, 2, 3, 4]


def test_a_run_killed_between_commit_and_move_does_not_read_its_files_again(
    spark, lake: Path, instance
) -> None:
    assets = landing_assets("archive")
    drop_file(lake, "a.parquet", range(0, 3))
    _run(lake, instance, assets)
    path = drop_file(lake, "b.parquet", range(3, 6))
    victim = subprocess.run(
        [sys.executable, "-m", "tests.landing_process", str(lake), "archive"],
        cwd=REPO_ROOT,
        env=subprocess_env(SPARK_LOCAL_IP="127.0.0.1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert victim.returncode == -9, victim.stderr[-3000:]
    # It committed b.parquet's rows and died before moving the file.
    assert _ids(lake) == [0, 1, 2, 3, 4, 5]
    assert Path(path).exists()
    version = DeltaTable(str(lake / "warehouse" / "arrivals")).version()

    drop_file(lake, "c.parquet", range(6, 7))
    _run(lake, instance, assets)
    assert _ids(lake) == [0, 1, 2, 3, 4, 5, 6]  # b.parquet was not read twice
    assert not Path(path).exists()
    assert (lake / "warehouse" / "landing" / "_archive" / "b.parquet").exists()
    assert DeltaTable(str(lake / "warehouse" / "arrivals")).version() == version + 1
    assert _stale(lake, assets) == []


def test_after_commit_needs_a_folder() -> None:
    with pytest.raises(PartlakeConfigError, match="add folder=True"):
        partlake_source("landing", after_commit="archive")
    with pytest.raises(PartlakeConfigError, match="use 'archive'"):
        partlake_source("landing", folder=True, after_commit="move")  # type: ignore[arg-type]
