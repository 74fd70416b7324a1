"""The invalidation planner: which asset partitions are stale, why, and because of what.

A pure function over plain data (no Spark, no Delta, no Dagster instance): `plan(PlanInput)`.
The sensor, `partlake plan` and `partlake run` gather the inputs, call it, and render or execute
the frozen `Plan` it returns. The data is `planning.definition`'s; the verdict on a partition,
from its facts, is `planning.rule`'s, which `judge` (here, one partition at a time) and the bulk
pass (`planning.bulk`, whole columns at once) both call.

Inputs, all keyed by asset name and partition key (None for an unpartitioned asset):

- `states[asset][key]`: the partitions that currently have data in storage, with their
  lastUpdated (ms; the time of the commit that last changed the partition's live files with
  `dataChange: true` actions, `delta.change_rule`; for a folder source, its newest file).
- `records[asset][key]`: what the last successful write of that partition recorded: the code
  version, the lastUpdated it gave its own partition (None if it wrote no rows) and, per upstream
  asset, the lastUpdated of every upstream partition it read (partitions without data absent).
- the graph: for each asset its code version and, per dependency, two functions given by the
  partition mapping: downstream key -> upstream keys, and upstream key -> downstream keys.

The rule (one topological pass, upstream first). `data(X)` = partitions of X that have data or
are stale themselves (they will have data after the plan runs). For a managed asset A:

- candidates: partitions of A with a record or with data, and every partition mapped from a
  partition in `data(U)` of an upstream U. An asset with no dependencies: the former plus every
  partition that exists now (`partition_keys`; the single partition of an unpartitioned asset),
  so each is `missing` until written.
- `missing`: no record, and every dependency has at least one mapped upstream partition in
  `data(U)` (a monthly partition is due as soon as any of its days exists; an empty future is
  never due). because = those upstream partitions.
- with a record, stale when any of (reason = the first that applies, in this order):
  `code_changed`: the recorded code version differs from the asset's;
  `out_of_band`: the partition's lastUpdated differs from what the write gave it (someone else
  wrote or deleted it);
  `upstream_changed`: a mapped upstream partition is stale, or its lastUpdated differs from the
  one recorded as read (including appearing or disappearing).
  For all three reasons, because = those changed upstream partitions (so a `code_changed`
  partition whose inputs also changed lists them; with unchanged inputs it is empty).
An order-only self-dependency (an asset whose time partitions apply in order: `merge`, `scd2`)
maps each partition to the previous one. It never makes a partition `missing` or keeps one from
being due; a partition with a record is `upstream_changed` because of its previous partition when
that one is stale, or was written after it (its lastUpdated is newer than this partition's
written lastUpdated). Staleness thus runs forward in time: when day D is stale, so is every later
day with a record.
A streaming asset (`partlake/stream`, mode `available_now`) is judged as a whole, as one item
with partition None: a run processes whatever its input holds that it has not processed yet, and
its micro-batches write whichever partitions their rows are in. Its record is the newest commit
of its table (a run closes with a commit saying what it consumed of its input): it is `missing`
without one while an upstream has data, `code_changed` as for any asset, and `upstream_changed`
when an upstream partition's lastUpdated differs from the one recorded as consumed (appeared,
moved or vanished) or is stale. It is never `out_of_band` (its table is where data enters: a
change there by others stands), and its staleness is not propagated as partitions: what reads it
is judged by the partitions its runs actually wrote.
Retired partitions (`retired[asset]`, from `partlake/retention` with cascades applied,
`planning.retirement`) are out of the rule altogether: a retired partition is never judged (never
`missing`, never stale, so never rebuilt), and a retired upstream partition is not read by the
rule (its removal, or a new write into it, moves nothing downstream; a downstream that must
forget too is retired itself by its `cascade`). A write into a retired range since it was read
or written (a retired partition whose lastUpdated differs from what its own write or its
reader's write recorded, or that appeared) is listed in `Plan.retired_writes`: a warning.
Sources (assets written by other systems) are never stale; their states feed their dependents.
Nothing fresh is ever listed. An asset whose table could not be read (`unreadable`) and every
asset downstream of it are not judged at all: the plan lists them in `Plan.unreadable` instead.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from dagster_partlake.planning.bulk import verdicts
from dagster_partlake.planning.definition import (
    REASONS,
    Dependency,
    Key,
    KeyMap,
    PartitionState,
    Plan,
    PlanAsset,
    PlanInput,
    Reason,
    Record,
    Retirement,
    StalePartition,
    UnreadableTable,
    render_partition,
)
from dagster_partlake.planning.rule import (
    Facts,
    cited,
    first_reason,
    input_moved,
    one_partition,
    written_after,
)

# The planner's data lives in `planning.definition`; these names are re-exported for the
# modules (and users) that know them from here.
__all__ = [
    "REASONS",
    "Dependency",
    "Key",
    "KeyMap",
    "PartitionState",
    "Plan",
    "PlanAsset",
    "PlanInput",
    "Reason",
    "Record",
    "StalePartition",
    "UnreadableTable",
    "candidates_of",
    "judge",
    "judge_stream",
    "plan",
    "render_partition",
    "retired_writes",
    "topological_order",
]


def topological_order(assets: Sequence[PlanAsset]) -> list[PlanAsset]:
    """Upstream before downstream; ties by name. Raises ValueError on a cycle."""
    by_name = {a.name: a for a in assets}
    # A self-dependency orders an asset's own partitions, not assets.
    pending = {
        a.name: {d.upstream for d in a.deps if d.upstream in by_name and d.upstream != a.name}
        for a in assets
    }
    order: list[PlanAsset] = []
    while pending:
        ready = sorted(name for name, ups in pending.items() if not ups)
        if not ready:
            raise ValueError(f"the asset graph has a cycle among {', '.join(sorted(pending))}")
        for name in ready:
            order.append(by_name[name])
            del pending[name]
        for ups in pending.values():
            ups.difference_update(ready)
    return order


def plan(inputs: PlanInput) -> Plan:
    """The stale asset partitions of `inputs`, with reasons; see the module docstring."""
    order = topological_order(inputs.assets)
    stale: dict[str, set[Key]] = {}
    items: list[StalePartition] = []
    # An unreadable table and everything downstream of it are neither stale nor fresh: nothing
    # is judged (so nothing runs) there until its state can be read again.
    held_by: dict[str, set[str]] = {}
    for asset in order:
        stale[asset.name] = set()
        causes = {asset.name} if asset.name in inputs.unreadable else set()
        for dep in asset.deps:
            causes |= held_by.get(dep.upstream, set())
        if causes:
            held_by[asset.name] = causes
            continue
        if asset.is_source:
            continue
        if asset.stream:
            verdict = judge_stream(asset, inputs, stale)
            if verdict is not None:
                items.append(verdict)
            continue
        states = inputs.states.get(asset.name, {})
        records = inputs.records.get(asset.name, {})
        own = [d for d in asset.deps if d.upstream == asset.name]
        bulk = None if own else verdicts(asset, inputs, stale)
        if bulk is not None:
            found = bulk[1]
            items.extend(found)
            stale[asset.name].update(item.partition for item in found)
            continue
        candidates = sorted(candidates_of(asset, inputs, stale), key=lambda k: k or "")
        if own:
            items.extend(_judge_in_order(asset, own, candidates, inputs, stale))
            continue
        for key in candidates:
            item = judge(asset, key, states.get(key), records.get(key), inputs, stale)
            if item is not None:
                items.append(item)
                stale[asset.name].add(key)
    sources = {a.name for a in order if a.is_source}
    unreadable = tuple(
        UnreadableTable(
            name,
            inputs.unreadable[name],
            tuple(
                a.name for a in order if name in held_by.get(a.name, ()) and a.name not in sources
            ),
        )
        for name in sorted(inputs.unreadable)
    )
    held = {a for a, causes in held_by.items() if causes}
    return Plan(
        tuple(items),
        tuple(a.name for a in order),
        unreadable,
        retired_writes=retired_writes(inputs, held),
    )


def retired_writes(inputs: PlanInput, held: Iterable[str] = ()) -> tuple[str, ...]:
    """The partitions written into a retired range since they were read or written (see the
    module docstring), rendered 'asset[key]', sorted; assets in `held` (not judged) aside."""
    retired = inputs.retired
    if not retired:
        return ()
    skip = set(held)
    found: set[str] = set()
    for asset in inputs.assets:
        if asset.is_source or asset.name in skip:
            continue
        own = retired.get(asset.name)
        deps = [d for d in asset.deps if d.upstream != asset.name]
        touching = [d for d in deps if d.upstream in retired]
        if own is None and not touching:
            continue
        states = inputs.states.get(asset.name, {})
        records = inputs.records.get(asset.name, {})
        if own is not None:
            for key, state in states.items():
                if own.contains(key):
                    record = records.get(key)
                    if record is None or record.written_last_updated != state.last_updated:
                        found.add(render_partition(asset.name, key))
        for key, record in records.items():
            own_retired = own is not None and own.contains(key)
            for dep in deps if own_retired else touching:
                up = retired.get(dep.upstream)
                upstream_states = inputs.states.get(dep.upstream, {})
                consumed = record.consumed.get(dep.upstream, {})
                for u in _mapped(dep, key):
                    if not own_retired and not (up is not None and up.contains(u)):
                        continue
                    current = upstream_states.get(u)
                    if current is not None and current.last_updated != consumed.get(u):
                        found.add(render_partition(dep.upstream, u))
    return tuple(sorted(found))


def _retired(retired: Retirement | None, key: Key) -> bool:
    return retired is not None and retired.contains(key)


def _judge_in_order(
    asset: PlanAsset,
    own: Sequence[Dependency],
    candidates: Sequence[Key],
    inputs: PlanInput,
    stale: dict[str, set[Key]],
) -> list[StalePartition]:
    """Judge the partitions of an asset that depends on its own earlier partitions: a partition
    that turns stale makes the ones reading it candidates again (a worklist in key order)."""
    states = inputs.states.get(asset.name, {})
    records = inputs.records.get(asset.name, {})
    known = set(candidates)
    heap = [(k or "", k) for k in candidates]
    heapq.heapify(heap)
    queued = set(candidates)
    items = []
    while heap:
        _, key = heapq.heappop(heap)
        queued.discard(key)
        if key in stale[asset.name]:
            continue
        item = judge(asset, key, states.get(key), records.get(key), inputs, stale)
        if item is None:
            continue
        items.append(item)
        stale[asset.name].add(key)
        for dep in own:
            for later in dep.downstream_keys(key):
                if later in known and later not in queued and later not in stale[asset.name]:
                    heapq.heappush(heap, (later or "", later))
                    queued.add(later)
    return items


def _mapped(dep: Dependency, key: Key) -> Iterable[Key]:
    return (key,) if dep.identity else dep.upstream_keys(key)


def candidates_of(asset: PlanAsset, inputs: PlanInput, stale: Mapping[str, set[Key]]) -> set[Key]:
    """The partitions of `asset` that `plan` judges, given the stale partitions so far."""
    keys: set[Key] = set(inputs.records.get(asset.name, {}))
    keys.update(inputs.states.get(asset.name, {}))
    if not any(d.upstream != asset.name for d in asset.deps):
        if not asset.partitioned:
            keys.add(None)
        keys.update(inputs.partition_keys.get(asset.name, ()))
        return keys
    for dep in asset.deps:
        if dep.upstream == asset.name:
            continue  # its own partitions are candidates already
        upstream_with_data = set(inputs.states.get(dep.upstream, {})) | stale.get(
            dep.upstream, set()
        )
        if dep.identity:
            keys.update(upstream_with_data)
            continue
        for upstream_key in upstream_with_data:
            keys.update(dep.downstream_keys(upstream_key))
    return keys


def judge_stream(
    asset: PlanAsset, inputs: PlanInput, stale: Mapping[str, set[Key]]
) -> StalePartition | None:
    """The verdict on a streaming asset as a whole (partition None): see the module docstring.
    Its record is under the key None; it is never `out_of_band`, and its `because` lists the
    upstream partitions that moved (for a first run: all that have data)."""
    record = inputs.records.get(asset.name, {}).get(None)
    changed: list[str] = []
    with_data = False
    for dep in asset.deps:
        if dep.upstream == asset.name:
            continue
        states = inputs.states.get(dep.upstream, {})
        upstream_stale = stale.get(dep.upstream, set())
        consumed = record.consumed.get(dep.upstream, {}) if record is not None else {}
        gone = inputs.retired.get(dep.upstream)
        for key in {*states, *consumed, *upstream_stale}:
            if gone is not None and gone.contains(key):
                continue
            with_data = with_data or key in states or key in upstream_stale
            current = states.get(key)
            now = current.last_updated if current is not None else None
            if input_moved(key in upstream_stale, now, consumed.get(key)):
                changed.append(render_partition(dep.upstream, key))
    recorded = record is not None
    facts = Facts(
        recorded=recorded,
        unrecorded=not recorded,
        inputs_present=with_data,
        code_changed=record is not None and record.code_version != asset.code_version,
        own_moved=False,
        inputs_moved=bool(changed),
    )
    reason = first_reason(facts)
    if reason is None:
        return None
    return StalePartition(asset.name, None, reason, tuple(sorted(changed)))


def judge(
    asset: PlanAsset,
    key: Key,
    state: PartitionState | None,
    record: Record | None,
    inputs: PlanInput,
    stale: Mapping[str, set[Key]],
) -> StalePartition | None:
    """The verdict on one partition (None: fresh), given the stale partitions of its upstream
    assets (and, for an asset ordered on itself, of its earlier partitions): its facts, decided
    by `planning.rule`."""
    retired = inputs.retired
    if retired and _retired(retired.get(asset.name), key):
        return None  # retired on purpose: never judged
    recorded = record is not None
    # Per upstream partition read with data or moved: (asset, key, has data, moved since the
    # write read it).
    edges: list[tuple[str, Key, bool, bool]] = []
    present, inputs_moved = True, False
    for dep in asset.deps:
        upstream_states = inputs.states.get(dep.upstream, {})
        upstream_stale = stale.get(dep.upstream, set())
        consumed = record.consumed.get(dep.upstream, {}) if record is not None else {}
        gone = retired.get(dep.upstream) if retired else None
        any_data = False
        for u in _mapped(dep, key):
            if gone is not None and gone.contains(u):
                continue  # a retired upstream partition is not read by the rule
            current = upstream_states.get(u)
            now = None if current is None else current.last_updated
            is_stale = u in upstream_stale
            has_data = now is not None or is_stale
            if record is None:
                moved = False
            elif dep.order_only:
                moved = written_after(is_stale, now, record.written_last_updated)
            else:
                moved = input_moved(is_stale, now, consumed.get(u))
            if has_data or moved:
                any_data = any_data or has_data
                inputs_moved = inputs_moved or moved
                edges.append((dep.upstream, u, has_data, moved))
        # Its own earlier partition never keeps a partition from being due.
        present = present and (any_data or dep.upstream == asset.name)
    own = None if state is None else state.last_updated
    facts = one_partition(
        recorded,
        present,
        record is not None and record.code_version != asset.code_version,
        record is not None and own != record.written_last_updated,
        inputs_moved,
    )
    reason = first_reason(facts)
    if reason is None:
        return None
    because = sorted(
        render_partition(a, u) for a, u, has, moved in edges if cited(facts, has, moved)
    )
    return StalePartition(asset.name, key, reason, tuple(because))
