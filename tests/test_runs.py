"""Plans become runs, and partition mappings become key maps: pure, no JVM, no storage."""

from __future__ import annotations

import pytest
from dagster import (
    BackfillPolicy,
    DailyPartitionsDefinition,
    DimensionPartitionMapping,
    IdentityPartitionMapping,
    MonthlyPartitionsDefinition,
    MultiPartitionMapping,
    MultiPartitionsDefinition,
    StaticPartitionMapping,
    StaticPartitionsDefinition,
    TimeWindowPartitionMapping,
)

from dagster_partlake.partitions.keys import all_keys
from dagster_partlake.partitions.mappings import key_maps, previous_partition_maps
from dagster_partlake.planning.batches import partition_boxes
from dagster_partlake.planning.planner import (
    Dependency,
    PartitionState,
    PlanAsset,
    PlanInput,
    Record,
    plan,
)
from dagster_partlake.planning.runs import plan_runs

REGIONS = StaticPartitionsDefinition(["eu", "us", "apac"])
DAILY = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-03-01")
MONTHLY = MonthlyPartitionsDefinition(start_date="2024-01", end_date="2024-03", fmt="%Y-%m")
DAILY_REGION = MultiPartitionsDefinition({"date": DAILY, "region": REGIONS})
MONTHLY_REGION = MultiPartitionsDefinition({"month": MONTHLY, "region": REGIONS})
TO_MONTH = MultiPartitionMapping(
    {
        "date": DimensionPartitionMapping("month", TimeWindowPartitionMapping()),
        "region": DimensionPartitionMapping("region", IdentityPartitionMapping()),
    }
)


def dep(name: str, upstream, downstream, mapping=None) -> Dependency:
    mapping = mapping or IdentityPartitionMapping()
    up, down = key_maps(upstream, downstream, mapping)
    return Dependency(name, up, down, identity=upstream == downstream)


# src (daily x region source) -> clean -> daily (same partitions) -> monthly (month x region)
ASSETS = [
    PlanAsset("src", (), None, is_source=True),
    PlanAsset("clean", (dep("src", DAILY_REGION, DAILY_REGION),), "1"),
    PlanAsset("daily", (dep("clean", DAILY_REGION, DAILY_REGION),), "1"),
    PlanAsset("monthly", (dep("daily", DAILY_REGION, MONTHLY_REGION, TO_MONTH),), "1"),
]
DEFS = {
    "src": DAILY_REGION,
    "clean": DAILY_REGION,
    "daily": DAILY_REGION,
    "monthly": MONTHLY_REGION,
}
SINGLE = BackfillPolicy.single_run()


def stale_source(keys: list[str]) -> PlanInput:
    """A source with data in `keys`; nothing managed written yet: all of it is missing."""
    return PlanInput(ASSETS, {"src": {k: PartitionState(1) for k in keys}}, {})


def test_single_run_assets_with_the_same_partitions_share_one_range_run() -> None:
    keys = [f"2024-01-0{d}|{r}" for d in (1, 2, 3) for r in ("eu", "us")]
    runs = plan_runs(
        plan(stale_source(keys)),
        ASSETS,
        DEFS,
        {"clean": SINGLE, "daily": SINGLE, "monthly": SINGLE},
    )
    assert [r.to_json() for r in runs.runs] == [
        {
            "run": 1,
            "assets": ["clean", "daily"],
            "partition_key": None,
            "partition_range": ["2024-01-01|eu", "2024-01-03|us"],
            "partitions": [
                "2024-01-01|eu",
                "2024-01-01|us",
                "2024-01-02|eu",
                "2024-01-02|us",
                "2024-01-03|eu",
                "2024-01-03|us",
            ],  # fmt: skip
            "reasons": ["missing"],
            "waits_for": [],
        },
        {
            "run": 2,
            "assets": ["monthly"],
            "partition_key": None,
            "partition_range": ["2024-01|eu", "2024-01|us"],
            "partitions": ["2024-01|eu", "2024-01|us"],
            "reasons": ["missing"],
            "waits_for": [1],
        },
    ]
    assert [r.number for r in runs.ready] == [1]
    assert runs.runs[0].run_tags() == {
        "partlake/reasons": "missing",
        "partlake/partitions": ", ".join(keys),
        "dagster/asset_partition_range_start": "2024-01-01|eu",
        "dagster/asset_partition_range_end": "2024-01-03|us",
    }
    assert runs.runs[0].describe_partitions() == "2024-01-01|eu...2024-01-03|us (6 partitions)"


