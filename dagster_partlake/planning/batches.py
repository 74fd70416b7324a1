"""One round of batching: which stale partitions can run now, grouped into Dagster runs.

`planning.runs.plan_runs` calls this round after round to turn a whole plan into runs.

A batch is one Dagster run: a list of assets sharing a partitions definition, and either one
partition key or one partition range (a box for multi-partitions). An asset whose backfill policy
is `single_run()` gets all its stale partitions in as few ranges as they allow; with
`multi_run(n)` ranges of at most n partitions; without a policy, one partition per run.
Per stale partition: if every upstream partition it reads is fresh, it runs now; if it reads
partitions written in this round, it joins their run when that run can write it too (same
partitions definition and the same keys, and the same policy unless the run covers one key;
Dagster then runs both steps in order), otherwise it waits for the next round (`deferred`), as
does every partition that reads a blocked or deferred one. So upstream always runs before
downstream, and a partition that keeps failing holds back only what reads it.

Runs of one round that Dagster can run together then become one run: the same partitions
definition and exactly the same keys (and the same policy unless that is one key). None of them
reads another (all are ready now), and one run starts one process, one Spark and one Dagster run
where several would each start their own: under the daemon, that start-up is most of a small
refresh.

An asset that applies its time partitions in order (`merge`, `scd2`: an order-only dependency on
its own previous partition, `RunRules.in_order`) and whose backfill policy allows ranges takes
its later partitions of one series (the same values of the other dimensions) in the run of the
earliest one that runs alone this round, up to the policy's limit: rewriting an old day makes
every later day stale, and the run applies them one after the other (each its own commit), as a
backfill of one asset applies a range, instead of one run per day in a chain. A later partition
joins only when everything else it reads is fresh; one that reads a partition written this round
by another run waits for the next round, as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from dagster import (
    BackfillPolicy,
    MultiPartitionsDefinition,
    PartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from dagster_partlake.compat import partition_loading_context
from dagster_partlake.partitions.keys import key_values
from dagster_partlake.planning.definition import Key, Plan, PlanAsset, StalePartition

if TYPE_CHECKING:
    from dagster import DagsterInstance


@dataclass(frozen=True)
class Batch:
    assets: tuple[str, ...]
    keys: tuple[Key, ...]  # every partition key the run covers, in order
    partition_range: tuple[str, str] | None  # (start, end) when the run is a range
    items: tuple[StalePartition, ...]


@dataclass(frozen=True)
class BatchPlan:
    ready: tuple[Batch, ...]
    deferred: tuple[StalePartition, ...]  # wait for their stale upstream partitions


@dataclass(frozen=True)
class RunRules:
    """What turns a code location's stale partitions into Dagster runs: shared by every round
    of batching (`make_batches`) and by run planning (`dagster_partlake.planning.runs`)."""

    assets: Sequence[PlanAsset]  # the planner's assets (dependencies with their mappings)
    partitions_defs: Mapping[str, PartitionsDefinition | None]  # per asset
    policies: Mapping[str, BackfillPolicy | None]  # backfill policy per asset
    # Per asset of a multi-asset that Dagster cannot subset, all its assets: they run together,
    # in one run, once every partition they read outside it is written (`LakeGraph.units()`).
    units: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # Assets whose stale partitions may come out unchanged (`tracked`): a partition reading one
    # of them never joins its run, it waits for a later round (and may then be left out).
    cutoff: Collection[str] = ()
    # Assets reading an input only once (incrementally, a landing folder): never several
    # partitions of a series in one run (each commit records what its whole run read).
    reads_once: Collection[str] = ()
    # Where the keys of dynamic partitions definitions are (the Dagster instance): a range of
    # dynamic partitions is cut in the order the instance holds them.
    dynamic_partitions_store: DagsterInstance | None = None
    # Partition key coordinates per in-order asset (`series_of`), made on first use.
    _grids: dict[str, _Grid] = field(default_factory=dict, init=False, repr=False, compare=False)

    @cached_property
    def by_name(self) -> dict[str, PlanAsset]:
        return {a.name: a for a in self.assets}

    @cached_property
    def _in_order(self) -> dict[str, int | None]:
        """Per asset that takes its later partitions of a series in one run: the most keys a run
        of it may hold (None: any number)."""
        found: dict[str, int | None] = {}
        for asset in self.assets:
            policy = self.policies.get(asset.name)
            ordered = any(d.order_only and d.upstream == asset.name for d in asset.deps)
            limit = policy.max_partitions_per_run if policy is not None else 1
            if (
                ordered
                and limit != 1
                and self.partitions_defs.get(asset.name) is not None
                and asset.name not in self.reads_once
            ):
                found[asset.name] = limit
        return found

    def in_order(self, name: str) -> bool:
        """Whether `name` applies its time partitions in order (an order-only dependency on its
        own previous partition), its backfill policy allows ranges and it reads no input only
        once: its later partitions of one series then run in one range run, applied one after
        the other."""
        return name in self._in_order

    def series_limit(self, name: str) -> int | None:
        """The most partitions of one series a run of in-order asset `name` holds (None: all)."""
        return self._in_order[name]

    def series_of(self, name: str, key: Key) -> tuple[int, ...]:
        """The series of one of `name`'s partitions: its position in every dimension but time."""
        partitions_def = self.partitions_defs.get(name)
        if key is None or partitions_def is None:
            return ()
        grid = self._grids.get(name)
        if grid is None:
            grid = self._grids[name] = _Grid(partitions_def, self.dynamic_partitions_store)
        coords = grid.coords(key)
        return tuple(c for i, c in enumerate(coords) if i != grid.time_axis)

    def reads(self, item: StalePartition) -> list[tuple[str, Key]]:
        """Every upstream partition `item` reads, through its partition mappings."""
        return [
            (dep.upstream, key)
            for dep in self.by_name[item.asset].deps
            for key in ((item.partition,) if dep.identity else dep.upstream_keys(item.partition))
        ]


