"""Property tests: `plan` equals an independent brute-force oracle of its module docstring.

The oracle enumerates every partition key of every asset (the universes are tiny) and defines
staleness recursively per (asset, key), memoized, instead of the planner's single topological
pass over candidate sets. A simulated world (storage states + write records, logical clock)
is driven by random events: source edits/deletions, writes, failed writes, code changes and
out-of-band edits.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_partlake.columnar.interner import KEYS
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.planning.planner import (
    Dependency,
    Key,
    PartitionState,
    Plan,
    PlanAsset,
    PlanInput,
    Record,
    plan,
)
from dagster_partlake.planning.state_maps import RecordMap, StateMap

DAYS = ("2024-01-30", "2024-01-31", "2024-02-01", "2024-02-02", "2024-02-03", "2024-02-04")
# '2024-03' has no days: an "empty future" month that must never be due.
MONTHS = ("2024-01", "2024-02", "2024-03")
REGIONS = ("eu", "us")
UNIVERSE: dict[str, tuple[Key, ...]] = {
    "daily": DAYS,
    "monthly": MONTHS,
    "daily_region": tuple(f"{d}|{r}" for d in DAYS for r in REGIONS),
    "monthly_region": tuple(f"{m}|{r}" for m in MONTHS for r in REGIONS),
    "none": (None,),
}
# Downstream schemes an upstream scheme may feed (only mappings that make sense).
FEEDS: dict[str, set[str]] = {
    "daily": {"daily", "monthly", "none"},
    "monthly": {"monthly", "none"},
    "daily_region": {"daily_region", "monthly_region", "none"},
    "monthly_region": {"monthly_region", "none"},
    "none": {"none"},
}
SOURCE_SCHEMES = ("daily", "daily", "daily_region", "daily_region", "monthly", "none")
CODE_VERSIONS: tuple[str | None, ...] = (None, "v1", "v2")
Verdict = tuple[str, tuple[str, ...]]  # (reason, sorted because)


def reads(up_scheme: str, down_scheme: str, key: Key) -> tuple[Key, ...]:
    """The upstream keys a downstream partition reads (the partition mapping)."""
    if down_scheme == "none":  # unpartitioned downstream reads everything upstream
        return UNIVERSE[up_scheme]
    if up_scheme == down_scheme:
        return (key,)
    assert key is not None
    if (up_scheme, down_scheme) == ("daily", "monthly"):
        return tuple(d for d in DAYS if d[:7] == key)
    month, region = key.split("|")
    return tuple(f"{d}|{region}" for d in DAYS if d[:7] == month)


def previous(scheme: str, key: Key) -> tuple[Key, ...]:
    """The previous time partition of a key (same region), none for the first."""
    assert key is not None
    universe = UNIVERSE[scheme]
    if "|" in key:
        window, region = key.split("|")
        windows = [k.split("|")[0] for k in universe if k.endswith("|" + region)]
        i = windows.index(window)
        return (f"{windows[i - 1]}|{region}",) if i > 0 else ()
    i = universe.index(key)
    return (universe[i - 1],) if i > 0 else ()


@dataclass(frozen=True)
class Spec:
    name: str
    scheme: str
    deps: tuple[str, ...]
    is_source: bool
    # A dependency on its own previous time partition: "read" (an input, consumed like any
    # other) or "order" (order-only: merge and scd2 apply their partitions in time order).
    self_dep: str | None = None


@dataclass
class World:
    specs: dict[str, Spec]  # insertion order is a topological order
    code: dict[str, str | None]
    states: dict[str, dict[Key, PartitionState]] = field(default_factory=dict)
    records: dict[str, dict[Key, Record]] = field(default_factory=dict)
    unreadable: set[str] = field(default_factory=set)  # tables whose log cannot be read
    clock: int = 0

    def tick(self) -> int:
        self.clock += 1
        return self.clock * 1000

    def reads_of(self, name: str, dep: str, key: Key) -> tuple[Key, ...]:
        return reads(self.specs[dep].scheme, self.specs[name].scheme, key)

    def write(self, name: str, key: Key) -> None:
        """A successful materialization; it has no rows when some dependency has no data."""
        now = self.tick()
        consumed: dict[str, dict[Key, int]] = {}
        for d in self.specs[name].deps:  # what was read: mapped upstream partitions with data
            up = self.states.get(d, {})
            consumed[d] = {u: up[u].last_updated for u in self.reads_of(name, d, key) if u in up}
        has_rows = all(consumed.values())
        if self.specs[name].self_dep == "read":  # its previous partition, if it has data
            own = self.states.get(name, {})
            prev = previous(self.specs[name].scheme, key)
            consumed[name] = {u: own[u].last_updated for u in prev if u in own}
        self.records.setdefault(name, {})[key] = Record(
            self.code[name], now if has_rows else None, consumed
        )
        if has_rows:
            self.states.setdefault(name, {})[key] = PartitionState(now)
        else:
            self.states.get(name, {}).pop(key, None)

    def plan_input(self) -> PlanInput:
        assets = [
            PlanAsset(
                s.name,
                tuple(self.dependency(s.name, d) for d in s.deps) + self.self_dependency(s),
                self.code[s.name],
                s.is_source,
                s.scheme != "none",
            )
            for s in self.specs.values()
        ]
        # As the gatherer does: an unreadable table contributes no state and no records.
        readable = {n: v for n, v in self.states.items() if n not in self.unreadable}
        records = {n: v for n, v in self.records.items() if n not in self.unreadable}
        roots = {
            s.name: UNIVERSE[s.scheme]
            for s in self.specs.values()
            if not s.is_source and not s.deps and s.scheme != "none"
        }  # a self-dependency does not make an asset any less of a root
        return PlanInput(
            assets,
            copy.deepcopy(readable),
            copy.deepcopy(records),
            partition_keys=roots,
            unreadable={n: f"{n} is unreadable" for n in self.unreadable},
        )

    def columnar_input(self) -> PlanInput:
        """`plan_input()` as a session builds it from tables: column-wise maps over interned
        keys (`StateMap`, `RecordMap` with `IntMap` consumption), and the dependencies between
        assets of one scheme marked identity (so `plan` takes its bulk pass)."""
        inputs = self.plan_input()
        assets = [
            replace(
                a,
                deps=tuple(
                    replace(d, identity=True)
                    if d.upstream != a.name
                    and self.specs[d.upstream].scheme == self.specs[a.name].scheme
                    else d
                    for d in a.deps
                ),
            )
            for a in inputs.assets
        ]
        return replace(
            inputs,
            assets=assets,
            states={n: StateMap.build(v.items()) for n, v in inputs.states.items()},
            records={n: record_map(v) for n, v in inputs.records.items()},
        )

    def self_dependency(self, spec: Spec) -> tuple[Dependency, ...]:
        if spec.self_dep is None:
            return ()
        universe = UNIVERSE[spec.scheme]

        def up(key: Key) -> tuple[Key, ...]:
            return previous(spec.scheme, key)

        def down(u: Key) -> list[Key]:
            return [k for k in universe if u in previous(spec.scheme, k)]

        return (Dependency(spec.name, up, down, order_only=spec.self_dep == "order"),)

    def dependency(self, name: str, dep: str) -> Dependency:
        down_universe = UNIVERSE[self.specs[name].scheme]

        def upstream_keys(key: Key) -> tuple[Key, ...]:
            return self.reads_of(name, dep, key)

        def downstream_keys(u: Key) -> list[Key]:  # the inverse, by enumeration
            return [k for k in down_universe if u in self.reads_of(name, dep, k)]

        return Dependency(dep, upstream_keys, downstream_keys)


def render(asset: str, key: Key) -> str:
    return asset if key is None else f"{asset}[{key}]"


def held(world: World) -> dict[str, set[str]]:
    """Per unreadable table, the managed assets it holds back: itself and all downstream."""

    def depends_on(name: str, table: str) -> bool:
        return name == table or any(depends_on(d, table) for d in world.specs[name].deps)

    return {
        table: {n for n, s in world.specs.items() if not s.is_source and depends_on(n, table)}
        for table in world.unreadable
    }


def oracle(world: World) -> dict[tuple[str, Key], Verdict]:
    """Every stale (asset, key) of the whole key universe, with (reason, because); assets held
    back by an unreadable table are never judged."""
    states, records = world.states, world.records
    not_judged = set().union(*held(world).values())

    def last_updated(asset: str, key: Key) -> int | None:
        state = states.get(asset, {}).get(key)
        return None if state is None else state.last_updated

    def has_data(asset: str, key: Key) -> bool:  # data(X): has data or is stale itself
        return key in states.get(asset, {}) or verdict(asset, key) is not None

    @cache
    def verdict(asset: str, key: Key) -> Verdict | None:
        spec = world.specs[asset]
        if spec.is_source or asset in not_judged:  # sources are never stale
            return None
        record = records.get(asset, {}).get(key)
        mapped = {d: world.reads_of(asset, d, key) for d in spec.deps}
        prev = previous(spec.scheme, key) if spec.self_dep else ()
        if record is None:
            with_data = {d: [u for u in us if has_data(d, u)] for d, us in mapped.items()}
            # Candidate: has data, or is mapped from data of some upstream, or belongs to an
            # asset without dependencies (every partition that exists is due until written).
            candidate = key in states.get(asset, {}) or any(with_data.values()) or not spec.deps
            if not (candidate and all(with_data.values())):
                return None
            # Its own previous partition never keeps it from being due; listed when it has data.
            because = [render(d, u) for d, us in with_data.items() for u in us]
            because += [render(asset, u) for u in prev if has_data(asset, u)]
            return "missing", tuple(sorted(because))
        changed = sorted(
            render(d, u)
            for d, us in mapped.items()
            for u in us
            if verdict(d, u) is not None  # stale upstream, or appeared/disappeared/rewritten
            or last_updated(d, u) != record.consumed.get(d, {}).get(u)
        )
        for u in prev:
            if spec.self_dep == "read":
                moved = last_updated(asset, u) != record.consumed.get(asset, {}).get(u)
            else:  # order-only: the previous partition was written after this one
                now, written = last_updated(asset, u), record.written_last_updated
                moved = now is not None and written is not None and now > written
            if verdict(asset, u) is not None or moved:
                changed = sorted([*changed, render(asset, u)])
        own = last_updated(asset, key)
        # AMBIGUITY: the docstring states `because` for `missing` and `upstream_changed` only.
        # We read "reason = the first that applies" as choosing the reason alone, so `because`
        # lists the changed upstream partitions whatever the reason (possibly empty).
        if record.code_version != world.code[asset]:
            return "code_changed", tuple(changed)
        if own != record.written_last_updated:
            return "out_of_band", tuple(changed)
        if changed:
            return "upstream_changed", tuple(changed)
        return None

    return {
        (name, key): v
        for name, spec in world.specs.items()
        for key in UNIVERSE[spec.scheme]
        if (v := verdict(name, key)) is not None
    }


def oracle_order(world: World) -> list[tuple[str, Key]]:
    """The oracle's stale partitions, upstream assets first."""
    rank = {name: i for i, name in enumerate(world.specs)}
    return sorted(oracle(world), key=lambda p: (rank[p[0]], p[1] or ""))


