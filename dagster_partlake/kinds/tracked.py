"""`tracked`'s early cutoff: order-independent content hashes, taken while Spark writes.

A partition's hash is `<rows>:<sum of xxhash64>:<sum of murmur3>` over its rows, each row hashed
over its non-partition columns (in name order, with a null mask, since Spark's hashes skip nulls).
Sums do not depend on row order or on how Spark split the rows into files, so the same rows give
the same hash whichever run wrote them. The write job sums each file's row hashes
(`delta.files.Extras.hashes`); the partition's hash is the sum over its files, so the rows are
never read again. A partition is unchanged when its hash equals the one its last write recorded
and nobody wrote it since (its lastUpdated is still the one that write left).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dagster_partlake.delta.files import WrittenFiles

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from dagster_partlake.kinds.session import WriteSession

_MOD = 2**64
_H1, _H2 = "content_xxhash64", "content_murmur3"


def hash_extras(df: DataFrame, partition_by: Sequence[str]) -> dict[str, Column]:
    """The two per-row hashes the write sums per file."""
    from pyspark.sql import functions as F

    columns = sorted(c for c in df.columns if c not in partition_by)
    values = [F.col(f"`{c}`") for c in columns]
    nulls = F.concat(
        F.lit("|".join(columns)),
        *(F.when(v.isNull(), F.lit("1")).otherwise(F.lit("0")) for v in values),
    )
    return {_H1: F.xxhash64(nulls, *values), _H2: F.hash(nulls, *values).cast("long")}


def content_hashes(session: WriteSession, written: WrittenFiles) -> dict[str, str]:
    """Content hash per written partition key, from the files' facts."""
    sums: dict[str, list[int]] = {}
    for f in written.files:
        total = sums.setdefault(session.target.key_of(f.partition_values), [0, 0, 0])
        total[0] += f.num_records
        total[1] += f.hashes.get(_H1, 0)
        total[2] += f.hashes.get(_H2, 0)
    return {pid: f"{n}:{h1 % _MOD:x}:{h2 % _MOD:x}" for pid, (n, h1, h2) in sums.items()}


def unchanged(session: WriteSession, hashes: dict[str, str]) -> dict[str, int]:
    """Partitions whose new content equals what is stored, with the lastUpdated they keep."""
    if not hashes or session.snapshot is None:
        return {}
    stored = session.records(list(hashes))
    current = session.last_updated(list(hashes))
    kept = {}
    for pid, content in hashes.items():
        record = stored.get(pid)
        now = current.get(pid)
        if (
            record is not None
            and now is not None
            and record.content_hashes.get(pid, "") == content
            and record.written_last_updated(pid) == now
        ):
            kept[pid] = now
    return kept
