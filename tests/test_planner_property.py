"""Property tests: `plan` equals an independent brute-force oracle of its module docstring.

The oracle enumerates every partition key of every asset (the universes are tiny) and defines
staleness recursively per (asset, key), memoized, instead of the planner's single topological
pass over candidate sets. A simulated world (storage states + write records, logical clock)
is driven by random events: source edits/deletions, writes, failed writes, code changes and
out-of-band edits.

Worlds hold assets of every model kind as the planner sees them (`dagster_partlake.kinds.spec`):
`partition` and `table` replace what they write; `tracked` keeps a partition whose recomputed
content is unchanged (its lastUpdated stays, the record says so: early cutoff); `append` and
`merge` keep a partition that got no rows; `merge` and `scd2` apply their time partitions in
order (an order-only dependency on the previous one, as `planning.graph` gives them); an
`append`, `merge` or `scd2` table partitioned otherwise than by its Dagster partitions
(decoupled) has the state its writes recorded, moved for all of them when others changed its
files after partlake's last write (`planning.convert.decoupled_states`), and its readers consume
those recorded states (`DeltaPartitionIOManager._load_decoupled`). A merge's roll back of the
merges of later units (`delta.merge`) is not simulated. Partitions have one to three
dimensions (`date|region/product`, as `partlake_partitions` combines static dimensions), mapped
as `partlake_mapping` maps them (a test checks the two agree); any partitioned asset may read
its own previous time partition.

Every world is checked on both of the planner's paths: one partition at a time over plain dicts
(`plan_input`) and the bulk pass over column-wise maps (`columnar_input`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TypeVar, cast

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
    Retirement,
    plan,
)
from dagster_partlake.planning.retirement import cascaded
from dagster_partlake.planning.state_maps import RecordMap, StateMap

DAYS = ("2024-01-30", "2024-01-31", "2024-02-01", "2024-02-02", "2024-02-03", "2024-02-04")
# '2024-03' has no days: an "empty future" month that must never be due.
MONTHS = ("2024-01", "2024-02", "2024-03")
REGIONS = ("eu", "us")
PRODUCTS = ("hats", "shoes")
# Per partitioned scheme: its time windows and its static dimensions (key: 'window|region/product').
SCHEMES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "daily": (DAYS, ()),
    "monthly": (MONTHS, ()),
    "daily_region": (DAYS, ("region",)),
    "monthly_region": (MONTHS, ("region",)),
    "daily_region_product": (DAYS, ("region", "product")),
    "monthly_region_product": (MONTHS, ("region", "product")),
}
_VALUES = {"region": REGIONS, "product": PRODUCTS}


def _universe(scheme: str) -> tuple[Key, ...]:
    windows, statics = SCHEMES[scheme]
    if not statics:
        return windows
    combined = ["/".join(v) for v in itertools.product(*(_VALUES[d] for d in statics))]
    return tuple(f"{w}|{c}" for w in windows for c in combined)


UNIVERSE: dict[str, tuple[Key, ...]] = {s: _universe(s) for s in SCHEMES} | {"none": (None,)}
# Downstream schemes an upstream scheme may feed (those `partlake_mapping` maps): the same, a
# coarser time, fewer static dimensions (aggregated over), or more (fanned out over).
FEEDS: dict[str, set[str]] = {
    "daily": {"daily", "monthly", "none"},
    "monthly": {"monthly", "none"},
    "daily_region": {
        "daily_region", "monthly_region", "daily_region_product", "monthly_region_product",
        "daily", "none",
    },
    "monthly_region": {"monthly_region", "monthly_region_product", "none"},
    "daily_region_product": {
        "daily_region_product", "monthly_region_product", "daily_region", "monthly_region",
        "daily", "none",
    },
    "monthly_region_product": {"monthly_region_product", "monthly_region", "none"},
    "none": {"none"},
}  # fmt: skip
SOURCE_SCHEMES = (
    "daily", "daily", "daily_region", "daily_region", "daily_region_product", "monthly", "none",
)  # fmt: skip
CODE_VERSIONS: tuple[str | None, ...] = (None, "v1", "v2")
# Model kinds (`kinds.spec`) a managed asset may have, partitioned or not ('tracked' and
# 'partition' need partitions, 'table' refuses them).
PARTITIONED_KINDS = ("partition", "partition", "tracked", "append", "merge", "scd2")
UNPARTITIONED_KINDS = ("table", "table", "append", "merge", "scd2")
ORDERED = ("merge", "scd2")  # `kinds.spec.ORDERED_KINDS`
Verdict = tuple[str, tuple[str, ...]]  # (reason, sorted because)
V = TypeVar("V")
M = TypeVar("M")


def _parts(key: Key) -> tuple[str, dict[str, str]]:
    """A key's time window and its static values by dimension."""
    assert key is not None
    window, _, combined = key.partition("|")
    names = ("region", "product")[: len(combined.split("/"))] if combined else ()
    return window, dict(zip(names, combined.split("/"), strict=True)) if combined else {}


