"""Order-independent content hashes of staged partitions, for early cutoff (`tracked`).

A partition's hash is `<rows>:<sum of xxhash64>:<sum of murmur3>` over its rows, each row hashed
over its non-partition columns (in name order, with a null mask, since Spark's hashes skip nulls).
Sums do not depend on row order or on how Spark split the rows into files, so the same rows give
the same hash whichever run wrote them. Computed by Spark from the staged Parquet files (one
aggregation, one result row per file), never from the DataFrame's lineage a second time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dagster_partlake.delta.staging import StagedFile, StagedWrite

_MOD = 2**64


def partition_hashes(
    spark: SparkSession, staged: StagedWrite, partition_of: Callable[[StagedFile], str]
) -> dict[str, str]:
    """Content hash per partition id (`partition_of` gives a staged file's id)."""
    from pyspark.sql import functions as F

    columns = sorted(c for c in staged.schema.names if c not in staged.partition_by)
    sums: dict[str, list[int]] = {}
    for f in staged.files:
        sums.setdefault(partition_of(f), [0, 0, 0])
    with_rows = [f for f in staged.files if f.num_records]
    if with_rows:
        by_path = {f.relative_path: f for f in with_rows}
        df = spark.read.parquet(
            *("file://" + os.path.join(staged.staging_dir, f.relative_path) for f in with_rows)
        )
        values = [F.col(f"`{c}`") for c in columns]
        nulls = F.concat(
            F.lit("|".join(columns)),
            *(F.when(v.isNull(), F.lit("1")).otherwise(F.lit("0")) for v in values),
        )
        rows = (
            df.select(
                F.col("_metadata.file_path").alias("path"),
                F.xxhash64(nulls, *values).cast("decimal(20,0)").alias("h1"),
                F.hash(nulls, *values).cast("decimal(20,0)").alias("h2"),
            )
            .groupBy("path")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("h1").alias("h1"), F.sum("h2").alias("h2"))
            .collect()
        )
        for row in rows:
            staged_file = by_path[_relative(row["path"], staged.staging_dir)]
            total = sums[partition_of(staged_file)]
            total[0] += int(row["n"])
            total[1] += int(row["h1"])
            total[2] += int(row["h2"])
    return {pid: f"{n}:{h1 % _MOD:x}:{h2 % _MOD:x}" for pid, (n, h1, h2) in sums.items()}


def _relative(uri: str, staging_dir: str) -> str:
    path = unquote(uri.removeprefix("file:"))
    while path.startswith("//"):
        path = path[1:]
    return os.path.relpath(path, staging_dir).replace(os.sep, "/")


def unchanged_partitions(
    new: dict[str, str],
    stored: dict[str, str],
    current_last_updated: dict[str, int],
    recorded_last_updated: dict[str, int | None],
) -> dict[str, int]:
    """Partitions whose new content equals what is stored, with the lastUpdated they keep.

    Stored means: the hash recorded by the last partlake write of the partition, and nobody
    wrote the partition since (its lastUpdated is still the one that write gave it)."""
    kept = {}
    for pid, content in new.items():
        current = current_last_updated.get(pid)
        if (
            current is not None
            and stored.get(pid) == content
            and recorded_last_updated.get(pid) == current
        ):
            kept[pid] = current
    return kept
