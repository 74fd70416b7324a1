"""Interned keys: each partition key or partition-value tuple stored once per process, compactly.

A key's id is its position in its interner (ids are never reused), so a map over keys can be an
array over a range of ids (`dagster_partlake.columnar.intmap`). Two interners are shared by
every table and plan of the process: `KEYS` (Dagster partition keys) and `VALUES` (a table's
partition values in its partition column order).

A million partitions per table made a dict entry, a key object and an int object per key
(about 135 bytes each, twice). Here a key is split into words (a partition key at its `|`, a
tuple of values into its values), each distinct word is held once (a million partitions have
ten thousand days and a hundred regions), and a key is the int32 codes of its words: about 24
bytes per key with its index. The index is an open-addressing hash table of int32 ids, at most
half full, keyed by a 64-bit hash of the codes (keys of equal hashes are told apart by their
codes), probed for a whole column of keys at once with numpy: a column is looked up and interned
without an object per key (`ids_of_words`, `ids_of_text`). Keys looked up one at a time are
memoized in a dict (`find`), which holds only those. Ids and lookups are exact: nothing is
decided by a hash alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from dagster_partlake.columnar.text import text_words

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ids = npt.NDArray[np.int64]
    Codes = npt.NDArray[np.int32]
    Positions = npt.NDArray[np.integer[Any]]

K = TypeVar("K", bound=Hashable)

# A Dagster partition key as partlake passes it around; None for an unpartitioned asset.
Key = str | None
# A table partition's values, in the table's partition column order.
Values = tuple[str | None, ...]
# A word of a key: a part of a partition key, or one value of a partition.
Word = str | None
# A column of words: codes into a list of words (as `ids_of_words` takes them).
WordColumn = tuple["Codes", Sequence[Word]]

_MASK = (1 << 64) - 1
_K1, _K2, _K3 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_SMALL = 32  # fewer keys than this are interned one at a time
_TEXT = 4096  # more string keys than this are split as one text (`ids_of_text`)
_ROWS = 1 << 18  # keys interned in bulk at a time


def _numpy() -> ModuleType:
    import numpy

    return numpy


def _hash(codes: Sequence[int]) -> int:
    """The 64-bit hash of a key's word codes (`_hashes` computes the same on columns)."""
    h = (len(codes) * _K1) & _MASK
    for code in codes:
        h = ((h ^ (code + 1)) * _K2) & _MASK
        h ^= h >> 29
    h = (h * _K3) & _MASK
    return h ^ (h >> 32)


def _hashes(np: ModuleType, columns: Sequence[Codes], size: int) -> npt.NDArray[np.uint64]:
    """`_hash` of every row of `columns` (uint64 arithmetic wraps as `_MASK` does)."""
    h = np.full(size, (len(columns) * _K1) & _MASK, np.uint64)
    for column in columns:
        h ^= column.astype(np.uint64) + np.uint64(1)
        h *= np.uint64(_K2)
        h ^= h >> np.uint64(29)
    h *= np.uint64(_K3)
    h ^= h >> np.uint64(32)
    return h