@cache
def reads(up_scheme: str, down_scheme: str, key: Key) -> tuple[Key, ...]:
    """The upstream keys a downstream partition reads (the partition mapping): the same time
    window (or the days of a month), and equal values of the static dimensions both have."""
    if down_scheme == "none":  # unpartitioned downstream reads everything upstream
        return UNIVERSE[up_scheme]
    if up_scheme == down_scheme:
        return (key,)
    window, values = _parts(key)

    def read(u: Key) -> bool:
        u_window, u_values = _parts(u)
        same_time = u_window == window or (len(window) == 7 and u_window[:7] == window)
        return same_time and all(u_values[d] == v for d, v in values.items() if d in u_values)

    return tuple(u for u in UNIVERSE[up_scheme] if read(u))


@cache
def previous(scheme: str, key: Key) -> tuple[Key, ...]:
    """The previous time partition of a key (same static values), none for the first."""
    assert key is not None
    universe = UNIVERSE[scheme]
    if "|" in key:
        window, rest = key.split("|")
        windows = [k.split("|")[0] for k in universe if k.endswith("|" + rest)]
        i = windows.index(window)
        return (f"{windows[i - 1]}|{rest}",) if i > 0 else ()
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
    kind: str = "partition"  # the model kind (`kinds.spec`); "table" when unpartitioned
    # The table is partitioned otherwise than by the Dagster partitions (append, merge, scd2):
    # a partition's state is what its last write recorded (`planning.convert`).
    decoupled: bool = False
    # `partlake/retention`: its oldest `retire` time windows are retired; `cascade`: so is
    # every partition that reads a retired upstream partition.
    retire: int = 0
    cascade: bool = False

    def retires(self, key: Key) -> bool:
        """Whether its own rule retires `key`."""
        if not self.retire or key is None:
            return False
        return SCHEMES[self.scheme][0].index(_parts(key)[0]) < self.retire


