"""Turn a plan into run-sized batches: which assets and partitions go into one Dagster run.

A batch is one Dagster run: a list of assets sharing a partitions definition, and either one
partition key or one partition range (a box for multi-partitions). An asset whose backfill policy
is `single_run()` gets all its stale partitions in as few ranges as they allow; with
`multi_run(n)` ranges of at most n partitions; without a policy, one partition per run. A
downstream asset joins its upstream's batch when it has the same partitions definition and the
same stale keys (Dagster then runs both steps in order in one run); otherwise it waits until its
stale upstream partitions are written (`deferred`), so upstream always runs before downstream.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dagster import (
    BackfillPolicy,
    MultiPartitionsDefinition,
    PartitionsDefinition,
    TimeWindowPartitionsDefinition,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from dagster_partlake.planner import Key, Plan, PlanAsset, StalePartition

REASONS_TAG = "partlake/reasons"
PARTITIONS_TAG = "partlake/partitions"


@dataclass(frozen=True)
class Batch:
    assets: tuple[str, ...]
    keys: tuple[Key, ...]  # every partition key the run covers, in order
    partition_range: tuple[str, str] | None  # (start, end) when the run is a range
    items: tuple[StalePartition, ...]

    @property
    def partition_key(self) -> str | None:
        """The run's single partition key (None for a range or an unpartitioned run)."""
        return self.keys[0] if self.partition_range is None and self.keys else None

    def run_tags(self) -> dict[str, str]:
        """Tags of the batch's run: the partition range, and why and what, for the UI."""
        shown = [k for k in self.keys if k is not None]
        tags = {
            REASONS_TAG: ", ".join(sorted({i.reason for i in self.items})),
            PARTITIONS_TAG: ", ".join(shown[:10])
            + (f" (+{len(shown) - 10})" if len(shown) > 10 else ""),
        }
        if self.partition_range is not None:
            tags[ASSET_PARTITION_RANGE_START_TAG] = self.partition_range[0]
            tags[ASSET_PARTITION_RANGE_END_TAG] = self.partition_range[1]
        return tags


@dataclass(frozen=True)
class BatchPlan:
    ready: tuple[Batch, ...]
    deferred: tuple[StalePartition, ...]  # wait for their stale upstream partitions


def make_batches(
    plan: Plan,
    assets: Sequence[PlanAsset],
    partitions_defs: Mapping[str, PartitionsDefinition | None],
    policies: Mapping[str, BackfillPolicy | None],
    *,
    blocked: Mapping[str, set[Key]] | None = None,
) -> BatchPlan:
    """Batches that can run now, and the stale partitions that must wait.

    Args:
        plan: from `planner.plan`.
        assets: the planner's assets (for dependencies).
        partitions_defs: per asset.
        policies: backfill policy per asset.
        blocked: partitions not to request now (already running, or backing off after failures);
            their downstream partitions wait too.
    """
    by_name = {a.name: a for a in assets}
    blocked = {k: set(v) for k, v in (blocked or {}).items()}
    stale_by_asset = plan.by_asset()
    waiting: dict[str, set[Key]] = {name: set(keys) for name, keys in blocked.items()}
    groups: list[tuple[list[str], list[StalePartition]]] = []
    group_of: dict[str, int] = {}
    deferred: list[StalePartition] = []
    for name in plan.asset_order:
        items = [
            i for i in stale_by_asset.get(name, []) if i.partition not in blocked.get(name, ())
        ]
        if not items:
            continue
        stale_parents = [
            d.upstream
            for d in by_name[name].deps
            if stale_by_asset.get(d.upstream) or waiting.get(d.upstream)
        ]
        if not stale_parents:
            group_of[name] = len(groups)
            groups.append(([name], items))
            continue
        target = {group_of.get(p) for p in stale_parents}
        keys = {i.partition for i in items}
        if len(target) == 1 and None not in target:
            index = target.pop()
            assert index is not None
            members, group_items = groups[index]
            leader = members[0]
            same_def = partitions_defs.get(leader) == partitions_defs.get(name)
            same_keys = keys == {i.partition for i in group_items if i.asset == leader}
            if same_def and same_keys and not any(waiting.get(p) for p in stale_parents):
                members.append(name)
                group_items.extend(items)
                group_of[name] = index
                continue
        deferred.extend(items)
        waiting.setdefault(name, set()).update(keys)
    ready: list[Batch] = []
    for members, items in groups:
        leader = members[0]
        keys = sorted({i.partition for i in items if i.asset == leader}, key=lambda k: k or "")
        by_key: dict[Key, list[StalePartition]] = {}
        for item in items:
            by_key.setdefault(item.partition, []).append(item)
        for chunk in _chunks(keys, partitions_defs.get(leader), policies.get(leader)):
            chunk_items = tuple(i for k in chunk.keys for i in by_key.get(k, ()))
            ready.append(Batch(tuple(members), chunk.keys, chunk.partition_range, chunk_items))
    return BatchPlan(tuple(ready), tuple(deferred))


@dataclass(frozen=True)
class _Chunk:
    keys: tuple[Key, ...]
    partition_range: tuple[str, str] | None


def _chunks(
    keys: Sequence[Key], partitions_def: PartitionsDefinition | None, policy: BackfillPolicy | None
) -> list[_Chunk]:
    if partitions_def is None or keys == [None]:
        return [_Chunk((None,), None)]
    if policy is None:
        return [_Chunk((k,), None) for k in keys]
    limit = policy.max_partitions_per_run
    grid = _Grid(partitions_def)
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

    def __init__(self, partitions_def: PartitionsDefinition) -> None:
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
        self.position = [
            {k: i for i, k in enumerate(dims[n].get_partition_keys())} for n in self.names
        ]

    def coords(self, key: str) -> tuple[int, ...]:
        """Position per dimension; -1 where the value is not a partition of that dimension."""
        values = key.split("|") if self.multi else [key]
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
