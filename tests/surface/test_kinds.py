"""Model kinds as a user declares them: `partition` (the default, with `schema_mode`), `table`,
`tracked`, `append`, `merge` and `scd2`, chosen with `model_kind_metadata` or the raw
`partlake/kind` / `partlake/unique_key` / `partlake/partition_by` settings, every step in the
Dagster pool `POOL`. One code location over a daily export of users, run as users run it
(`partlake run`) twice: the first export, then another system writing day 1 again unchanged and
day 2 with changes and a new column. Rows read back with deltalake; `ModelKind` predicts each
table's partitioning.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dagster_partlake import ModelKind, PartlakeConfigError, model_kind_metadata
from tests.surface.options import covers
from tests.surface.project import UserProject, outcome_lines, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.dagster_cli]

MODULE = "shop_kinds"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import (
    POOL,
    DeltaPartitionIOManager,
    SparkResource,
    model_kind_metadata,
    partlake_asset_checks,
    partlake_source,
)

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
one_run = dg.BackfillPolicy.single_run()
exports = partlake_source("exports", partitions_def=days)


@dg.asset(
    partitions_def=days, backfill_policy=one_run, pool=POOL, metadata={"schema_mode": "add_columns"}
)
def snapshot(exports: DataFrame) -> DataFrame:
    return exports


@dg.asset(partitions_def=days, backfill_policy=one_run, pool=POOL)
def snapshot_strict(exports: DataFrame) -> DataFrame:
    return exports


@dg.asset(
    partitions_def=days, backfill_policy=one_run, pool=POOL, metadata={"partlake/kind": "tracked"}
)
def plan_counts(exports: DataFrame) -> DataFrame:
    return exports.groupBy("date", "plan").agg(F.count(F.lit(1)).alias("users"))


# One run per day: a day whose counts came out unchanged is not run.
@dg.asset(partitions_def=days, pool=POOL)
def day_totals(plan_counts: DataFrame) -> DataFrame:
    return plan_counts.groupBy("date").agg(F.sum("users").alias("users"))


@dg.asset(pool=POOL, metadata={"partlake/kind": "table"})
def plan_mix(plan_counts: DataFrame) -> DataFrame:
    return plan_counts.groupBy("plan").agg(F.sum("users").alias("user_days"))


@dg.asset(
    partitions_def=days, backfill_policy=one_run, pool=POOL, metadata=model_kind_metadata("append")
)
def export_log(exports: DataFrame) -> DataFrame:
    return exports.select("date", "user_id", "plan")


@dg.asset(
    partitions_def=days,
    backfill_policy=one_run,
    pool=POOL,
    metadata=model_kind_metadata("merge", unique_key=["user_id"], partition_by=[]),
)
def users(context: dg.AssetExecutionContext, exports: DataFrame) -> dict[str, DataFrame]:
    # A range run applies its days in order, one DataFrame each.
    return {
        day: exports.where(F.col("date") == day).select("user_id", "name", "plan")
        for day in context.partition_keys
    }


@dg.asset(
    partitions_def=days,
    pool=POOL,
    metadata={
        "partlake/kind": "scd2",
        "partlake/unique_key": ["user_id"],
        "partlake/partition_by": ["plan"],
    },
)
def users_history(exports: DataFrame) -> DataFrame:
    return exports.select("user_id", "name", "plan")


spark = SparkResource(master="local[2]")
assets = [exports, snapshot, snapshot_strict, plan_counts, day_totals, plan_mix, export_log]
assets += [users, users_history]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    executor=dg.in_process_executor,
)
"""
DAY1, DAY2 = "2024-01-01", "2024-01-02"
FIRST = {
    DAY1: [(1, "ann", "free"), (2, "bob", "pro"), (3, "cy", "free")],
    DAY2: [(1, "ann", "pro"), (2, "bob", "pro"), (4, "dee", "free")],
}
# Day 2 again, from an exporter that now adds an email: bob renamed rob, dee upgraded.
SECOND_DAY2 = [(1, "ann", "pro"), (2, "rob", "pro"), (4, "dee", "pro")]


def _export(day: str, users: list[tuple[int, str, str]], email: bool = False) -> pa.Table:
    rows: list[dict[str, Any]] = [
        {"date": day, "user_id": u, "name": n, "plan": p} for u, n, p in users
    ]
    for row in rows if email else []:
        row["email"] = f"{row['name']}@example.com"
    return pa.Table.from_pylist(rows)