class Interner(Generic[K]):
    """Ids for keys, each key stored once as the codes of its words (ids are never reused).

    Args:
        split: a key's words (`join` of them gives the key back).
        join: the key of some words.
        split_all: `split` of each of many keys.
        separator: for keys that are strings, the character `split` cuts them at (keys can
            then be interned from text, `ids_of_text`).
    """

    def __init__(
        self,
        split: Callable[[K], Sequence[Word]],
        join: Callable[[Sequence[Word]], K],
        split_all: Callable[[list[K]], list[Sequence[Word]]] | None = None,
        separator: str | None = None,
    ) -> None:
        self._split, self._join = split, join
        self._split_all = split_all or (lambda keys: [split(k) for k in keys])
        self.separator = separator
        self._lock = threading.RLock()
        self.words: list[Word] = []  # each distinct word once; a word's code is its position
        self._word_codes: dict[Word, int] = {}
        self._size = 0  # keys
        self._used = 0  # codes
        self._codes: Codes | None = None  # the words of key i: _codes[_starts[i]:_starts[i + 1]]
        self._starts: Codes | None = None  # int32: a billion keys of two words fit
        # An open-addressing hash table of ids (-1: empty), at most half full, probed from
        # `hash & mask` onwards: a column of keys is looked up in a few numpy passes.
        self._table: npt.NDArray[np.int32] | None = None
        self._memo: dict[K, int] = {}

    def __len__(self) -> int:
        return self._size

    def __copy__(self) -> Interner[K]:
        return self  # ids mean something only in the one interner that gave them

    def __deepcopy__(self, memo: dict[int, object]) -> Interner[K]:
        return self

    # ---- one key at a time ---------------------------------------------------------------

    def find(self, key: K) -> int | None:
        """The key's id, or None if it was never interned."""
        found = self._memo.get(key)
        if found is not None:
            return found
        codes = [self._word_codes.get(w, -1) for w in self._split(key)]
        if -1 in codes:
            return None
        with self._lock:
            found = self._search(codes, _hash(codes))
        if found is not None:
            self._memo[key] = found
        return found

    def id(self, key: K) -> int:
        """The key's id, interning it if new."""
        found = self.find(key)
        if found is not None:
            return found
        with self._lock:
            found = self.find(key)  # another thread may have interned it meanwhile
            if found is None:
                codes = self._word_codes_of(self._split(key))
                found = self._append_one(codes)
                self._insert_one(found, _hash(codes))
                self._memo[key] = found
            return found

    def key(self, key_id: int) -> K:
        """The key of an id."""
        if not 0 <= key_id < self._size:
            raise IndexError(f"key id {key_id} was never given")
        assert self._codes is not None and self._starts is not None
        start, end = int(self._starts[key_id]), int(self._starts[key_id + 1])
        words = self.words
        return self._join([words[c] for c in self._codes[start:end].tolist()])

    # ---- many keys at once ---------------------------------------------------------------

    def ids_of(self, keys: Iterable[K]) -> list[int]:
        """The id of each key, interning the new ones."""
        keys = keys if isinstance(keys, list) else list(keys)
        if len(keys) < _SMALL:
            return [self.id(k) for k in keys]
        np = _numpy()
        ids = np.empty(len(keys), np.int64)
        for rows, columns in self._word_groups(np, keys):
            ids[rows] = self.ids_of_words(columns, len(rows))
        return ids.tolist()

    def find_all(self, keys: Sequence[K]) -> Ids:
        """The id of each key, -1 for keys never interned (none is interned here)."""
        np = _numpy()
        found = np.full(len(keys), -1, np.int64)
        if len(keys) < _SMALL:
            for i, key in enumerate(keys):
                one = self.find(key)
                found[i] = -1 if one is None else one
            return found
        get = self._word_codes.get
        for rows, columns in self._word_groups(np, list(keys)):
            known = np.ones(len(rows), bool)
            codes = []
            for local, words in columns:
                mapped = np.fromiter((get(w, -1) for w in words), np.int64, len(words))[local]
                known &= mapped >= 0
                codes.append(mapped)
            codes = [c[known].astype(np.int32) for c in codes]
            with self._lock:
                hashes = _hashes(np, codes, int(known.sum()))
                found[rows[known]] = self._lookup(np, codes, hashes)
        return found

    def _word_groups(self, np: ModuleType, keys: list[K]) -> list[tuple[Ids, list[WordColumn]]]:
        """Keys as their words: per number of words, the rows that have it and their words as
        columns (codes into each column's distinct words). Many string keys are cut as one
        text, with numpy (`ids_of_text`); others one at a time."""
        if self.separator is not None and len(keys) >= _TEXT and None not in keys:
            joined = "\x00".join(keys)  # type: ignore[arg-type]
            if joined.count("\x00") == len(keys) - 1:  # no key holds the joint
                data = np.frombuffer(joined.encode(), np.uint8)
                cuts = np.flatnonzero(data == 0)
                starts = np.concatenate([[0], cuts + 1])
                ends = np.concatenate([cuts, [len(data)]])
                return list(text_words(np, data, starts, ends, ord(self.separator)))  # type: ignore[arg-type]
        rows = self._split_all(keys)
        arities = np.fromiter(map(len, rows), np.int64, len(rows))
        groups: list[tuple[Ids, list[WordColumn]]] = []
        for arity in np.unique(arities).tolist():
            at = np.flatnonzero(arities == arity)
            chosen = rows if len(at) == len(rows) else [rows[i] for i in at.tolist()]
            columns: list[WordColumn] = []
            for words in zip(*chosen, strict=True) if arity else ():
                distinct = {w: i for i, w in enumerate(dict.fromkeys(words))}
                local = np.fromiter(map(distinct.__getitem__, words), np.int32, len(words))
                columns.append((local, list(distinct)))
            groups.append((at, columns))
        return groups

    def ids_of_words(self, columns: Sequence[WordColumn], size: int) -> Ids:
        """The id of each of `size` keys given column-wise as words (a key's words are one row
        of the columns: codes into each column's own list of words), interning the new ones in
        order of first appearance, without an object per key."""
        np = _numpy()
        with self._lock:
            codes = [
                np.fromiter((self._word_code(w) for w in words), np.int32, len(words))
                for _, words in columns
            ]
        ids = np.empty(size, np.int64)
        for start in range(0, size, _ROWS):  # a chunk at a time: temporaries stay small
            chunk = [local[start : start + _ROWS] for local, _ in columns]
            mapped = [c[at] for c, at in zip(codes, chunk, strict=True)]
            ids[start : start + _ROWS] = self._bulk(np, mapped, min(_ROWS, size - start))
        return ids

    def ids_of_text(self, data: npt.NDArray[np.uint8], starts: Positions, ends: Positions) -> Ids:
        """The ids of keys given as spans of UTF-8 text (`data[starts[i]:ends[i]]`), split at
        `separator` with numpy, interning the new ones: no string is made but one per distinct
        word."""
        np = _numpy()
        if self.separator is None:
            raise ValueError("this interner's keys are not text")
        ids = np.empty(len(starts), np.int64)
        if not len(starts):
            return ids
        for start in range(0, len(starts), _ROWS):  # a chunk at a time: temporaries stay small
            chunk = slice(start, start + _ROWS)
            low, high = int(starts[chunk].min()), int(ends[chunk].max())  # the text they cover
            first = np.asarray(starts[chunk], np.int64) - low
            last = np.asarray(ends[chunk], np.int64) - low
            found = ids[chunk]
            for rows, columns in text_words(np, data[low:high], first, last, ord(self.separator)):
                found[rows] = self.ids_of_words(columns, len(rows))
        return ids

    def words_of(self, ids: Ids) -> list[Codes] | None:
        """The word codes (into `words`) of keys as columns, one per word; None when the keys
        do not all have the same number of words."""
        np = _numpy()
        ids = np.asarray(ids, np.int64)
        if not len(ids):
            return []
        starts, ends = self._starts_of(np, ids)
        arity = ends[0] - starts[0]
        if not np.all(ends - starts == arity):
            return None
        assert self._codes is not None
        return [self._codes[starts + i] for i in range(int(arity))]

    def keys_of(self, ids: Ids | Sequence[int]) -> list[K]:
        """The key of each id, in order."""
        np = _numpy()
        wanted: Ids = np.asarray(ids, np.int64)
        columns = self.words_of(wanted)
        if columns is None:
            return [self.key(i) for i in wanted.tolist()]
        words, join = self.words, self._join
        if not columns:
            return [join(()) for _ in range(len(wanted))]
        rows = zip(*([words[c] for c in column.tolist()] for column in columns), strict=True)
        return [join(row) for row in rows]

    def iter_keys(self, ids: Ids, chunk: int = 1 << 16) -> Iterator[K]:
        """`keys_of(ids)`, made a chunk at a time."""
        for start in range(0, len(ids), chunk):
            yield from self.keys_of(ids[start : start + chunk])

    # ---- storage ---------------------------------------------------------------------------

    def _word_code(self, word: Word) -> int:
        code = self._word_codes.get(word)
        if code is None:
            code = self._word_codes[word] = len(self.words)
            self.words.append(word)
        return code

    def _word_codes_of(self, words: Sequence[Word]) -> list[int]:
        return [self._word_code(w) for w in words]

    def _starts_of(self, np: ModuleType, ids: Ids) -> tuple[Codes, Codes]:
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self._size):
            raise IndexError("an id that was never given")
        assert self._starts is not None
        return self._starts[ids], self._starts[ids + 1]

    def _reserve(self, np: ModuleType, keys: int, codes: int) -> None:
        """Room for `keys` more keys of `codes` more word codes."""
        if self._used + codes >= 2**31:
            raise OverflowError("more than 2**31 words of keys in one interner")
        if self._codes is None or self._starts is None:
            self._codes = np.zeros(max(1024, codes), np.int32)
            self._starts = np.zeros(max(1024, keys) + 1, np.int32)
            return
        if self._used + codes > len(self._codes):
            grown = np.zeros(max(2 * len(self._codes), self._used + codes), np.int32)
            grown[: self._used] = self._codes[: self._used]
            self._codes = grown
        if self._size + keys + 1 > len(self._starts):
            starts = np.zeros(max(2 * len(self._starts), self._size + keys + 1), np.int32)
            starts[: self._size + 1] = self._starts[: self._size + 1]
            self._starts = starts

    def _append_one(self, codes: list[int]) -> int:
        """A new key of these word codes (the caller puts it into the table)."""
        np = _numpy()
        self._reserve(np, 1, len(codes))
        assert self._codes is not None and self._starts is not None
        self._codes[self._used : self._used + len(codes)] = codes
        self._used += len(codes)
        self._size += 1
        self._starts[self._size] = self._used
        return self._size - 1

    def _append(self, np: ModuleType, columns: Sequence[Codes], size: int) -> Ids:
        """New keys, one per row of `columns`; their ids."""
        arity = len(columns)
        self._reserve(np, size, size * arity)
        assert self._codes is not None and self._starts is not None
        block = self._codes[self._used : self._used + size * arity].reshape(size, arity)
        for i, column in enumerate(columns):
            block[:, i] = column
        first = self._size
        self._starts[first + 1 : first + size + 1] = self._used + arity * np.arange(
            1, size + 1, dtype=np.int64
        )
        self._used += size * arity
        self._size += size
        return np.arange(first, first + size, dtype=np.int64)

    # ---- the index ---------------------------------------------------------------------------

    def _search(self, codes: Sequence[int], h: int) -> int | None:
        """The id of these word codes (under the lock)."""
        table = self._table
        if table is None:
            return None
        assert self._codes is not None and self._starts is not None
        mask = len(table) - 1
        slot = h & mask
        wanted = list(codes)
        while (found := int(table[slot])) >= 0:
            start, end = int(self._starts[found]), int(self._starts[found + 1])
            if self._codes[start:end].tolist() == wanted:
                return found
            slot = (slot + 1) & mask
        return None

    def _insert_one(self, key_id: int, h: int) -> None:
        """Put a key just appended into the table."""
        if self._make_room(_numpy(), 0):
            return  # the table was rebuilt with every key, this one included
        assert self._table is not None
        table = self._table
        mask = len(table) - 1
        slot = h & mask
        while table[slot] >= 0:
            slot = (slot + 1) & mask
        table[slot] = key_id

    def _make_room(self, np: ModuleType, more: int) -> bool:
        """A table at most half full with `more` keys more; whether it was rebuilt (with every
        key interned so far)."""
        needed = 2 * (self._size + more)
        if self._table is not None and len(self._table) >= needed:
            return False
        if self._size + more >= 2**31 - 1:
            raise OverflowError("more than 2**31 keys in one interner")
        size = 1 << max(10, (needed - 1).bit_length())
        self._table = None  # the old table's memory, before the new one's
        self._table = np.full(size, -1, np.int32)
        for first in range(0, self._size, _ROWS):
            assert self._codes is not None
            ids = np.arange(first, min(first + _ROWS, self._size), dtype=np.int64)
            starts, ends = self._starts_of(np, ids)
            lengths = ends - starts
            for arity in np.unique(lengths).tolist():
                chosen = np.flatnonzero(lengths == arity)
                columns = [self._codes[starts[chosen] + i] for i in range(arity)]
                self._insert_many(np, ids[chosen], _hashes(np, columns, len(chosen)))
        return True

    def _insert_many(self, np: ModuleType, ids: Ids, hashes: npt.NDArray[np.uint64]) -> None:
        """Put ids into the table (which has room), each at the first free slot of its probe."""
        assert self._table is not None
        table = self._table
        mask = len(table) - 1
        slots = (hashes & np.uint64(mask)).astype(np.int64)
        pending = np.arange(len(ids))
        while len(pending):
            at = slots[pending]
            free = table[at] < 0
            movers = np.flatnonzero(free)
            # Rows aiming at one free slot: one of them lands there (whichever numpy writes
            # last), the others see it taken and probe on.
            table[at[movers]] = ids[pending[movers]]
            placed = movers[table[at[movers]] == ids[pending[movers]]]
            left = np.ones(len(pending), bool)
            left[placed] = False
            pending = pending[left]
            slots[pending] = (slots[pending] + 1) & mask

    def _lookup(
        self, np: ModuleType, columns: Sequence[Codes], hashes: npt.NDArray[np.uint64]
    ) -> Ids:
        """The ids of the rows of `columns` (-1 where not interned), probing for all at once."""
        found = np.full(len(hashes), -1, np.int64)
        table = self._table
        if table is None:
            return found
        mask = len(table) - 1
        slots = (hashes & np.uint64(mask)).astype(np.int64)
        pending = np.arange(len(hashes))
        while len(pending):
            candidates = table[slots[pending]]
            live = candidates >= 0  # an empty slot ends the probe: not interned
            pending, candidates = pending[live], candidates[live]
            same = self._same_codes(np, candidates, [c[pending] for c in columns])
            found[pending[same]] = candidates[same]
            pending = pending[~same]
            slots[pending] = (slots[pending] + 1) & mask
        return found

    def _bulk(self, np: ModuleType, columns: Sequence[Codes], size: int) -> Ids:
        """The ids of `size` keys of these word code columns, interning the new ones."""
        if not size:
            return np.zeros(0, np.int64)
        with self._lock:
            hashes = _hashes(np, columns, size)
            ids = self._lookup(np, columns, hashes)
            new = np.flatnonzero(ids < 0)
            if len(new):
                ids[new] = self._add_new(np, [c[new] for c in columns], hashes[new])
            return ids

    def _same_codes(
        self, np: ModuleType, ids: Ids, columns: Sequence[Codes]
    ) -> npt.NDArray[np.bool_]:
        assert self._codes is not None and self._starts is not None
        starts, ends = self._starts[ids], self._starts[ids + 1]
        same = ends - starts == len(columns)
        for i, column in enumerate(columns):
            at = np.minimum(starts + i, max(self._used - 1, 0))
            same &= self._codes[at] == column
        return same

    def _add_new(
        self, np: ModuleType, columns: Sequence[Codes], hashes: npt.NDArray[np.uint64]
    ) -> Ids:
        """Ids for rows not interned yet, equal rows sharing one, in order of first appearance."""
        _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        representative = first[inverse]
        if any(np.any(c != c[representative]) for c in columns):
            return self._one_by_one(np, columns)  # two different rows with one hash
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        rows = first[order]
        self._make_room(np, len(rows))
        ids = self._append(np, [c[rows] for c in columns], len(rows))
        self._insert_many(np, ids, hashes[rows])
        return ids[rank[inverse]]

    def _one_by_one(self, np: ModuleType, columns: Sequence[Codes]) -> Ids:
        """Ids for new rows a row at a time: for rows whose hash another row shares."""
        size = len(columns[0]) if columns else 0
        ids = np.empty(size, np.int64)
        for i, codes in enumerate(zip(*(c.tolist() for c in columns), strict=True)):
            h = _hash(codes)
            found = self._search(codes, h)
            if found is None:
                found = self._append_one(list(codes))
                self._insert_one(found, h)
            ids[i] = found
        return ids


