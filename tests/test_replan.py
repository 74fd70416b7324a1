"""Property test: incremental planning (`replan`) gives exactly the full plan and the oracle's
answer after every event of random worlds (`tests.test_planner_property`), on both of the
planner's paths; `make bench-exactness` runs the same check over 100,000 worlds."""

from __future__ import annotations

from hypothesis import given, settings

from dagster_partlake.planning.planner import plan
from dagster_partlake.planning.replan import PlanMemo, changed_partitions, full, replan
from tests.test_planner_property import Event, World, apply, check_shape, compare, worlds


def replay(world: World, events: list[Event]) -> tuple[int, int]:
    """Apply `events` one by one, planning incrementally after each, on both of the planner's
    paths (plain dicts judged one partition at a time, and column-wise maps judged in bulk where
    that applies); (plans, incremental plans of the first).

    Raises:
        AssertionError: an incremental plan differs from the full plan or the oracle.
    """
    memo: PlanMemo = full(world.plan_input())
    in_bulk: PlanMemo = full(world.columnar_input())
    incremental = 0
    for event in events:
        apply(world, event)
        inputs = world.plan_input()
        columns = world.columnar_input(inputs)
        memo = replan(memo, inputs, changed_partitions(memo.inputs, inputs))
        in_bulk = replan(in_bulk, columns, changed_partitions(in_bulk.inputs, columns))
        incremental += memo.incremental
        expected = plan(inputs).items
        assert memo.plan.items == expected, event
        assert plan(columns).items == expected, event
        assert in_bulk.plan.items == expected, event
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


def test_plans_over_real_delta_tables_follow_the_new_commits(tmp_path, monkeypatch) -> None:
    """On real Delta tables (the planning benchmark's lake, 1,000 partitions per asset), with
    one state cache as the sensor keeps: each plan after a change follows the new commits
    (only the moved partitions converted and judged) and equals a plan made from scratch."""
    from benchmarks.plan_lake import Layout, build_defs, build_lake, change_source, repair
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning import session as gather
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession, make_plan

    # No partition-by-partition comparison of old and new state: the moved keys are known.
    # (Without the full re-checks the tests do elsewhere; `from_scratch` is the reference.)
    monkeypatch.delenv("PARTLAKE_CHECK_REPLAN")
    compared: list[object] = []
    monkeypatch.setattr(gather, "changed_partitions", lambda *a: compared.append(a) or {})
    moved: dict[str, set] = {}  # what the last plan took as moved, from the followed commits
    changes = PlanningSession._changes

    def spied(self, old, new):  # type: ignore[no-untyped-def]
        found = changes(self, old, new)
        moved.clear()
        moved.update({name: set(move.keys) for name, move in self.moves.items()})
        return found

    monkeypatch.setattr(PlanningSession, "_changes", spied)
    layout, root = Layout(1000), str(tmp_path / "lake")
    build_lake(layout, root)
    # One session, as the sensor keeps one across ticks.
    session = PlanningSession(LakeGraph(build_defs(layout, root, None)), StateCache())

    def from_scratch() -> set[tuple[str, str | None]]:
        fresh = make_plan(LakeGraph(build_defs(layout, root, None)), StateCache())
        return {(i.asset, i.partition) for i in fresh.plan.items}

    assert not session.plan().plan
    for keys in ([layout.old_key(0)], layout.ten_percent(5), [layout.old_key(1)]):
        change_source(root, keys)
        result = session.plan()
        got = {(i.asset, i.partition) for i in result.plan.items}
        assert got == {(a, k) for a in ("a1", "a2", "a3") for k in keys} == from_scratch()
        assert session.memo is not None and session.memo.incremental
        assert moved["src"] == set(keys)  # the keys its new commits touched
        repair(root, keys)  # the runs of a1..a3 commit: fresh again
        assert not session.plan().plan and not from_scratch()
        assert all(moved[a] == set(keys) for a in ("a1", "a2", "a3"))
    assert compared == []