def make_batches(
    plan: Plan, rules: RunRules, *, blocked: Mapping[str, set[Key]] | None = None
) -> BatchPlan:
    """Batches that can run now, and the stale partitions that must wait.

    Args:
        plan: from `planner.plan`.
        rules: the code location's dependencies, partitions, policies, units and cutoff assets.
        blocked: partitions not to request now (already running, or backing off after failures);
            their downstream partitions wait too.
    """
    batching = _Round(plan, rules, blocked or {})
    handled: set[str] = set()
    for name in plan.asset_order:
        if name in handled:
            continue
        if name in rules.units:
            handled.update(rules.units[name])
            batching.add_unit(rules.units[name])
        else:
            batching.add_asset(name)
    return BatchPlan(tuple(batching.batches()), tuple(batching.deferred))


class _Round:
    """One round of batching, asset by asset, upstream first."""

    def __init__(self, plan: Plan, rules: RunRules, blocked: Mapping[str, set[Key]]) -> None:
        self.rules = rules
        self.blocked = blocked
        self.by_asset = plan.by_asset()
        self.stale = {(i.asset, i.partition) for i in plan.items}
        # Stale partitions that will not be written this round: blocked, then deferred ones.
        self.waiting: set[tuple[str, Key]] = {(a, k) for a, keys in blocked.items() for k in keys}
        self.groups: list[tuple[list[str], list[StalePartition]]] = []
        self.group_of: dict[tuple[str, Key], int] = {}  # written this round -> their group
        self.deferred: list[StalePartition] = []

    def ups_of(self, item: StalePartition) -> list[tuple[str, Key]]:
        """The stale upstream partitions an item reads."""
        return [up for up in self.rules.reads(item) if up in self.stale]

    def unblocked(self, name: str) -> list[StalePartition]:
        return [
            i for i in self.by_asset.get(name, []) if i.partition not in self.blocked.get(name, ())
        ]

    def defer(self, items: Sequence[StalePartition]) -> None:
        self.deferred.extend(items)
        self.waiting.update((i.asset, i.partition) for i in items)

    def group(self, members: list[str], items: list[StalePartition]) -> None:
        self.group_of.update({(i.asset, i.partition): len(self.groups) for i in items})
        self.groups.append((members, items))

    def add_unit(self, unit: Sequence[str]) -> None:
        """A multi-asset that cannot be subset: all its stale partitions in one group, when
        nothing it reads from outside is still to be written."""
        members = [m for m in unit if m in self.by_asset]
        items = [i for m in members for i in self.unblocked(m)]
        if not items:
            return
        if any(up[0] not in unit for i in items for up in self.ups_of(i)):
            self.defer(items)
        else:
            self.group(members, items)

    def add_asset(self, name: str) -> None:
        alone: list[StalePartition] = []  # every upstream partition it reads is fresh
        joining: dict[StalePartition, set[int]] = {}  # reads partitions written this round
        later: list[StalePartition] = []  # reads a partition that waits
        for item in self.unblocked(name):
            ups = self.ups_of(item)
            # Its own earlier stale partition (a self-dependency) runs first, in an earlier run.
            if any(up in self.waiting or up[0] in self.rules.cutoff or up[0] == name for up in ups):
                later.append(item)
            elif ups:
                joining[item] = {self.group_of[up] for up in ups}
            else:
                alone.append(item)
        if joining and not _join(self.groups, name, joining, self.rules, self.group_of):
            later.extend(joining)
        if alone and self.rules.in_order(name):
            later = self.chain(name, alone, later)
        if alone:
            self.group([name], alone)
        self.defer(later)

    def chain(
        self, name: str, alone: list[StalePartition], later: list[StalePartition]
    ) -> list[StalePartition]:
        """Move into `alone` (one run, applied in order) the later partitions of an in-order
        asset whose stale upstream partitions are all its own, in `alone` already, and of the
        same series, within the policy's limit per series; return the partitions still waiting.
        """
        limit = self.rules.series_limit(name)
        taken = {i.partition for i in alone}
        per_series: dict[tuple[int, ...], int] = {}
        for item in alone:
            series = self.rules.series_of(name, item.partition)
            per_series[series] = per_series.get(series, 0) + 1
        waiting = list(later)
        moved = True
        while moved:  # each pass takes the next partition of every series
            moved = False
            for item in list(waiting):
                ups = self.ups_of(item)
                if not ups or any(up[0] != name or up[1] not in taken for up in ups):
                    continue
                series = self.rules.series_of(name, item.partition)
                if any(self.rules.series_of(name, up[1]) != series for up in ups):
                    continue
                if limit is not None and per_series.get(series, 0) >= limit:
                    continue
                waiting.remove(item)
                alone.append(item)
                taken.add(item.partition)
                per_series[series] = per_series.get(series, 0) + 1
                moved = True
        return waiting

    def batches(self) -> list[Batch]:
        """Each group as runs: one per key or range its leader's backfill policy allows."""
        ready: list[Batch] = []
        for members, items in _shared(self.groups, self.rules):
            leader = members[0]
            # Joined assets have their leader's keys; a multi-asset's assets may each have others.
            keys = sorted({i.partition for i in items}, key=lambda k: k or "")
            by_key: dict[Key, list[StalePartition]] = {}
            for item in items:
                by_key.setdefault(item.partition, []).append(item)
            policy = self.rules.policies.get(leader)
            for part in self.split_series(leader, keys, policy):
                partitions_def = self.rules.partitions_defs.get(leader)
                store = self.rules.dynamic_partitions_store
                for chunk in _chunks(part, partitions_def, policy, store):
                    chunk_items = tuple(i for k in chunk.keys for i in by_key.get(k, ()))
                    ready.append(
                        Batch(tuple(members), chunk.keys, chunk.partition_range, chunk_items)
                    )
        return ready

    def split_series(
        self, leader: str, keys: list[Key], policy: BackfillPolicy | None
    ) -> list[list[Key]]:
        """The keys chunked apart per series for an in-order asset with a limit per run: a
        chunk of several series would cut them by time, and two chunks of one series in one
        round would run side by side (`chain` keeps each series within the limit)."""
        if not self.rules.in_order(leader) or policy is None or not policy.max_partitions_per_run:
            return [keys]
        parts: dict[tuple[int, ...], list[Key]] = {}
        for key in keys:
            parts.setdefault(self.rules.series_of(leader, key), []).append(key)
        return list(parts.values())