def _split_key(key: Key) -> Sequence[Word]:
    return () if key is None else key.split("|")


def _split_keys(keys: list[Key]) -> list[Sequence[Word]]:
    return [() if k is None else k.split("|") for k in keys]


def _join_key(words: Sequence[Word]) -> Key:
    return None if not words else "|".join(words)  # type: ignore[arg-type]


def _split_values(values: Values) -> Sequence[Word]:
    return values


def _split_all_values(values: list[Values]) -> list[Sequence[Word]]:
    return values  # type: ignore[return-value]


def _join_values(words: Sequence[Word]) -> Values:
    return tuple(words)


# Partition keys and record partition ids (str; None for an unpartitioned asset). A key's words
# are its parts between `|` (a multi-partition key's dimension keys).
KEYS: Interner[Key] = Interner(_split_key, _join_key, _split_keys, "|")
# Table partition values, in the table's partition column order.
VALUES: Interner[Values] = Interner(_split_values, _join_values, _split_all_values)


class KeyList(Sequence[str]):
    """Partition keys held as their ids in `KEYS` (int32): the keys a commit of a million
    partitions wrote, without a string per key. Equal to any sequence of the same keys."""

    __slots__ = ("ids",)

    def __init__(self, ids: Positions) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> KeyList: ...
    def __getitem__(self, index: int | slice) -> str | KeyList:
        if isinstance(index, slice):
            return KeyList(self.ids[index])
        return KEYS.key(int(self.ids[index]))  # type: ignore[return-value]

    def __iter__(self) -> Iterator[str]:
        return KEYS.iter_keys(self.ids.astype("int64"))  # type: ignore[return-value]

    def __contains__(self, key: object) -> bool:
        found = KEYS.find(key) if isinstance(key, str) else None
        return found is not None and bool((self.ids == found).any())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeyList):
            return len(self.ids) == len(other.ids) and bool((self.ids == other.ids).all())
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"KeyList({list(self)!r})"
