"""A large commitInfo line read with numpy: a partlake payload without an object per partition.

A commit that wrote a million partitions carries a payload of about 50 MB: the keys it wrote and
its per-partition int columns (a record's lastUpdated of every partition it read, per upstream).
`json.loads` makes a string, an int and a pair per entry (about 250 MB for a moment, and a second
per payload). Here the line's structure is found with numpy instead: its strings (between its
unescaped quotes) and its brackets, commas and colons outside them, with their depth. The
payload's values that hold one entry per partition (`partition_keys`, `rows_by_partition`,
`kept`, and the int columns of its groups: objects of objects, `delta.payload`) are read in bulk
where they have the compact form partlake's writer gives them (strings without escapes, integer
values, no spaces), straight from the line's bytes into `KEYS` (`Interner.ids_of_text`); the rest
of the line is read by `json.loads` with those values cut out. Anything of another form is read
by `json.loads` too, so the result is what `json.loads` gives, in the compact form of payloads
(`CommitPayload.from_commit_info(..., compact=True)`: a `KeyList` and `IntMap`s).
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dagster_partlake.columnar.interner import KEYS, Key, KeyList
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.columnar.memory import give_back
from dagster_partlake.columnar.text import integers, windows
from dagster_partlake.delta.payload import RECORD_KEY, compact_pairs

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ids = npt.NDArray[np.integer[Any]]

_LARGE = 1 << 12  # values shorter than this (bytes) are left to `json`
_CHUNK = 1 << 22  # bytes (or positions) handled at a time
_ROWS = 1 << 18  # keys compared at a time
_OPEN, _CLOSE = b"{[", b"}]"
_PER_PARTITION = ("partition_keys", "rows_by_partition", "kept")


def scan_commit_info(line: bytes) -> dict[str, Any]:
    """The commitInfo of a commit's `{"commitInfo": ...}` line, its partlake record's values
    per partition read in bulk (see the module docstring).

    Raises:
        ValueError: the line is not JSON.
    """
    import numpy as np

    try:
        found = _Line(np, line).bulk_values()
        if found:
            return _with_values(line, found)
    except (ValueError, KeyError, TypeError, IndexError):
        pass  # not of the form read in bulk, or not JSON: `json.loads` says which
    finally:
        give_back()
    return dict(json.loads(bytes(line), object_pairs_hook=compact_pairs)["commitInfo"])


def _with_values(
    line: bytes, found: list[tuple[int, int, tuple[str, ...], object]]
) -> dict[str, Any]:
    """The line read by `json.loads` with the `found` values cut out, then put back."""
    spans = sorted(found, key=lambda span: span[0], reverse=True)
    parts = []
    end = len(line)
    for start, stop, _, _ in spans:  # from the end: the cut line is built once
        parts.append(bytes(line[stop:end]))
        parts.append(b"null")
        end = start
    parts.append(bytes(line[:end]))
    info = dict(
        json.loads(b"".join(reversed(parts)), object_pairs_hook=compact_pairs)["commitInfo"]
    )
    record = info[RECORD_KEY]
    for _, _, path, value in spans:
        target: dict[str, Any] = record
        for name in path[:-1]:
            target = target[name]
        if target[path[-1]] is not None:
            raise ValueError("a member read twice")  # a duplicate key: json kept another
        target[path[-1]] = value
    return info


class _Line:
    """The structure of one JSON line: unescaped quotes, and the positions, bytes and depths
    (after each) of the brackets, commas and colons outside strings."""

    def __init__(self, np: ModuleType, line: bytes) -> None:
        self.np = np
        data = np.frombuffer(line, np.uint8)
        self.data = data
        quotes = _positions(np, data, b'"')
        self.slashes = _positions(np, data, b"\\")
        if len(self.slashes):
            quotes = quotes[~_escaped(np, data, quotes, self.slashes)]
        self.quotes = quotes
        marks = _positions(np, data, b"{}[],:")
        outside = np.empty(len(marks), bool)
        for start in range(0, len(marks), _CHUNK):  # outside strings: an even number before
            part = marks[start : start + _CHUNK]
            outside[start : start + _CHUNK] = np.searchsorted(quotes, part) % 2 == 0
        marks = marks[outside]
        self.marks = marks
        self.kinds = data[marks]
        step = np.zeros(len(marks), np.int8)
        step[np.isin(self.kinds, list(_OPEN))] = 1
        step[np.isin(self.kinds, list(_CLOSE))] = -1
        self.depth = np.cumsum(step, dtype=np.int32)

    def bulk_values(self) -> list[tuple[int, int, tuple[str, ...], object]]:
        """(start, end, path in the record, value) of the record's values read in bulk."""
        if not len(self.marks) or self.kinds[0] != ord("{"):
            return []
        info = dict(self.children(0)).get("commitInfo")
        if info is None or info[2] is None:
            return []
        record = dict(self.children(info[2])).get(RECORD_KEY)
        if record is None or record[2] is None:
            return []
        found: list[tuple[int, int, tuple[str, ...], object]] = []
        for name, (start, end, mark) in self.children(record[2]):
            if mark is None or end - start < _LARGE:
                continue
            if name in _PER_PARTITION:
                value: object = self.keys(mark) if name == "partition_keys" else self.numbers(mark)
                if value is not None:
                    found.append((start, end, (name,), value))
            elif self.opens_objects(mark):  # a group of per-partition columns, maybe
                for column, (s, e, inner) in self.children(mark):
                    value = self.numbers(inner) if inner is not None and e - s >= _LARGE else None
                    if value is not None:
                        found.append((s, e, (name, column), value))
        return found

    def opens_objects(self, mark: int) -> bool:
        """Whether the object opened at `mark` starts with a member whose value is an object
        (checked on its first member only: an object of strings is never walked)."""
        if self.kinds[mark] != ord("{") or mark + 2 >= len(self.marks):
            return False
        colon, opener = mark + 1, mark + 2
        return bool(
            self.kinds[colon] == ord(":")
            and self.kinds[opener] == ord("{")
            and self.marks[opener] == self.marks[colon] + 1
        )

    def children(self, mark: int) -> list[tuple[str, tuple[int, int, int | None]]]:
        """The members of the object opened at mark `mark`: (key, (value start, value end,
        mark opening the value or None for a scalar)). [] if it is not an object."""
        np = self.np
        if self.kinds[mark] != ord("{"):
            return []
        level = int(self.depth[mark])
        close = self.closing(mark)
        inside = slice(mark + 1, close)
        at_level = np.flatnonzero(self.depth[inside] == level) + mark + 1
        colons = at_level[self.kinds[at_level] == ord(":")]
        ends = at_level[self.kinds[at_level] == ord(",")].tolist() + [close]
        members = []
        for colon, end in zip(colons.tolist(), ends, strict=False):
            quote = int(np.searchsorted(self.quotes, self.marks[colon])) - 1
            key = json.loads(self.text(int(self.quotes[quote - 1]), int(self.quotes[quote]) + 1))
            start, stop = int(self.marks[colon]) + 1, int(self.marks[end])
            opener = colon + 1 if colon + 1 < end and self.marks[colon + 1] == start else None
            members.append((str(key), (start, stop, opener)))
        return members

    def closing(self, mark: int) -> int:
        """The mark closing the bracket opened at `mark`."""
        np = self.np
        level = int(self.depth[mark]) - 1
        after = np.flatnonzero(self.depth[mark + 1 :] == level)
        if not len(after):
            raise ValueError("an unclosed bracket")
        return int(after[0]) + mark + 1

    def text(self, start: int, end: int) -> bytes:
        return bytes(self.data[start:end])

    def plain(self, start: int, end: int) -> bool:
        """No escape and no control character between these positions."""
        np = self.np
        if np.searchsorted(self.slashes, start) != np.searchsorted(self.slashes, end):
            return False
        return not bool(np.any(self.data[start:end] < 0x20))

    def strings(self, mark: int, close: int) -> tuple[Ids, Ids] | None:
        """Open and close quotes of the strings between marks `mark` and `close`."""
        np = self.np
        low = np.searchsorted(self.quotes, self.marks[mark])
        high = np.searchsorted(self.quotes, self.marks[close])
        quotes = self.quotes[low:high]
        if len(quotes) % 2:
            return None
        return quotes[0::2], quotes[1::2]

    def keys(self, mark: int) -> KeyList | None:
        """A compact array of plain strings (`["a","b"]`) as partition keys."""
        np = self.np
        close = self.closing(mark)
        found = self.strings(mark, close)
        if self.kinds[mark] != ord("[") or found is None:
            return None
        opens, closes = found
        inner = self.marks[mark + 1 : close]
        expected = np.concatenate([[self.marks[mark]], inner, [self.marks[close]]])
        if len(inner) != max(len(opens) - 1, 0) or np.any(self.kinds[mark + 1 : close] != ord(",")):
            return None
        if len(opens) and not (
            np.array_equal(opens, expected[:-1] + 1) and np.array_equal(closes, expected[1:] - 1)
        ):
            return None
        if not self.plain(int(self.marks[mark]), int(self.marks[close])):
            return None
        return KeyList(_key_ids(np, self.data, opens, closes).astype(np.int32))

    def numbers(self, mark: int) -> IntMap[Key] | None:
        """A compact object of plain strings to integers (`{"a":1,"b":2}`) as an `IntMap`."""
        np = self.np
        close = self.closing(mark)
        found = self.strings(mark, close)
        if self.kinds[mark] != ord("{") or found is None or not len(found[0]):
            return None
        opens, closes = found
        kinds = self.kinds[mark + 1 : close]
        inner = self.marks[mark + 1 : close]
        colons, commas = inner[kinds == ord(":")], inner[kinds == ord(",")]
        if (
            len(colons) != len(opens)
            or len(commas) != len(opens) - 1
            or len(inner) != 2 * len(opens) - 1
        ):
            return None
        after = np.concatenate([commas, [self.marks[close]]])
        if not (
            opens[0] == self.marks[mark] + 1
            and np.array_equal(colons, closes + 1)
            and np.array_equal(opens[1:], commas + 1)
        ):
            return None
        if not self.plain(int(self.marks[mark]), int(self.marks[close])):
            return None
        values = integers(np, self.data, colons + 1, after)
        if values is None:
            return None
        return IntMap.from_ids(KEYS, _key_ids(np, self.data, opens, closes), values)


