"""The planner's bulk pass: `judge`'s verdicts on many partitions at once, on whole columns.

A full plan at a million partitions per asset would call `judge` three million times, and a
change of 10% of a source a hundred thousand times per asset. For an asset whose dependencies
all map partitions one to one (identity, no order-only self-dependency) and whose input maps are
column-wise (`StateMap`, `RecordMap` with `IntMap` consumption,
`dagster_partlake.planning.state_maps`), the verdict of `judge` on a partition reads only values
at the same key id: whether it has a record, the code version of the commit that wrote it, its
lastUpdated against the one that commit gave it, and per upstream asset whether that partition
has data, is stale, and has the lastUpdated consumed. Here those are int64 columns (numpy), and
the verdicts, reasons and `because` come out of them through the same rule `judge` calls
(`planning.rule`), in the order `plan` judges (by key). Anything else (plain dicts, another
mapping, a record whose consumption is a dict, an asset or upstream asset with retired
partitions) returns None, and the planner judges one partition at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dagster_partlake.columnar.interner import KEYS, Key
from dagster_partlake.columnar.intmap import ABSENT, NONE, IntMap
from dagster_partlake.planning.definition import (
    REASONS,
    PlanAsset,
    PlanInput,
    StalePartition,
    render_partition,
)
from dagster_partlake.planning.rule import Facts, cited, input_moved, reason_column
from dagster_partlake.planning.state_maps import RecordMap, StateMap

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt

    Column = npt.NDArray[np.int64]
    Mask = npt.NDArray[np.bool_]


def verdicts(
    asset: PlanAsset,
    inputs: PlanInput,
    stale: Mapping[str, set[Key]],
    keys: Sequence[Key] | None = None,
) -> tuple[list[Key], list[StalePartition]] | None:
    """`judge`'s verdicts on the candidates of `asset` (see `planner.candidates_of`), or on
    `keys`: the keys judged (`keys`; none listed for the candidates), and the items of the stale
    ones, sorted as `plan` judges them. None when the bulk pass does not apply (see the module
    docstring)."""
    records = _records(asset, inputs)
    if records is None:
        return None
    import numpy as np

    states = [inputs.states.get(n) for n in (asset.name, *(d.upstream for d in asset.deps))]
    columns = [s.last_updated if isinstance(s, StateMap) else None for s in states]
    ups = [stale.get(d.upstream, set()) for d in asset.deps]
    names: list[Key] | None = None
    if keys is None:
        stale_ids = [_ids_of(np, up) for up in ups]
        maps = [records.which, *(c for c in columns if c is not None)]
        bounds = [int(f(ids)) for ids in stale_ids if len(ids) for f in (np.min, np.max)]
        low, high = _range(maps, bounds)
        ids = np.arange(low, high, dtype=np.int64)
        flags = [np.isin(ids, up) for up in stale_ids]
    else:
        found = KEYS.find_all(list(keys))
        if np.any(found < 0):
            return None  # a key no map holds: `judge` it
        order = np.argsort(found, kind="stable")
        ids = found[order]
        names = [keys[i] for i in order.tolist()]
        flags = [np.fromiter((k in up for k in names), bool, len(names)) for up in ups]
    judged = _judge(np, asset, records, columns, flags, ids, candidates_only=keys is None)
    return _items(np, asset, names, *judged)


def _records(asset: PlanAsset, inputs: PlanInput) -> RecordMap | None:
    """The asset's records if the bulk pass applies to it."""
    if not asset.partitioned or not asset.deps or asset.stream:
        return None
    if inputs.retired and any(n in inputs.retired for n in (asset.name, *_uppers(asset))):
        return None  # retired partitions are decided one key at a time (`planner.judge`)
    if any(not d.identity or d.order_only or d.upstream == asset.name for d in asset.deps):
        return None
    records = inputs.records.get(asset.name, RecordMap.empty())
    found = [inputs.states.get(n) for n in (asset.name, *(d.upstream for d in asset.deps))]
    if not isinstance(records, RecordMap) or any(
        f is not None and not isinstance(f, StateMap) for f in found
    ):
        return None
    if not all(_over_keys(r.consumed.get(d.upstream)) for r in records.sources for d in asset.deps):
        return None
    return records


def _uppers(asset: PlanAsset) -> list[str]:
    return [d.upstream for d in asset.deps]


