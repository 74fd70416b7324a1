"""Interned keys: each partition key or partition-value tuple held once per process.

A key's id is its position in its interner's list (ids are never reused), so a map over keys can
be an array over a range of ids (`dagster_partlake.columnar.intmap`). Two interners are shared by
every table and plan of the process: `KEYS` (Dagster partition keys) and `VALUES` (a table's
partition values in its partition column order).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# A Dagster partition key as partlake passes it around; None for an unpartitioned asset.
Key = str | None
# A table partition's values, in the table's partition column order.
Values = tuple[str | None, ...]


class Interner(Generic[K]):
    """Ids for keys, each key object held once (ids are never reused)."""

    __slots__ = ("ids", "keys")

    def __init__(self) -> None:
        self.ids: dict[K, int] = {}
        self.keys: list[K] = []

    def id(self, key: K) -> int:
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.keys)
            self.keys.append(key)
        return found

    def ids_of(self, keys: Iterable[K]) -> list[int]:
        """The id of each key, interning the new ones in order."""
        keys = list(keys)
        found = list(map(self.ids.get, keys))
        if None in found:  # some are new
            new = self.id
            found = [new(k) if i is None else i for k, i in zip(keys, found, strict=True)]
        return found  # type: ignore[return-value]

    def canonical(self, key: K) -> K:
        """The interned object equal to `key` (so equal keys share one object)."""
        return self.keys[self.id(key)]


# Partition keys and record partition ids (str; None for an unpartitioned asset).
KEYS: Interner[Key] = Interner()
# Table partition values, in the table's partition column order.
VALUES: Interner[Values] = Interner()
