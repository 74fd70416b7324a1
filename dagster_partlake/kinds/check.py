"""Calling an asset's quality gates (`WriteTarget.check`) from a write, before its commit.

The gates say what they want counted row by row (`BatchCheck.extras`); the write job counts it
per file while it writes (`delta.files`), and the gates get those counts per Dagster key, with
what the job counted of repeated keys (`unique`, exact when one task wrote every row), and a
DataFrame over the written files made only for a gate that must look at rows (offending samples,
`unique` otherwise). For `merge` and `scd2` the gates check the incoming batch
itself. A gate that raises stops the write: its files are deleted, the table stays as it was.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.files import Extras, WrittenFiles
from dagster_partlake.delta.schema import arrow_to_spark
from dagster_partlake.kinds.session import Batch, BatchCheck, WriteSession

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def extras_of(df: DataFrame, check: BatchCheck | None) -> Extras:
    """What the gates want counted while writing `df`; nothing when a gate names a column the
    rows lack (the gates then read the rows, and their check says which)."""
    if check is None:
        return Extras()
    extras = check.extras()
    columns = [*extras.flags.values(), *extras.sums.values()]
    if not columns:
        return extras
    from pyspark.errors import AnalysisException

    try:
        df.select(*columns).schema  # noqa: B018 - analysed now (Spark Connect is lazy)
    except AnalysisException:
        return Extras(hashes=extras.hashes, repeats=extras.repeats)
    return extras


def check_written(
    spark: SparkSession, session: WriteSession, written: WrittenFiles, extras: Extras
) -> float:
    """Run the gates on the written files; raise (the caller deletes them) if one blocks.
    Returns the seconds the gates took (0.0: the asset has none)."""
    check = session.target.check
    if check is None:
        return 0.0
    started = time.perf_counter()
    asked = check.extras()
    # Counts the write could not take (a gate names a column the rows lack): the gates read the
    # rows instead, and say what is wrong.
    complete = set(asked.flags) <= set(extras.flags) and set(asked.sums) <= set(extras.sums)
    counted = _counted(session, written, extras) if complete else None
    check(
        Batch(
            lambda: _rows_of(spark, session, written),
            written.schema.names,
            counted,
            session.snapshot,
            repeated={name: written.repeated(name) for name in extras.repeats},
        )
    )
    return time.perf_counter() - started


def check_batch(session: WriteSession, batch: DataFrame) -> float:
    """Run the gates on a merge's or scd2's incoming batch (persisted by the caller)."""
    check = session.target.check
    if check is None:
        return 0.0
    started = time.perf_counter()
    check(Batch(lambda: batch, batch.columns, None, session.snapshot))
    return time.perf_counter() - started


def _rows_of(spark: SparkSession, session: WriteSession, written: WrittenFiles) -> DataFrame:
    """The written rows, as a lazy DataFrame (Spark reads them only if a gate asks)."""
    schema = arrow_to_spark(written.schema)
    location = session.location
    paths = location.spark_uris([f.relative_path for f in written.files])
    if not paths:
        return spark.createDataFrame([], schema)
    reader = spark.read.schema(schema).option("basePath", location.spark_uri())
    return reader.parquet(*paths).select(*schema.fieldNames())


def _counted(
    session: WriteSession, written: WrittenFiles, extras: Extras
) -> Mapping[str, Mapping[str, Any]] | None:
    """Per Dagster key: `_rows` and the extras' counts; None for a table whose partitions are
    not the asset's (a decoupled write: a file's partition values name no key)."""
    target = session.target
    if target.decoupled:
        return None
    counted: dict[str, dict[str, Any]] = {}
    for f in written.files:
        key = target.key_of(f.partition_values)
        into = counted.setdefault(key, {"_rows": 0})
        into["_rows"] += f.num_records
        for name in extras.flags:
            into[name] = into.get(name, 0) + f.flags.get(name, 0)
        for name in extras.sums:
            total, count = into.get(name, (0.0, 0))
            value, n = f.sums.get(name, (0.0, 0))
            into[name] = (total + value, count + n)
    for key in target.partition_ids:
        counted.setdefault(key, {"_rows": 0})
    return counted
