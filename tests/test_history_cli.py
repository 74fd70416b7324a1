"""`partlake history` and `partlake restore` on the example code location, through the real CLI."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.conftest import cli_env, run_partlake

pytestmark = pytest.mark.spark

PARTITION = "2024-01-01|eu"


def clean_rows(path: str, version: int | None = None) -> list[tuple]:
    """event_id and amount of clean_events' rows of PARTITION, sorted."""
    table = DeltaTable(path, version=version).to_pyarrow_table()
    return sorted(
        (r["event_id"], str(r["amount"]))
        for r in table.to_pylist()
        if r["date"] == dt.date(2024, 1, 1) and r["region"] == "eu"
    )


def checksum(rows: list[tuple]) -> str:
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def test_history_and_restore_of_one_partition_through_the_cli(
    example, lake: Path, instance, tmp_path: Path
) -> None:
    from dagster_partlake.orchestration.runner import refresh
    from definitions.ingest import write_partition

    _defs, graph = example
    first = refresh_runs(instance)
    # New source data for one partition only: the second run rewrites its clean_events.
    write_partition(dt.date(2024, 1, 1), "eu", 150, seed=7, root=str(lake))
    outcomes = refresh(graph, instance)
    assert outcomes and all(o.ok for o in outcomes)
    second = {(o.asset, o.partition): o.run_id for o in outcomes if o.asset == "clean_events"}
    assert set(second) == {("clean_events", PARTITION)}
    env = cli_env(tmp_path, lake)

    proc = run_partlake(
        "history", "-m", "definitions", "clean_events", "--partition", PARTITION, "--json", env=env
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    entries = json.loads(proc.stdout)
    assert [e["run_id"] for e in entries] == [second[("clean_events", PARTITION)], first[PARTITION]]
    assert [e["operation"] for e in entries] == ["write", "write"]
    assert entries[0]["version"] > entries[1]["version"]
    assert all(e["code_version"] == "1" for e in entries)
    assert set(entries[0]) == {
        "version",
        "timestamp",
        "operation",
        "run_id",
        "code_version",
        "rows",
        "upstream_versions",
    }
    path = str(lake / "warehouse" / "clean_events")
    old_version = entries[1]["version"]
    old_rows = clean_rows(path, old_version)
    assert entries[1]["rows"] == len(old_rows)
    assert entries[0]["rows"] == len(clean_rows(path))
    assert set(entries[0]["upstream_versions"]) == {"raw_events"}
    # The rewrite of 2024-01-01|eu is not in the history of its neighbour.
    proc = run_partlake(
        "history",
        "-m",
        "definitions",
        "clean_events",
        "--partition",
        "2024-01-01|us",
        "--json",
        env=env,
    )
    assert [e["run_id"] for e in json.loads(proc.stdout)] == [first["2024-01-01|us"]]

    proc = run_partlake(
        "history", "-m", "definitions", "clean_events", "--partition", PARTITION, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    lines = proc.stdout.splitlines()
    assert (
        lines[0]
        == f"clean_events partition {PARTITION}: 2 commit(s) that changed its data, newest first"
    )
    assert lines[1].split() == [
        "version",
        "time",
        "operation",
        "run",
        "id",
        "code",
        "version",
        "rows",
        "upstream",
        "versions",
    ]
    assert lines[2].split()[0] == str(entries[0]["version"])
    assert second[("clean_events", PARTITION)] in lines[2]

    assert checksum(clean_rows(path)) != checksum(old_rows)
    proc = run_partlake(
        "restore",
        "-m",
        "definitions",
        "clean_events",
        "--version",
        str(old_version),
        "--partition",
        PARTITION,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""  # quiet: the engines' output goes to the command's log file
    assert f"Restored clean_events partition {PARTITION} to version {old_version}" in proc.stdout
    assert checksum(clean_rows(path)) == checksum(old_rows)

    proc = run_partlake("plan", "-m", "definitions", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stale = {(i["asset"], i["partition"], i["reason"]) for i in json.loads(proc.stdout)}
    assert stale == {
        ("clean_events", PARTITION, "out_of_band"),
        ("daily_region_stats", PARTITION, "upstream_changed"),
        ("monthly_region_stats", "2024-01|eu", "upstream_changed"),
        # The example's SQL models (definitions/sql/) downstream of clean_events' partition.
        ("marts/monthly_region_summary", "2024-01|eu", "upstream_changed"),
    }

    proc = run_partlake(
        "history", "-m", "definitions", "clean_events", "--partition", PARTITION, "--json", env=env
    )
    newest = json.loads(proc.stdout)[0]
    assert (newest["operation"], newest["run_id"], newest["rows"]) == (
        "restore",
        None,
        len(old_rows),
    )


def test_history_names_the_valid_assets_and_partitions(tmp_path: Path, lake: Path) -> None:
    env = cli_env(tmp_path, lake)
    proc = run_partlake("history", "-m", "definitions", "nope", env=env)
    assert proc.returncode == 1
    assert "Error: unknown asset nope; the code location has clean_events" in proc.stderr
    proc = run_partlake(
        "restore",
        "-m",
        "definitions",
        "clean_events",
        "--version",
        "1",
        "--partition",
        "2024-13-01|eu",
        env=env,
    )
    assert proc.returncode == 1
    assert (
        "partition key '2024-13-01|eu' is not in the partitions of asset clean_events "
        "(date: daily from 2024-01-01; region: eu, us, apac)" in proc.stderr
    )


def refresh_runs(instance) -> dict[str, str]:
    """Run id of the last materialization of each clean_events partition in the instance."""
    from dagster import AssetKey, AssetRecordsFilter

    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey("clean_events")), limit=100
    ).records
    found: dict[str, str] = {}
    for record in sorted(records, key=lambda r: r.storage_id):
        found[record.partition_key] = record.run_id
    return found