def test_without_a_policy_each_partition_is_a_run_and_downstream_waits_for_its_own() -> None:
    runs = plan_runs(plan(stale_source(["2024-01-31|eu", "2024-02-01|eu"])), ASSETS, DEFS, {})
    by_number = {r.number: r for r in runs.runs}
    summary = [(r.assets, r.partition_key, r.waits_for) for r in runs.runs]
    assert summary == [
        (("clean", "daily"), "2024-01-31|eu", ()),
        (("clean", "daily"), "2024-02-01|eu", ()),
        (("monthly",), "2024-01|eu", (1,)),  # January waits for January's day only
        (("monthly",), "2024-02|eu", (2,)),
    ]
    assert by_number[3].run_tags()["partlake/partitions"] == "2024-01|eu"
    # What each run reads of the runs it waits for: `partlake run` starts a run once those
    # partitions are written, even if another asset of their run failed.
    assert [r.reads for r in runs.runs] == [
        (),
        (),
        (("daily", "2024-01-31|eu"),),
        (("daily", "2024-02-01|eu"),),
    ]


def test_blocked_partitions_and_what_depends_on_them_wait() -> None:
    stale = plan(stale_source(["2024-01-31|eu", "2024-02-01|eu"]))
    runs = plan_runs(stale, ASSETS, DEFS, {}, blocked={"clean": {"2024-01-31|eu"}})
    assert [(r.assets, r.partition_key) for r in runs.runs] == [
        (("clean", "daily"), "2024-02-01|eu"),
        (("monthly",), "2024-02|eu"),
    ]
    assert sorted((i.asset, i.partition) for i in runs.waiting) == [
        ("clean", "2024-01-31|eu"),
        ("daily", "2024-01-31|eu"),
        ("monthly", "2024-01|eu"),
    ]


def test_a_range_of_dynamic_partitions_follows_the_instance_order_of_their_keys() -> None:
    """Cutting a single-run range of dynamic partitions reads their keys from the instance
    (it failed with Dagster's "The instance is not available to load partitions")."""
    from dagster import DagsterInstance, DynamicPartitionsDefinition

    stores = DynamicPartitionsDefinition(name="stores")
    assets = [PlanAsset("sales", ())]
    stale = plan(PlanInput(assets, {}, {}, partition_keys={"sales": ["s9", "s8"]}))
    one_run = {"sales": BackfillPolicy.single_run()}
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("stores", ["s9", "s8"])
        runs = plan_runs(
            stale, assets, {"sales": stores}, one_run, dynamic_partitions_store=instance
        )
    assert [(r.keys, r.partition_range) for r in runs.runs] == [(("s9", "s8"), ("s9", "s8"))]


def test_multi_run_policy_chunks_a_box_into_ranges() -> None:
    keys = [f"2024-01-{d:02d}|eu" for d in range(1, 8)]
    runs = plan_runs(
        plan(stale_source(keys)), ASSETS, DEFS, {"clean": BackfillPolicy.multi_run(3)}
    ).runs
    clean = [r for r in runs if "clean" in r.assets]
    assert [r.partition_range or r.partition_key for r in clean] == [
        ("2024-01-01|eu", "2024-01-03|eu"),
        ("2024-01-04|eu", "2024-01-06|eu"),
        "2024-01-07|eu",
    ]