Event = tuple[str, int, int]
KINDS = (
    "source_edit", "source_edit", "source_delete", "write", "write_stale", "write_stale",
    "write_stale", "write_plan_prefix", "failed_write", "code_change", "code_change", "oob_edit",
    "oob_edit", "oob_delete", "damage", "repair",
)  # fmt: skip


def apply(world: World, event: Event) -> None:
    kind, i, j = event
    if kind == "damage":  # any table's log becomes unreadable (data and records stay)
        world.unreadable.add(list(world.specs)[i % len(world.specs)])
        return
    if kind == "repair":
        world.unreadable.discard(list(world.specs)[i % len(world.specs)])
        return
    sources = [s for s in world.specs.values() if s.is_source]
    managed = [s for s in world.specs.values() if not s.is_source]
    pool = sources if kind.startswith("source") else managed
    spec = pool[i % len(pool)]
    key = UNIVERSE[spec.scheme][j % len(UNIVERSE[spec.scheme])]
    if kind == "write":
        world.write(spec.name, key)
        return
    if kind in ("write_stale", "write_plan_prefix"):  # steer the world towards partly fresh
        stale = oracle_order(world)
        if not stale:
            world.tick()
            return
        chosen = [stale[i % len(stale)]] if kind == "write_stale" else stale[:i]
        for name, k in chosen:
            world.write(name, k)
        return
    now = world.tick()
    if kind == "code_change":
        world.code[spec.name] = CODE_VERSIONS[j % len(CODE_VERSIONS)]
    elif kind in ("source_edit", "oob_edit"):  # new data without a record change
        world.states.setdefault(spec.name, {})[key] = PartitionState(now)
    elif kind in ("source_delete", "oob_delete"):
        world.states.get(spec.name, {}).pop(key, None)
    # failed_write: nothing changes but the clock