def _judge(
    np: ModuleType,
    asset: PlanAsset,
    records: RecordMap,
    columns: Sequence[IntMap[Key] | None],
    stale_flags: Sequence[Mask],
    ids: Column,
    *,
    candidates_only: bool,
) -> tuple[Column, Mask, npt.NDArray[np.int8], list[Mask]]:
    """The ids judged (those given, or the candidates among them) with, per id, its reason (an
    index into `REASONS`, -1: fresh) and, per dependency, whether it is in `because`: the
    facts of every id gathered as columns, decided by `planning.rule`."""
    which = _gather(np, records.which, ids)
    has_record = which != ABSENT
    own = _gather(np, columns[0], ids)
    present = has_record | (own != ABSENT)
    code_ok = np.array([r.code_version == asset.code_version for r in records.sources], bool)
    code_changed = (
        ~code_ok[np.where(has_record, which, 0)] if len(code_ok) else np.zeros(len(ids), bool)
    )
    order = _by_source(np, ids, which, len(records.sources))
    inputs_present = np.ones(len(ids), bool)
    inputs_moved = np.zeros(len(ids), bool)
    moved, with_data = [], []
    for dep, upstream, is_stale in zip(asset.deps, columns[1:], stale_flags, strict=True):
        now = _gather(np, upstream, ids)
        has_data = (now != ABSENT) | is_stale
        present |= has_data
        consumed = _consumed(np, records, dep.upstream, order, len(ids))
        moved.append(input_moved(is_stale, _none(np, now), _none(np, consumed)))
        with_data.append(has_data)
        inputs_present &= has_data
        inputs_moved |= moved[-1]
    facts = Facts(
        recorded=has_record,
        unrecorded=~has_record,
        inputs_present=inputs_present,
        code_changed=code_changed,
        own_moved=_none(np, own) != _none(np, _gather(np, records.written, ids)),
        inputs_moved=inputs_moved,
    )
    reasons = reason_column(np, facts, len(ids))
    because = [cited(facts, has, change) for has, change in zip(with_data, moved, strict=True)]
    if not candidates_only:
        present[:] = True
    return ids, present, reasons, because


def _items(
    np: ModuleType,
    asset: PlanAsset,
    names: list[Key] | None,
    ids: Column,
    judged: Mask,
    reasons: npt.NDArray[np.int8],
    because: Sequence[Mask],
) -> tuple[list[Key], list[StalePartition]]:
    """The keys judged (`names`, the keys of `ids` if given; else none are listed) and the items
    of the stale ones, sorted by key as `plan` judges them."""
    rows = np.flatnonzero(judged & (reasons >= 0))
    keys = KEYS.keys_of(ids[rows]) if names is None else [names[i] for i in rows.tolist()]
    upstreams = [d.upstream for d in asset.deps]
    flags = [b[rows].tolist() for b in because]
    reason_of = reasons[rows].tolist()
    items = []
    for i in sorted(range(len(keys)), key=lambda i: keys[i] or ""):
        key = keys[i]
        shown = (render_partition(u, key) for u, f in zip(upstreams, flags, strict=True) if f[i])
        items.append(StalePartition(asset.name, key, REASONS[reason_of[i]], tuple(sorted(shown))))
    return names or [], items


def _ids_of(np: ModuleType, keys: set[Key] | Sequence[Key]) -> Column:
    return np.unique(np.asarray(KEYS.ids_of(list(keys)), np.int64))


def _over_keys(consumed: object) -> bool:
    return consumed is None or (isinstance(consumed, IntMap) and consumed.interner is KEYS)


def _range(maps: Sequence[IntMap[Key]], ids: Sequence[int]) -> tuple[int, int]:
    starts = [m.base for m in maps if len(m.column)] + list(ids)
    ends = [m.base + len(m.column) for m in maps if len(m.column)] + [i + 1 for i in ids]
    return (min(starts), max(ends)) if starts else (0, 0)


def _gather(np: ModuleType, values: IntMap[Key] | None, ids: Column) -> Column:
    """The stored value of each id (`ABSENT` where none)."""
    out = np.full(len(ids), ABSENT, np.int64)
    if values is not None and len(values.column):
        slots = values.slots()
        at = ids - values.base
        inside = (at >= 0) & (at < len(slots))
        out[inside] = slots[at[inside]]
    return out


def _none(np: ModuleType, column: Column) -> Column:
    """No value and a value None compare alike (`judge` sees None for both)."""
    return np.where(column == ABSENT, NONE, column)


def _by_source(
    np: ModuleType, ids: Column, which: Column, sources: int
) -> list[tuple[Column, Column]]:
    """Per source index, the rows that source wrote and their ids."""
    rows = np.flatnonzero(which != ABSENT)
    owners = which[rows]
    sort = np.argsort(owners, kind="stable")
    rows, owners = rows[sort], owners[sort]
    bounds = np.searchsorted(owners, np.arange(sources + 1))
    return [
        (rows[bounds[s] : bounds[s + 1]], ids[rows[bounds[s] : bounds[s + 1]]])
        for s in range(sources)
    ]


def _consumed(
    np: ModuleType,
    records: RecordMap,
    upstream: str,
    order: Sequence[tuple[Column, Column]],
    size: int,
) -> Column:
    """Per row, the lastUpdated of `upstream`'s partition that the write of that key consumed
    (`ABSENT`: none recorded)."""
    out = np.full(size, ABSENT, np.int64)
    for source, (rows, ids) in zip(records.sources, order, strict=True):
        consumed = source.consumed.get(upstream)
        if isinstance(consumed, IntMap) and len(rows):
            out[rows] = _gather(np, consumed, ids)
    return out