@dataclass
class World:
    specs: dict[str, Spec]  # insertion order is a topological order
    code: dict[str, str | None]
    # lastUpdated of the table partitions of sources and of managed assets not decoupled.
    states: dict[str, dict[Key, PartitionState]] = field(default_factory=dict)
    records: dict[str, dict[Key, Record]] = field(default_factory=dict)
    unreadable: set[str] = field(default_factory=set)  # tables whose log cannot be read
    clock: int = 0
    seed: int = 0  # whether a `tracked` recomputation comes out unchanged
    last_commit: dict[str, int] = field(default_factory=dict)  # newest partlake write per table
    touched: dict[str, int] = field(default_factory=dict)  # newest change by others (decoupled)
    memo: dict[object, tuple[list[object], object]] = field(default_factory=dict, repr=False)

    def tick(self) -> int:
        self.clock += 1
        return self.clock * 1000

    def reads_of(self, name: str, dep: str, key: Key) -> tuple[Key, ...]:
        return reads(self.specs[dep].scheme, self.specs[name].scheme, key)

    def read_value(self, asset: str, key: Key) -> int | None:
        """The lastUpdated a write records as consumed of an upstream partition: its files'
        (None: no data), or for a decoupled table what its last write recorded."""
        if self.specs[asset].decoupled:
            record = self.records.get(asset, {}).get(key)
            return None if record is None else record.written_last_updated
        state = self.states.get(asset, {}).get(key)
        return None if state is None else state.last_updated

    def visible_states(self) -> dict[str, dict[Key, PartitionState]]:
        """The partition states the planner is given (`planning.convert`): a decoupled table's
        from its records, every one moved to the time of a change by others after partlake's
        last write."""
        visible = {n: v for n, v in self.states.items() if not self.specs[n].decoupled}
        for name, spec in self.specs.items():
            if not spec.decoupled or name not in self.records:
                continue
            touched = self.touched.get(name, 0)
            moved = touched > self.last_commit.get(name, touched)
            visible[name] = {
                k: PartitionState(touched if moved else r.written_last_updated)
                for k, r in self.records[name].items()
                if r.written_last_updated is not None
            }
        return visible

    def write(self, name: str, key: Key) -> None:
        """A successful materialization; it has no rows when some dependency has no data."""
        now = self.tick()
        spec = self.specs[name]
        consumed: dict[str, dict[Key, int]] = {}
        for d in spec.deps:  # what was read: mapped upstream partitions with data
            found = {u: self.read_value(d, u) for u in self.reads_of(name, d, key)}
            consumed[d] = {u: v for u, v in found.items() if v is not None}
        has_rows = all(consumed.values())
        if spec.self_dep == "read":  # its previous partition, if it has data
            found = {u: self.read_value(name, u) for u in previous(spec.scheme, key)}
            consumed[name] = {u: v for u, v in found.items() if v is not None}
        written = self._land(spec, key, now, has_rows)
        self.records.setdefault(name, {})[key] = Record(self.code[name], written, consumed)
        self.last_commit[name] = now

    def _land(self, spec: Spec, key: Key, now: int, has_rows: bool) -> int | None:
        """What the write does to the partition's files, as its kind says; the lastUpdated it
        records for the partition (None: the partition has no rows)."""
        files = self.states.setdefault(spec.name, {})
        current = files.get(key)
        if spec.decoupled:  # no file names a Dagster partition: each written key is recorded
            return now
        if spec.kind == "tracked" and has_rows and current is not None and self._same(spec, key):
            return current.last_updated  # kept: the recomputed content equals the stored one
        if spec.kind in ("append", "merge") and not has_rows:
            return None if current is None else current.last_updated  # kept: nothing added
        if has_rows or spec.kind == "scd2":  # an scd2 history never empties: keys close
            files[key] = PartitionState(now)
            return now
        files.pop(key, None)
        return None

    def _same(self, spec: Spec, key: Key) -> bool:
        """Whether a `tracked` partition recomputed now comes out as stored (early cutoff):
        never once someone else rewrote it, else as the world's seed says."""
        record = self.records.get(spec.name, {}).get(key)
        state = self.states.get(spec.name, {}).get(key)
        if record is None or state is None or record.written_last_updated != state.last_updated:
            return False
        return random.Random(f"{self.seed}|{spec.name}|{key}|{self.clock}").random() < 0.5

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
        visible = self.visible_states()
        readable = {n: v for n, v in visible.items() if n not in self.unreadable}
        records = {n: v for n, v in self.records.items() if n not in self.unreadable}
        roots = {
            s.name: UNIVERSE[s.scheme]
            for s in self.specs.values()
            if not s.is_source and not s.deps and s.scheme != "none"
        }  # a self-dependency does not make an asset any less of a root
        own = {
            s.name: Retirement(f"oldest {s.retire}", s.retires)
            for s in self.specs.values()
            if s.retire
        }
        cascading = {s.name for s in self.specs.values() if s.cascade}
        return PlanInput(
            assets,
            # Copies of the maps (their values are frozen and never changed in place).
            {n: dict(v) for n, v in readable.items()},
            {n: dict(v) for n, v in records.items()},
            partition_keys=roots,
            unreadable={n: f"{n} is unreadable" for n in self.unreadable},
            retired=cascaded(assets, own, cascading) if own else {},
        )

    def columnar_input(self, inputs: PlanInput | None = None) -> PlanInput:
        """`plan_input()` (or `inputs`, made by it) as a session builds it from tables:
        column-wise maps over interned keys (`StateMap`, `RecordMap` with `IntMap`
        consumption), and the dependencies between assets of one scheme marked identity (so
        `plan` takes its bulk pass)."""
        inputs = inputs if inputs is not None else self.plan_input()
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
            states={n: self._columns(v, state_map) for n, v in inputs.states.items()},
            records={n: self._columns(v, record_map) for n, v in inputs.records.items()},
        )

    def _columns(self, values: dict[Key, V], build: Callable[[dict[Key, V]], M]) -> M:
        """`build(values)`, made once per distinct map (as a session keeps a table's
        conversion until its table moves): maps are equal when they hold the same objects."""
        key = (build, tuple((k, id(v)) for k, v in values.items()))
        if key not in self.memo:
            self.memo[key] = (list(values.values()), build(values))  # the values stay alive
        return cast(M, self.memo[key][1])

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
    states, records = world.visible_states(), world.records
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
        if retired(world, asset, key):  # retired on purpose: never judged
            return None
        record = records.get(asset, {}).get(key)
        # Retired upstream partitions are not read by the rule.
        mapped = {
            d: tuple(u for u in world.reads_of(asset, d, key) if not retired(world, d, u))
            for d in spec.deps
        }
        prev = previous(spec.scheme, key) if spec.self_dep else ()
        prev = tuple(u for u in prev if not retired(world, asset, u))
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