def _positions(np: ModuleType, data: npt.NDArray[np.uint8], chars: bytes) -> npt.NDArray[np.int32]:
    """Where `data` holds one of `chars`, as int32, a chunk of `data` at a time (a 50 MB line
    needs no 50 MB temporaries)."""
    table = np.zeros(256, bool)
    table[list(chars)] = True
    found = []
    for start in range(0, len(data), _CHUNK):
        part = data[start : start + _CHUNK]
        hits = part == chars[0] if len(chars) == 1 else table[part]
        found.append((np.flatnonzero(hits) + start).astype(np.int32))
    return np.concatenate(found) if found else np.zeros(0, np.int32)


def _escaped(
    np: ModuleType, data: npt.NDArray[np.uint8], quotes: Ids, slashes: Ids
) -> npt.NDArray[np.bool_]:
    """Which quotes an odd run of backslashes escapes."""
    escaped = np.zeros(len(quotes), bool)
    after = np.flatnonzero((data[np.maximum(quotes - 1, 0)] == ord("\\")) & (quotes > 0))
    if not len(after):
        return escaped
    starts = np.maximum.accumulate(np.where(np.r_[True, np.diff(slashes) != 1], slashes, 0))
    chosen = quotes[after]
    run = starts[np.searchsorted(slashes, chosen) - 1]  # the run of backslashes before it
    escaped[after] = (chosen - run) % 2 == 1
    return escaped


