"""The asset definition metadata dagster_partlake reads, in one place.

| key | on | meaning |
| --- | --- | --- |
| `partition_expr` | partitioned assets | table column(s) holding the partition dimensions |
| `schema_mode` | managed assets | `"add_columns"` lets a write add new columns |
| `partlake/format` | sources | `"delta"` (default) or `"folder"` (Parquet in `col=value/`) |
| `partlake/path` | sources | where the source lives, relative to the lake root |
| `partlake/after_commit` | folder sources | archive or delete consumed files after the commit |
| `partlake/incremental` | inputs, assets | read only new rows: `"log"` or `{"column": ...}` |
| `partlake/fail_if_no_input`, `partlake/conditions` | managed assets | run guards |
| `partlake/constraints`, `partlake/audits` | managed assets | quality gates |
| `partlake/version` | inputs (`AssetIn`) | read the upstream table at this Delta version |
| `partlake/timestamp` | inputs (`AssetIn`) | read the upstream table as of this time (ISO 8601) |
| `partlake/stream` | managed assets | a streaming asset: its input is read as a stream |
| `partlake/writer` | managed assets | `"partlake"` or `"delta-spark"`: who commits the writes |
"""

from __future__ import annotations

PARTITION_EXPR_KEY = "partition_expr"
SCHEMA_MODE_KEY = "schema_mode"
FORMAT_KEY = "partlake/format"
PATH_KEY = "partlake/path"
VERSION_KEY = "partlake/version"
TIMESTAMP_KEY = "partlake/timestamp"
STREAM_KEY = "partlake/stream"  # `dagster_partlake.incremental.streams`
WRITER_KEY = "partlake/writer"  # `dagster_partlake.kinds.native`


def plain(value: object) -> object:
    """A metadata entry's value: Dagster may hand it over wrapped in a `MetadataValue`."""
    return getattr(value, "value", value)


# The partitioned asset check through which partlake's verdict on each partition reaches the UI
# (`dagster_partlake.freshness`): passed when fresh, failed (severity WARN) when stale.
# Tags of the runs partlake plans (partlake run, the sensor): why, and which partitions.
REASONS_TAG = "partlake/reasons"
PARTITIONS_TAG = "partlake/partitions"
# On every run (or asset backfill) of one refresh the invalidation sensor requests: the refresh's
# id, the same from the first level of a closure to its last (the UI's run list filters by it).
REFRESH_TAG = "partlake/refresh"
# Written by earlier versions of the sensor, which requested runs ahead of the runs they read and
# made them wait inside their run; no longer written, still understood on runs made then:
# CHAIN_TAG named a run others waited for, WAITS_FOR_TAG the runs a run waited for, and
# UPSTREAM_FAILED_TAG the run whose failure ended it (not counted as its own failure).
CHAIN_TAG = "partlake/chain"
WAITS_FOR_TAG = "partlake/waits_for"
UPSTREAM_FAILED_TAG = "partlake/upstream_failed"

FRESH_CHECK = "partlake_fresh"
# Metadata of its results.
REASON_KEY = "partlake/reason"  # missing, upstream_changed, out_of_band, code_changed
BECAUSE_KEY = "partlake/because"  # the upstream asset[partition]s that made it stale
LAST_UPDATED_KEY = "partlake/last_updated"  # the partition's lastUpdated (a timestamp)
ROWS_KEY = "partlake/rows"  # rows the partition got from the write that reported it