@st.composite
def worlds(draw: st.DrawFn) -> tuple[World, list[Event]]:
    n_sources = draw(st.integers(1, 2))
    n_total = draw(st.integers(max(3, n_sources + 1), 6))
    names = draw(st.permutations("abcdef"))  # names unrelated to topological order
    specs: list[Spec] = []
    for i in range(n_total):
        if i < n_sources:
            specs.append(Spec(names[i], draw(st.sampled_from(SOURCE_SCHEMES)), (), True))
            continue
        # A managed asset without upstream assets produces its own data (e.g. from an API).
        min_ups = draw(st.sampled_from([0, 1, 1, 1]))
        ups = draw(st.lists(st.sampled_from(list(specs)), min_size=min_ups, max_size=min(2, i),
                            unique_by=lambda s: s.name))  # fmt: skip
        if not ups:
            scheme = draw(st.sampled_from(SOURCE_SCHEMES))
        else:
            partitioned = sorted(set.intersection(*(FEEDS[u.scheme] for u in ups)) - {"none"})
            scheme = draw(st.sampled_from([*partitioned, *partitioned, "none"]))  # partitioned
        self_dep = None
        if scheme != "none":
            self_dep = draw(st.sampled_from([None, None, "read", "order"]))
        specs.append(Spec(names[i], scheme, tuple(u.name for u in ups), False, self_dep))
    code = {s.name: draw(st.sampled_from(CODE_VERSIONS)) for s in specs}
    event = st.tuples(st.sampled_from(KINDS), st.integers(0, 15), st.integers(0, 15))
    events = draw(st.lists(event, min_size=5, max_size=40))
    return World({s.name: s for s in specs}, code), events


