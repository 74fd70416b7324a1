"""`IntMap`: key -> int (or None) as one int64 array over a range of interned key ids.

At a million partitions per asset, dicts of objects cost gigabytes: every layer (a table's state,
the planner's input, the records, what each write consumed) would keep its own key objects and
boxed values. A map here is one `array` of int64 values over a range of ids of an `Interner`
(`dagster_partlake.columnar.interner`), with `ABSENT` where a key has no value. A map is never
changed in place: `updated` copies its array (milliseconds at a million partitions), so a plan
can keep the previous maps to compare with.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar, cast, overload

from dagster_partlake.columnar.interner import Interner

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ints = Sequence[int] | npt.NDArray[np.int64]

K = TypeVar("K", bound=Hashable)
_T = TypeVar("_T")

ABSENT = -(2**63)  # no value for this id
NONE = ABSENT + 1  # a value that is None


def _box(value: int) -> int | None:
    return None if value == NONE else value


def _unbox(value: int | None) -> int:
    return NONE if value is None else value


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
    def from_ids(
        cls, interner: Interner[K], ids: Sequence[int], values: Iterable[int | None]
    ) -> IntMap[K]:
        if not len(ids):
            return cls(interner)
        import numpy as np

        keys = np.asarray(ids, np.int64)
        numbers = np.array([NONE if v is None else v for v in values], np.int64)
        if len(keys) != len(numbers):
            raise ValueError(f"{len(keys)} ids but {len(numbers)} values")
        base = int(keys.min())
        slots = np.full(int(keys.max()) - base + 1, ABSENT, np.int64)
        slots[keys - base] = numbers
        size = int(np.count_nonzero(slots != ABSENT))
        if size != len(keys):  # an id given twice: its last value, as a loop would leave it
            last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]
            slots[keys[last] - base] = numbers[last]
        return cls(interner, base, array("q", slots.tobytes()), size)

    @classmethod
    def newest(
        cls, interner: Interner[K], ids: Ints, values: Ints, *, add: bool = False
    ) -> IntMap[K]:
        """Per id, the largest of its `values` (`add`: their sum)."""
        if not len(ids):
            return cls(interner)
        import numpy as np

        keys = np.asarray(ids, np.int64)
        numbers = np.asarray(values, np.int64)
        if len(keys) != len(numbers):
            raise ValueError(f"{len(keys)} ids but {len(numbers)} values")
        order = np.argsort(keys, kind="stable")
        keys, numbers = keys[order], numbers[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        reduce = np.add if add else np.maximum
        base = int(keys[0])
        slots = np.full(int(keys[-1]) - base + 1, ABSENT, np.int64)
        slots[keys[starts] - base] = reduce.reduceat(numbers, starts)
        return cls(interner, base, array("q", slots.tobytes()), len(starts))

    @classmethod
    def build(cls, interner: Interner[K], items: Iterable[tuple[K, int | None]]) -> IntMap[K]:
        pairs = list(items)
        return cls.from_ids(interner, interner.ids_of(k for k, _ in pairs), (v for _, v in pairs))

    def _slot(self, key: object) -> int:
        found = self.interner.ids.get(cast(K, key))
        if found is None:
            return ABSENT
        index = found - self.base
        if index < 0 or index >= len(self.column):
            return ABSENT
        return self.column[index]

    def _index(self, key: object) -> int:
        """The key's position in `column` when it has a value there, else -1."""
        found = self.interner.ids.get(cast(K, key))
        if found is None:
            return -1
        index = found - self.base
        if index < 0 or index >= len(self.column) or self.column[index] == ABSENT:
            return -1
        return index

    def aligned(self, like: IntMap[K]) -> IntMap[K]:
        """This map over the same range of ids as `like` (its keys outside it dropped)."""
        if self.base == like.base and len(self.column) == len(like.column):
            return self
        column = array("q", [ABSENT]) * len(like.column)
        for i, value in self.raw_items():
            if 0 <= i - like.base < len(column):
                column[i - like.base] = value
        return IntMap(self.interner, like.base, column, len(column) - column.count(ABSENT))

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
        base = self.base
        return (base + i for i, v in enumerate(self.column) if v != ABSENT)

    def __iter__(self) -> Iterator[K]:
        keys, base = self.interner.keys, self.base
        return (keys[base + i] for i, v in enumerate(self.column) if v != ABSENT)

    def __len__(self) -> int:
        return self.size

    def items(self) -> Iterator[tuple[K, int | None]]:  # type: ignore[override]
        keys, base = self.interner.keys, self.base
        return ((keys[base + i], _box(v)) for i, v in enumerate(self.column) if v != ABSENT)

    def raw_items(self) -> Iterator[tuple[int, int]]:
        """(id, stored value) pairs: `NONE` for None."""
        base = self.base
        return ((base + i, v) for i, v in enumerate(self.column) if v != ABSENT)

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
        changes = changes or {}
        gone = [self.interner.ids[k] for k in delete if k in self.interner.ids]
        new = [(self.interner.id(k), _unbox(v)) for k, v in changes.items()]
        ids = [i for i, _ in new]
        base = min([self.base, *ids]) if self.column else min(ids, default=0)
        end = max([self.base + len(self.column), *(i + 1 for i in ids)])
        slots = array("q", [ABSENT]) * (self.base - base) + self.column
        slots.extend(array("q", [ABSENT]) * (end - base - len(slots)))
        size = self.size
        for i in gone:
            if 0 <= i - base < len(slots) and slots[i - base] != ABSENT:
                slots[i - base] = ABSENT
                size -= 1
        for i, value in new:
            size += slots[i - base] == ABSENT
            slots[i - base] = value
        return IntMap(self.interner, base, slots, size)

    def __repr__(self) -> str:
        return f"IntMap({dict(self.items())!r})"


def _trimmed(values: IntMap[K]) -> tuple[int, array]:
    """The map's array without leading and trailing ABSENT slots, and its first id."""
    slots = values.column
    start, end = 0, len(slots)
    while start < end and slots[start] == ABSENT:
        start += 1
    while end > start and slots[end - 1] == ABSENT:
        end -= 1
    return values.base + start if start < end else 0, slots[start:end]
