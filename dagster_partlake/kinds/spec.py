"""Model kinds: what a run of a managed asset does to its Delta table.

Chosen per asset by definition metadata `partlake/kind` (or built with `model_kind_metadata`):

| kind | a run ... |
| --- | --- |
| `partition` (default when partitioned) | replaces exactly the run's partitions |
| `table` (default when unpartitioned) | replaces the whole table |
| `tracked` | like `partition`, but keeps a partition whose new rows equal the stored ones |
| `append` (default when streaming) | adds the returned rows; a retried commit adds nothing |
| `merge` | upserts on `partlake/unique_key`: matching rows are replaced, new keys inserted |
| `scd2` | applies the returned snapshot to a history on `partlake/unique_key` |

For `append`, `merge` and `scd2` the Dagster partitions are units of work; `partlake/partition_by`
(a list of columns, may be empty) sets how the table is partitioned, by default the dimension
columns. When it differs from them the table's partitions are not Dagster partitions ("decoupled"):
a partition's state then comes from the commits that wrote it, and a reader of the asset gets the
whole table. An `scd2` table is unpartitioned unless `partlake/partition_by` names columns of
the snapshot (its history rows span snapshots, so the dimension columns are not a default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.metadata import (
    DELTA_SPARK_WRITER,
    STREAM_KEY,
    WRITER_KEY,
    WRITERS,
    Writer,
    plain,
)

Kind = Literal["partition", "table", "tracked", "append", "merge", "scd2"]
KINDS: tuple[Kind, ...] = get_args(Kind)
KIND_KEY = "partlake/kind"
UNIQUE_KEY_KEY = "partlake/unique_key"
PARTITION_BY_KEY = "partlake/partition_by"
# Kinds whose runs apply in time order (the result depends on the order of the units of work):
# the planner makes a later time partition stale when an earlier one is (`Dependency.order_only`).
ORDERED_KINDS: tuple[Kind, ...] = ("merge", "scd2")
# Kinds whose table may be partitioned other than by the Dagster partitions.
_UNIT_OF_WORK_KINDS = ("append", "merge", "scd2")


@dataclass(frozen=True)
class ModelKind:
    """An asset's kind, its unique key (merge) and its table partitioning."""

    kind: Kind
    unique_key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] | None = None  # None: the dimension columns

    def table_partition_by(self, dimension_columns: Sequence[str]) -> tuple[str, ...]:
        """The table's partition columns given the asset's dimension columns."""
        if self.kind == "scd2":  # history rows span snapshots: no dimension column by default
            return self.partition_by or ()
        return tuple(dimension_columns) if self.partition_by is None else self.partition_by

    def decoupled(self, dimension_columns: Sequence[str]) -> bool:
        """Whether the table's partitions differ from the asset's Dagster partitions."""
        if self.kind == "scd2":  # a history table's partitions never are Dagster partitions
            return bool(dimension_columns)
        return self.table_partition_by(dimension_columns) != tuple(dimension_columns)