def record_map(records: dict[Key, Record]) -> RecordMap:
    """Records as a table's commits give them: one source per write, consumption as `IntMap`s."""
    sources = tuple(
        replace(
            r,
            written_last_updated=None,
            consumed={u: IntMap.build(KEYS, c.items()) for u, c in r.consumed.items()},
        )
        for r in records.values()
    )
    keys = list(records)
    return RecordMap(
        sources,
        IntMap.build(KEYS, zip(keys, range(len(keys)), strict=True)),
        IntMap.build(KEYS, ((k, r.written_last_updated) for k, r in records.items())),
    )


def check_shape(result: Plan, world: World) -> None:
    """Topological order, no sources, no duplicate partitions."""
    for n, item in enumerate(result.items):
        spec = world.specs[item.asset]
        assert not spec.is_source, item
        for dep in spec.deps:  # no item of an upstream asset may come after this one
            assert all(later.asset != dep for later in result.items[n:]), (item, dep)
    pairs = [(i.asset, i.partition) for i in result.items]
    assert len(pairs) == len(set(pairs)), pairs


def compare(result: Plan, world: World) -> None:
    assert {u.asset: set(u.held) for u in result.unreadable} == held(world)
    expected = oracle(world)
    got = {(i.asset, i.partition): (i.reason, i.because) for i in result.items}
    # Complete and minimal: nothing fresh listed, nothing stale missed, same reasons.
    assert {p: v[0] for p, v in got.items()} == {p: v[0] for p, v in expected.items()}
    # Same upstream partitions; compared sorted (the docstring fixes no order).
    assert {p: (v[0], tuple(sorted(v[1]))) for p, v in got.items()} == expected


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_plan_equals_oracle_after_every_event(case: tuple[World, list[Event]]) -> None:
    world, events = case
    for event in [("failed_write", 0, 0), *events]:
        apply(world, event)
        result = plan(world.plan_input())
        check_shape(result, world)
        compare(result, world)
        assert plan(world.columnar_input()).items == result.items


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_running_the_whole_plan_leaves_nothing_stale(case: tuple[World, list[Event]]) -> None:
    world, events = case
    for event in events:
        apply(world, event)
    first = plan(world.plan_input())
    for item in first.items:  # in plan order, each write sees the world as it is now
        world.write(item.asset, item.partition)
    after = plan(world.plan_input())
    assert after.items == (), (first.items, after.items)
    assert oracle(world) == {}
    # Repaired tables: what they held back is judged again, and one more plan settles it.
    world.unreadable.clear()
    for item in plan(world.plan_input()).items:
        world.write(item.asset, item.partition)
    assert plan(world.plan_input()).items == ()


def test_oracle_sanity() -> None:
    """The oracle itself on a hand-checked history, and the planner agreeing at each step."""
    world = World(
        {"s": Spec("s", "daily", (), True), "m": Spec("m", "monthly", ("s",), False)},
        {"s": None, "m": "v1"},
    )
    apply(world, ("source_edit", 0, 0))  # s[2024-01-30] gets data
    assert oracle(world) == {("m", "2024-01"): ("missing", ("s[2024-01-30]",))}
    compare(plan(world.plan_input()), world)
    world.write("m", "2024-01")
    assert oracle(world) == {}
    compare(plan(world.plan_input()), world)
    apply(world, ("source_edit", 0, 1))  # a new day of the same month
    assert oracle(world) == {("m", "2024-01"): ("upstream_changed", ("s[2024-01-31]",))}
    compare(plan(world.plan_input()), world)
    world.code["m"] = "v2"
    apply(world, ("oob_edit", 0, 0))  # also edited out of band: code_changed comes first
    assert oracle(world) == {("m", "2024-01"): ("code_changed", ("s[2024-01-31]",))}
    compare(plan(world.plan_input()), world)