def _table(project: UserProject, asset: str) -> str:
    return str(project.lake / "warehouse" / asset)


def _files(table: str, day: str) -> set[str]:
    actions = pa.table(DeltaTable(table).get_add_actions(flatten=True))
    return {
        path
        for path, date in zip(
            actions.column("path").to_pylist(),
            actions.column("partition.date").to_pylist(),
            strict=True,
        )
        if date == day
    }


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The user's project after two `partlake run`s: the first export of two days, then day 1
    written again unchanged and day 2 with changes and a new column."""
    project = UserProject(tmp_path_factory.mktemp("kinds"))
    project.write(MODULE, CODE)
    source = _table(project, "exports")
    first_export = pa.concat_tables([_export(d, u) for d, u in FIRST.items()])
    write_deltalake(source, first_export, partition_by=["date"])
    first = project.ok("partlake", "run", "-m", MODULE)
    kept = _files(_table(project, "plan_counts"), DAY1)
    first_users = table_rows(_table(project, "users"), ["user_id", "name", "plan"])

    # Another system writes both days again: day 1 unchanged, day 2 changed, with an email.
    write_deltalake(
        source, _export(DAY1, FIRST[DAY1]), mode="overwrite", predicate=f"date = '{DAY1}'"
    )
    write_deltalake(
        source,
        _export(DAY2, SECOND_DAY2, email=True),
        mode="overwrite",
        predicate=f"date = '{DAY2}'",
        schema_mode="merge",
    )
    second = project.run("partlake", "run", "-m", MODULE)
    return {
        "project": project,
        "first": first,
        "second": second,
        "kept": kept,
        "first_users": first_users,
    }


def _line(out: str, asset: str, partition: str) -> str:
    found = [line for line in outcome_lines(out) if line.split()[1:3] == [asset, partition]]
    assert len(found) == 1, out
    return found[0]


@covers("POOL")
def test_every_partition_runs_with_its_steps_in_the_pool(shop: dict[str, Any]) -> None:
    """`pool=POOL`: `partlake run` runs as many runs at once as the pool's limit on the
    instance (the project's dagster.yaml: 2) and says so."""
    first = shop["first"].splitlines()
    assert first[0] == (
        "Running 15 stale asset partition(s) in 6 run(s). Executing up to 2 run(s) at a time; "
        "Dagster pool partlake (limit 2) caps steps across runs."
    ), first[0]
    assert all(line.startswith("[OK]") for line in outcome_lines(shop["first"])), shop["first"]
    assert first[-1] == "15 asset partition(s) refreshed, 0 failed."


@covers("setting schema_mode")
def test_new_columns_are_added_only_with_schema_mode(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    columns = ["date", "user_id", "name", "email"]
    assert table_rows(_table(project, "snapshot"), columns) == [
        (DAY1, 1, "ann", None),
        (DAY1, 2, "bob", None),
        (DAY1, 3, "cy", None),
        (DAY2, 1, "ann", "ann@example.com"),
        (DAY2, 2, "rob", "rob@example.com"),
        (DAY2, 4, "dee", "dee@example.com"),
    ]
    # Without it the write is refused, naming the column and the setting; the table is as it was.
    for day in (DAY1, DAY2):
        line = _line(shop["second"].stdout, "snapshot_strict", day)
        assert line.startswith("[FAILED]") and "new columns: email" in line, line
        assert "{'schema_mode': 'add_columns'}" in line, line
    strict = _table(project, "snapshot_strict")
    assert "email" not in DeltaTable(strict).schema().to_arrow().names
    assert table_rows(strict, ["date", "user_id", "name"]) == sorted(
        (d, u, n) for d, users in FIRST.items() for u, n, _ in users
    )
    # What is left to run is exactly the refused partitions: every other asset is fresh.
    plan = project.ok("partlake", "plan", "-m", MODULE)
    assert plan.startswith("2 stale asset partition(s) in 1 asset(s)"), plan
    assert "snapshot_strict: 2 stale (upstream_changed 2)" in plan, plan


@covers("setting partlake/kind", "model_kind_metadata", "model_kind_metadata(kind=)")
def test_each_kind_does_what_it_says_to_its_table(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    second = shop["second"]
    assert second.returncode == 1, second.stdout  # snapshot_strict failed, as it should
    # partition (the default): each day replaced; table (unpartitioned): replaced whole.
    assert table_rows(_table(project, "plan_mix"), ["plan", "user_days"]) == [
        ("free", 2),
        ("pro", 4),
    ]
    # tracked: day 1 came out equal, so its files stayed and what reads it did not run.
    assert _files(_table(project, "plan_counts"), DAY1) == shop["kept"]
    assert _line(second.stdout, "day_totals", DAY1) == (
        "[UNCHANGED] day_totals 2024-01-01 (upstream_changed, not run: its inputs came out "
        "unchanged)"
    )
    assert _line(second.stdout, "day_totals", DAY2).startswith("[OK]")
    assert table_rows(_table(project, "plan_counts"), ["date", "plan", "users"]) == [
        (DAY1, "free", 2),
        (DAY1, "pro", 1),
        (DAY2, "pro", 3),
    ]
    # append (model_kind_metadata("append")): a re-run appends the partition again.
    log = table_rows(_table(project, "export_log"), ["date", "user_id", "plan"])
    expected = [(DAY1, u, p) for u, _, p in FIRST[DAY1]] * 2 + [
        (DAY2, u, p) for u, _, p in FIRST[DAY2] + SECOND_DAY2
    ]
    assert log == sorted(expected)
    assert "inserted" in _line(shop["first"], "export_log", DAY1)


@covers(
    "model_kind_metadata(unique_key=)",
    "model_kind_metadata(partition_by=)",
    "setting partlake/unique_key",
    "setting partlake/partition_by",
)
def test_merge_and_scd2_apply_the_days_in_order_on_their_key(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    # merge on user_id, unpartitioned (partition_by=[]): day 1 then day 2 upserted; a key
    # missing from a later day stays.
    assert shop["first_users"] == [
        (1, "ann", "pro"),
        (2, "bob", "pro"),
        (3, "cy", "free"),
        (4, "dee", "free"),
    ]
    assert table_rows(_table(project, "users"), ["user_id", "name", "plan"]) == [
        (1, "ann", "pro"),
        (2, "rob", "pro"),
        (3, "cy", "free"),
        (4, "dee", "pro"),
    ]
    assert DeltaTable(_table(project, "users")).metadata().partition_columns == []
    # scd2 on user_id, partitioned by plan (raw settings): every version with its validity.
    d1, d2 = (dt.datetime.fromisoformat(d).replace(tzinfo=dt.UTC) for d in (DAY1, DAY2))
    columns = ["user_id", "name", "plan", "valid_from", "valid_to", "is_current"]
    assert table_rows(_table(project, "users_history"), columns) == [
        (1, "ann", "free", d1, d2, False),
        (1, "ann", "pro", d2, None, True),
        (2, "bob", "pro", d1, d2, False),
        (2, "rob", "pro", d2, None, True),
        (3, "cy", "free", d1, d2, False),  # gone from day 2's export: closed
        (4, "dee", "pro", d2, None, True),
    ]
    assert DeltaTable(_table(project, "users_history")).metadata().partition_columns == ["plan"]


@covers("ModelKind", "ModelKind(kind=)", "ModelKind(unique_key=)", "ModelKind(partition_by=)")
def test_model_kind_says_how_each_table_is_partitioned(shop: dict[str, Any]) -> None:
    project: UserProject = shop["project"]
    dimension = ["date"]
    for asset, kind in {
        "users": ModelKind("merge", unique_key=("user_id",), partition_by=()),
        "users_history": ModelKind("scd2", unique_key=("user_id",), partition_by=("plan",)),
        "export_log": ModelKind("append"),
        "snapshot": ModelKind("partition"),
    }.items():
        columns = DeltaTable(_table(project, asset)).metadata().partition_columns
        assert list(kind.table_partition_by(dimension)) == columns, asset
        assert kind.decoupled(dimension) == (columns != dimension), asset


def test_a_kind_that_does_not_fit_is_refused_where_it_is_written() -> None:
    """`model_kind_metadata` checks its arguments when the module is imported."""
    with pytest.raises(PartlakeConfigError, match="'merge' model but has no 'partlake/unique_key'"):
        model_kind_metadata("merge")
    with pytest.raises(PartlakeConfigError, match="sets 'partlake/partition_by', but a 'tracked'"):
        model_kind_metadata("tracked", partition_by=["plan"])
