"""The staleness rule, written once: from the facts about a partition to its verdict.

The rule is `planning.planner`'s (its module docstring). Two paths gather the facts: `judge`
(`planning.planner`) for one partition at a time, from the planner's input as Python values
(bools, lastUpdated as int or None), and the bulk pass (`planning.bulk`) for whole columns of
partitions at once, as numpy values (boolean masks, int64 columns with `NONE` for None). Both
decide with what is here: `RULE` (each reason, when it applies, and their order), read by
`first_reason` for one partition and by `reason_column` for many, and the facts' own rules
(`input_moved`, `written_after`, `cited`), which use only what the two kinds of values share
(`&`, `|`, `!=`). The bulk pass exists for speed: a cold plan of 3 x 100,000 partitions with
one-to-one mappings costs 0.05 s of CPU on columns, 2.5 s one partition at a time.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from dagster_partlake.planning.definition import Reason

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# A fact: a bool for one partition, a boolean mask (one per partition) for many.
Flag = Any


class Facts(NamedTuple):  # a tuple: made once per partition judged, it must be cheap
    """What the verdict on a partition depends on (one partition's, or many's as masks)."""

    recorded: Flag  # a write of the partition is recorded
    unrecorded: Flag  # the complement of `recorded` (masks and bools negate differently)
    # Every dependency (its own earlier partitions aside) maps the partition to at least one
    # upstream partition with data or due itself: a partition not yet written is due.
    inputs_present: Flag
    code_changed: Flag  # the recorded code version differs from the asset's
    own_moved: Flag  # its lastUpdated differs from the one its write gave it
    inputs_moved: Flag  # some upstream partition it reads moved (`input_moved`, `written_after`)


_tuple_of = tuple.__new__  # `Facts` made without its keyword-handling constructor


def one_partition(
    recorded: bool, inputs_present: bool, code_changed: bool, own_moved: bool, inputs_moved: bool
) -> Facts:
    """The facts of one partition (`judge` makes one per partition judged, so this skips the
    named tuple's constructor, a third of a microsecond each)."""
    return _tuple_of(
        Facts, (recorded, not recorded, inputs_present, code_changed, own_moved, inputs_moved)
    )


# Each reason with when it applies (two facts that must both hold: which partitions it is about,
# and the fact that makes them stale), in the order they are tried: the first that applies is
# the verdict; none: fresh. The order is `REASONS`' (a reason's index means the same in both;
# the planner's property test checks it).
RULE: tuple[tuple[Reason, str, str], ...] = (
    ("missing", "unrecorded", "inputs_present"),
    ("code_changed", "recorded", "code_changed"),
    ("out_of_band", "recorded", "own_moved"),
    ("upstream_changed", "recorded", "inputs_moved"),
)
# RULE with the facts as positions in `Facts` (a partition at a time, this is the hot path).
_RULE_AT = tuple((r, Facts._fields.index(a), Facts._fields.index(b)) for r, a, b in RULE)


def input_moved(is_stale: Flag, now: Any, consumed: Any) -> Flag:
    """Whether an upstream partition moved since a write read it: it is stale, or its
    lastUpdated `now` differs from the one the write `consumed` (one of them None, or `NONE`
    on columns: it appeared or vanished)."""
    return is_stale | (now != consumed)


def written_after(is_stale: bool, now: int | None, written: int | None) -> bool:
    """Whether a partition's previous partition, on an order-only dependency (`merge`,
    `scd2`), moved for it: it is stale, or was written after this one was (its lastUpdated
    `now` is newer than this partition's `written` lastUpdated). One partition at a time: the
    bulk pass leaves assets ordered on themselves to `judge`."""
    return is_stale or (now is not None and written is not None and now > written)


def cited(facts: Facts, with_data: Flag, moved: Flag) -> Flag:
    """Whether an upstream partition is in a stale partition's `because`: for one never
    written (`missing`), the upstream partitions it reads that have data; for one written, the
    ones that moved."""
    return (facts.unrecorded & with_data) | (facts.recorded & moved)


def first_reason(facts: Facts) -> Reason | None:
    """The verdict on one partition: the first reason of `RULE` that applies (None: fresh)."""
    for reason, about, when in _RULE_AT:
        if facts[about] and facts[when]:
            return reason
    return None


def reason_column(np: ModuleType, facts: Facts, size: int) -> npt.NDArray[np.int8]:
    """The verdict on many partitions (`facts` as masks of `size`): per partition the index
    in `REASONS` (`planning.definition`) of the first reason of `RULE` that applies, -1 where
    none does (fresh)."""
    reasons = np.full(size, -1, np.int8)
    for index in reversed(range(len(_RULE_AT))):  # the earlier reasons overwrite the later ones
        _, about, when = _RULE_AT[index]
        reasons[facts[about] & facts[when]] = index
    return reasons