def test_a_new_process_starts_from_the_plan_the_last_one_saved(tmp_path, monkeypatch) -> None:
    """With an on-disk cache (`partlake plan`, `partlake run`), a new process starts from the
    plan the previous one saved when the tables are at the versions it saw, and plans only the
    commits since then; a changed code version or a damaged plan file means a full plan."""
    from benchmarks.plan_lake import Layout, build_defs, build_lake, change_source, repair
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning import replan
    from dagster_partlake.planning import session as gather
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan

    layout, root, persist = Layout(1000), str(tmp_path / "lake"), str(tmp_path / "cache")
    build_lake(layout, root)
    full_plans: list[object] = []
    full = replan.full
    monkeypatch.setattr(gather, "full", lambda inputs: full_plans.append(inputs) or full(inputs))

    def new_process(code_version: str = "1") -> set[tuple[str, str | None]]:
        defs = build_defs(layout, root, None, code_version)
        result = make_plan(LakeGraph(defs), StateCache(persist))
        return {(i.asset, i.partition) for i in result.plan.items}

    def from_scratch(code_version: str = "1") -> set[tuple[str, str | None]]:
        defs = build_defs(layout, root, None, code_version)
        fresh = make_plan(LakeGraph(defs), StateCache())
        return {(i.asset, i.partition) for i in fresh.plan.items}

    assert new_process() == set() and len(full_plans) == 1  # the first: a full plan, saved
    assert new_process() == set() and len(full_plans) == 1  # nothing moved: the saved plan
    keys = [layout.old_key(0)]
    change_source(root, keys)
    expected = {(a, k) for a in ("a1", "a2", "a3") for k in keys}
    assert new_process() == expected and len(full_plans) == 1  # from the saved plan
    assert from_scratch() == expected and len(full_plans) == 2
    repair(root, keys)
    assert new_process() == set() == from_scratch() and len(full_plans) == 3
    # Another code version changes the graph's signature: planned in full.
    changed = new_process("2")
    assert len(changed) == 3 * layout.n and changed == from_scratch("2")
    assert len(full_plans) == 5
    # A damaged plan file: planned in full, then saved again.
    for saved in (tmp_path / "cache").glob("plan-*.plan"):
        saved.write_bytes(b"damaged")
    assert new_process() == set() and len(full_plans) == 6
    assert new_process() == set() and len(full_plans) == 6


def test_partlake_plan_in_new_processes_starts_from_the_saved_plan(tmp_path) -> None:
    """The real `partlake plan`, one process per call, with its on-disk cache: the first call
    saves its plan; the next ones start from it (the subprocesses inherit
    PARTLAKE_CHECK_REPLAN, so a resumed plan is checked against a full plan in the process) and
    show exactly the partitions a source commit made stale, then none after the repair."""
    import json

    from benchmarks.plan_lake import Layout, build_lake, change_source, repair
    from tests.conftest import run_partlake, subprocess_env

    layout, root = Layout(1000), str(tmp_path / "lake")
    build_lake(layout, root)
    cache = tmp_path / "cache"
    env = subprocess_env(PLAN_LAKE_ROOT=root, PARTLAKE_CACHE_DIR=str(cache))
    assert env.get("PARTLAKE_CHECK_REPLAN")

    def plan() -> set[tuple[str, str]]:
        proc = run_partlake("plan", "-m", "tests.plan_lake_defs", "--json", env=env)
        assert proc.returncode == 0, proc.stderr
        return {(i["asset"], i["partition"]) for i in json.loads(proc.stdout)}

    assert plan() == set()
    saved = list(cache.glob("plan-*.plan"))
    assert len(saved) == 1 and len(list(cache.glob("*.state"))) == 4
    assert plan() == set()
    keys = [layout.old_key(0)]
    change_source(root, keys)
    assert plan() == {(a, k) for a in ("a1", "a2", "a3") for k in keys}
    repair(root, keys)
    assert plan() == set()
