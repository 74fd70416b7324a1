"""Partition values as partlake keys them: the log's text, read by the column's Delta type.

A Delta log holds each partition value as text (`partitionValues`), and writers spell some
types differently: a timestamp as `2024-01-01 10:00:00` (Spark) or `2024-01-01T10:00:00.000000Z`
(ISO 8601), a double as `1.0` or `1`. Strings, dates and integers are kept as written (their
spelling is fixed); every other type is parsed with Arrow and printed the way Arrow prints that
type, which is the text delta-rs' typed partition values give: `2024-01-01 10:00:00.000000Z`
(timestamps, in UTC), `2024-01-01 10:00:00.000000` (timestampNtz), `1` / `1.5` (floats),
`1.50` (decimals), `true`. So a partition is one key however its writer spelled it. A value that
does not parse as its type is kept as written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from dagster_partlake.delta.schema import DeltaType

# Delta partition types whose text in the log is the text partlake keys them by.
TEXT_TYPES = frozenset({"string", "date", "byte", "short", "integer", "long", "binary"})
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def normalized(words: Sequence[str | None], delta_type: DeltaType) -> list[str | None]:
    """`words` (partition values of one column as the log spells them) as partlake keys them."""
    if delta_type in TEXT_TYPES or not isinstance(delta_type, str):
        return list(words)
    import pyarrow as pa

    arrow_type = _arrow_type(delta_type)
    if arrow_type is None:
        return list(words)
    try:
        return _printed(list(words), arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    found: list[str | None] = []
    for word in words:  # one by one: keep what does not parse as written
        try:
            found.extend(_printed([word], arrow_type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            found.append(word)
    return found


def _printed(words: list[str | None], arrow_type: pa.DataType) -> list[str | None]:
    import pyarrow as pa
    import pyarrow.compute as pc

    text = _strings(words)
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        try:
            typed = pc.cast(text, arrow_type)
        except pa.ArrowInvalid:
            # Without a zone, as Spark writes them: UTC (as delta-rs reads them).
            naive = pc.cast(text, pa.timestamp(arrow_type.unit))
            typed = pc.assume_timezone(naive, arrow_type.tz)
    else:
        typed = pc.cast(text, arrow_type)
    printed: list[str | None] = pc.cast(typed, pa.string()).to_pylist()
    return printed


def _strings(words: list[str | None]) -> pa.Array:
    """A string array made from buffers (`pa.array` would import pandas, about 110 MB)."""
    import numpy as np
    import pyarrow as pa

    encoded = [b"" if w is None else w.encode() for w in words]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    valid = np.packbits(np.array([w is not None for w in words], bool), bitorder="little")
    buffers = [pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(words), buffers)


def _arrow_type(delta_type: str) -> pa.DataType | None:
    import pyarrow as pa

    simple = {
        "boolean": pa.bool_(),
        "float": pa.float32(),
        "double": pa.float64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
    if delta_type in simple:
        return simple[delta_type]
    found = _DECIMAL.fullmatch(delta_type)
    if found is not None:
        precision, scale = int(found.group(1)), int(found.group(2))
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
    return None
