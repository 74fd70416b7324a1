"""Partition retention without Spark: the rule checked at load (`partitions.retention`), what it
retires, and the planner over plain data (a retired partition neither missing nor stale, its
removal not propagated unless `cascade`, a write into a retired range a warning). The real
commands over a user's code location are in tests/surface/test_retention.py."""

from __future__ import annotations

import re

import dagster as dg
import pytest

from dagster_partlake import partlake_source
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.partitions.keys import dimension_columns
from dagster_partlake.partitions.retention import retention_of, retired_keys
from dagster_partlake.planning.definition import (
    Dependency,
    PartitionState,
    PlanAsset,
    PlanInput,
    Record,
    Retirement,
)
from dagster_partlake.planning.planner import plan
from dagster_partlake.planning.replan import changed_partitions, full, replan
from dagster_partlake.planning.retirement import cascaded
from dagster_partlake.spec.load import check_assets

DAYS = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-11")
REGIONS = dg.MultiPartitionsDefinition(
    {"date": DAYS, "region": dg.StaticPartitionsDefinition(["eu", "us"])}
)


def _asset(rule: object, partitions_def: dg.PartitionsDefinition | None = DAYS) -> list[object]:
    @dg.asset(partitions_def=partitions_def, metadata={"partlake/retention": rule})
    def clean(events):  # noqa: ANN001, ANN202 - never run
        return events

    events = partlake_source("events", partitions_def=partitions_def)
    return [events, clean]


@pytest.mark.parametrize(
    ("rule", "partitions_def", "message"),
    [
        ({"keep_last": 0}, DAYS, "keep_last 0, a window that would retire every partition"),
        ({"keep_last": 3, "dimension": "day"}, DAYS, "names dimension 'day', which the asset"),
        ({"condition": "country = 'fr'"}, REGIONS, "unknown dimension(s) country; the asset's"),
        ({"condition": "date >= '2000-01-01'"}, DAYS, "true for every partition the asset has"),
        ({"keep_last": 3, "dimension": "region"}, REGIONS, "'region', which is not a time"),
        ({"keep_last": 3, "condition": "date < 'x'"}, DAYS, "sets both keep_last and condition"),
        ({"keep": 3}, DAYS, "unknown key(s) keep; the keys are keep_last"),
        ({"keep_last": 3}, None, "the asset is not partitioned"),
        ({"condition": "date <"}, DAYS, "does not parse"),
    ],
)
def test_a_bad_rule_is_refused_at_load_naming_the_fix(
    rule: object, partitions_def: dg.PartitionsDefinition | None, message: str
) -> None:
    with pytest.raises(PartlakeConfigError, match=re.escape(message)):
        check_assets(_asset(rule, partitions_def))


def test_a_cascade_that_reaches_a_source_is_refused() -> None:
    with pytest.raises(PartlakeConfigError, match="a cascade cannot reach it"):
        partlake_source(  # checked as it is declared
            "events", partitions_def=DAYS, metadata={"partlake/retention": {"cascade": True}}
        )
    source = dg.AssetSpec(
        "events", partitions_def=DAYS, metadata={"partlake/retention": {"cascade": True}}
    )
    with pytest.raises(PartlakeConfigError, match="a cascade cannot reach it"):
        check_assets([source])
    # A source may say what its own system keeps: its retired partitions are not read.
    kept = partlake_source(
        "events", partitions_def=DAYS, metadata={"partlake/retention": {"keep_last": 5}}
    )
    assert check_assets([kept])["events"].retention is not None


def test_keep_last_counts_back_from_the_newest_partition_present() -> None:
    rule = retention_of({"keep_last": 3}, DAYS, _columns(DAYS), asset_name="a")
    assert rule is not None
    present = ["2024-01-02", "2024-01-05", "2024-01-07"]
    found = retired_keys(rule, _columns(DAYS), present)
    assert found is not None and found.rule == "date before 2024-01-05T00:00:00+00:00"
    retired = [k for k in DAYS.get_partition_keys() if found.contains(k)]
    assert retired == ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
    assert retired_keys(rule, _columns(DAYS), []) is None  # an empty table retires nothing


def test_a_condition_over_the_partition_values_of_several_dimensions() -> None:
    columns = _columns(REGIONS)
    rule = retention_of(
        {"condition": "region = 'us' AND date < '2024-01-03'"},
        REGIONS,
        columns,
        asset_name="a",
    )
    assert rule is not None
    found = retired_keys(rule, columns, [])
    assert found is not None
    keys = ["2024-01-01|us", "2024-01-02|us", "2024-01-03|us", "2024-01-01|eu"]
    assert [k for k in keys if found.contains(k)] == ["2024-01-01|us", "2024-01-02|us"]


def _columns(partitions_def: dg.PartitionsDefinition) -> list:  # type: ignore[type-arg]
    return dimension_columns(partitions_def, {}, asset_name="a")


# -- the planner over plain data -----------------------------------------------------------------

D1, D2, D3 = "2024-01-01", "2024-01-02", "2024-01-03"


def _same(key: str | None) -> list[str | None]:
    return [key]