def model_kind_metadata(
    kind: Kind,
    *,
    unique_key: Sequence[str] = (),
    partition_by: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Definition metadata choosing a kind, checked now rather than at the first run.

    Example:
        .. code-block:: python

            @asset(partitions_def=daily, metadata=model_kind_metadata("merge", unique_key=["id"],
                                                                      partition_by=[]))
            def users(user_changes): ...
    """
    metadata: dict[str, Any] = {KIND_KEY: kind}
    if unique_key:
        metadata[UNIQUE_KEY_KEY] = list(unique_key)
    if partition_by is not None:
        metadata[PARTITION_BY_KEY] = list(partition_by)
    model_kind(metadata, partitioned=True, asset_name="<metadata>")
    return metadata


def model_kind(metadata: Mapping[str, Any], *, partitioned: bool, asset_name: str) -> ModelKind:
    """The kind an asset's definition metadata chooses.

    Raises:
        PartlakeConfigError: an unknown or empty kind, a kind that does not fit the asset, or a
            missing or malformed unique key or partitioning.
    """
    # A streaming asset appends each micro-batch (`dagster_partlake.incremental.streams`).
    default = "append" if STREAM_KEY in metadata else "partition" if partitioned else "table"
    raw = metadata.get(KIND_KEY, default)
    choices = ", ".join(KINDS)
    if not raw:
        raise PartlakeConfigError(
            f"asset {asset_name} has an empty '{KIND_KEY}'; set it to one of {choices}, or "
            "remove the entry for the default."
        )
    if raw not in KINDS:
        raise PartlakeConfigError(
            f"asset {asset_name} has '{KIND_KEY}' {raw!r}, which is not a model kind; use one "
            f"of {choices}."
        )
    kind: Kind = raw
    if kind in ("partition", "tracked") and not partitioned:
        raise PartlakeConfigError(
            f"asset {asset_name} is not partitioned, so kind {kind!r} has no partitions to "
            "replace; use 'table' (or give the asset a partitions_def)."
        )
    if kind == "table" and partitioned:
        raise PartlakeConfigError(
            f"asset {asset_name} is partitioned, so kind 'table' would replace every partition "
            "on each run; use 'partition' (or 'tracked'), or drop the partitions_def."
        )
    unique_key = _columns(metadata, UNIQUE_KEY_KEY, asset_name)
    if kind in ("merge", "scd2") and not unique_key:
        raise PartlakeConfigError(
            f"asset {asset_name} is a {kind!r} model but has no '{UNIQUE_KEY_KEY}'; add the "
            f"columns that identify a row, e.g. metadata={{'{UNIQUE_KEY_KEY}': ['id']}}."
        )
    partition_by = None
    if PARTITION_BY_KEY in metadata:
        if kind not in _UNIT_OF_WORK_KINDS:
            raise PartlakeConfigError(
                f"asset {asset_name} sets '{PARTITION_BY_KEY}', but a {kind!r} table is "
                "partitioned by its Dagster partitions; remove it, or use kind 'append', "
                "'merge' or 'scd2'."
            )
        partition_by = _columns(metadata, PARTITION_BY_KEY, asset_name)
    return ModelKind(kind, unique_key, partition_by)


def _columns(metadata: Mapping[str, Any], key: str, asset_name: str) -> tuple[str, ...]:
    value = metadata.get(key, ())
    if isinstance(value, str) or not all(isinstance(c, str) and c for c in value):
        raise PartlakeConfigError(
            f"asset {asset_name} has '{key}' {value!r}; it must be a list of column names, "
            "e.g. ['id']."
        )
    return tuple(value)


# The kinds the delta-spark writer commits.
NATIVE_KINDS = ("partition", "table")


def writer_of(metadata: Mapping[str, Any], default: str, *, kind: str, asset_name: str) -> Writer:
    """The writer of an asset: its metadata `partlake/writer`, else `default` (the IO
    manager's `writer`).

    Raises:
        PartlakeConfigError: the value is not a writer, or the delta-spark writer is asked for
            a kind it does not commit.
    """
    raw = plain(metadata.get(WRITER_KEY, default))
    where = (
        f"'{WRITER_KEY}' of asset {asset_name}"
        if WRITER_KEY in metadata
        else (f"the IO manager's writer (for asset {asset_name})")
    )
    if raw not in WRITERS:
        raise PartlakeConfigError(
            f"{where} is {raw!r}; it must be one of {', '.join(repr(w) for w in WRITERS)}."
        )
    writer = cast("Writer", raw)
    if writer == DELTA_SPARK_WRITER:
        check_native_kind(kind, asset_name)
    return writer


def check_native_kind(kind: str, asset_name: str) -> None:
    """Refuse the delta-spark writer for a kind it does not commit.

    Raises:
        PartlakeConfigError: naming the kind and the way out.
    """
    if kind not in NATIVE_KINDS:
        raise PartlakeConfigError(
            f"asset {asset_name} is of kind {kind!r}, which the {DELTA_SPARK_WRITER} writer "
            f"does not commit (it commits the kinds {', '.join(NATIVE_KINDS)}: a replace of "
            "the run's partitions); set metadata {'partlake/writer': 'partlake'} on the asset "
            "to write it with partlake's writer."
        )