def test_partition_boxes_split_irregular_keys_into_ranges() -> None:
    keys = ["2024-01-01|eu", "2024-01-02|eu", "2024-01-05|eu", "2024-01-01|us", "2024-01-02|us"]
    assert partition_boxes(DAILY_REGION, keys) == [
        ["2024-01-01|eu", "2024-01-02|eu"],
        ["2024-01-05|eu"],
        ["2024-01-01|us", "2024-01-02|us"],
    ]
    full = [f"2024-01-0{d}|{r}" for d in (1, 2) for r in ("eu", "us", "apac")]
    assert partition_boxes(DAILY_REGION, full) == [
        sorted(full, key=lambda k: (k[:10], "euusapac".index(k[11:13])))
    ]
    assert partition_boxes(DAILY, ["2024-01-03", "2024-01-01", "2024-01-02", "2024-02-10"]) == [
        ["2024-01-01", "2024-01-02", "2024-01-03"],
        ["2024-02-10"],
    ]


IDENTITY, TIME = IdentityPartitionMapping(), TimeWindowPartitionMapping()
SWAP = StaticPartitionMapping({"eu": "us", "us": "eu", "apac": "apac"})
FEBRUARY_EU = [f"2024-02-{d:02d}|eu" for d in range(1, 30)]


@pytest.mark.parametrize(
    ("upstream", "downstream", "mapping", "down_key", "up_keys"),
    [
        (DAILY_REGION, DAILY_REGION, IDENTITY, "2024-01-05|us", ["2024-01-05|us"]),
        (DAILY, MONTHLY, TIME, "2024-02", [f"2024-02-{d:02d}" for d in range(1, 30)]),
        (MONTHLY, DAILY, TIME, "2024-02-14", ["2024-02"]),
        (DAILY_REGION, MONTHLY_REGION, TO_MONTH, "2024-02|eu", FEBRUARY_EU),
        (REGIONS, REGIONS, SWAP, "eu", ["us"]),
    ],
)  # fmt: skip
def test_key_maps_are_inverse_of_each_other(upstream, downstream, mapping, down_key, up_keys):
    up, down = key_maps(upstream, downstream, mapping)
    assert list(up(down_key)) == up_keys
    for key in up_keys:
        assert down_key in down(key)
    # Inverse on the whole universe: u in up(d) <=> d in down(u).
    for d in all_keys(downstream):
        for u in up(d):
            assert d in down(u), (d, u)


def test_unpartitioned_sides_map_to_every_key() -> None:
    up, down = key_maps(REGIONS, None, IdentityPartitionMapping())
    assert list(up(None)) == ["eu", "us", "apac"] and list(down("us")) == [None]
    up, down = key_maps(None, REGIONS, IdentityPartitionMapping())
    assert list(up("eu")) == [None] and list(down(None)) == ["eu", "us", "apac"]


def test_a_multi_asset_that_cannot_be_subset_runs_whole_after_what_it_reads() -> None:
    """order_count reads clean, names reads the source: without the unit, order_count would join
    clean's run and names run alone, but Dagster refuses to run half of the multi-asset (here the
    two happen to share one run as siblings of the same key)."""
    assets = [
        *ASSETS[:2],
        PlanAsset("order_count", (dep("clean", DAILY_REGION, DAILY_REGION),), "1"),
        PlanAsset("names", (dep("src", DAILY_REGION, DAILY_REGION),), "1"),
    ]
    stale = plan(PlanInput(assets, {"src": {"2024-01-01|eu": PartitionState(1)}}, {}))
    units = {"order_count": ("order_count", "names"), "names": ("order_count", "names")}
    runs = plan_runs(stale, assets, DEFS | {"order_count": DAILY_REGION, "names": DAILY_REGION}, {})
    assert [(r.assets, r.waits_for) for r in runs.runs] == [(("clean", "order_count", "names"), ())]
    runs = plan_runs(
        stale,
        assets,
        DEFS | {"order_count": DAILY_REGION, "names": DAILY_REGION},
        {},
        units=units,
    )
    assert [(r.assets, r.partition_key, r.waits_for) for r in runs.runs] == [
        (("clean",), "2024-01-01|eu", ()),
        (("order_count", "names"), "2024-01-01|eu", (1,)),
    ]


