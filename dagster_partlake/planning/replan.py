"""Incremental planning: the plan after a change, judging only what the change can affect.

`plan` (the reference) judges every candidate partition of every asset. After a change, most
verdicts cannot have moved: a partition's verdict depends only on its own state and record, its
asset's code version, and the states and staleness of the upstream partitions it maps to (for an
asset ordered on itself, also its previous partition's). So `replan(memo, inputs, changed)`
re-judges, asset by asset upstream first:

- the partitions whose state or record changed (`changed`, from the new log entries, or
  `changed_partitions` as the reference diff);
- the partitions mapped from an upstream partition whose state changed or whose staleness
  flipped in this pass (stale <-> not stale);
- for an asset ordered on its own partitions, the later partitions of any of those, in key order,
  as `plan` does;
- every candidate of an asset whose code version changed, and the partitions that appeared in or
  left the partition keys of an asset without upstream assets;
- a streaming asset (judged as a whole) when its record, its code or any upstream moved;

(a retired partition is never judged, so keeps no verdict; the retired partitions must be those
of the previous plan, compared by their rules, and `Plan.retired_writes` is found again in full)

and keeps every other verdict of the previous plan. Anything else (the assets or their
dependencies changed, an unreadable table before or now) plans in full. The result equals
`plan(inputs)`, items and order: a property test and `make bench-exactness` check it against the
full plan and an independent oracle.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dagster_partlake.planning.bulk import verdicts
from dagster_partlake.planning.definition import (
    Dependency,
    Key,
    Plan,
    PlanAsset,
    PlanInput,
    StalePartition,
)
from dagster_partlake.planning.planner import (
    candidates_of,
    judge,
    judge_stream,
    plan,
    retired_writes,
    topological_order,
)


@dataclass(frozen=True)
class PlanMemo:
    """A plan with what it was computed from, to plan the next change incrementally."""

    inputs: PlanInput
    plan: Plan
    verdicts: Mapping[str, Mapping[Key, StalePartition]]  # asset -> stale partition -> item
    incremental: bool = False  # whether `plan` came from `replan` (False: a full plan)


def full(inputs: PlanInput) -> PlanMemo:
    """The full plan of `inputs`, memoized."""
    return remembered(inputs, plan(inputs))


def remembered(inputs: PlanInput, result: Plan) -> PlanMemo:
    """The memo of `result`, the plan of `inputs` (made by `plan` or kept from an earlier
    process)."""
    verdicts: dict[str, dict[Key, StalePartition]] = {}
    for item in result.items:
        verdicts.setdefault(item.asset, {})[item.partition] = item
    return PlanMemo(inputs, result, verdicts)


def changed_partitions(old: PlanInput, new: PlanInput) -> dict[str, set[Key]]:
    """Per asset, the partitions whose state or record differs between `old` and `new` (the
    reference for the `changed` argument of `replan`; it compares every partition)."""
    changed: dict[str, set[Key]] = {}
    for table in (old.states, new.states), (old.records, new.records):
        before, after = table
        for asset in set(before) | set(after):
            a, b = before.get(asset, {}), after.get(asset, {})
            if a is b:
                continue
            keys = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
            if keys:
                changed.setdefault(asset, set()).update(keys)
    return changed


def replan(memo: PlanMemo, inputs: PlanInput, changed: Mapping[str, Iterable[Key]]) -> PlanMemo:
    """The plan of `inputs`, equal to `plan(inputs)`, given the plan of `memo.inputs` and the
    partitions whose state or record differs between the two (`changed`, per asset)."""
    old = memo.inputs
    if (
        inputs.unreadable
        or old.unreadable
        or _shape(inputs.assets) != _shape(old.assets)
        or set(inputs.states) != set(old.states)
        or set(inputs.records) != set(old.records)
        # Another rule, or a window that moved: other partitions are retired.
        or dict(inputs.retired) != dict(old.retired)
    ):
        return full(inputs)
    old_code = {a.name: a.code_version for a in old.assets}
    order = topological_order(inputs.assets)
    stale: dict[str, set[Key]] = {}
    verdicts: dict[str, Mapping[Key, StalePartition]] = {}
    flipped: dict[str, set[Key]] = {}  # staleness changed in this pass
    for asset in order:
        previous = memo.verdicts.get(asset.name, {})
        if asset.is_source:
            stale[asset.name] = set()
            continue
        if asset.stream:
            _rejudge_stream(asset, memo, inputs, changed, flipped, stale, verdicts, old_code)
            continue
        own_changed = set(changed.get(asset.name, ()))
        dirty = own_changed | _downstream_of_changes(asset, changed, flipped)
        is_root = not any(d.upstream != asset.name for d in asset.deps)
        if is_root:
            before = old.partition_keys.get(asset.name, ())
            now = inputs.partition_keys.get(asset.name, ())
            if before is not now and before != now:
                dirty |= set(before) ^ set(now)
        if asset.code_version != old_code.get(asset.name):
            dirty |= set(previous) | candidates_of(asset, inputs, stale)
        if not dirty:  # nothing it reads or holds moved: every verdict stands
            stale[asset.name] = set(previous)
            verdicts[asset.name] = previous
            flipped[asset.name] = set()
            continue
        own = [d for d in asset.deps if d.upstream == asset.name]
        # `plan` judges only candidates; for an asset with upstream assets `judge` says None
        # for any other partition, but without them it would call every key `missing`.
        allowed = _root_candidates(asset, inputs) if is_root else None
        if allowed is not None:
            dirty &= allowed
        current = dict(previous)
        stale[asset.name] = set(current)
        if own:
            _rejudge_in_order(asset, own, dirty, own_changed, allowed, inputs, stale, current)
        elif not _rejudge_bulk(asset, dirty, inputs, stale, current):
            for key in dirty:
                _rejudge(asset, key, inputs, stale, current)
        flipped[asset.name] = set(current).symmetric_difference(previous)
        verdicts[asset.name] = current
    items = tuple(
        verdicts[a.name][key]
        for a in order
        if a.name in verdicts
        for key in sorted(verdicts[a.name], key=lambda k: k or "")
    )
    result = Plan(items, tuple(a.name for a in order), (), retired_writes=retired_writes(inputs))
    return PlanMemo(inputs, result, verdicts, incremental=True)


def _rejudge_stream(
    asset: PlanAsset,
    memo: PlanMemo,
    inputs: PlanInput,
    changed: Mapping[str, Iterable[Key]],
    flipped: dict[str, set[Key]],
    stale: dict[str, set[Key]],
    verdicts: dict[str, Mapping[Key, StalePartition]],
    old_code: Mapping[str, str | None],
) -> None:
    """A streaming asset is judged as a whole: again when its record, its code version, or
    anything of an upstream moved; it never makes partitions stale downstream."""
    previous = memo.verdicts.get(asset.name, {})
    moved = asset.code_version != old_code.get(asset.name) or bool(set(changed.get(asset.name, ())))
    for dep in asset.deps:
        if dep.upstream != asset.name:
            moved = moved or bool(set(changed.get(dep.upstream, ())) or flipped.get(dep.upstream))
    stale[asset.name] = set()
    flipped[asset.name] = set()
    if not moved:
        verdicts[asset.name] = previous
        return
    verdict = judge_stream(asset, inputs, stale)
    verdicts[asset.name] = {} if verdict is None else {None: verdict}


def _shape(assets: Iterable[PlanAsset]) -> list[tuple[object, ...]]:
    """What must not change for a plan to be incremental: the assets and their edges."""
    return sorted(
        (
            a.name,
            a.is_source,
            a.stream,
            a.partitioned,
            tuple((d.upstream, d.identity, d.order_only) for d in a.deps),
        )
        for a in assets
    )


def _downstream_of_changes(
    asset: PlanAsset, changed: Mapping[str, Iterable[Key]], flipped: Mapping[str, set[Key]]
) -> set[Key]:
    """The partitions of `asset` mapped from an upstream partition that changed or flipped."""
    keys: set[Key] = set()
    for dep in asset.deps:
        if dep.upstream == asset.name:
            continue  # its own partitions are handled in key order
        moved = set(changed.get(dep.upstream, ())) | flipped.get(dep.upstream, set())
        if dep.identity:
            keys |= moved
            continue
        for upstream_key in moved:
            keys.update(dep.downstream_keys(upstream_key))
    return keys


def _root_candidates(asset: PlanAsset, inputs: PlanInput) -> set[Key]:
    """The partitions `plan` judges of an asset without upstream assets."""
    keys: set[Key] = set(inputs.records.get(asset.name, {}))
    keys.update(inputs.states.get(asset.name, {}))
    keys.update(inputs.partition_keys.get(asset.name, ()))
    if not asset.partitioned:
        keys.add(None)
    return keys


def _rejudge(
    asset: PlanAsset,
    key: Key,
    inputs: PlanInput,
    stale: dict[str, set[Key]],
    current: dict[Key, StalePartition],
) -> None:
    item = judge(
        asset,
        key,
        inputs.states.get(asset.name, {}).get(key),
        inputs.records.get(asset.name, {}).get(key),
        inputs,
        stale,
    )
    if item is None:
        current.pop(key, None)
        stale[asset.name].discard(key)
    else:
        current[key] = item
        stale[asset.name].add(key)


def _rejudge_bulk(
    asset: PlanAsset,
    dirty: set[Key],
    inputs: PlanInput,
    stale: dict[str, set[Key]],
    current: dict[Key, StalePartition],
) -> bool:
    """`_rejudge` of every dirty key on whole columns (`planning.bulk`); False where that does
    not apply."""
    found = verdicts(asset, inputs, stale, list(dirty))
    if found is None:
        return False
    judged, items = found
    for key in judged:
        current.pop(key, None)
        stale[asset.name].discard(key)
    for item in items:
        current[item.partition] = item
        stale[asset.name].add(item.partition)
    return True


def _rejudge_in_order(
    asset: PlanAsset,
    own: list[Dependency],
    dirty: set[Key],
    own_changed: set[Key],
    allowed: set[Key] | None,
    inputs: PlanInput,
    stale: dict[str, set[Key]],
    current: dict[Key, StalePartition],
) -> None:
    """Re-judge an asset ordered on its own partitions in key order (an earlier partition
    before a later one): a partition whose state changed, or whose staleness flipped, makes the
    partitions after it due for judging again."""
    heap = [(k or "", k) for k in dirty]
    heapq.heapify(heap)
    queued = set(dirty)

    def push_later(key: Key) -> None:
        for dep in own:
            for later in dep.downstream_keys(key):
                if later not in queued and (allowed is None or later in allowed):
                    heapq.heappush(heap, (later or "", later))
                    queued.add(later)

    for key in own_changed:  # its later partitions read its state
        push_later(key)
    while heap:
        _, key = heapq.heappop(heap)
        queued.discard(key)
        was = key in current
        _rejudge(asset, key, inputs, stale, current)
        if (key in current) != was:
            push_later(key)
