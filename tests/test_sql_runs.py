"""SQL models in real Dagster runs on the shared local Spark and real Delta tables: a model per
mapping (identity, daily -> monthly by a named mapping, the whole upstream), rows checked against
the same logic in Python, the views gone after the run, an edited model planned `code_changed`
(a whitespace or comment edit not), and the IO manager's partition-column error for a model
whose output lacks them, and `partlake_stale()` set by `sql_assets(automation_condition=...)`
requesting exactly the stale partitions."""

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
from dagster_partlake.layout import table_path
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
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
