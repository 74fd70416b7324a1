"""The planner's input maps on column-wise storage: `StateMap` and `RecordMap`.

Both are read-only `Mapping`s from partition key to the planner's `PartitionState` / `Record`,
built on `IntMap` columns over the interned partition keys (`dagster_partlake.columnar`): their
values are made on access, so a million partitions cost a few arrays, not a million objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Self, TypeVar, overload

from dagster_partlake.columnar.interner import KEYS, Key
from dagster_partlake.columnar.intmap import ABSENT, NONE, IntMap
from dagster_partlake.planning.definition import PartitionState, Record

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Column = npt.NDArray[np.int64]

V = TypeVar("V")
T = TypeVar("T")


class _Rows(Mapping[Key, V]):
    """A map over interned partition keys whose values are made on access from columns that
    share one range of ids (`_keys` says which keys have a value)."""

    __slots__ = ()

    def _value(self, index: int) -> V:
        """The value at a position of the columns."""
        raise NotImplementedError

    @overload
    def get(self, key: Key, /) -> V | None: ...
    @overload
    def get(self, key: Key, /, default: V | T) -> V | T: ...
    def get(self, key: Key, /, default: object = None) -> object:
        """The key's value, made now (`default` when it has none)."""
        index = self._row(key)
        return default if index < 0 else self._value(index)

    def _keys(self) -> IntMap[str | None]:
        raise NotImplementedError

    def _row(self, key: object) -> int:
        """The key's position in the columns, or -1 when it has no value."""
        return self._keys()._index(key)

    def __getitem__(self, key: Key) -> V:
        index = self._row(key)
        if index < 0:
            raise KeyError(key)
        return self._value(index)

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __iter__(self) -> Iterator[str | None]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def _same(self, other: Self) -> bool:
        """Equal columns (a quick True; False says nothing)."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)) and self._same(other):
            return True
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]


class StateMap(_Rows[PartitionState]):
    """The planner's `PartitionState` per partition key: lastUpdated and version columns."""

    __slots__ = ("last_updated", "versions")

    def __init__(self, last_updated: IntMap[str | None], versions: IntMap[str | None]) -> None:
        self.last_updated = last_updated
        self.versions = versions.aligned(last_updated)  # one position per key in both

    @classmethod
    def build(cls, items: Iterable[tuple[str | None, PartitionState]]) -> StateMap:
        pairs = list(items)
        ids = KEYS.ids_of(k for k, _ in pairs)
        return cls(
            IntMap.from_ids(KEYS, ids, (s.last_updated for _, s in pairs)),
            IntMap.from_ids(KEYS, ids, (s.version for _, s in pairs)),
        )

    def _keys(self) -> IntMap[str | None]:
        return self.last_updated

    def _value(self, index: int) -> PartitionState:
        version = self.versions.raw(index)
        return PartitionState(
            self.last_updated.raw(index), None if version in (NONE, ABSENT) else version
        )

    def _same(self, other: Self) -> bool:
        return self.last_updated == other.last_updated and self.versions == other.versions

    def updated_ids(
        self, ids: Column, last_updated: Column, versions: Column, gone: Column
    ) -> StateMap:
        """`updated` for keys given by id: `last_updated` and `versions` (`NONE` for None) of
        `ids`, the `gone` ids removed."""
        return StateMap(
            self.last_updated.updated_ids(ids, last_updated, gone),
            self.versions.updated_ids(ids, versions, gone),
        )

    def updated(
        self, changes: Mapping[str | None, PartitionState], delete: Iterable[str | None] = ()
    ) -> StateMap:
        gone = list(delete)
        return StateMap(
            self.last_updated.updated({k: s.last_updated for k, s in changes.items()}, gone),
            self.versions.updated({k: s.version for k, s in changes.items()}, gone),
        )


class RecordMap(_Rows[Record]):
    """The planner's `Record` per partition key: which commit wrote it (an index into
    `sources`, each that commit's record without a written lastUpdated) and the lastUpdated the
    write gave the partition."""

    __slots__ = ("sources", "which", "written", "_made")

    def __init__(
        self,
        sources: tuple[Record, ...],
        which: IntMap[str | None],
        written: IntMap[str | None],
    ) -> None:
        self.sources = sources
        self.which = which
        self.written = written.aligned(which)  # one position per key in both
        self._made: dict[tuple[int, int | None], Record] = {}

    @classmethod
    def empty(cls) -> RecordMap:
        return cls((), IntMap(KEYS), IntMap(KEYS))

    def _keys(self) -> IntMap[str | None]:
        return self.which

    def _value(self, index: int) -> Record:
        """One `Record` object per commit and written lastUpdated."""
        source, written = self.which.raw(index), self.written.raw(index)
        made = self._made.get((source, written))
        if made is None:
            last_updated = None if written in (NONE, ABSENT) else written
            made = replace(self.sources[source], written_last_updated=last_updated)
            self._made[(source, written)] = made
        return made

    def _same(self, other: Self) -> bool:
        return (
            other.sources == self.sources
            and other.which == self.which
            and other.written == self.written
        )

    def then(self, later: RecordMap) -> RecordMap:
        """These records with `later`'s (written after them) in place of theirs."""
        if not later:
            return self
        offset = len(self.sources)
        which = {k: offset + s for k, s in later.which.items()}  # type: ignore[operator]
        return RecordMap(
            self.sources + later.sources,
            self.which.updated(which),
            self.written.updated(dict(later.written.items())),
        )
