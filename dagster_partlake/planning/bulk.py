"""The planner's bulk pass: the candidates shown fresh by whole columns, before `judge`.

A full plan at a million partitions per asset would call `judge` three million times, and nearly
every call finds the partition fresh. For an asset whose dependencies all map partitions one to
one (identity, no order-only self-dependency) and whose input maps are column-wise
(`StateMap`, `RecordMap` with `IntMap` consumption, `dagster_partlake.planning.state_maps`), the
fresh test of `judge` reads, per partition, only values at the same key id: the code version of
the commit that wrote it, its lastUpdated against the one that commit gave it, and per upstream
asset whether that partition is stale and whether its lastUpdated is the one consumed. Here it is
evaluated on whole int64 columns with numpy, and `plan` judges only the rest, one by one, as
before, so the verdicts are `judge`'s own. Anything else (plain dicts, another mapping, a record
whose consumption is a dict) returns None and `plan` judges every candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dagster_partlake.columnar.interner import KEYS, Key
from dagster_partlake.columnar.intmap import ABSENT, NONE, IntMap
from dagster_partlake.planning.planner import PlanAsset, PlanInput
from dagster_partlake.planning.state_maps import RecordMap, StateMap

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt

    Column = npt.NDArray[np.int64]


def unsettled(
    asset: PlanAsset, inputs: PlanInput, stale: Mapping[str, set[Key]]
) -> list[Key] | None:
    """The candidates of `asset` (see `planner.candidates_of`) that are not fresh by the bulk
    test, sorted as `plan` judges them; None when the bulk test does not apply."""
    if not asset.partitioned or not asset.deps:
        return None
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
    # lastUpdated of the asset's partitions, then of each upstream asset's.
    columns = [f.last_updated if isinstance(f, StateMap) else None for f in found]
    maps = [records.which, *(c for c in columns if c is not None)]
    stale_ids = [sorted(KEYS.id(k) for k in stale.get(d.upstream, ())) for d in asset.deps]
    low, high = _range(maps, [i for ids in stale_ids for i in ids])
    if high <= low:
        return None
    import numpy as np

    which = _dense(np, records.which, low, high)
    written = _dense(np, records.written, low, high)
    own = _dense(np, columns[0], low, high)
    present = (which != ABSENT) | (own != ABSENT)
    fresh = which != ABSENT
    code_ok = np.array([r.code_version == asset.code_version for r in records.sources], bool)
    if len(code_ok):
        fresh &= code_ok[np.where(fresh, which, 0)]
    fresh &= _none(np, own) == _none(np, written)
    order = _by_source(np, which, len(records.sources))
    for dep, upstream, ids in zip(asset.deps, columns[1:], stale_ids, strict=True):
        now = _dense(np, upstream, low, high)
        is_stale = np.zeros(high - low, bool)
        is_stale[np.asarray(ids, np.int64) - low] = True
        present |= (now != ABSENT) | is_stale
        consumed = _consumed(np, records, dep.upstream, order, which, low, high)
        fresh &= ~is_stale & (_none(np, now) == _none(np, consumed))
    judged = KEYS.keys_of(np.flatnonzero(present & ~fresh) + low)
    judged.sort(key=lambda k: k or "")
    return judged


def _over_keys(consumed: object) -> bool:
    return consumed is None or (isinstance(consumed, IntMap) and consumed.interner is KEYS)


def _range(maps: Sequence[IntMap[Key]], ids: Sequence[int]) -> tuple[int, int]:
    starts = [m.base for m in maps if len(m.column)] + list(ids)
    ends = [m.base + len(m.column) for m in maps if len(m.column)] + [i + 1 for i in ids]
    return (min(starts), max(ends)) if starts else (0, 0)


def _dense(np: ModuleType, values: IntMap[Key] | None, low: int, high: int) -> Column:
    """`values` as one int64 column over ids `low`..`high` (`ABSENT` where it has none)."""
    out = np.full(high - low, ABSENT, np.int64)
    if values is not None and len(values.column):
        column = values.slots()
        start, end = max(values.base, low), min(values.base + len(column), high)
        if start < end:
            out[start - low : end - low] = column[start - values.base : end - values.base]
    return out


def _none(np: ModuleType, column: Column) -> Column:
    """No value and a value None compare alike (`judge` sees None for both)."""
    return np.where(column == ABSENT, NONE, column)


def _by_source(np: ModuleType, which: Column, sources: int) -> list[Column]:
    """Per source index, the positions of the partitions that source wrote."""
    positions = np.flatnonzero(which != ABSENT)
    owners = which[positions]
    sort = np.argsort(owners, kind="stable")
    positions, owners = positions[sort], owners[sort]
    bounds = np.searchsorted(owners, np.arange(sources + 1))
    return [positions[bounds[s] : bounds[s + 1]] for s in range(sources)]


def _consumed(
    np: ModuleType,
    records: RecordMap,
    upstream: str,
    order: Sequence[Column],
    which: Column,
    low: int,
    high: int,
) -> Column:
    """Per key id, the lastUpdated of `upstream`'s partition that the write of that key
    consumed (`ABSENT`: none recorded)."""
    out = np.full(high - low, ABSENT, np.int64)
    for source, positions in zip(records.sources, order, strict=True):
        consumed = source.consumed.get(upstream)
        if not isinstance(consumed, IntMap) or not len(positions) or not len(consumed.column):
            continue
        column = consumed.slots()
        at = positions + (low - consumed.base)
        inside = (at >= 0) & (at < len(column))
        out[positions[inside]] = column[at[inside]]
    return out
