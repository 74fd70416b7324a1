"""The metadata keys partlake reads and the tags and metadata it writes, as constants.

Every key an asset or input may set is listed, with where it goes, its type and how it is
checked, in `dagster_partlake.spec.settings` (`SETTINGS`, the source of the reference page
docs/reference/settings.md); `dagster_partlake.spec.model` parses them all into one `ModelSpec`
per asset when the code location loads. The keys of the model kinds, gates, incremental inputs
and run guards are defined beside their parsers (`kinds.spec`, `gates.spec`,
`incremental.spec`, `incremental.guards`, `incremental.landing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

PARTITION_EXPR_KEY = "partition_expr"
SCHEMA_MODE_KEY = "schema_mode"
FORMAT_KEY = "partlake/format"
PATH_KEY = "partlake/path"
ROOT_KEY = "partlake/root"  # a source's own lake root (`partlake_source(root=...)`)
POSTGRES_KEY = "partlake/postgres"  # a PostgreSQL source's `PostgresTable`, without password
KAFKA_KEY = "partlake/kafka"  # a Kafka source's `KafkaTopic`
VERSION_KEY = "partlake/version"
TIMESTAMP_KEY = "partlake/timestamp"
STREAM_KEY = "partlake/stream"  # `dagster_partlake.incremental.streams`
WRITER_KEY = "partlake/writer"  # `dagster_partlake.kinds.native`, checked by `kinds.spec`
# Its values: who writes and commits an asset's table (`kinds.spec.writer_of` checks them).
Writer = Literal["partlake", "delta-spark"]
PARTLAKE_WRITER: Writer = "partlake"
DELTA_SPARK_WRITER: Writer = "delta-spark"
WRITERS: tuple[Writer, ...] = (PARTLAKE_WRITER, DELTA_SPARK_WRITER)
RETENTION_KEY = "partlake/retention"  # `dagster_partlake.partitions.retention`
SQL_PATH_KEY = "partlake/sql_path"  # set by `sql_assets`: the model's file


def plain(value: object) -> object:
    """A metadata entry's value: Dagster may hand it over wrapped in a `MetadataValue`."""
    return getattr(value, "value", value)


def plain_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every entry of `metadata` unwrapped (`plain`): Dagster stores a source's metadata as
    `MetadataValue`s (`JsonMetadataValue`, `TextMetadataValue`) and an asset's as given, and
    partlake reads both alike."""
    return {key: plain(value) for key, value in (metadata or {}).items()}


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
# A passed result whose partition is retired on purpose (`partlake/retention`): which rule.
RETIRED_KEY = "partlake/retired"
# Materialization metadata of a write its run guards skipped (`partlake/conditions` with action
# "skip"): the condition that did not hold. Nothing but the commit record was written.
SKIPPED_KEY = "partlake/skipped"
# Materialization metadata of a write registered in the catalog (`dagster_partlake.catalog`):
# what registering did ("registered", "schema updated", "unchanged", "moved").
CATALOG_KEY = "partlake/catalog"
# An asset check evaluation's metadata of a quality gate: the partitions that failed it.
FAILING_PARTITIONS_KEY = "partlake/failing_partitions"
