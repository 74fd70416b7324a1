"""Model kinds in real Dagster runs on real Spark and Delta: tracked (early cutoff), append,
merge; checked row by row with delta-rs, and what the planner sees afterwards."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from dagster import (
    AssetIn,
    AssetKey,
    BackfillPolicy,
    DailyPartitionsDefinition,
    Definitions,
    TimeWindowPartitionMapping,
    asset,
    materialize,
)
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import log_versions
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.kinds.spec import model_kind, model_kind_metadata
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.partitions.keys import dimension_columns, selection_for_keys
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import PlanningSession, make_plan
from dagster_partlake.records.queries import read_record
from dagster_partlake.records.writes import write_partitions
from dagster_partlake.storage.location import table_path
from tests.conftest import delta_files, delta_rows

pytestmark = pytest.mark.spark

daily = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
changes = partlake_source("changes", partitions_def=daily)


def write_changes(spark, lake: Path, day: str, rows: list[tuple[int, str, int]]) -> None:
    """The change feed of one day: (id, name, score)."""
    df = spark.createDataFrame(
        [(dt.date.fromisoformat(day), *r) for r in rows],
        "date date, id long, name string, score long",
    )
    columns = dimension_columns(daily, {}, asset_name="changes")
    write_partitions(
        df,
        table_path(str(lake), ["changes"]),
        partition_by=["date"],
        selection=selection_for_keys(columns, [day], {"date": "date"}, asset_name="changes"),
        partition_ids=[day],
    )


@asset(partitions_def=daily, code_version="1", metadata={"partlake/kind": "tracked"})
def scores(changes: DataFrame) -> DataFrame:
    return changes.select("date", "id", "score")


@asset(partitions_def=daily, code_version="1")
def score_totals(scores: DataFrame) -> DataFrame:
    return scores.groupBy("date").agg(F.sum("score").alias("total"))


@asset(partitions_def=daily, code_version="1", metadata=model_kind_metadata("append"))
def change_log(changes: DataFrame) -> DataFrame:
    return changes.select("date", "id", "name")


@asset(
    partitions_def=daily,
    code_version="1",
    metadata=model_kind_metadata("merge", unique_key=["id"], partition_by=[]),
)
def users(changes: DataFrame) -> DataFrame:
    return changes.select("id", "name", "score")


@asset(code_version="1", ins={"users": AssetIn()})
def user_count(users: DataFrame) -> DataFrame:
    return users.groupBy().agg(F.count(F.lit(1)).alias("n"))


def defs_for(lake: Path, *assets) -> Definitions:
    resource = SparkResource(master="local[2]")
    return Definitions(
        assets=[changes, *assets],
        resources={
            "spark": resource,
            "io_manager": DeltaPartitionIOManager(spark=resource, root=str(lake)),
        },
    )


def stale(graph: LakeGraph) -> list[tuple[str, str | None, str]]:
    plan = make_plan(graph, StateCache()).plan
    return sorted((i.asset, i.partition, i.reason) for i in plan.items)


def last_record(lake: Path, name: str):
    path = table_path(str(lake), [name])
    return read_record(path, log_versions(path)[-1])


def test_tracked_partition_with_unchanged_rows_cuts_off_its_downstream(
    spark, lake: Path, instance
) -> None:
    for day in DAYS[:2]:
        write_changes(spark, lake, day, [(1, "ann", 10), (2, "bob", 20)])
    graph = LakeGraph(defs_for(lake, scores, score_totals))
    assert all(o.ok for o in refresh(graph, instance))
    assert stale(graph) == []
    path = table_path(str(lake), ["scores"])
    files_before = delta_files(path)

    # Same rows, new commit (and new lastUpdated) for day 2: scores re-runs, keeps its files.
    write_changes(spark, lake, DAYS[1], [(2, "bob", 20), (1, "ann", 10)])
    assert stale(graph) == [
        ("score_totals", DAYS[1], "upstream_changed"),
        ("scores", DAYS[1], "upstream_changed"),
    ]
    outcomes = refresh(graph, instance)
    by_asset = {(o.asset, o.partition): o.status for o in outcomes}
    assert by_asset == {("scores", DAYS[1]): "ok", ("score_totals", DAYS[1]): "unchanged"}
    assert stale(graph) == []
    record = last_record(lake, "scores")
    assert record.kind == "tracked" and DAYS[1] in record.kept
    assert delta_files(path) == files_before

    # Different rows: rewritten, and the downstream runs.
    write_changes(spark, lake, DAYS[1], [(1, "ann", 10), (2, "bob", 25)])
    outcomes = refresh(graph, instance)
    assert {(o.asset, o.status) for o in outcomes} == {("scores", "ok"), ("score_totals", "ok")}
    assert record.content_hashes[DAYS[1]] != last_record(lake, "scores").content_hashes[DAYS[1]]
    assert sorted(delta_rows(table_path(str(lake), ["score_totals"]), ["total"])) == [(30,), (35,)]
    assert stale(graph) == []


def test_append_adds_rows_and_a_retried_commit_of_the_same_run_adds_nothing(
    spark, lake: Path, instance
) -> None:
    write_changes(spark, lake, DAYS[0], [(1, "ann", 1), (2, "bob", 2)])
    defs = defs_for(lake, change_log)
    resources = defs.resources
    result = materialize(
        [changes, change_log],
        partition_key=DAYS[0],
        resources=resources,
        instance=instance,
        selection=[AssetKey("change_log")],
    )
    assert result.success
    path = table_path(str(lake), ["change_log"])
    assert sorted(delta_rows(path, ["id", "name"])) == [(1, "ann"), (2, "bob")]
    # The day's feed changed: a new run appends the new rows next to the old ones.
    write_changes(spark, lake, DAYS[0], [(3, "cy", 3)])
    graph = LakeGraph(defs)
    assert stale(graph) == [("change_log", DAYS[0], "upstream_changed")]
    assert all(o.ok for o in refresh(graph, instance))
    assert sorted(delta_rows(path, ["id", "name"])) == [(1, "ann"), (2, "bob"), (3, "cy")]
    assert last_record(lake, "change_log").metrics["rows_inserted"] == 1
    assert stale(graph) == []

    # A step retried after its commit landed (same run id): nothing is added twice.
    version = log_versions(path)[-1]
    run_id = last_record(lake, "change_log").run_id
    from dagster_partlake.kinds.write import WriteTarget, write_output
    from dagster_partlake.records.record import CommitRecord

    target = WriteTarget(
        root=path,
        asset_name="change_log",
        kind=model_kind({"partlake/kind": "append"}, partitioned=True, asset_name="change_log"),
        columns=dimension_columns(daily, {}, asset_name="change_log"),
        column_types={"date": "date"},
        keys=[DAYS[0]],
        allow_new_columns=False,
        max_attempts=3,
    )
    again = write_output(
        spark.createDataFrame([(dt.date(2024, 1, 1), 3, "cy")], "date date, id long, name string"),
        target,
        CommitRecord("change_log", (DAYS[0],), "1", run_id),
    )
    assert again.commit is None and again.record.table_version == version
    assert log_versions(path)[-1] == version
    assert sorted(delta_rows(path, ["id", "name"])) == [(1, "ann"), (2, "bob"), (3, "cy")]


def test_merge_upserts_on_the_unique_key_and_downstream_reads_the_whole_table(
    spark, lake: Path, instance
) -> None:
    write_changes(spark, lake, DAYS[0], [(1, "ann", 1), (2, "bob", 2)])
    write_changes(spark, lake, DAYS[1], [(2, "bobby", 5), (3, "cy", 3)])
    graph = LakeGraph(defs_for(lake, users, user_count))
    assert stale(graph) == [
        ("user_count", None, "missing"),
        ("users", DAYS[0], "missing"),
        ("users", DAYS[1], "missing"),
    ]
    assert all(o.ok for o in refresh(graph, instance))
    path = table_path(str(lake), ["users"])
    assert sorted(delta_rows(path, ["id", "name", "score"])) == [
        (1, "ann", 1),
        (2, "bobby", 5),
        (3, "cy", 3),
    ]
    assert delta_rows(table_path(str(lake), ["user_count"]), ["n"]) == [(3,)]
    assert stale(graph) == []
    # Day 2's feed changes: only that unit of work re-runs, then the count. It merges into the
    # table as day 1 left it: cy, only in day 2's old feed, goes (as from scratch).
    write_changes(spark, lake, DAYS[1], [(2, "bob", 9), (4, "dee", 4)])
    assert stale(graph) == [
        ("user_count", None, "upstream_changed"),
        ("users", DAYS[1], "upstream_changed"),
    ]
    assert all(o.ok for o in refresh(graph, instance))
    assert sorted(delta_rows(path, ["id", "name", "score"])) == [
        (1, "ann", 1),
        (2, "bob", 9),
        (4, "dee", 4),
    ]
    record = last_record(lake, "users")
    assert record.kind == "merge"
    assert record.metrics == {
        "rows_inserted": 1,
        "rows_updated": 1,
        "rows_deleted": 1,
        "rows_unchanged": 1,
    }
    # The same counts in the Dagster materialization metadata.
    from dagster import AssetRecordsFilter

    latest = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey("users"), asset_partitions=[DAYS[1]]), limit=1
    ).records[0]
    metadata = {k: v.value for k, v in latest.asset_materialization.metadata.items()}
    assert metadata["partlake/kind"] == "merge"
    assert (metadata["partlake/rows_inserted"], metadata["partlake/rows_updated"]) == (1, 1)
    assert delta_rows(table_path(str(lake), ["user_count"]), ["n"]) == [(3,)]
    assert stale(graph) == []

    # Day 1's feed loses ann (a row deleted at the source): day 1 merges into the table as it
    # was before any day, day 2 after it again, and ann goes too.
    write_changes(spark, lake, DAYS[0], [(2, "bo", 7)])
    assert stale(graph) == [
        ("user_count", None, "upstream_changed"),
        ("users", DAYS[0], "upstream_changed"),
        ("users", DAYS[1], "upstream_changed"),
    ]
    assert all(o.ok for o in refresh(graph, instance))
    assert sorted(delta_rows(path, ["id", "name", "score"])) == [(2, "bob", 9), (4, "dee", 4)]
    assert delta_rows(table_path(str(lake), ["user_count"]), ["n"]) == [(2,)]
    assert stale(graph) == []


def test_merge_rejects_duplicate_and_missing_keys_and_leaves_the_table(
    spark, lake: Path, instance
) -> None:
    write_changes(spark, lake, DAYS[0], [(1, "ann", 1)])
    defs = defs_for(lake, users)
    assert materialize(
        [changes, users],
        partition_key=DAYS[0],
        resources=defs.resources,
        instance=instance,
        selection=[AssetKey("users")],
    ).success
    path = table_path(str(lake), ["users"])
    version = log_versions(path)[-1]
    write_changes(spark, lake, DAYS[1], [(1, "a", 1), (1, "b", 2), (7, "c", 3)])
    result = materialize(
        [changes, users],
        partition_key=DAYS[1],
        resources=defs.resources,
        instance=instance,
        selection=[AssetKey("users")],
        raise_on_error=False,
    )
    assert not result.success
    message = str(result.get_step_failure_events()[0].step_failure_data.error)
    assert "repeats or nulls its unique key (id): (id=1) x2" in message
    assert log_versions(path)[-1] == version
    assert delta_rows(path, ["id", "name"]) == [(1, "ann")]

    @asset(
        name="users",
        partitions_def=daily,
        metadata=model_kind_metadata("merge", unique_key=["user_id"], partition_by=[]),
    )
    def users_wrong_key(changes: DataFrame) -> DataFrame:
        return changes.select("id", "name")

    result = materialize(
        [changes, users_wrong_key],
        partition_key=DAYS[0],
        resources=defs.resources,
        instance=instance,
        selection=[AssetKey("users")],
        raise_on_error=False,
    )
    assert not result.success
    message = str(result.get_step_failure_events()[0].step_failure_data.error)
    assert "names column(s) user_id that the returned DataFrame does not have" in message
    assert log_versions(path)[-1] == version


def test_merge_on_dimension_partitions_rewrites_only_files_that_can_hold_a_key(
    spark, lake: Path
) -> None:
    """Delta statistics then partitions: a batch of high keys leaves the low-key file alone."""
    from dagster_partlake.kinds.merge import merge_rows
    from dagster_partlake.records.record import CommitRecord

    path = table_path(str(lake), ["accounts"])
    day = dt.date(2024, 1, 1)

    def batch(rows):
        return spark.createDataFrame(
            [(day, *r) for r in rows], "date date, id long, name string"
        ).repartition(1)

    def merge(df):
        return merge_rows(
            df,
            path,
            unique_key=["id"],
            partition_by=["date"],
            selection=PartitionSelection.everything(),
            record_for=lambda _b: CommitRecord("accounts", (), None, None),
        )

    merge(batch([(i, f"low{i}") for i in range(1, 11)]))
    merge(batch([(i, f"high{i}") for i in range(100, 111)]))
    result = merge(batch([(105, "changed"), (200, "new")]))
    assert result.files_rewritten == 1  # the high-key file; the low one cannot hold 105 or 200
    assert result.metrics["rows_updated"] == 1 and result.metrics["rows_inserted"] == 1
    rows = dict(delta_rows(path, ["id", "name"]))
    assert rows[105] == "changed" and rows[200] == "new" and rows[1] == "low1"
    assert len(rows) == 22


def test_kind_metadata_is_checked_with_a_clear_error() -> None:
    def kind(metadata, partitioned=True):
        return model_kind(metadata, partitioned=partitioned, asset_name="a")

    assert kind({}).kind == "partition" and kind({}, partitioned=False).kind == "table"
    with pytest.raises(PartlakeConfigError, match="'upsert', which is not a model kind; use one"):
        kind({"partlake/kind": "upsert"})
    with pytest.raises(PartlakeConfigError, match="empty 'partlake/kind'"):
        kind({"partlake/kind": ""})
    with pytest.raises(PartlakeConfigError, match="has no 'partlake/unique_key'"):
        kind({"partlake/kind": "merge"})
    with pytest.raises(PartlakeConfigError, match="must be a list of column names"):
        kind({"partlake/kind": "merge", "partlake/unique_key": "id"})
    with pytest.raises(PartlakeConfigError, match="use 'partition'"):
        kind({"partlake/kind": "table"})
    with pytest.raises(PartlakeConfigError, match="use 'table'"):
        kind({"partlake/kind": "tracked"}, partitioned=False)
    with pytest.raises(PartlakeConfigError, match="sets 'partlake/partition_by'"):
        kind({"partlake/kind": "tracked", "partlake/partition_by": []})
    merge = kind(model_kind_metadata("merge", unique_key=["id"], partition_by=[]))
    assert merge.unique_key == ("id",) and merge.decoupled(["date"])
    assert not kind(model_kind_metadata("append")).decoupled(["date"])


@asset(
    partitions_def=daily, code_version="1", metadata=model_kind_metadata("scd2", unique_key=["id"])
)
def users_history(changes: DataFrame) -> DataFrame:
    return changes.select("id", "name")


def history(lake: Path) -> list[tuple]:
    rows = delta_rows(
        table_path(str(lake), ["users_history"]),
        ["id", "name", "valid_from", "valid_to", "is_current"],
    )
    return sorted(
        (i, n, f.date().isoformat(), t.date().isoformat() if t else None, c)
        for i, n, f, t, c in rows
    )


def test_scd2_keeps_history_per_key_and_reapplies_an_older_snapshot(
    spark, lake: Path, instance
) -> None:
    snapshots = {
        DAYS[0]: [(1, "ann", 0), (2, "bob", 0)],
        DAYS[1]: [(1, "ann", 0), (2, "bobby", 0), (3, "cy", 0)],
        DAYS[2]: [(2, "bobby", 0), (3, "cy", 0)],
    }
    defs = defs_for(lake, users_history)

    def apply(day: str, ok: bool = True):
        result = materialize(
            [changes, users_history],
            partition_key=day,
            resources=defs.resources,
            instance=instance,
            selection=[AssetKey("users_history")],
            raise_on_error=False,
        )
        assert result.success is ok
        return result

    for day, rows in snapshots.items():
        write_changes(spark, lake, day, rows)
        apply(day)
    expected = [
        (1, "ann", "2024-01-01", "2024-01-03", False),  # gone from the day-3 snapshot
        (2, "bob", "2024-01-01", "2024-01-02", False),  # renamed on day 2
        (2, "bobby", "2024-01-02", None, True),
        (3, "cy", "2024-01-02", None, True),
    ]
    assert history(lake) == expected
    assert last_record(lake, "users_history").metrics == {
        "rows_inserted": 0,
        "rows_updated": 0,
        "rows_deleted": 1,
        "rows_unchanged": 3,
    }
    # The same snapshot again changes nothing: no file added or removed.
    path = table_path(str(lake), ["users_history"])
    files = delta_files(path)
    apply(DAYS[2])
    assert history(lake) == expected and delta_files(path) == files

    # Day 2's snapshot changes: history rolls back to day 2, then days 2 and 3 apply in order.
    write_changes(spark, lake, DAYS[1], [(1, "ann", 0), (2, "rob", 0), (3, "cy", 0)])
    apply(DAYS[1])
    assert history(lake) == [
        (1, "ann", "2024-01-01", None, True),
        (2, "bob", "2024-01-01", "2024-01-02", False),
        (2, "rob", "2024-01-02", None, True),
        (3, "cy", "2024-01-02", None, True),
    ]
    write_changes(spark, lake, DAYS[2], [(2, "rob", 0), (3, "cy", 0)])
    apply(DAYS[2])
    assert history(lake) == [
        (1, "ann", "2024-01-01", "2024-01-03", False),
        (2, "bob", "2024-01-01", "2024-01-02", False),
        (2, "rob", "2024-01-02", None, True),
        (3, "cy", "2024-01-02", None, True),
    ]

    # A snapshot that already has the history columns is refused; the table stays as it was.
    @asset(
        name="users_history",
        partitions_def=daily,
        metadata=model_kind_metadata("scd2", unique_key=["id"]),
    )
    def with_history_columns(changes: DataFrame) -> DataFrame:
        return changes.select("id", "name", F.lit(True).alias("is_current"))

    version = log_versions(path)[-1]
    result = materialize(
        [changes, with_history_columns],
        partition_key=DAYS[2],
        resources=defs.resources,
        instance=instance,
        selection=[AssetKey("users_history")],
        raise_on_error=False,
    )
    assert not result.success
    message = str(result.get_step_failure_events()[0].step_failure_data.error)
    assert "already has column(s) is_current, which the IO manager adds" in message
    assert log_versions(path)[-1] == version


@asset(
    partitions_def=daily,
    code_version="1",
    ins={
        "running_total": AssetIn(
            partition_mapping=TimeWindowPartitionMapping(
                start_offset=-1, end_offset=-1, allow_nonexistent_upstream_partitions=True
            )
        )
    },
)
def running_total(context, changes: DataFrame, running_total: DataFrame | None) -> DataFrame:
    """The day's score sum plus the previous day's running total (an explicit self-dependency)."""
    day = changes.groupBy("date").agg(F.sum("score").alias("day_total"))
    if running_total is None or running_total.isEmpty():
        return day.select("date", F.col("day_total").alias("total"))
    before = running_total.agg(F.max("total").alias("before"))
    return day.crossJoin(before).select(
        "date", (F.col("day_total") + F.col("before")).alias("total")
    )


def test_an_asset_reading_its_previous_partition_is_planned_and_run_in_time_order(
    spark, lake: Path, instance
) -> None:
    for n, day in enumerate(DAYS, start=1):
        write_changes(spark, lake, day, [(1, "a", n), (2, "b", 10 * n)])
    graph = LakeGraph(defs_for(lake, running_total))
    assert stale(graph) == [("running_total", d, "missing") for d in DAYS]
    assert all(o.ok for o in refresh(graph, instance))
    path = table_path(str(lake), ["running_total"])
    assert delta_rows(path, ["total"]) == [(11,), (33,), (66,)]
    assert stale(graph) == []
    # Day 1 changes: days 2 and 3 are stale because of their previous day, and run after it.
    write_changes(spark, lake, DAYS[0], [(1, "a", 100)])
    plan = make_plan(graph, StateCache()).plan
    assert [(i.partition, i.reason, i.because) for i in plan.items] == [
        (DAYS[0], "upstream_changed", (f"changes[{DAYS[0]}]",)),
        (DAYS[1], "upstream_changed", (f"running_total[{DAYS[0]}]",)),
        (DAYS[2], "upstream_changed", (f"running_total[{DAYS[1]}]",)),
    ]
    outcomes = refresh(graph, instance)
    assert [(o.partition, o.status) for o in outcomes] == [(d, "ok") for d in DAYS]
    assert delta_rows(path, ["total"]) == [(100,), (122,), (155,)]
    assert stale(graph) == []


@asset(
    name="users_history",
    partitions_def=daily,
    code_version="1",
    metadata=model_kind_metadata("scd2", unique_key=["id"], partition_by=["team"]),
)
def users_history_by_team(changes: DataFrame) -> DataFrame:
    return changes.select(
        "id", "name", F.when(F.col("score") > 5, "big").otherwise("small").alias("team")
    )


def test_scd2_history_partitioned_by_a_snapshot_column(spark, lake: Path, instance) -> None:
    defs = defs_for(lake, users_history_by_team)
    snapshots = {DAYS[0]: [(1, "ann", 1), (2, "bob", 9)], DAYS[1]: [(1, "ann", 7), (3, "cy", 2)]}
    for day, rows in snapshots.items():
        write_changes(spark, lake, day, rows)
        result = materialize(
            [changes, users_history_by_team],
            partition_key=day,
            resources=defs.resources,
            instance=instance,
            selection=[AssetKey("users_history")],
        )
        assert result.success
    path = table_path(str(lake), ["users_history"])
    assert DeltaTable(path).metadata().partition_columns == ["team"]
    rows = delta_rows(path, ["id", "team", "valid_from", "valid_to", "is_current"])
    assert sorted(
        (i, team, f.date().isoformat(), t.date().isoformat() if t else None, c)
        for i, team, f, t, c in rows
    ) == [
        (1, "big", "2024-01-02", None, True),  # moved team: closed in one partition, opened in
        (1, "small", "2024-01-01", "2024-01-02", False),  # the other
        (2, "big", "2024-01-01", "2024-01-02", False),  # gone from the second snapshot
        (3, "small", "2024-01-02", None, True),
    ]


@asset(
    partitions_def=daily,
    code_version="1",
    backfill_policy=BackfillPolicy.single_run(),
    metadata=model_kind_metadata("merge", unique_key=["id"], partition_by=[]),
)
def users_in_order(context, changes: DataFrame) -> dict[str, DataFrame]:
    """users, over a range of days in one run: one DataFrame per day, applied in order (its
    table is not partitioned by day, so its rows cannot say their day)."""
    return {
        key: changes.where(F.col("date") == F.lit(dt.date.fromisoformat(key))).select(
            "id", "name", "score"
        )
        for key in context.partition_keys
    }


@asset(
    partitions_def=daily,
    code_version="1",
    backfill_policy=BackfillPolicy.single_run(),
    metadata=model_kind_metadata("merge", unique_key=["id"]),
)
def scores_in_order(changes: DataFrame) -> DataFrame:
    """A merge partitioned by day: one DataFrame for the range, split by its date column."""
    return changes.select("date", "id", "score")


@asset(
    partitions_def=daily,
    code_version="1",
    backfill_policy=BackfillPolicy.single_run(),
    metadata=model_kind_metadata("scd2", unique_key=["id"]),
)
def history_in_order(context, changes: DataFrame) -> dict[str, DataFrame]:
    """users_history over a range: each day's snapshot applied at that day's time."""
    return {
        key: changes.where(F.col("date") == F.lit(dt.date.fromisoformat(key))).select("id", "name")
        for key in context.partition_keys
    }


def run_records_of(lake: Path, name: str) -> list:
    path = table_path(str(lake), [name])
    return [r for v in log_versions(path) if (r := read_record(path, v)) is not None]


def test_in_order_kinds_apply_a_range_day_by_day_in_one_run(spark, lake: Path, instance) -> None:
    """merge and scd2 assets whose policy allows ranges: the days an old one made stale run in
    one run, each applied on top of the one before in its own commit with its own record, and
    the table is the one consecutive one-day runs leave."""
    feeds = {
        DAYS[0]: [(1, "ann", 1), (2, "bob", 2)],
        DAYS[1]: [(2, "bobby", 5), (3, "cy", 3)],
        DAYS[2]: [(3, "cyd", 4), (4, "dee", 6)],
    }
    for day, rows in feeds.items():
        write_changes(spark, lake, day, rows)
    graph = LakeGraph(defs_for(lake, users_in_order, scores_in_order, history_in_order))
    session = PlanningSession(graph, StateCache())
    runs = session.runs(session.plan()).runs
    # One run for the three days of all three (siblings over the same keys and policy).
    assert [(sorted(r.assets), r.describe_partitions()) for r in runs] == [
        (
            ["history_in_order", "scores_in_order", "users_in_order"],
            "2024-01-01...2024-01-03 (3 partitions)",
        )
    ]
    outcomes = refresh(graph, instance)
    assert all(o.ok for o in outcomes) and len({o.run_id for o in outcomes}) == 1
    users_path = table_path(str(lake), ["users_in_order"])
    assert sorted(delta_rows(users_path, ["id", "name", "score"])) == [
        (1, "ann", 1),
        (2, "bobby", 5),
        (3, "cyd", 4),
        (4, "dee", 6),
    ]
    # Each day its own commit and record, in order, all of the one run; each day's rows.
    for name in ("users_in_order", "scores_in_order", "history_in_order"):
        records = run_records_of(lake, name)
        assert [r.partition_keys for r in records] == [(d,) for d in DAYS], name
        assert len({r.run_id for r in records}) == 1
    by_day = {r.partition_keys[0]: r for r in run_records_of(lake, "scores_in_order")}
    assert {d: by_day[d].rows_by_partition for d in DAYS} == {d: {d: 2} for d in DAYS}
    snapshots = [r.snapshot_ms for r in run_records_of(lake, "history_in_order")]
    assert snapshots == [
        int(dt.datetime.fromisoformat(f"{d}T00:00:00+00:00").timestamp() * 1000) for d in DAYS
    ]
    outcome = {(o.asset, o.partition): o for o in outcomes}
    assert outcome[("users_in_order", DAYS[1])].metrics == {
        "rows_inserted": 1,
        "rows_updated": 1,
        "rows_deleted": 0,
        "rows_unchanged": 1,
    }
    assert stale(graph) == []

    # Day 1's feed loses ann: days 1-3 are stale; one run applies them again, in order (day 1
    # rolls back days 1-3 first), and the table is as if built from scratch.
    write_changes(spark, lake, DAYS[0], [(2, "bo", 7)])
    plan = session.plan()
    assert sorted(
        (i.asset, i.partition) for i in plan.plan.items if i.asset == "users_in_order"
    ) == [("users_in_order", d) for d in DAYS]
    assert len(session.runs(plan).runs) == 1
    assert all(o.ok for o in refresh(graph, instance))
    assert sorted(delta_rows(users_path, ["id", "name", "score"])) == [
        (2, "bobby", 5),
        (3, "cyd", 4),
        (4, "dee", 6),
    ]
    assert sorted(delta_rows(table_path(str(lake), ["scores_in_order"]), ["id", "score"])) == [
        (2, 5),
        (2, 7),
        (3, 3),
        (3, 4),
        (4, 6),
    ]
    assert stale(graph) == []


@asset(
    name="users_in_order",
    partitions_def=daily,
    code_version="1",
    backfill_policy=BackfillPolicy.single_run(),
    metadata=model_kind_metadata("merge", unique_key=["id"], partition_by=[]),
)
def users_missing_a_day(context, changes: DataFrame) -> dict[str, DataFrame]:
    return {context.partition_keys[0]: changes.select("id", "name", "score")}


@asset(
    name="users_in_order",
    partitions_def=daily,
    code_version="1",
    backfill_policy=BackfillPolicy.single_run(),
    metadata=model_kind_metadata("merge", unique_key=["id"], partition_by=[]),
)
def users_in_one_frame(changes: DataFrame) -> DataFrame:
    return changes.select("id", "name", "score")


@asset(
    name="scores_in_order",
    partitions_def=daily,
    code_version="1",
    backfill_policy=BackfillPolicy.single_run(),
    metadata=model_kind_metadata("merge", unique_key=["id"]),
)
def scores_outside_the_run(changes: DataFrame) -> DataFrame:
    return changes.select(F.lit(dt.date(2024, 1, 3)).alias("date"), "id", "score")


def test_an_in_order_range_that_cannot_say_its_days_is_refused_before_any_commit(
    spark, lake: Path, instance
) -> None:
    for day in DAYS:
        write_changes(spark, lake, day, [(1, "ann", 1)])
    tags = {
        "dagster/asset_partition_range_start": DAYS[0],
        "dagster/asset_partition_range_end": DAYS[1],
    }
    for bad, message in (
        (users_missing_a_day, "returned DataFrames for the partitions 2024-01-01, but this run"),
        (users_in_one_frame, "its table is not partitioned by every dimension"),
        (scores_outside_the_run, "fall outside the partitions of this run: date=2024-01-03"),
    ):
        defs = defs_for(lake, bad)
        result = materialize(
            [changes, bad],
            resources=defs.resources,
            instance=instance,
            selection=[bad.key],
            tags=tags,
            raise_on_error=False,
        )
        assert not result.success
        error = str(result.get_step_failure_events()[0].step_failure_data.error)
        assert message in error, error
        assert not (lake / "warehouse" / bad.key.path[0]).exists()
