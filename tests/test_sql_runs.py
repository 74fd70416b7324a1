"""SQL models in real Dagster runs on the shared local Spark and real Delta tables: a model per
mapping (identity, daily -> monthly by a named mapping, the whole upstream), rows checked against
the same logic in Python, the views gone after the run, an edited model planned `code_changed`
(a whitespace or comment edit not), and the IO manager's partition-column error for a model
whose output lacks them, and `partlake_stale()` set by `sql_assets(automation_condition=...)`
requesting exactly the stale partitions. Then the `append` kind and a watermark input, against
the Python assets of the same logic."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest
from dagster import (
    DimensionPartitionMapping,
    IdentityPartitionMapping,
    MultiPartitionMapping,
    TimeWindowPartitionMapping,
    evaluate_automation_conditions,
)

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_stale, sql_assets
from dagster_partlake.delta.state import StateCache
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from dagster_partlake.storage.location import table_path
from definitions.assets import build_lakehouse
from definitions.ingest import write_partition
from definitions.partitions import daily_region, monthly_region
from tests.conftest import delta_rows

pytestmark = pytest.mark.spark

MONTHS = MultiPartitionMapping(
    {
        "date": DimensionPartitionMapping("month", TimeWindowPartitionMapping()),
        "region": DimensionPartitionMapping("region", IdentityPartitionMapping()),
    }
)
MODELS = {
    "daily.sql": """
        -- @partitions: daily_region
        -- @constraint: not_null(date, region)
        select date, region, count(*) as events, sum(amount) as amount
        from raw_events
        where user_id is not null
        group by date, region
    """,
    "monthly.sql": """
        -- @partitions: monthly_region
        -- @depends_on: daily (months)
        select trunc(d.date, 'MM') as month, d.region, sum(d.events) as events, count(*) as days
        from daily d
        group by trunc(d.date, 'MM'), d.region
    """,
    "totals.sql": """
        -- every day, every region: the whole upstream table
        select region, sum(events) as events from daily group by region
    """,
    "broken.sql": """
        -- @partitions: daily_region
        select count(*) as events from raw_events
    """,
}


def defs_for(lake: Path, models: Path, automation_condition=None):  # type: ignore[no-untyped-def]
    from dagster import Definitions

    source = build_lakehouse(daily_region, monthly_region)[0]
    assets = [
        source,
        *sql_assets(
            models,
            partitions={"daily_region": daily_region, "monthly_region": monthly_region},
            mappings={"months": MONTHS},
            upstream=[source],
            automation_condition=automation_condition,
        ),
    ]
    spark = SparkResource(master="local[2]")
    return Definitions(
        assets=assets,
        resources={
            "spark": spark,
            "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake)),
        },
    )


def write_models(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


def test_sql_models_run_as_python_assets_do(spark, lake: Path, instance, tmp_path: Path) -> None:
    for day in ("2024-01-01", "2024-01-02"):
        for region in ("eu", "us"):
            write_partition(dt.date.fromisoformat(day), region, 150, root=str(lake))
    models = tmp_path / "models"
    write_models(models, MODELS)
    graph = LakeGraph(defs_for(lake, models))
    outcomes = refresh(graph, instance, select=["daily", "monthly", "totals"])
    assert {(o.asset, o.partition) for o in outcomes} == {
        *(("daily", f"{d}|{r}") for d in ("2024-01-01", "2024-01-02") for r in ("eu", "us")),
        ("monthly", "2024-01|eu"),
        ("monthly", "2024-01|us"),
        ("totals", None),
    }
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]

    # The same logic in Python (Spark DataFrames), row by row.
    from pyspark.sql import functions as F

    from dagster_partlake.delta.reader import open_table, read_snapshot
    from dagster_partlake.delta.selection import PartitionSelection

    raw = read_snapshot(
        spark, open_table(table_path(str(lake), ["raw_events"])), PartitionSelection.everything()
    ).df
    daily = (
        raw.where(F.col("user_id").isNotNull())
        .groupBy("date", "region")
        .agg(F.count(F.lit(1)).alias("events"), F.sum("amount").alias("amount"))
    )
    columns = ["date", "region", "events", "amount"]
    assert delta_rows(table_path(str(lake), ["daily"]), columns) == sorted(
        tuple(r[c] for c in columns) for r in daily.collect()
    )
    monthly = daily.groupBy(F.trunc("date", "month").alias("month"), "region").agg(
        F.sum("events").alias("events"), F.count(F.lit(1)).alias("days")
    )
    columns = ["month", "region", "events", "days"]
    assert delta_rows(table_path(str(lake), ["monthly"]), columns) == sorted(
        tuple(r[c] for c in columns) for r in monthly.collect()
    )
    assert [r[3] for r in delta_rows(table_path(str(lake), ["monthly"]), columns)] == [2, 2]
    totals = daily.groupBy("region").agg(F.sum("events").alias("events"))
    assert delta_rows(table_path(str(lake), ["totals"]), ["region", "events"]) == sorted(
        (r["region"], r["events"]) for r in totals.collect()
    )
    # No temporary view outlives its run in the shared session.
    assert [t.name for t in spark.catalog.listTables() if t.isTemporary] == []

    # A model whose output lacks the partition columns: the IO manager's error, as for Python.
    [failed] = refresh(graph, instance, select=["broken"])[:1]
    assert not failed.ok
    assert "stores partition dimension 'date' in column 'date', which its data does not have" in (
        failed.error or ""
    )

    # Editing whitespace and comments keeps the code version; editing the query does not.
    assert not make_plan(LakeGraph(defs_for(lake, models)), StateCache(), select=["totals"]).plan
    write_models(
        models,
        {
            "totals.sql": "-- every region\nSELECT region,\n  SUM(events) AS events\nFROM daily\n"
            "GROUP BY region -- same query\n"
        },
    )
    assert not make_plan(LakeGraph(defs_for(lake, models)), StateCache(), select=["totals"]).plan
    write_models(
        models,
        {
            "totals.sql": "select region, sum(events) as events from daily where events > 0 "
            "group by region\n"
        },
    )
    plan = make_plan(LakeGraph(defs_for(lake, models)), StateCache(), select=["totals"]).plan
    assert [(i.asset, i.partition, i.reason) for i in plan.items] == [
        ("totals", None, "code_changed")
    ]

    # sql_assets(automation_condition=...) puts the condition on every model, and Dagster's own
    # evaluation of partlake_stale() requests exactly the stale partitions: the edited totals,
    # broken (never written), and after a source rewrite its closure.
    stale = partlake_stale()
    automated = defs_for(lake, models, automation_condition=stale)
    graph_nodes = automated.resolve_asset_graph().asset_nodes
    conditions = {n.key.to_user_string(): n.automation_condition for n in graph_nodes}
    assert conditions.pop("raw_events") is None
    assert conditions == dict.fromkeys(["daily", "monthly", "totals", "broken"], stale)

    def requested(result) -> set[tuple[str, str | None]]:  # type: ignore[no-untyped-def]
        return {
            (n.key.to_user_string(), p)
            for n in graph_nodes
            for p in result.get_requested_partitions(n.key)
        }

    result = evaluate_automation_conditions(automated, instance)
    broken = {("broken", f"{d}|{r}") for d in ("2024-01-01", "2024-01-02") for r in ("eu", "us")}
    assert requested(result) == {("totals", None), *broken}
    write_partition(dt.date(2024, 1, 2), "us", 150, seed=7, root=str(lake))
    result = evaluate_automation_conditions(automated, instance, cursor=result.cursor)
    assert requested(result) == {
        ("daily", "2024-01-02|us"),
        ("monthly", "2024-01|us"),
        ("totals", None),
        *broken,
    }
    plan = make_plan(LakeGraph(automated), StateCache()).plan
    assert requested(result) == {(i.asset, i.partition) for i in plan.items}


APPENDED = {
    "event_log.sql": """
        -- @kind: append
        -- @partitions: daily_region
        select event_id, user_id, amount * 2 as doubled, date, region
        from raw_events
        where amount > 100
    """,
    "change_log.sql": """
        -- @kind: append
        -- @incremental: watermark(updated_at)
        select id, upper(region) as region, amount + 1 as amount, updated_at
        from changes
        where amount >= 0
    """,
}


def _changes(lake: Path, ids: range, hour: int, amount: int = 5) -> None:
    """Another system appends rows (id, region, amount, updated_at) to the changes table."""
    import pyarrow as pa
    from deltalake import write_deltalake

    at = dt.datetime(2024, 1, 1, hour, tzinfo=dt.UTC)
    table = pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "region": pa.array(["eu" if i % 2 else "us" for i in ids], pa.string()),
            "amount": pa.array([amount - i % 3 * 4 for i in ids], pa.int64()),
            "updated_at": pa.array([at] * len(ids), pa.timestamp("us", tz="UTC")),
        }
    )
    write_deltalake(table_path(str(lake), ["changes"]), table, mode="append")


def test_append_and_watermark_models_write_what_python_assets_write(
    spark, lake: Path, instance, tmp_path: Path
) -> None:
    """A SQL `append` model and a SQL `append` model with `@incremental: watermark(...)`, run as
    Dagster runs twice (new source data in between), hold the rows of the Python assets of the
    same logic, row by row: each unit of work once, rows at or below the watermark never read."""
    from dagster import AssetIn, Definitions, asset
    from pyspark.sql import functions as F

    from dagster_partlake import model_kind_metadata, partlake_source

    raw_events = build_lakehouse(daily_region, monthly_region)[0]
    changes = partlake_source("changes")

    @asset(partitions_def=daily_region, metadata=model_kind_metadata("append"))
    def py_event_log(raw_events):  # type: ignore[no-untyped-def]
        return raw_events.where(F.col("amount") > 100).select(
            "event_id", "user_id", (F.col("amount") * 2).alias("doubled"), "date", "region"
        )

    @asset(
        ins={"changes": AssetIn(metadata={"partlake/incremental": {"column": "updated_at"}})},
        metadata=model_kind_metadata("append"),
    )
    def py_change_log(changes):  # type: ignore[no-untyped-def]
        return changes.where(F.col("amount") >= 0).select(
            "id", F.upper("region").alias("region"), (F.col("amount") + 1).alias("amount"),
            "updated_at",
        )  # fmt: skip

    models = tmp_path / "models"
    write_models(models, APPENDED)
    spark_resource = SparkResource(master="local[2]")
    defs = Definitions(
        assets=[
            raw_events,
            changes,
            *sql_assets(
                models, partitions={"daily_region": daily_region}, upstream=[raw_events, changes]
            ),
            py_event_log,
            py_change_log,
        ],
        resources={
            "spark": spark_resource,
            "io_manager": DeltaPartitionIOManager(spark=spark_resource, root=str(lake)),
        },
    )
    graph = LakeGraph(defs)
    logs = ["event_log", "py_event_log", "change_log", "py_change_log"]

    def run() -> set[tuple[str, str | None]]:
        outcomes = refresh(graph, instance, select=logs, max_parallel=2)
        assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
        return {(o.asset, o.partition) for o in outcomes}

    write_partition(dt.date(2024, 1, 1), "eu", 40, root=str(lake))
    _changes(lake, range(0, 6), hour=2)
    assert run() == {
        ("event_log", "2024-01-01|eu"),
        ("py_event_log", "2024-01-01|eu"),
        ("change_log", None),
        ("py_change_log", None),
    }
    write_partition(dt.date(2024, 1, 2), "eu", 40, root=str(lake))
    _changes(lake, range(6, 9), hour=3)
    _changes(lake, range(100, 102), hour=1)  # late: at or below the watermark, never read
    assert run() == {
        ("event_log", "2024-01-02|eu"),
        ("py_event_log", "2024-01-02|eu"),
        ("change_log", None),
        ("py_change_log", None),
    }

    events = ["event_id", "user_id", "doubled", "date", "region"]
    appended = delta_rows(table_path(str(lake), ["event_log"]), events)
    assert appended == delta_rows(table_path(str(lake), ["py_event_log"]), events)
    raw = delta_rows(table_path(str(lake), ["raw_events"]), ["event_id", "amount"])
    assert sorted(r[0] for r in appended) == sorted(i for i, a in raw if a > 100)  # each once
    columns = ["id", "region", "amount", "updated_at"]
    seen = delta_rows(table_path(str(lake), ["change_log"]), columns)
    assert seen == delta_rows(table_path(str(lake), ["py_change_log"]), columns)
    assert [r[0] for r in seen] == [i for i in range(9) if 5 - i % 3 * 4 >= 0]