def _world(*, cascade: bool) -> tuple[list[PlanAsset], dict, dict]:  # type: ignore[type-arg]
    """src -> raw (retires D1) -> daily and private (private cascades): every partition
    written; then raw's D1 removed by the retention."""
    edge = Dependency("src", _same, _same, identity=True)
    assets = [
        PlanAsset("src", is_source=True),
        PlanAsset("raw", deps=(edge,)),
        PlanAsset("daily", deps=(Dependency("raw", _same, _same, identity=True),)),
        PlanAsset("private", deps=(Dependency("raw", _same, _same, identity=True),)),
    ]
    states = {n: {d: PartitionState(100) for d in (D1, D2, D3)} for n in ("src", "raw")}
    states |= {n: {d: PartitionState(200) for d in (D1, D2, D3)} for n in ("daily", "private")}
    records = {
        "raw": {d: Record(None, 100, {"src": {d: 100}}) for d in (D1, D2, D3)},
        "daily": {d: Record(None, 200, {"raw": {d: 100}}) for d in (D1, D2, D3)},
        "private": {d: Record(None, 200, {"raw": {d: 100}}) for d in (D1, D2, D3)},
    }
    del states["raw"][D1]  # removed by `partlake maintain --retention`
    if cascade:
        del states["private"][D1]
    return assets, states, records


def _retired(assets: list[PlanAsset], *, cascade: bool) -> dict[str, Retirement]:
    own = {"raw": Retirement("date before D2", lambda k: k == D1)}
    return cascaded(assets, own, {"private"} if cascade else set())


def test_a_removed_retired_partition_is_neither_missing_nor_stale_downstream() -> None:
    assets, states, records = _world(cascade=False)
    without = plan(PlanInput(assets, states, records))
    # Without the rule, the removal is a change outside partlake: rebuilt, and downstream stale.
    assert {(i.asset, i.partition, i.reason) for i in without.items} >= {
        ("raw", D1, "out_of_band"),
        ("daily", D1, "upstream_changed"),
    }
    retired = _retired(assets, cascade=False)
    assert plan(PlanInput(assets, states, records, retired=retired)).items == ()


def test_a_cascading_downstream_forgets_too() -> None:
    assets, states, records = _world(cascade=True)
    retired = _retired(assets, cascade=True)
    assert retired["private"].contains(D1) and not retired["private"].contains(D2)
    assert "daily" not in retired
    assert plan(PlanInput(assets, states, records, retired=retired)).items == ()
    # A new day of raw is due in every reader, a retired one in none.
    states["src"]["2024-01-04"] = PartitionState(300)
    found = plan(PlanInput(assets, states, records, retired=retired))
    assert [(i.asset, i.partition, i.reason) for i in found.items] == [
        ("raw", "2024-01-04", "missing"),
        ("daily", "2024-01-04", "missing"),
        ("private", "2024-01-04", "missing"),
    ]


def test_a_new_write_into_a_retired_range_is_a_warning_not_a_rebuild() -> None:
    assets, states, records = _world(cascade=False)
    retired = _retired(assets, cascade=False)
    before = PlanInput(assets, states, records, retired=retired)
    states = {n: dict(v) for n, v in states.items()}
    states["src"][D1] = PartitionState(500)  # the source system wrote the retired day again
    after = PlanInput(assets, states, records, retired=retired)
    result = plan(after)
    assert result.items == ()
    assert result.retired_writes == ("src[2024-01-01]",)
    incremental = replan(full(before), after, changed_partitions(before, after))
    assert incremental.incremental and incremental.plan.retired_writes == result.retired_writes


def test_a_stale_partition_that_turns_retired_is_reported_passed_and_retired() -> None:
    """The UI's word for it: the `partlake_fresh` result of a partition that was stale and is
    retired now passes, saying "retired" and by which rule (`freshness.report`)."""
    from dagster import AssetKey, DagsterInstance

    from dagster_partlake.freshness.report import FreshnessReporter
    from dagster_partlake.planning.definition import Plan, StalePartition
    from dagster_partlake.planning.session import PlanResult

    key = AssetKey("raw")
    item = StalePartition("raw", D1, "upstream_changed", ("src[2024-01-01]",))
    reporter = FreshnessReporter(limit=None)
    retired = {"raw": Retirement("date before 2024-01-02", lambda k: k == D1)}
    with DagsterInstance.ephemeral() as instance:
        was = PlanResult(Plan((item,), ("raw",)), PlanInput([], {}, {}), {}, 0.0)
        first = reporter.report(instance, was, {"raw": {D1: item}}, {"raw": key})
        now = PlanResult(Plan((), ("raw",)), PlanInput([], {}, {}, retired=retired), {}, 0.0)
        second = reporter.report(instance, now, {"raw": {}}, {"raw": key})
    assert [(e.partition, e.passed) for e in first.evaluations] == [(D1, False)]
    [evaluation] = second.evaluations
    assert evaluation.passed and evaluation.partition == D1
    assert evaluation.description == "retired (date before 2024-01-02): never rebuilt"
    assert evaluation.metadata["partlake/retired"].value == "date before 2024-01-02"
