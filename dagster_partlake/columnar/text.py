"""Text held as bytes, cut into words and numbers with numpy: no Python object per piece.

A partition key in a commit record of a million partitions is a span of the record's bytes;
these functions turn many spans at once into codes of their distinct texts (each distinct text
decoded once) or into integers, for the interners (`Interner.ids_of_text`) and the commit record
reader (`dagster_partlake.delta.commit_scan`).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ids = npt.NDArray[np.int64]
    Bytes = npt.NDArray[np.uint8]
    Codes = npt.NDArray[np.int32]

_DIGITS = 18  # longer integers are left to `json` (10**18 still fits in int64)


def windows(np: ModuleType, data: Bytes, starts: Ids, ends: Ids) -> Bytes:
    """The spans `data[starts[i]:ends[i]]` as the rows of a matrix as wide as the longest,
    zero after each span's end."""
    lengths = ends - starts
    width = int(lengths.max()) if len(lengths) else 0
    matrix = np.zeros((len(starts), width), np.uint8)
    if not width:
        return matrix
    tail = starts > len(data) - width  # windows that would run past the end: copied apart
    if not tail.all():
        view = np.lib.stride_tricks.sliding_window_view(data, width)
        matrix[~tail] = view[starts[~tail]]
    for row in np.flatnonzero(tail).tolist():
        piece = data[starts[row] : ends[row]]
        matrix[row, : len(piece)] = piece
    matrix *= np.arange(width) < lengths[:, None]
    return matrix


def span_words(np: ModuleType, data: Bytes, starts: Ids, ends: Ids) -> tuple[Codes, list[str]]:
    """Spans of UTF-8 text as codes into their distinct texts (each decoded once)."""
    matrix = windows(np, data, starts, ends)
    width = matrix.shape[1]
    if not width:
        return np.zeros(len(starts), np.int32), [""]
    inside = np.arange(width) < (ends - starts)[:, None]
    if np.any((matrix == 0) & inside):  # a NUL inside a text: fixed-width strings drop it
        spans = zip(starts.tolist(), ends.tolist(), strict=True)
        texts = [bytes(data[a:b]).decode() for a, b in spans]
        distinct = {t: i for i, t in enumerate(dict.fromkeys(texts))}
        codes = np.fromiter(map(distinct.__getitem__, texts), np.int32, len(texts))
        return codes, list(distinct)
    keyed = np.ascontiguousarray(matrix).view(f"S{width}").reshape(-1)
    used, inverse = np.unique(keyed, return_inverse=True)
    words = [bytes(u).decode() for u in used.tolist()]
    return inverse.reshape(-1).astype(np.int32), words


def text_words(
    np: ModuleType, data: Bytes, starts: Ids, ends: Ids, separator: int
) -> list[tuple[Ids, list[tuple[Codes, list[str]]]]]:
    """Text spans cut at the byte `separator`: per number of words, the rows that have it and
    their words as columns (codes into each column's distinct words)."""
    cuts = np.flatnonzero(data == separator)
    low = np.searchsorted(cuts, starts)
    counts = np.searchsorted(cuts, ends) - low
    groups = []
    for count in np.unique(counts).tolist():
        rows = np.flatnonzero(counts == count)
        first, last, at = starts[rows], ends[rows], low[rows]
        columns = []
        for i in range(count + 1):
            begin = first if i == 0 else cuts[at + i - 1] + 1
            end = last if i == count else cuts[at + i]
            columns.append(span_words(np, data, begin, end))
        groups.append((rows, columns))
    return groups


def integers(np: ModuleType, data: Bytes, starts: Ids, ends: Ids) -> Ids | None:
    """The JSON integer literals at these spans (`-?(0|[1-9][0-9]*)`, at most 18 digits);
    None if any span is something else."""
    if not len(starts):
        return np.zeros(0, np.int64)
    negative = data[np.minimum(starts, len(data) - 1)] == ord("-")
    starts = starts + negative
    lengths = ends - starts
    if int(lengths.min()) < 1 or int(lengths.max()) > _DIGITS:
        return None
    matrix = windows(np, data, starts, ends)
    if np.any((lengths > 1) & (matrix[:, 0] == ord("0"))):
        return None  # a leading zero: not JSON
    values = np.zeros(len(starts), np.int64)
    for i in range(matrix.shape[1]):  # Horner's rule, a digit column at a time
        digits = matrix[:, i].astype(np.int64) - ord("0")
        inside = i < lengths
        if np.any(inside & ((digits < 0) | (digits > 9))):
            return None
        values = np.where(inside, values * 10 + digits, values)
    return np.where(negative, -values, values)