def test_siblings_dagster_can_run_together_share_one_run() -> None:
    """Assets ready in the same round over the same partitions share a run (one process, one
    Spark, one Dagster run), whatever their policies when that run covers one key; over
    several keys only assets of the same policy do, and other keys or partitions never."""
    assets = [
        *ASSETS,
        PlanAsset("staging", (dep("src", DAILY_REGION, DAILY_REGION),), "1"),  # a sibling of clean
        PlanAsset("merged", (dep("staging", DAILY_REGION, DAILY_REGION),), "1"),
        PlanAsset("summary", (dep("daily", DAILY_REGION, MONTHLY_REGION, TO_MONTH),), "1"),
    ]
    defs = DEFS | {"staging": DAILY_REGION, "merged": DAILY_REGION, "summary": MONTHLY_REGION}
    one = plan(PlanInput(assets, {"src": {"2024-01-02|eu": PartitionState(1)}}, {}))
    # staging is single_run, merged has no policy (a merge kind): one key fits both.
    policies = {a: SINGLE for a in ("clean", "daily", "monthly", "staging", "summary")}
    runs = plan_runs(one, assets, defs, policies)
    assert [(r.assets, r.keys, r.waits_for) for r in runs.runs] == [
        (("clean", "daily", "staging", "merged"), ("2024-01-02|eu",), ()),
        (("monthly", "summary"), ("2024-01|eu",), (1,)),
    ]
    # Two keys: a range for the single_run assets; merged, without a policy, one run per key.
    two = plan(
        PlanInput(
            assets, {"src": {k: PartitionState(1) for k in ("2024-01-02|eu", "2024-01-03|eu")}}, {}
        )
    )
    runs = plan_runs(two, assets, defs, policies)
    assert [(r.assets, r.describe_partitions(), r.waits_for) for r in runs.runs] == [
        (("clean", "daily", "staging"), "2024-01-02|eu...2024-01-03|eu (2 partitions)", ()),
        (("merged",), "2024-01-02|eu", (1,)),
        (("merged",), "2024-01-03|eu", (1,)),
        (("monthly", "summary"), "2024-01|eu", (1,)),
    ]


def applied_in_order(regions: tuple[str, ...]) -> tuple[list[PlanAsset], PlanInput]:
    """clean -> acts, a merge of each day on top of the day before (an order-only dependency on
    its own previous partition), days 1-4 written; day 1 of `regions` rewritten at the source,
    so acts' days 1-4 of those regions are stale, days 2-4 because of the day before."""
    prev, following = previous_partition_maps(DAILY_REGION)  # type: ignore[misc]
    assets = [
        *ASSETS[:2],
        PlanAsset(
            "acts",
            (
                dep("clean", DAILY_REGION, DAILY_REGION),
                Dependency("acts", prev, following, order_only=True),
            ),
            "1",
        ),
    ]
    keys = [f"2024-01-0{d}|{r}" for d in (1, 2, 3, 4) for r in regions]
    states = {
        "src": {k: PartitionState(10 if k.startswith("2024-01-01") else 1) for k in keys},
        "clean": {k: PartitionState(2) for k in keys},
        "acts": {k: PartitionState(2 + int(k[8:10])) for k in keys},
    }
    records = {
        "clean": {k: Record("1", 2, {"src": {k: 1}}) for k in keys},
        "acts": {k: Record("1", 2 + int(k[8:10]), {"clean": {k: 2}}) for k in keys},
    }
    return assets, PlanInput(assets, states, records)


