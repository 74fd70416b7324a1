"""`IntMap`: key -> int (or None) as one int64 array over a range of interned key ids.

At a million partitions per asset, dicts of objects cost gigabytes: every layer (a table's state,
the planner's input, the records, what each write consumed) would keep its own key objects and
boxed values. A map here is one `array` of int64 values over a range of ids of an `Interner`
(`dagster_partlake.columnar.interner`), with `ABSENT` where a key has no value. A map is never
changed in place: `updated` copies its array (milliseconds at a million partitions), so a plan
can keep the previous maps to compare with. Whole maps are built, compared, iterated and updated
with numpy; `get` and `in` of one key look its id up in the interner (`Interner.find`).
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar, cast, overload

from dagster_partlake.columnar.interner import Interner

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ints = Sequence[int] | npt.NDArray[np.int64]
    Column = npt.NDArray[np.int64]

K = TypeVar("K", bound=Hashable)
_T = TypeVar("_T")

ABSENT = -(2**63)  # no value for this id
NONE = ABSENT + 1  # a value that is None
# A map whose values all fit in 32 bits (versions, file counts, record indices) is stored as
# int32, with these in place of ABSENT and NONE: half the memory of a million partitions.
_ABSENT32, _NONE32 = -(2**31), -(2**31) + 1
_NARROW = (-(2**31) + 2, 2**31 - 1)


def _box(value: int) -> int | None:
    return None if value == NONE else value


def _unbox(value: int | None) -> int:
    return NONE if value is None else value


def _numpy() -> ModuleType:
    import numpy

    return numpy


class IntMap(Mapping[K, "int | None"]):
    """key -> int (or None), held as an int64 array over a range of interned key ids."""

    __slots__ = ("interner", "base", "column", "size")

    def __init__(
        self, interner: Interner[K], base: int = 0, column: array | None = None, size: int = 0
    ) -> None:
        self.interner = interner
        self.base = base
        self.column = column if column is not None else array("q")
        self.size = size

    @classmethod
    def of_slots(cls, interner: Interner[K], base: int, slots: Column) -> IntMap[K]:
        """The map of an int64 column over ids `base`.. (`ABSENT` where a key has no value),
        stored as int32 when every value fits."""
        np = _numpy()
        slots = np.ascontiguousarray(slots, np.int64)
        present = slots != ABSENT
        size = int(np.count_nonzero(present))
        values = slots[present & (slots != NONE)]
        if len(slots) and (
            not len(values) or (values.min() >= _NARROW[0] and values.max() <= _NARROW[1])
        ):
            narrow = slots.astype(np.int32)
            narrow[~present] = _ABSENT32
            narrow[slots == NONE] = _NONE32
            column = array("i")
            column.frombytes(narrow.data.cast("B"))
        else:
            column = array("q")
            column.frombytes(slots.data.cast("B"))  # one copy
        return cls(interner, base, column, size)

    @classmethod
    def from_ids(
        cls, interner: Interner[K], ids: Ints, values: Iterable[int | None] | Column
    ) -> IntMap[K]:
        if not len(ids):
            return cls(interner)
        np = _numpy()
        keys = np.asarray(ids, np.int64)
        if isinstance(values, np.ndarray):
            numbers = values.astype(np.int64, copy=False)
        else:
            numbers = np.array([NONE if v is None else v for v in values], np.int64)
        if len(keys) != len(numbers):
            raise ValueError(f"{len(keys)} ids but {len(numbers)} values")
        base = int(keys.min())
        slots = np.full(int(keys.max()) - base + 1, ABSENT, np.int64)
        slots[keys - base] = numbers
        if int(np.count_nonzero(slots != ABSENT)) != len(keys):
            # an id given twice: its last value, as a loop would leave it
            last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]
            slots[keys[last] - base] = numbers[last]
        return cls.of_slots(interner, base, slots)

    @classmethod
    def newest(
        cls, interner: Interner[K], ids: Ints, values: Ints, *, add: bool = False
    ) -> IntMap[K]:
        """Per id, the largest of its `values` (`add`: their sum)."""
        if not len(ids):
            return cls(interner)
        np = _numpy()
        keys = np.asarray(ids, np.int64)
        numbers = np.asarray(values, np.int64)
        if len(keys) != len(numbers):
            raise ValueError(f"{len(keys)} ids but {len(numbers)} values")
        base = int(keys.min())
        at = keys - base
        present = np.zeros(int(keys.max()) - base + 1, bool)
        present[at] = True
        # Unbuffered `at` reductions: no sort, nothing as large as the input but the slots.
        slots = np.zeros(len(present), np.int64)
        if add:
            np.add.at(slots, at, numbers)
        else:
            slots[:] = np.iinfo(np.int64).min
            np.maximum.at(slots, at, numbers)
        slots[~present] = ABSENT
        return cls.of_slots(interner, base, slots)

    @classmethod
    def build(cls, interner: Interner[K], items: Iterable[tuple[K, int | None]]) -> IntMap[K]:
        pairs = list(items)
        return cls.from_ids(interner, interner.ids_of([k for k, _ in pairs]), (v for _, v in pairs))

    def slots(self) -> Column:
        """The map's column as int64 (read-only; `ABSENT` where a key has no value)."""
        np = _numpy()
        if not len(self.column):
            return np.zeros(0, np.int64)
        if self.column.typecode == "q":
            return np.frombuffer(self.column, np.int64)
        narrow = np.frombuffer(self.column, np.int32)
        wide = narrow.astype(np.int64)
        wide[narrow == _ABSENT32] = ABSENT
        wide[narrow == _NONE32] = NONE
        return wide

    def raw(self, index: int) -> int:
        """The stored value at a position of `column` (`ABSENT`, `NONE` as in `slots`)."""
        value: int = self.column[index]
        if self.column.typecode == "i" and value <= _NONE32:
            return ABSENT if value == _ABSENT32 else NONE
        return value

    def id_array(self) -> Column:
        """The ids of the keys with a value, ascending."""
        np = _numpy()
        return np.flatnonzero(self.slots() != ABSENT) + self.base

    def _slot(self, key: object) -> int:
        found = self.interner.find(cast(K, key))
        if found is None:
            return ABSENT
        index = found - self.base
        if index < 0 or index >= len(self.column):
            return ABSENT
        return self.raw(index)

    def _index(self, key: object) -> int:
        """The key's position in `column` when it has a value there, else -1."""
        found = self.interner.find(cast(K, key))
        if found is None:
            return -1
        index = found - self.base
        if index < 0 or index >= len(self.column) or self.raw(index) == ABSENT:
            return -1
        return index

    def aligned(self, like: IntMap[K]) -> IntMap[K]:
        """This map over the same range of ids as `like` (its keys outside it dropped)."""
        if self.base == like.base and len(self.column) == len(like.column):
            return self
        return self.over(like.base, like.base + len(like.column))

    def over(self, low: int, high: int) -> IntMap[K]:
        """This map over ids `low`..`high` (its keys outside them dropped)."""
        np = _numpy()
        slots = np.full(max(high - low, 0), ABSENT, np.int64)
        own = self.slots()
        start, end = max(self.base, low), min(self.base + len(own), high)
        if start < end:
            slots[start - low : end - low] = own[start - self.base : end - self.base]
        return IntMap.of_slots(self.interner, low, slots)

    def __getitem__(self, key: K) -> int | None:
        value = self._slot(key)
        if value == ABSENT:
            raise KeyError(key)
        return _box(value)

    @overload
    def get(self, key: K) -> int | None: ...
    @overload
    def get(self, key: K, default: int | None | _T) -> int | None | _T: ...
    def get(self, key: K, default: object = None) -> object:
        value = self._slot(key)
        return default if value == ABSENT else _box(value)

    def __contains__(self, key: object) -> bool:
        return self._slot(key) != ABSENT

    def ids(self) -> Iterator[int]:
        return iter(self.id_array().tolist())

    def __iter__(self) -> Iterator[K]:
        return self.interner.iter_keys(self.id_array())

    def __len__(self) -> int:
        return self.size

    def items(self) -> Iterator[tuple[K, int | None]]:  # type: ignore[override]
        ids = self.id_array()
        values = (_box(v) for v in self.slots()[ids - self.base].tolist())
        return zip(self.interner.iter_keys(ids), values, strict=True)

    def keys_with(self, value: int, *, among: Column | None = None) -> list[K]:
        """The keys whose value is `value` (of the keys of the ids `among`)."""
        np = _numpy()
        ids = np.flatnonzero(self.slots() == value) + self.base
        if among is not None:
            ids = ids[np.isin(ids, among)]
        return self.interner.keys_of(ids)

    def raw_items(self) -> Iterator[tuple[int, int]]:
        """(id, stored value) pairs: `NONE` for None."""
        ids = self.id_array()
        return zip(ids.tolist(), self.slots()[ids - self.base].tolist(), strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IntMap) and other.interner is self.interner:
            return self.size == other.size and _trimmed(self) == _trimmed(other)
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def updated(
        self, changes: Mapping[K, int | None] | None = None, delete: Iterable[K] = ()
    ) -> IntMap[K]:
        """A copy with `changes` set and the `delete` keys removed."""
        np = _numpy()
        changes = changes or {}
        gone = self.interner.find_all(list(delete))
        keys = list(changes)
        ids = np.asarray(self.interner.ids_of(keys), np.int64)
        values = np.fromiter(map(_unbox, changes.values()), np.int64, len(keys))
        return self.updated_ids(ids, values, gone[gone >= 0])

    def updated_ids(self, ids: Column, values: Column, gone: Column | None = None) -> IntMap[K]:
        """A copy with the keys of `ids` set to `values` (stored values: `NONE` for None) and
        the keys of the `gone` ids removed first."""
        np = _numpy()
        ids = np.asarray(ids, np.int64)
        values = np.asarray(values, np.int64)
        gone = np.zeros(0, np.int64) if gone is None else np.asarray(gone, np.int64)
        patched = self._patched(np, ids, values, gone)
        if patched is not None:
            return patched
        own = self.slots()
        bounds = [(self.base, self.base + len(own))] if len(own) else []
        if len(ids):
            bounds.append((int(ids.min()), int(ids.max()) + 1))
        if not bounds:
            return self
        low, high = min(b[0] for b in bounds), max(b[1] for b in bounds)
        slots = np.full(high - low, ABSENT, np.int64)
        slots[self.base - low : self.base - low + len(own)] = own
        if gone is not None and len(gone):
            gone = gone[(gone >= low) & (gone < high)]
            slots[gone - low] = ABSENT
        slots[ids - low] = values
        return IntMap.of_slots(self.interner, low, slots)

    def _patched(
        self, np: ModuleType, ids: Column, values: Column, gone: Column
    ) -> IntMap[K] | None:
        """`updated_ids` as a copy of `column` with a few slots set, when the ids lie inside its
        range and the values fit its width (a memcpy, not a pass of numpy per step)."""
        end = self.base + len(self.column)
        if not len(self.column) or (len(ids) and (ids.min() < self.base or ids.max() >= end)):
            return None
        narrow = self.column.typecode == "i"
        stored = values[values != NONE]
        if narrow and len(stored) and (stored.min() < _NARROW[0] or stored.max() > _NARROW[1]):
            return None
        if len(np.unique(ids)) != len(ids):
            return None  # an id given twice: `updated_ids` keeps its last value
        absent = _ABSENT32 if narrow else ABSENT
        column = self.column[:]  # a copy
        view = np.frombuffer(column, np.int32 if narrow else np.int64)
        gone = np.unique(gone[(gone >= self.base) & (gone < end)]) - self.base
        size = self.size - int(np.count_nonzero(view[gone] != absent))
        view[gone] = absent
        at = ids - self.base
        size += int(np.count_nonzero(view[at] == absent))
        view[at] = np.where(values == NONE, _NONE32, values) if narrow else values
        del view  # `column` exports no buffer any more
        return IntMap(self.interner, self.base, column, size)

    def __repr__(self) -> str:
        return f"IntMap({dict(self.items())!r})"


def _trimmed(values: IntMap[K]) -> tuple[int, bytes]:
    """The map's array without leading and trailing ABSENT slots, and its first id."""
    np = _numpy()
    slots = values.slots()
    present = np.flatnonzero(slots != ABSENT)
    if not len(present):
        return 0, b""
    start, end = int(present[0]), int(present[-1]) + 1
    return values.base + start, slots[start:end].tobytes()