def _join(
    groups: list[tuple[list[str], list[StalePartition]]],
    name: str,
    joining: Mapping[StalePartition, set[int]],
    rules: RunRules,
    group_of: dict[tuple[str, Key], int],
) -> bool:
    """Add the partitions to the one group they read from, if its run can write them too: same
    partitions definition and backfill policy as its first asset, and exactly its keys (a
    Dagster run covers one key or range for all its assets). Dagster orders the steps."""
    targets = set().union(*joining.values())
    if len(targets) != 1:
        return False
    index = targets.pop()
    members, items = groups[index]
    leader = members[0]
    keys = {i.partition for i in items if i.asset == leader}
    if {i.partition for i in joining} != keys or not _can_share(rules, leader, name, keys):
        return False
    if name not in members:
        members.append(name)
    items.extend(joining)
    group_of.update({(name, i.partition): index for i in joining})
    return True


def _can_share(rules: RunRules, leader: str, name: str, keys: Collection[Key]) -> bool:
    """Whether `name`'s partitions `keys` can be written by `leader`'s run of the same keys: the
    same partitions definition, and the same backfill policy unless the run covers one key (one
    partition is a run under any policy; a range needs the policy that allows it)."""
    if rules.partitions_defs.get(leader) != rules.partitions_defs.get(name):
        return False
    return len(keys) == 1 or rules.policies.get(leader) == rules.policies.get(name)


