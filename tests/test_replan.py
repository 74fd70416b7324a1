"""Property test: incremental planning (`replan`) gives exactly the full plan and the oracle's
answer after every event of random worlds (`tests.test_planner_property`); `make
bench-exactness` runs the same check over 10,000 worlds."""

from __future__ import annotations

from hypothesis import given, settings

from dagster_partlake.planner import plan
from dagster_partlake.replan import PlanMemo, changed_partitions, full, replan
from tests.test_planner_property import Event, World, apply, check_shape, compare, worlds


def replay(world: World, events: list[Event]) -> tuple[int, int]:
    """Apply `events` one by one, planning incrementally after each; (plans, incremental plans).

    Raises:
        AssertionError: an incremental plan differs from the full plan or the oracle.
    """
    memo: PlanMemo = full(world.plan_input())
    incremental = 0
    for event in events:
        apply(world, event)
        inputs = world.plan_input()
        memo = replan(memo, inputs, changed_partitions(memo.inputs, inputs))
        incremental += memo.incremental
        assert memo.plan.items == plan(inputs).items, event
        check_shape(memo.plan, world)
        compare(memo.plan, world)
    return len(events), incremental


@settings(max_examples=1500, deadline=None)
@given(worlds())
def test_incremental_plans_equal_the_full_plan_and_the_oracle(
    case: tuple[World, list[Event]],
) -> None:
    world, events = case
    replay(world, events)


def test_a_plan_with_nothing_changed_keeps_every_verdict() -> None:
    from tests.test_planner_property import Spec

    world = World(
        {"s": Spec("s", "daily", (), True), "m": Spec("m", "monthly", ("s",), False)},
        {"s": None, "m": "v1"},
    )
    apply(world, ("source_edit", 0, 0))
    memo = full(world.plan_input())
    again = replan(memo, world.plan_input(), {})
    assert again.incremental and again.plan.items == memo.plan.items != ()
    # A change to one day re-judges its month only, and the write makes it fresh.
    world.write("m", "2024-01")
    inputs = world.plan_input()
    changed = changed_partitions(memo.inputs, inputs)
    assert changed == {"m": {"2024-01"}}
    assert replan(memo, inputs, changed).plan.items == ()
