"""Planning a code location from Python, as a user's script does: `plan(defs)` and
`plan_runs(plan(defs), defs)` give what `partlake plan` shows, with `select`, another lake
`root` and another Dagster `instance` (dynamic partitions); the pure forms over the planner's
plain data (`PlanInput`, `PlanAsset`s) with partitions, backfill policies, blocked partitions,
multi-asset units and early cutoff; and `partlake plan` over a stale streaming asset says what
its new rows may make stale downstream. Nothing runs Spark: the plans are of a lake whose
sources another system wrote and whose assets were never materialized.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.surface.options import covers
from tests.surface.project import UserProject

pytestmark = [pytest.mark.dagster_cli]

MODULE = "plan_shop"
CODE = """
import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
stores = dg.DynamicPartitionsDefinition(name="stores")
one_run = dg.BackfillPolicy.single_run()

orders = partlake_source("orders", partitions_def=days)
# A landing folder of JSON files, streamed into `events`.
drops = partlake_source("drops", folder=True)


@dg.asset(partitions_def=days, backfill_policy=one_run)
def order_totals(orders: DataFrame) -> DataFrame:
    return orders.groupBy("date").agg(F.sum("amount").alias("amount"))


@dg.asset(partitions_def=stores, backfill_policy=one_run)
def store_sales(context: dg.AssetExecutionContext, spark: SparkResource) -> DataFrame:
    keys = [(key, 1) for key in context.partition_keys]
    return spark.spark_session.createDataFrame(keys, "partition string, n int")


@dg.asset(
    partitions_def=days,
    metadata={"partlake/stream": {"format": "json", "schema": "id long, ts timestamp"}},
)
def events(drops: DataFrame) -> DataFrame:
    return drops.withColumn("date", F.to_date("ts"))


@dg.asset(partitions_def=days)
def daily_events(events: DataFrame) -> DataFrame:
    return events.groupBy("date").count()


spark = SparkResource()
defs = dg.Definitions(
    assets=[orders, drops, order_totals, store_sales, events, daily_events],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
)
"""
# The user's script: the code location planned from Python.
PLANNING = """
import json
import sys

from dagster import DagsterInstance

from dagster_partlake import plan, plan_runs
from plan_shop import defs


def items(found):
    return [item.to_json() for item in found.sorted_items()]


stale = plan(defs)
found = {
    "plan": items(stale),
    "runs": plan_runs(stale, defs).to_json(),
    "select": items(plan(defs, select=["order_totals"])),
    "root": items(plan(defs, root=sys.argv[1])),
}
# Another instance, with other stores.
with DagsterInstance.ephemeral() as other:
    other.add_dynamic_partitions("stores", ["s9", "s8"])
    elsewhere = plan(defs, instance=other)
    found["instance"] = items(elsewhere)
    found["instance_runs"] = plan_runs(elsewhere, defs, instance=other).to_json()
print(json.dumps(found))
"""
# The user's script: the pure planner and run planning over plain data.
PURE = """
import json

from dagster import BackfillPolicy, DailyPartitionsDefinition

from dagster_partlake import PlanInput, plan, plan_runs
from dagster_partlake.planning import Dependency, PartitionState, PlanAsset, Record


def same(key):
    return [key]


days = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")
raw = PlanAsset("raw", is_source=True)
clean = PlanAsset("clean", deps=(Dependency("raw", same, same, identity=True),))
report = PlanAsset("report", deps=(Dependency("clean", same, same, identity=True),))
assets = [raw, clean, report]
d1, d2 = "2024-01-01", "2024-01-02"
states = {
    "raw": {d1: PartitionState(1500), d2: PartitionState(2500)},  # both rewritten since
    "clean": {d1: PartitionState(1100), d2: PartitionState(2100)},
    "report": {d1: PartitionState(1200), d2: PartitionState(2200)},
}
records = {
    "clean": {
        d1: Record(None, 1100, {"raw": {d1: 1000}}),
        d2: Record(None, 2100, {"raw": {d2: 2000}}),
    },
    "report": {
        d1: Record(None, 1200, {"clean": {d1: 1100}}),
        d2: Record(None, 2200, {"clean": {d2: 2100}}),
    },
}
stale = plan(PlanInput(assets, states, records))
partitions = {"raw": days, "clean": days, "report": days}
one_run = {"clean": BackfillPolicy.single_run(), "report": BackfillPolicy.single_run()}
together = {"clean": ["clean", "report"], "report": ["clean", "report"]}


def runs(**options):
    planned = plan_runs(stale, assets, **options)
    return {
        "runs": [[list(r.assets), list(r.keys), list(r.waits_for), r.after_cutoff]
                 for r in planned.runs],
        "waiting": [[i.asset, i.partition] for i in planned.waiting],
    }