def _shared(
    groups: Sequence[tuple[list[str], list[StalePartition]]], rules: RunRules
) -> list[tuple[list[str], list[StalePartition]]]:
    """The round's groups, those that can share a run joined: every asset of each over the same
    keys, and the leaders can share (`_can_share`). Upstream groups first, as planned."""
    shared: list[tuple[list[str], list[StalePartition]]] = []
    keys_of: list[frozenset[Key]] = []
    for members, items in groups:
        keys = frozenset(i.partition for i in items)
        uniform = all({i.partition for i in items if i.asset == m} == keys for m in members)
        for index, (into, joined) in enumerate(shared):
            if uniform and keys_of[index] == keys and _can_share(rules, into[0], members[0], keys):
                into.extend(m for m in members if m not in into)
                joined.extend(items)
                break
        else:
            shared.append((list(members), list(items)))
            keys_of.append(keys if uniform else frozenset())
    return shared


@dataclass(frozen=True)
class _Chunk:
    keys: tuple[Key, ...]
    partition_range: tuple[str, str] | None


def _chunks(
    keys: Sequence[Key],
    partitions_def: PartitionsDefinition | None,
    policy: BackfillPolicy | None,
    store: DagsterInstance | None = None,
) -> list[_Chunk]:
    if partitions_def is None or keys == [None]:
        return [_Chunk((None,), None)]
    if policy is None:
        return [_Chunk((k,), None) for k in keys]
    limit = policy.max_partitions_per_run
    grid = _Grid(partitions_def, store)
    chunks: list[_Chunk] = []
    for box in _boxes(grid, [k for k in keys if k is not None]):
        for start in range(0, len(box), limit or len(box)):
            part = box[start : start + (limit or len(box))]
            if len(part) == 1:
                chunks.append(_Chunk((part[0],), None))
            elif grid.is_box(part):
                chunks.append(_Chunk(tuple(part), (part[0], part[-1])))
            else:
                chunks.extend(_Chunk((k,), None) for k in part)
    return chunks


