"""Staged files: what a write put on disk that no reader sees yet, and their cleanup.

A write stages in two steps before its commit (`dagster_partlake.delta.writer`):

1. Spark writes the Parquet files into a private folder `<table>/_partlake_staging/<uuid>/`
   (`new_staging_folder`, `write_parquet_files`); the driver lists them and reads their footers
   (`staged_files`): row counts and key statistics, never the data.
2. `publish_staged` moves them next to the table's files (`col=value/` folders), still
   unreferenced by the log until the commit.

Files that will never be committed must not outlive their writer: `discarded_on_failure` removes
them when anything (an error, an interrupt) stops the write before its commit; a writer killed
outright leaves a staging folder that the next write removes after `STALE_STAGING_SECONDS`
(`remove_stale_staging`; delta-rs vacuum skips `_` folders) and published files that `vacuum`
removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from dagster_partlake.delta.selection import HIVE_NULL, PartitionSelection
from dagster_partlake.delta.table import LiveFile
from dagster_partlake.layout import staging_dir

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow.parquet import FileMetaData
    from pyspark.sql import DataFrame

STALE_STAGING_SECONDS = 6 * 3600


@dataclass(frozen=True)
class StagedFile:
    relative_path: str  # final location, relative to the table root, not encoded
    size: int
    num_records: int
    partition_values: dict[str, str | None]
    # Delta file statistics of the `stats_columns` asked for (from the Parquet footer).
    min_values: dict[str, Any] = field(default_factory=dict)
    max_values: dict[str, Any] = field(default_factory=dict)
    null_count: dict[str, int] = field(default_factory=dict)

    def stats_json(self) -> str:
        stats: dict[str, Any] = {"numRecords": self.num_records}
        if self.min_values:
            stats["minValues"] = self.min_values
            stats["maxValues"] = self.max_values
        if self.null_count:
            stats["nullCount"] = self.null_count
        return json.dumps(stats, default=str)


@dataclass(frozen=True)
class StageSeconds:
    """Where a staged write's time went before its commit (reported in materialization
    metadata; nothing depends on it)."""

    spark: float = 0.0  # Spark computing the rows and writing the Parquet files into staging
    listing: float = 0.0  # listing the staged files and reading their footers


# Which live files a commit removes: those of the staged selection (a replace), none (an
# append), or exactly `StagedWrite.remove_files` (a merge, which read them).
Removal = Literal["selection", "none", "files"]


@dataclass(frozen=True)
class StagedWrite:
    """Parquet files written and checked, not yet visible to any reader."""

    root: str
    table_name: str
    staging_dir: str
    files: tuple[StagedFile, ...]
    schema: pa.Schema
    partition_by: tuple[str, ...]
    selection: PartitionSelection
    partition_ids: tuple[str, ...]
    removal: Removal = "selection"
    remove_files: tuple[LiveFile, ...] = ()
    # For removal "files": every live file of the selection when the write read the table; any
    # other set at commit time means a concurrent commit changed what the write was based on.
    expected_live: frozenset[str] = frozenset()
    # Files of an earlier table version that the commit makes live again, as they are (a merge
    # that rolls table partitions back, `delta.merge`); never published nor discarded.
    readd_files: tuple[LiveFile, ...] = ()
    seconds: StageSeconds = StageSeconds()

    @property
    def num_records(self) -> int:
        return sum(f.num_records for f in self.files)

    def without(self, dropped: Sequence[StagedFile], selection: PartitionSelection) -> StagedWrite:
        """The same write without `dropped` (deleted from staging), replacing `selection`."""
        for f in dropped:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.staging_dir, f.relative_path))
        gone = {f.relative_path for f in dropped}
        kept = tuple(f for f in self.files if f.relative_path not in gone)
        return replace(self, files=kept, selection=selection)


def new_staging_folder(root: str) -> str:
    """A new private folder for one write's files under the table's staging folder (staging
    folders of writers that died long ago are removed first)."""
    remove_stale_staging(root)
    return os.path.join(staging_dir(root), uuid.uuid4().hex)


@contextmanager
def discarded_on_failure(staged: str | StagedWrite) -> Iterator[None]:
    """Remove a write's uncommitted files if the block raises (anything, an interrupt too),
    then re-raise.

    Args:
        staged: a staging folder (removed with everything in it), or a `StagedWrite` whose
            files `publish_staged` moved into the table (those files are removed).
    """
    try:
        yield
    except BaseException:
        if isinstance(staged, StagedWrite):
            discard_published(staged)
        else:
            shutil.rmtree(staged, ignore_errors=True)
        raise


def publish_staged(staged: StagedWrite) -> None:
    """Move staged files into the table's partition folders; still invisible until committed."""
    for f in staged.files:
        target = os.path.join(staged.root, f.relative_path)
        if os.path.exists(target):
            continue  # already published by an earlier attempt
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(os.path.join(staged.staging_dir, f.relative_path), target)
    shutil.rmtree(staged.staging_dir, ignore_errors=True)