# The key sequence interned last, as (key lengths, the keys' bytes joined, their ids): a commit
# that read its upstream's partitions one to one names the keys it wrote again, and so do
# the next asset's records; a sequence equal to it byte for byte is not cut into words again.
_last: tuple[npt.NDArray[np.int32], bytes, npt.NDArray[np.int64]] | None = None


def forget() -> None:
    """Drop the key sequence kept for the next record (a cold plan's reads are done)."""
    global _last
    _last = None


def _key_ids(
    np: ModuleType, data: npt.NDArray[np.uint8], opens: Ids, closes: Ids
) -> npt.NDArray[np.int64]:
    """The `KEYS` ids of the strings between these quotes (plain: no escapes)."""
    global _last
    starts, ends = opens + 1, closes
    lengths = (ends - starts).astype(np.int32)
    joined = None
    if _last is not None and np.array_equal(_last[0], lengths):
        joined = _joined(np, data, starts, ends)
        if joined == _last[1]:
            return _last[2]
    ids = KEYS.ids_of_text(data, starts, ends)
    _last = (lengths, joined if joined is not None else _joined(np, data, starts, ends), ids)
    return ids


def _joined(np: ModuleType, data: npt.NDArray[np.uint8], starts: Ids, ends: Ids) -> bytes:
    """The spans' bytes one after the other, a chunk of spans at a time."""
    parts = []
    for i in range(0, len(starts), _ROWS):
        first = np.asarray(starts[i : i + _ROWS], np.int64)
        last = np.asarray(ends[i : i + _ROWS], np.int64)
        matrix = windows(np, data, first, last)
        parts.append(matrix[np.arange(matrix.shape[1]) < (last - first)[:, None]].tobytes())
    return b"".join(parts)