class _Grid:
    """Partition keys as coordinates: per dimension (alphabetical, as in multi keys), the key's
    position in that dimension's key order. Lets range questions be answered without building
    Dagster's partition key objects, which costs seconds at tens of thousands of keys."""

    def __init__(
        self, partitions_def: PartitionsDefinition, store: DagsterInstance | None = None
    ) -> None:
        if isinstance(partitions_def, MultiPartitionsDefinition):
            dims = {d.name: d.partitions_def for d in partitions_def.partitions_defs}
        else:
            dims = {"": partitions_def}
        self.names = sorted(dims)
        self.multi = isinstance(partitions_def, MultiPartitionsDefinition)
        self.time_axis = next(
            (
                i
                for i, n in enumerate(self.names)
                if isinstance(dims[n], TimeWindowPartitionsDefinition)
            ),
            None,
        )
        # A dynamic dimension's keys are in `store` (the Dagster instance).
        with partition_loading_context(store):
            self.position = [
                {k: i for i, k in enumerate(dims[n].get_partition_keys())} for n in self.names
            ]

    def coords(self, key: str) -> tuple[int, ...]:
        """Position per dimension; -1 where the value is not a partition of that dimension."""
        values = key_values(key) if self.multi else [key]
        if len(values) != len(self.names):
            return (-1,) * len(self.names)
        return tuple(p.get(v, -1) for p, v in zip(self.position, values, strict=True))

    def is_box(self, keys: Sequence[str]) -> bool:
        """True when the Dagster partition range keys[0]...keys[-1] contains exactly `keys`
        (for multi-partitions that range is the product of each dimension's range)."""
        if not keys:
            return False
        coords = [self.coords(k) for k in keys]
        size = 1
        for axis in range(len(self.names)):
            seen = {c[axis] for c in coords}
            low, high = min(seen), max(seen)
            if low < 0 or len(seen) != high - low + 1:
                return False
            if coords[0][axis] != low or coords[-1][axis] != high:
                return False
            size *= high - low + 1
        return len(set(keys)) == len(keys) == size


def partition_boxes(partitions_def: PartitionsDefinition, keys: Sequence[str]) -> list[list[str]]:
    """Split keys into groups that are each exactly one Dagster partition range."""
    return _boxes(_Grid(partitions_def), keys)


def _boxes(grid: _Grid, keys: Sequence[str]) -> list[list[str]]:
    wanted = list(dict.fromkeys(keys))
    coords = {k: grid.coords(k) for k in wanted}
    axis = grid.time_axis

    def rest(key: str) -> tuple[int, ...]:
        return tuple(c for i, c in enumerate(coords[key]) if i != axis)

    def when(key: str) -> int:
        return coords[key][axis] if axis is not None else 0

    if not grid.multi:
        return _runs(sorted(wanted, key=lambda k: coords[k][0]), lambda k: coords[k][0])
    ordered = sorted(wanted, key=lambda k: (rest(k), when(k)))
    if grid.is_box(ordered):
        return [sorted(wanted, key=lambda k: (when(k), rest(k)))]
    boxes: list[list[str]] = []
    for _, group in itertools.groupby(ordered, key=rest):
        members = list(group)
        boxes.extend(_runs(members, when) if axis is not None else [[k] for k in members])
    return boxes


def _runs(keys: list[str], position: Callable[[str], int]) -> list[list[str]]:
    """Maximal runs of consecutive positions."""
    runs: list[list[str]] = []
    for key in keys:
        if runs and position(key) == position(runs[-1][-1]) + 1:
            runs[-1].append(key)
        else:
            runs.append([key])
    return runs