def retired(world: World, asset: str, key: Key) -> bool:
    """Whether (asset, key) is retired: by its own rule, or by its cascade when a partition
    it reads (its own earlier ones aside) is retired."""
    spec = world.specs[asset]
    if spec.retires(key):
        return True
    return spec.cascade and any(
        retired(world, d, u) for d in spec.deps for u in world.reads_of(asset, d, key)
    )


def oracle_writes(world: World) -> tuple[str, ...]:
    """Writes into a retired range: a retired partition of a managed asset whose data is not
    what its own write gave it, and a retired partition read by a write (or read by a retired
    partition's write) whose data moved since."""
    states, found = world.visible_states(), set()
    not_judged = set().union(*held(world).values())

    def now(asset: str, key: Key) -> int | None:
        state = states.get(asset, {}).get(key)
        return None if state is None else state.last_updated

    for name, spec in world.specs.items():
        if spec.is_source or name in not_judged or name in world.unreadable:
            continue
        records = world.records.get(name, {})
        for key in UNIVERSE[spec.scheme]:
            record = records.get(key)
            mine = retired(world, name, key)
            own_now = now(name, key)
            if (
                mine
                and own_now is not None
                and (record is None or record.written_last_updated != own_now)
            ):
                found.add(render(name, key))
            if record is None:
                continue
            for d in spec.deps:
                for u in world.reads_of(name, d, key):
                    if not (mine or retired(world, d, u)):
                        continue
                    value = now(d, u)
                    if value is not None and value != record.consumed.get(d, {}).get(u):
                        found.add(render(d, u))
    return tuple(sorted(found))