print(json.dumps({
    "plan": [[i.asset, i.partition, i.reason, list(i.because)] for i in stale.items],
    "each": runs(partitions_defs=partitions, policies={}),
    "ranges": runs(partitions_defs=partitions, policies=one_run),
    "blocked": runs(partitions_defs=partitions, policies=one_run, blocked={"clean": {d2}}),
    "cutoff": runs(partitions_defs=partitions, policies=one_run, cutoff=["clean"]),
    "units": runs(partitions_defs=partitions, policies=one_run, cutoff=["clean"], units=together),
}))
"""
D1, D2, D3 = "2024-01-01", "2024-01-02", "2024-01-03"


def _orders(where: Path, days: list[str]) -> None:
    rows = [{"date": d, "amount": 5} for d in days]
    write_deltalake(str(where), pa.Table.from_pylist(rows), partition_by=["date"])


def _last_json(out: str) -> Any:
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The user's project: orders written for two days, one file landed for the stream, store
    s1 registered in the instance; every plan made once."""
    project = UserProject(tmp_path_factory.mktemp("planning"))
    project.write(MODULE, CODE)
    project.write("planning", PLANNING)
    project.write("pure_plan", PURE)
    _orders(project.lake / "warehouse" / "orders", [D1, D2])
    drops = project.lake / "warehouse" / "drops"
    drops.mkdir(parents=True)
    (drops / "batch-1.json").write_text('{"id": 1, "ts": "2024-01-02T10:00:00"}\n')
    other = project.root / "other-lake"
    _orders(other / "warehouse" / "orders", [D3])
    project.ok(
        "python", "-c",
        "from dagster import DagsterInstance; "
        "DagsterInstance.get().add_dynamic_partitions('stores', ['s1'])",
    )  # fmt: skip
    return {
        "text": project.ok("partlake", "plan", "-m", MODULE),
        "json": json.loads(project.ok("partlake", "plan", "-m", MODULE, "--json")),
        "runs_json": json.loads(project.ok("partlake", "plan", "-m", MODULE, "--runs-json")),
        "script": _last_json(project.ok("python", "planning.py", str(other))),
        "pure": _last_json(project.ok("python", "pure_plan.py")),
    }


def _stale(items: list[dict[str, Any]]) -> list[tuple[str, str | None, str]]:
    return [(i["asset"], i["partition"], i["reason"]) for i in items]


@covers("plan", "plan(source=)", "plan_runs", "plan_runs(plan=)", "plan_runs(assets=)")
def test_a_script_plans_the_code_location_as_partlake_plan_does(planned: dict[str, Any]) -> None:
    script = planned["script"]
    assert _stale(script["plan"]) == [
        ("events", None, "missing"),
        ("order_totals", D1, "missing"),
        ("order_totals", D2, "missing"),
        ("store_sales", "s1", "missing"),
    ]
    # `--json` also names each partition's dimensions.
    assert script["plan"] == [
        {k: v for k, v in item.items() if k != "dimensions"} for item in planned["json"]
    ]
    assert script["runs"] == planned["runs_json"]
    ranged = [r for r in script["runs"] if r["assets"] == ["order_totals"]]
    assert [r["partition_range"] for r in ranged] == [[D1, D2]]


@covers("plan(select=)", "plan(root=)", "plan(instance=)", "plan_runs(instance=)")
def test_a_script_plans_a_selection_another_lake_and_another_instance(
    planned: dict[str, Any],
) -> None:
    script = planned["script"]
    assert _stale(script["select"]) == [
        ("order_totals", D1, "missing"),
        ("order_totals", D2, "missing"),
    ]
    # The other lake has orders of the third day only (and no landing folder).
    assert _stale(script["root"]) == [
        ("order_totals", D3, "missing"),
        ("store_sales", "s1", "missing"),
    ]
    # The other instance knows stores s9 and s8 (in that order), not s1: one run, their range.
    assert ("store_sales", "s9", "missing") in _stale(script["instance"])
    assert ("store_sales", "s1", "missing") not in _stale(script["instance"])
    stores = [r for r in script["instance_runs"] if r["assets"] == ["store_sales"]]
    assert [(r["partition_range"], r["partitions"]) for r in stores] == [
        (["s9", "s8"], ["s9", "s8"])
    ]


@covers(
    "plan_runs(partitions_defs=)",
    "plan_runs(policies=)",
    "plan_runs(blocked=)",
    "plan_runs(units=)",
    "plan_runs(cutoff=)",
)
def test_the_pure_planner_and_run_planning_over_plain_data(planned: dict[str, Any]) -> None:
    pure = planned["pure"]
    assert pure["plan"] == [
        ["clean", D1, "upstream_changed", [f"raw[{D1}]"]],
        ["clean", D2, "upstream_changed", [f"raw[{D2}]"]],
        ["report", D1, "upstream_changed", [f"clean[{D1}]"]],
        ["report", D2, "upstream_changed", [f"clean[{D2}]"]],
    ]
    both = ["clean", "report"]
    # No backfill policy: a run per day, both assets in it (Dagster runs them in order).
    assert pure["each"] == {
        "runs": [[both, [D1], [], False], [both, [D2], [], False]],
        "waiting": [],
    }
    # single_run: one run over the range.
    assert pure["ranges"] == {"runs": [[both, [D1, D2], [], False]], "waiting": []}
    # A blocked partition is not run, nor what reads it.
    assert pure["blocked"] == {
        "runs": [[both, [D1], [], False]],
        "waiting": [["clean", D2], ["report", D2]],
    }
    # clean may leave its partitions unchanged: report waits for its run, after the cutoff.
    assert pure["cutoff"] == {
        "runs": [[["clean"], [D1, D2], [], False], [["report"], [D1, D2], [1], True]],
        "waiting": [],
    }
    # ... unless both are one multi-asset, which only runs whole.
    assert pure["units"] == {"runs": [[both, [D1, D2], [], False]], "waiting": []}


def test_the_plan_of_a_stale_stream_says_what_its_new_rows_may_make_stale(
    planned: dict[str, Any],
) -> None:
    text = planned["text"]
    assert "events: 1 stale (missing 1)" in text, text
    assert (
        "  then, where its new rows land, maybe stale: daily_events (planned once the stream "
        "has run; partlake run does so)"
    ) in text, text
    # Only the stream says so.
    assert text.count("then, where its new rows land") == 1, text
