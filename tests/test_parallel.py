"""Parallel partition runs under the Dagster pool limit, on a real on-disk Dagster instance."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, instance_for_test

from dagster_partlake.delta.state import StateCache
from dagster_partlake.freshness.check import CHECK_OP_SUFFIX as FRESH_OP_SUFFIX
from dagster_partlake.gates.checks import CHECK_OP_SUFFIX
from dagster_partlake.orchestration.pools import POOL
from dagster_partlake.orchestration.runner import Outcome, refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan

pytestmark = pytest.mark.spark

# Four partitions that no single Dagster partition range covers: four runs of
# clean_events + daily_region_stats, then one run of monthly_region_stats.
# The lakehouse group only: the example's SQL models (tested in test_example_sql.py) would add
# runs that are not what these tests count, and minutes of CI time.
LAKEHOUSE = ["raw_events", "clean_events", "daily_region_stats", "monthly_region_stats"]
SCATTERED = [("2024-01-01", "eu"), ("2024-01-03", "eu"), ("2024-01-02", "us"), ("2024-01-04", "us")]


@pytest.fixture
def pooled_instance() -> Iterator[DagsterInstance]:
    """An on-disk instance (pools need a SQL event log) with the demo's pool default: 2."""
    overrides = {"concurrency": {"pools": {"granularity": "op", "default_limit": 2}}}
    with instance_for_test(overrides=overrides) as instance:
        yield instance


@pytest.fixture
def example(spark, lake: Path, pooled_instance: DagsterInstance, monkeypatch) -> LakeGraph:
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    from definitions import defs
    from definitions.ingest import write_partition

    for day in range(1, 6):
        for region in ["eu", "us"]:
            write_partition(dt.date(2024, 1, day), region, 100, root=str(lake))
    graph = LakeGraph(defs)
    assert all(o.ok for o in refresh(graph, pooled_instance, select=LAKEHOUSE))
    return graph


def rewrite_scattered(lake: Path, seed: int) -> None:
    from definitions.ingest import write_partition

    for date, region in SCATTERED:
        write_partition(dt.date.fromisoformat(date), region, 120, seed=seed, root=str(lake))


def intervals(
    instance: DagsterInstance,
    outcomes: list[Outcome],
    start: DagsterEventType,
    end: DagsterEventType,
) -> list[tuple[float, float]]:
    """(start, end) times of every asset step (or run) of the outcomes' runs, from the event log.

    The check steps (gates, partlake_fresh) are left out: they only read what the asset step
    logged.
    """
    result = []
    for run_id in sorted({o.run_id for o in outcomes if o.run_id}):
        times: dict[str | None, dict[DagsterEventType, float]] = {}
        for entry in instance.all_logs(run_id, of_type={start, end}):
            assert entry.dagster_event is not None
            if (entry.step_key or "").endswith((CHECK_OP_SUFFIX, FRESH_OP_SUFFIX)):
                continue
            times.setdefault(entry.step_key, {})[entry.dagster_event.event_type] = entry.timestamp
        result.extend((t[start], t[end]) for t in times.values())
    return result


def no_slot_held(instance: DagsterInstance) -> bool:
    info = instance.event_log_storage.get_concurrency_info(POOL)
    return not info.claimed_slots and not info.pending_steps


def most_at_once(spans: list[tuple[float, float]]) -> int:
    # An end sorts before a start at the same instant: touching spans do not overlap.
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def test_runs_go_in_parallel_up_to_the_pool_limit(
    example: LakeGraph, lake: Path, pooled_instance: DagsterInstance
) -> None:
    rewrite_scattered(lake, seed=11)
    # As many runs at once as the pool allows: 2.
    outcomes = refresh(example, pooled_instance, select=LAKEHOUSE)
    assert all(o.ok for o in outcomes)
    assert {(o.asset, o.partition) for o in outcomes} == {
        *((a, f"{d}|{r}") for a in ("clean_events", "daily_region_stats") for d, r in SCATTERED),
        ("monthly_region_stats", "2024-01|eu"),
        ("monthly_region_stats", "2024-01|us"),
    }
    assert len({o.run_id for o in outcomes}) == 5
    steps = intervals(
        pooled_instance, outcomes, DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS
    )
    assert len(steps) == 4 * 2 + 1  # the monthly run covers both regions in one step
    assert most_at_once(steps) == 2
    assert no_slot_held(pooled_instance)
    # Each run's check step found the results its own write logged, though another run wrote
    # the same asset at the same time: every gate was evaluated once per run, on the batch.
    for run_id in {o.run_id for o in outcomes if o.asset == "clean_events"}:
        evaluations = [
            entry.dagster_event.event_specific_data
            for entry in pooled_instance.all_logs(
                run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
            )
            if entry.dagster_event is not None
            and entry.dagster_event.event_specific_data.asset_key.path == ["clean_events"]
            # The gates; partlake_fresh says freshness per partition, not about the batch.
            and entry.dagster_event.event_specific_data.check_name != "partlake_fresh"
        ]
        names = [e.check_name for e in evaluations]
        assert len(names) == len(set(names)) == 5
        assert all(e.metadata["partlake/checked"].value < 200 for e in evaluations)
    assert not make_plan(example, StateCache(), select=LAKEHOUSE).plan


def test_more_runs_than_pool_slots_wait_for_a_slot(
    example: LakeGraph, lake: Path, pooled_instance: DagsterInstance
) -> None:
    # An operator narrows the pool (as `dagster instance concurrency set partlake 1` does).
    pooled_instance.event_log_storage.set_concurrency_slots(POOL, 1)
    rewrite_scattered(lake, seed=12)
    # The first level is enough to see runs wait: one run per rewritten partition.
    first_level = ["raw_events", "clean_events"]
    outcomes = refresh(example, pooled_instance, max_parallel=4, select=first_level)
    assert all(o.ok for o in outcomes) and len(outcomes) == len(SCATTERED)
    runs = intervals(
        pooled_instance, outcomes, DagsterEventType.RUN_START, DagsterEventType.RUN_SUCCESS
    )
    steps = intervals(
        pooled_instance, outcomes, DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS
    )
    assert most_at_once(runs) >= 2  # several runs were in flight together...
    assert most_at_once(steps) == 1  # ...but their steps took the one slot in turns
    assert no_slot_held(pooled_instance)
    assert not make_plan(example, StateCache(), select=first_level).plan