def test_an_in_order_asset_applies_its_later_days_of_a_series_in_one_run() -> None:
    """A merge whose policy allows ranges takes the later days made stale by an old one in one
    run after the day that reads the rewrite (the chain no longer grows with the days); without
    a policy each day is its own run, one after the other; a limit cuts each series."""
    assets, inputs = applied_in_order(("eu",))
    stale = plan(inputs)
    assert [(i.asset, i.partition) for i in stale.items if i.asset == "acts"] == [
        ("acts", f"2024-01-0{d}|eu") for d in (1, 2, 3, 4)
    ]
    defs = DEFS | {"acts": DAILY_REGION}
    runs = plan_runs(stale, assets, defs, {"clean": SINGLE, "acts": SINGLE})
    assert [(r.assets, r.describe_partitions(), r.waits_for) for r in runs.runs] == [
        (("clean", "acts"), "2024-01-01|eu", ()),
        (("acts",), "2024-01-02|eu...2024-01-04|eu (3 partitions)", (1,)),
    ]
    assert runs.runs[1].run_tags()["dagster/asset_partition_range_end"] == "2024-01-04|eu"
    # Without a policy (one partition per run): a chain of runs, one day after the other.
    runs = plan_runs(stale, assets, defs, {"clean": SINGLE})
    assert [(r.partition_key, r.waits_for) for r in runs.runs[1:]] == [
        ("2024-01-02|eu", (1,)),
        ("2024-01-03|eu", (2,)),
        ("2024-01-04|eu", (3,)),
    ]
    # At most two partitions per run: the series is cut, the second part after the first.
    runs = plan_runs(stale, assets, defs, {"clean": SINGLE, "acts": BackfillPolicy.multi_run(2)})
    assert [(r.describe_partitions(), r.waits_for) for r in runs.runs[1:]] == [
        ("2024-01-02|eu...2024-01-03|eu (2 partitions)", (1,)),
        ("2024-01-04|eu", (2,)),
    ]


def test_in_order_series_share_a_range_or_run_apart_under_a_limit() -> None:
    """Two regions rewritten: one range over both series (each applied in its own order); with
    a limit per run, one run per series, never one series in two runs at once."""
    assets, inputs = applied_in_order(("eu", "us"))
    stale = plan(inputs)
    defs = DEFS | {"acts": DAILY_REGION}
    runs = plan_runs(stale, assets, defs, {"clean": SINGLE, "acts": SINGLE})
    assert [(r.assets, r.describe_partitions(), r.waits_for) for r in runs.runs] == [
        (("clean", "acts"), "2024-01-01|eu...2024-01-01|us (2 partitions)", ()),
        (("acts",), "2024-01-02|eu...2024-01-04|us (6 partitions)", (1,)),
    ]
    # Another policy than clean's cannot share clean's range: all four days after it, three
    # per run and series, the fourth after its series' first three.
    runs = plan_runs(stale, assets, defs, {"clean": SINGLE, "acts": BackfillPolicy.multi_run(3)})
    assert [(r.assets, r.describe_partitions(), r.waits_for) for r in runs.runs] == [
        (("clean",), "2024-01-01|eu...2024-01-01|us (2 partitions)", ()),
        (("acts",), "2024-01-01|eu...2024-01-03|eu (3 partitions)", (1,)),
        (("acts",), "2024-01-01|us...2024-01-03|us (3 partitions)", (1,)),
        (("acts",), "2024-01-04|eu", (2,)),
        (("acts",), "2024-01-04|us", (3,)),
    ]
    # A later day whose own input was rewritten too: every day of acts waits for clean's runs,
    # then all run in one range.
    inputs.states["src"]["2024-01-03|eu"] = PartitionState(10)
    runs = plan_runs(plan(inputs), assets, defs, {"clean": SINGLE, "acts": SINGLE})
    assert [(r.assets, r.describe_partitions(), r.waits_for) for r in runs.runs] == [
        (("clean",), "2024-01-01|eu", ()),
        (("clean",), "2024-01-03|eu", ()),
        (("clean",), "2024-01-01|us", ()),
        (("acts",), "2024-01-01|eu...2024-01-04|us (8 partitions)", (1, 2, 3)),
    ]