def discard_published(staged: StagedWrite) -> None:
    """Remove files `publish_staged` moved into the table that no commit will reference."""
    for f in staged.files:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(staged.root, f.relative_path))


def write_parquet_files(df: DataFrame, path: str, partition_by: Sequence[str]) -> None:
    """Spark writes `df` as Parquet under `path` (a new folder), in `col=value/` folders."""
    spark = df.sparkSession
    # INT96 timestamps (Spark's default) are unreadable by delta-rs outside the nanosecond range.
    if spark.conf.get("spark.sql.parquet.outputTimestampType", None) != "TIMESTAMP_MICROS":
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    writer = df.write.mode("error").option(
        "mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(_file_uri(path))


def staged_files(
    staging_dir: str, partition_by: Sequence[str], stats_columns: Sequence[str] = ()
) -> list[StagedFile]:
    """The Parquet files Spark wrote under `staging_dir`, with row counts and statistics."""
    import pyarrow.parquet as pq

    files = []
    for directory, subdirs, names in os.walk(staging_dir):
        subdirs[:] = [d for d in subdirs if not d.startswith(("_", "."))]
        for name in names:
            if name.startswith(("_", ".")) or not name.endswith(".parquet"):
                continue
            full = os.path.join(directory, name)
            relative = os.path.relpath(full, staging_dir).replace(os.sep, "/")
            values = _partition_values_from_path(relative, partition_by)
            footer = pq.read_metadata(full)
            mins, maxs, nulls = _footer_stats(footer, stats_columns)
            files.append(
                StagedFile(
                    relative_path=relative,
                    size=os.path.getsize(full),
                    num_records=footer.num_rows,
                    partition_values=values,
                    min_values=mins,
                    max_values=maxs,
                    null_count=nulls,
                )
            )
    return files


# Longer strings would need Delta's truncation rules for maxValues; such columns get no stats.
_MAX_STAT_STRING = 32


def _footer_stats(
    footer: FileMetaData, columns: Sequence[str]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
    """Min, max and null count per column over the row groups of a Parquet footer, for the
    columns whose statistics are complete and JSON-exact (integers, dates, short strings)."""
    import datetime as dt

    if not columns:
        return {}, {}, {}
    index = {footer.schema.column(i).name: i for i in range(footer.num_columns)}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for column in columns:
        if column not in index or footer.num_rows == 0:
            continue
        stats = [
            footer.row_group(g).column(index[column]).statistics
            for g in range(footer.num_row_groups)
        ]
        if any(s is None or not s.has_null_count for s in stats):
            continue
        nulls[column] = sum(s.null_count for s in stats)
        if not all(s.has_min_max for s in stats):
            continue
        low, high = min(s.min for s in stats), max(s.max for s in stats)
        exact = all(
            isinstance(v, int | str | dt.date) and not isinstance(v, bool | dt.datetime)
            for v in (low, high)
        )
        if not exact or (isinstance(high, str) and len(high) > _MAX_STAT_STRING):
            continue
        mins[column] = low.isoformat() if isinstance(low, dt.date) else low
        maxs[column] = high.isoformat() if isinstance(high, dt.date) else high
    return mins, maxs, nulls


def _partition_values_from_path(
    relative: str, partition_by: Sequence[str]
) -> dict[str, str | None]:
    segments = relative.split("/")[:-1]
    values: dict[str, str | None] = {}
    for segment, column in zip(segments, partition_by, strict=True):
        key, _, raw = segment.partition("=")
        if unquote(key) != column:
            raise ValueError(f"unexpected partition folder {segment!r} in {relative!r}")
        value = unquote(raw)
        values[column] = None if value == HIVE_NULL else value
    return values


def remove_stale_staging(root: str) -> None:
    """Remove staging folders of writers that died before committing (older than
    `STALE_STAGING_SECONDS`)."""
    base = staging_dir(root)
    if not os.path.isdir(base):
        return
    cutoff = time.time() - STALE_STAGING_SECONDS
    for entry in os.scandir(base):
        try:
            if entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)
        except FileNotFoundError:
            continue


def _file_uri(path: str) -> str:
    return "file://" + os.path.abspath(path)
