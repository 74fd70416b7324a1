"""`partlake delete` on the example code location through the real CLI: a privacy delete in the
source, the plan it makes (exactly the closure of the touched partitions), `partlake run`, and
the aggregates then equal to a recomputation from scratch; a delete in a managed table shows
its partitions out_of_band; a bad predicate changes nothing. And a decoupled (scd2) table: a
delete makes every run partition out_of_band and what reads it stale."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from dagster import DailyPartitionsDefinition, Definitions, asset, instance_for_test
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, model_kind_metadata
from dagster_partlake.delta.state import StateCache
from dagster_partlake.maintenance.delete import delete_rows
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.orchestration.sources import partlake_source
from dagster_partlake.partitions.keys import selection_for_keys
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from dagster_partlake.records.writes import write_partitions
from tests.conftest import cli_env, delta_rows, run_partlake

pytestmark = pytest.mark.spark

STATS = ["daily_region_stats", "monthly_region_stats"]
# The example's SQL models (definitions/sql/), in the closure of a delete from raw_events.
SQL_MODELS = ["staging/events", "marts/user_activity", "marts/monthly_region_summary"]


def _table(lake: Path, name: str) -> str:
    return str(lake / "warehouse" / name)


def _plan(env: dict[str, str]) -> list[tuple[str, str, str]]:
    proc = run_partlake("plan", "-m", "definitions", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted((i["asset"], i["partition"], i["reason"]) for i in json.loads(proc.stdout))


def _users_in(lake: Path) -> tuple[int, int]:
    """A user of 2024-01-01|eu and one of 2024-01-02|us (each may appear elsewhere too)."""
    rows = delta_rows(_table(lake, "raw_events"), ["date", "region", "user_id"])
    first = next(r[2] for r in rows if r[:2] == (dt.date(2024, 1, 1), "eu") and r[2])
    second = next(r[2] for r in rows if r[:2] == (dt.date(2024, 1, 2), "us") and r[2])
    return first, second


def _cli(*args: str) -> tuple[int, str, str]:
    """The `partlake` command in this process (click's runner): it reuses the test session's
    Spark instead of starting a JVM of its own."""
    from click.testing import CliRunner

    from dagster_partlake.cli import main

    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.extended  # CI: the delete below, tests/delta/test_delete.py
def test_a_source_delete_then_partlake_run_equals_a_recomputation_from_scratch(
    example, lake: Path, tmp_path: Path, monkeypatch
) -> None:
    defs, _graph = example
    env = cli_env(tmp_path, lake)
    raw = _table(lake, "raw_events")
    users = _users_in(lake)
    where = f"user_id IN ({users[0]}, {users[1]})"
    version = DeltaTable(raw).version()

    # The real process: the files and rows that would change, and nothing committed.
    dry = run_partlake(
        "delete", "-m", "definitions", "raw_events", "--where", where, "--dry-run", env=env
    )
    assert dry.returncode == 0, dry.stderr[-3000:]
    print(dry.stdout)
    head, *listed, tail = dry.stdout.splitlines()
    expected = _matching_files(raw, users)
    rows = sum(m for _p, _f, m, _n in expected)
    assert head == (
        f"Dry run: deleting the rows of raw_events where {where} would remove {rows:,} row(s) "
        f"from {len(expected)} file(s) in {len({p for p, *_ in expected})} partition(s) "
        f"({', '.join(sorted({p for p, *_ in expected}))}):"
    )
    assert sorted(tuple(line.split(maxsplit=2)) for line in listed) == [
        (p, f, f"{m:,} of {n:,} row(s)") for p, f, m, n in expected
    ]
    assert tail.endswith("Nothing was committed.")
    assert DeltaTable(raw).version() == version
    # Bad predicates through the real process: one Error: line naming the cause and the fix.
    for bad, cause, fix in [
        ("user_id = = 1", "does not parse as a Spark SQL condition", 'write it like "user_id'),
        ("user_idd = 1", "names column `user_idd`, which the table does not have", "fix the"),
    ]:
        refused = run_partlake("delete", "-m", "definitions", "raw_events", "--where", bad, env=env)
        assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr[-3000:]
        errors = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, refused.stderr
        assert errors[0].startswith(f"Error: the predicate {bad!r} of the delete from raw_events")
        assert cause in errors[0] and fix in errors[0] and "Nothing was deleted." in errors[0]
        others = [line for line in refused.stderr.splitlines() if line and line != errors[0]]
        assert all(line.startswith("Full output (Dagster, Spark): ") for line in others), others
        assert DeltaTable(raw).version() == version

    proc = run_partlake(
        "delete", "-m", "definitions", "raw_events", "--where", where, "--json", env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    matching = [r for r in delta_rows(raw, ["user_id"]) if r[0] in users]
    assert matching == [] and result["rows_deleted"] > 0 and result["version"] == version + 1
    touched = set(result["partitions"])
    assert {"2024-01-01|eu", "2024-01-02|us"} <= touched

    # Exactly the closure of the touched source partitions, and nothing else.
    months = {f"2024-01|{k.split('|')[1]}" for k in touched}
    assert _plan(env) == sorted(
        [("clean_events", k, "upstream_changed") for k in touched]
        + [("daily_region_stats", k, "upstream_changed") for k in touched]
        + [("monthly_region_stats", m, "upstream_changed") for m in months]
        # The example's SQL models (definitions/sql/) read raw_events and daily_region_stats.
        + [("staging/events", k, "upstream_changed") for k in touched]
        # A merge model applies the days after a changed one again, in order.
        + [("marts/user_activity", k, "upstream_changed") for k in _merged_again(raw, touched)]
        + [("marts/monthly_region_summary", m, "upstream_changed") for m in months]
    )
    history = run_partlake("history", "-m", "definitions", "raw_events", "--json", env=env)
    newest = json.loads(history.stdout)[0]
    assert (newest["operation"], newest["predicate"]) == ("delete", where)
    assert newest["rows_deleted"] == result["rows_deleted"]

    run = run_partlake("run", "-m", "definitions", env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert _plan(env) == []

    # From scratch: a new lake holding only the source as it is now, everything computed anew.
    scratch = tmp_path / "scratch"
    shutil.copytree(raw, _table(scratch, "raw_events"))
    monkeypatch.setenv("PARTLAKE_HOME", str(scratch))
    with instance_for_test() as fresh:
        outcomes = refresh(LakeGraph(defs), fresh)
    assert outcomes and all(o.ok for o in outcomes)
    for name in ["clean_events", *STATS, *SQL_MODELS]:
        assert delta_rows(_table(lake, name)) == delta_rows(_table(scratch, name)), name

    # A delete in a managed table: its partition is out_of_band, what reads it upstream_changed.
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    _managed_delete(lake, env)


def _managed_delete(lake: Path, env: dict[str, str]) -> None:
    clean = _table(lake, "clean_events")
    user = next(
        r[0]
        for r in delta_rows(clean, ["user_id", "date", "region"])
        if r[1:] == (dt.date(2024, 1, 2), "eu")
    )
    version = DeltaTable(clean).version()
    code, _out, err = _cli("delete", "-m", "definitions", "clean_events", "--where", "user_idd = 1")
    assert code == 1
    assert "Error: the predicate 'user_idd = 1' of the delete from clean_events names column" in err
    code, _out, err = _cli(
        "delete", "-m", "definitions", "clean_events", "--where", "user_id = 1",
        "--partition", "2024-13-01|eu",
    )  # fmt: skip
    assert code == 1 and "is not in the partitions of asset clean_events" in err
    assert DeltaTable(clean).version() == version

    code, out, err = _cli(
        "delete", "-m", "definitions", "clean_events", "--where", f"user_id = {user}",
        "--partition", "2024-01-02|eu",
    )  # fmt: skip
    assert code == 0, err
    print(out)
    assert out.startswith("Deleted ")
    assert "in 1 partition(s) (2024-01-02|eu)" in out
    # Only the partition asked for lost the user's rows.
    left = {r[1:] for r in delta_rows(clean, ["user_id", "date", "region"]) if r[0] == user}
    assert (dt.date(2024, 1, 2), "eu") not in left
    assert _plan(env) == [
        ("clean_events", "2024-01-02|eu", "out_of_band"),
        ("daily_region_stats", "2024-01-02|eu", "upstream_changed"),
        # The example's SQL model over daily_region_stats.
        ("marts/monthly_region_summary", "2024-01|eu", "upstream_changed"),
        ("monthly_region_stats", "2024-01|eu", "upstream_changed"),
    ]


def test_a_delete_in_a_decoupled_scd2_table_makes_it_and_its_readers_stale(
    spark, lake: Path, instance
) -> None:
    days = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
    exports = partlake_source("exports", partitions_def=days)

    @asset(partitions_def=days, metadata=model_kind_metadata("scd2", unique_key=["user_id"]))
    def history(exports: DataFrame) -> DataFrame:
        return exports.select("user_id", "plan")

    @asset
    def plan_users(history: DataFrame) -> DataFrame:
        return history.where("is_current").groupBy("plan").agg(F.count(F.lit(1)).alias("users"))

    spark_resource = SparkResource(master="local[1]")
    defs = Definitions(
        assets=[exports, history, plan_users],
        resources={
            "spark": spark_resource,
            "io_manager": DeltaPartitionIOManager(spark=spark_resource, root=str(lake)),
        },
    )
    graph = LakeGraph(defs)
    source = graph.assets["exports"]
    for day, rows in [
        ("2024-01-01", [(42, "free"), (7, "free")]),
        ("2024-01-02", [(42, "pro"), (7, "free")]),
    ]:
        df = spark.createDataFrame(rows, "user_id long, plan string").withColumn(
            "date", F.lit(day).cast("date")
        )
        write_partitions(
            df,
            source.path,
            partition_by=["date"],
            selection=selection_for_keys(source.columns, [day], {"date": "date"}, asset_name="x"),
            partition_ids=[day],
        )
    assert all(o.ok for o in refresh(graph, instance))
    assert not make_plan(graph, StateCache()).plan
    result = delete_rows(spark, graph.assets["history"].path, "user_id = 42")
    assert result.rows_deleted == 2  # the closed 'free' version and the current 'pro' one

    stale = sorted(
        (i.asset, i.partition, i.reason) for i in make_plan(graph, StateCache()).plan.items
    )
    assert stale == [
        ("history", "2024-01-01", "out_of_band"),
        ("history", "2024-01-02", "out_of_band"),
        ("plan_users", None, "upstream_changed"),
    ]


def _matching_files(raw: str, users: tuple[int, int]) -> list[tuple[str, str, int, int]]:
    """(partition key, file path in the table, rows of `users`, rows) of each file of the table
    holding rows of `users`: listed by delta-rs, counted by pyarrow (not by the code under test)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found = []
    for uri in DeltaTable(raw).file_uris():
        local = unquote(uri.removeprefix("file://"))
        user_ids = pq.read_table(local, columns=["user_id"])["user_id"]
        matching = pc.sum(pc.is_in(user_ids, value_set=pa.array(users, user_ids.type))).as_py()
        if matching:
            path = os.path.relpath(local, raw)
            values = dict(part.split("=", 1) for part in path.split("/")[:-1])
            found.append((f"{values['date']}|{values['region']}", path, matching, len(user_ids)))
    return sorted(found)


def _merged_again(raw: str, touched: set[str]) -> set[str]:
    """The source's partitions on or after a touched day of the same region."""
    keys = {f"{p['date']}|{p['region']}" for p in DeltaTable(raw).partitions()}
    return {k for k in keys for t in touched if k.split("|")[1] == t.split("|")[1] and k >= t}