def oracle_order(world: World) -> list[tuple[str, Key]]:
    """The oracle's stale partitions, upstream assets first."""
    rank = {name: i for i, name in enumerate(world.specs)}
    return sorted(oracle(world), key=lambda p: (rank[p[0]], p[1] or ""))


Event = tuple[str, int, int]
EVENT_KINDS = (
    "source_edit", "source_edit", "source_delete", "write", "write_stale", "write_stale",
    "write_stale", "write_plan_prefix", "failed_write", "code_change", "code_change", "oob_edit",
    "oob_edit", "oob_delete", "damage", "repair", "retire", "retire_remove",
)  # fmt: skip


def apply(world: World, event: Event) -> None:
    kind, i, j = event
    if kind == "damage":  # any table's log becomes unreadable (data and records stay)
        world.unreadable.add(list(world.specs)[i % len(world.specs)])
        return
    if kind == "repair":
        world.unreadable.discard(list(world.specs)[i % len(world.specs)])
        return
    if kind == "retire":  # a new rule (or none) on a partitioned asset
        spec = list(world.specs.values())[i % len(world.specs)]
        if spec.scheme != "none":
            windows = len(SCHEMES[spec.scheme][0])
            cascade = not spec.is_source and j % 3 == 0
            world.specs[spec.name] = replace(spec, retire=j % windows, cascade=cascade)
        return
    if kind == "retire_remove":  # `partlake maintain --retention`: retired data removed
        world.tick()
        for name, spec in world.specs.items():
            if spec.is_source or spec.decoupled:
                continue
            for key in list(world.states.get(name, {})):
                if retired(world, name, key):
                    del world.states[name][key]
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
    elif spec.decoupled and kind in ("oob_edit", "oob_delete"):  # others changed its files
        world.touched[spec.name] = now
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
        specs.append(draw(managed_spec(names[i], scheme, tuple(u.name for u in ups))))
    for n, spec in enumerate(specs):  # retention rules on some partitioned assets
        if spec.scheme != "none" and draw(st.integers(0, 3)) == 0:
            windows = len(SCHEMES[spec.scheme][0])
            cascade = not spec.is_source and draw(st.booleans())
            specs[n] = replace(spec, retire=draw(st.integers(0, windows - 1)), cascade=cascade)
    code = {s.name: draw(st.sampled_from(CODE_VERSIONS)) for s in specs}
    event = st.tuples(st.sampled_from(EVENT_KINDS), st.integers(0, 15), st.integers(0, 15))
    events = draw(st.lists(event, min_size=5, max_size=40))
    seed = draw(st.integers(0, 2**16))
    return World({s.name: s for s in specs}, code, seed=seed), events


@st.composite
def managed_spec(draw: st.DrawFn, name: str, scheme: str, deps: tuple[str, ...]) -> Spec:
    """A managed asset of a random model kind, with what its kind gives it as the planner sees
    it (`planning.graph`): `merge` and `scd2` apply their time partitions in order unless they
    read their previous partition already; any partitioned asset may read it."""
    if scheme == "none":  # no time partitions to order or to read back
        return Spec(name, scheme, deps, False, None, draw(st.sampled_from(UNPARTITIONED_KINDS)))
    kind = draw(st.sampled_from(PARTITIONED_KINDS))
    if kind in ORDERED:
        self_dep = draw(st.sampled_from(["order", "order", "read"]))
    else:
        self_dep = draw(st.sampled_from([None, None, "read"]))
    # scd2 history rows span snapshots: never partitioned by the Dagster partitions.
    decoupled = kind == "scd2" or (kind in ("append", "merge") and draw(st.booleans()))
    return Spec(name, scheme, deps, False, self_dep, kind, decoupled)


def state_map(states: dict[Key, PartitionState]) -> StateMap:
    """States as a table's log gives them: column-wise over the interned keys."""
    return StateMap.build(states.items())


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
    assert result.retired_writes == oracle_writes(world)
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
        inputs = world.plan_input()
        result = plan(inputs)  # one partition at a time
        check_shape(result, world)
        compare(result, world)
        columns = plan(world.columnar_input(inputs))  # the bulk pass where it applies
        compare(columns, world)
        assert columns.items == result.items


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


def test_the_worlds_map_partitions_as_partlake_does() -> None:
    """The generator's schemes, mappings and previous partitions are those of
    `partlake_partitions` and `partlake_mapping` through `key_maps` and
    `previous_partition_maps`, as `planning.graph` gives them to the planner."""
    from dagster import DailyPartitionsDefinition, MonthlyPartitionsDefinition

    from dagster_partlake.partitions.dimensions import partlake_mapping, partlake_partitions
    from dagster_partlake.partitions.keys import all_keys
    from dagster_partlake.partitions.mappings import key_maps, previous_partition_maps

    times = {
        DAYS: DailyPartitionsDefinition(start_date=DAYS[0], end_date="2024-02-05"),
        MONTHS: MonthlyPartitionsDefinition(start_date="2024-01", end_date="2024-04", fmt="%Y-%m"),
    }
    defs = {
        scheme: partlake_partitions(date=times[windows], **{d: _VALUES[d] for d in statics})
        for scheme, (windows, statics) in SCHEMES.items()
    }
    for scheme, definition in defs.items():
        assert tuple(all_keys(definition)) == UNIVERSE[scheme], scheme
        maps = previous_partition_maps(definition)
        assert maps is not None
        for key in UNIVERSE[scheme]:
            assert tuple(maps[0](key)) == previous(scheme, key), (scheme, key)
    for up, downs in FEEDS.items():
        for down in downs - {"none"}:
            mapping = partlake_mapping(defs[up], defs[down])
            upstream_keys, downstream_keys = key_maps(defs[up], defs[down], mapping)
            for key in UNIVERSE[down]:
                # Only partitions the definitions have: over days 2024-01-30 to 2024-02-04,
                # January reads two days and February four (not 31 and 29).
                assert set(upstream_keys(key)) == set(reads(up, down, key)), (up, down, key)
            for key in UNIVERSE[up]:
                assert set(downstream_keys(key)) <= set(UNIVERSE[down]), (up, down, key)


def test_the_rule_decides_alike_on_one_partition_and_on_columns() -> None:
    """`planning.rule` on every combination of facts: as Python bools one partition at a time
    (`judge`) and as boolean columns all at once (the bulk pass), the same reasons and citations;
    and the reasons' order is `REASONS`'."""
    import numpy as np

    from dagster_partlake.planning.definition import REASONS
    from dagster_partlake.planning.rule import RULE, Facts, cited, first_reason, reason_column

    assert tuple(reason for reason, _, _ in RULE) == REASONS
    rows = list(itertools.product((False, True), repeat=7))  # 5 facts, has data, moved
    column = {i: np.array([row[i] for row in rows]) for i in range(7)}
    many = Facts(column[0], ~column[0], column[1], column[2], column[3], column[4])
    reasons = reason_column(np, many, len(rows))
    citations = cited(many, column[5], column[6])
    for n, (recorded, present, code, own, inputs, has, moved) in enumerate(rows):
        one = Facts(recorded, not recorded, present, code, own, inputs)
        reason = first_reason(one)
        assert (REASONS[reasons[n]] if reasons[n] >= 0 else None) == reason, rows[n]
        assert bool(citations[n]) == cited(one, has, moved), rows[n]
        expected = _in_words(recorded, present, code, own, inputs)
        assert reason == expected, rows[n]


def _in_words(recorded: bool, present: bool, code: bool, own: bool, inputs: bool) -> str | None:
    """The rule as the planner's docstring says it (the reason = the first that applies)."""
    if not recorded:
        return "missing" if present else None
    if code:
        return "code_changed"
    if own:
        return "out_of_band"
    return "upstream_changed" if inputs else None
