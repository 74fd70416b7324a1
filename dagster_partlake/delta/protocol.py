"""The protocol gate: which Delta tables partlake reads, and which it writes.

A Delta table declares what a reader and a writer must understand in its `protocol` action:
`minReaderVersion` (1, 2: column mapping, 3: the `readerFeatures` list) and `minWriterVersion`
(2 to 6 each imply a fixed set of features, 7: the `writerFeatures` list). partlake reads the log
itself (`dagster_partlake.delta.log_state`) and writes through delta-rs, so:

- reading (planning) needs every reader feature in `READ_FEATURES`: those that change how the
  log is replayed (column mapping: partition values keyed by physical names; deletion vectors:
  a file is its path plus its vector; V2 checkpoints; timestampNtz partition values) and those
  that change only the data files (variant, type widening, vacuum's protocol check). Anything
  else, or a reader version above 3, is refused with `UnreadableTableFeatureError`, which says
  the table is valid and names what partlake lacks. Only a broken log is told to restore a file
  from a backup (`dagster_partlake.delta.table.unreadable`).
- writing needs more: delta-rs 1.6 writes none of rowTracking, domainMetadata, clustering,
  identityColumns, inCommitTimestamp, typeWidening, icebergCompat, collations and the like
  (its `ProtocolChecker`), and partlake's writer, which commits Parquet files Spark wrote with
  logical column names, whole, through `create_write_transaction`, honours neither column
  mapping, deletion vectors, change data feed, generated columns, invariants, check constraints
  nor append-only while a table turns them on. `check_writable` refuses those with
  `TableFeatureError`; reads and planning of such a table still work.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_partlake.errors import TableFeatureError, UnreadableTableFeatureError

if TYPE_CHECKING:
    from deltalake import DeltaTable

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7
# Reader features partlake reads (the log replay and, for data files, Spark).
READ_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
        "variantShredding-preview",
        "typeWidening",
        "typeWidening-preview",
    }
)
# Writer features partlake's writer honours whatever the table's settings.
WRITE_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "variantType", "variantType-preview"})
# Writer features partlake's writer can live with while the table does not turn them on, each
# with what turns it on (`_active`).
WRITE_FEATURES_WHILE_OFF = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "deletionVectors",
    }
)
# The features each legacy writer version implies (Delta's PROTOCOL.md).
_LEGACY_WRITER = {
    1: (),
    2: ("appendOnly", "invariants"),
    3: ("appendOnly", "invariants", "checkConstraints"),
    4: ("appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"),
    5: (
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
    ),
}
_LEGACY_WRITER[6] = (*_LEGACY_WRITER[5], "identityColumns")


@dataclass(frozen=True)
class Protocol:
    """A table's `protocol` action."""

    min_reader_version: int
    min_writer_version: int
    reader_features: frozenset[str] | None = None  # None: not listed (reader version < 3)
    writer_features: frozenset[str] | None = None  # None: not listed (writer version < 7)

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> Protocol:
        """From the body of a `protocol` action as the log holds it."""
        readers, writers = action.get("readerFeatures"), action.get("writerFeatures")
        return cls(
            min_reader_version=int(action.get("minReaderVersion", 1)),
            min_writer_version=int(action.get("minWriterVersion", 2)),
            reader_features=None if readers is None else frozenset(readers),
            writer_features=None if writers is None else frozenset(writers),
        )

    @classmethod
    def of_table(cls, table: DeltaTable) -> Protocol:
        """From a delta-rs table's loaded snapshot."""
        found = table.protocol()
        readers, writers = found.reader_features, found.writer_features
        return cls(
            min_reader_version=found.min_reader_version,
            min_writer_version=found.min_writer_version,
            reader_features=None if readers is None else frozenset(readers),
            writer_features=None if writers is None else frozenset(writers),
        )

    def required_writer_features(self) -> frozenset[str]:
        """The writer features a writer must honour (listed, or implied by a legacy version)."""
        if self.min_writer_version >= MAX_WRITER_VERSION:
            return self.writer_features or frozenset()
        return frozenset(_LEGACY_WRITER.get(self.min_writer_version, ()))


def unreadable_reason(protocol: Protocol) -> str | None:
    """What partlake lacks to read a table with `protocol` (None: it reads it)."""
    version, features = protocol.min_reader_version, protocol.reader_features
    if version > MAX_READER_VERSION or version < 1:
        return f"Delta reader version {version} (partlake reads versions 1 to {MAX_READER_VERSION})"
    if version == MAX_READER_VERSION and features is None:
        return "reader version 3 without its list of reader features (an invalid protocol action)"
    if version < MAX_READER_VERSION and features:
        return (
            f"reader features {', '.join(sorted(features))} with reader version {version} "
            "(an invalid protocol action: they need reader version 3)"
        )
    missing = sorted((features or frozenset()) - READ_FEATURES)
    if missing:
        plural = "s" if len(missing) > 1 else ""
        return f"the Delta reader feature{plural} {', '.join(missing)}"
    return None


def check_readable(protocol: Protocol, *, table_name: str, root: str) -> None:
    """Refuse a table whose protocol partlake cannot read.

    Raises:
        UnreadableTableFeatureError: it needs a reader version or feature partlake lacks.
    """
    reason = unreadable_reason(protocol)
    if reason is None:
        return
    raise UnreadableTableFeatureError(
        f"table {table_name} at {_shown(root)} is a valid Delta table, but it needs "
        f"{reason}, which partlake cannot read; partlake reads the reader features "
        f"{', '.join(sorted(READ_FEATURES))}. Nothing that depends on {table_name} is planned "
        "or written until it is read by a newer partlake or rewritten without that feature."
    )


def check_writable(
    protocol: Protocol,
    *,
    table_name: str,
    root: str,
    configuration: Mapping[str, str | None] | None = None,
    schema_string: str | None = None,
) -> None:
    """Refuse a write to a table whose protocol partlake's writer cannot honour (reads and
    planning of it are not affected). `configuration` and `schema_string` are the table's
    `metaData` (they say which features a table turns on).

    Raises:
        UnreadableTableFeatureError: partlake cannot even read it (`check_readable`).
        TableFeatureError: it needs a writer version or feature partlake cannot write.
    """
    check_readable(protocol, table_name=table_name, root=root)
    where = f"table {table_name} at {_shown(root)}"
    fix = (
        f"partlake still reads and plans {table_name}; write it with the engine that made it, or "
        "recreate it without those features to let partlake write it."
    )
    version = protocol.min_writer_version
    if version > MAX_WRITER_VERSION or version < 1:
        raise TableFeatureError(
            f"{where} is a valid Delta table, but it needs Delta writer version {version}, which "
            f"partlake cannot write (it writes versions 1 to {MAX_WRITER_VERSION}); {fix}"
        )
    required = protocol.required_writer_features()
    never = sorted(required - WRITE_FEATURES - WRITE_FEATURES_WHILE_OFF)
    if never:
        raise TableFeatureError(
            f"{where} is a valid Delta table, but it uses the Delta writer feature"
            f"{'s' if len(never) > 1 else ''} {', '.join(never)}, which partlake cannot write; "
            + fix
        )
    on = [
        f"{feature} ({why})"
        for feature, why in _active(configuration or {}, schema_string)
        if feature in required
    ]
    if on:
        raise TableFeatureError(
            f"{where} is a valid Delta table, but it turns on {', '.join(on)}, which partlake's "
            f"writer does not honour; {fix}"
        )


def check_table_writable(table: DeltaTable, *, table_name: str, root: str) -> None:
    """`check_writable` for a delta-rs table's loaded snapshot (the write path's one call).

    Raises:
        UnreadableTableFeatureError: partlake cannot read the table.
        TableFeatureError: partlake cannot write it.
    """
    metadata = table.metadata()
    check_writable(
        Protocol.of_table(table),
        table_name=table_name,
        root=root,
        configuration=dict(metadata.configuration),
        schema_string=table.schema().to_json(),
    )


def _active(
    configuration: Mapping[str, str | None], schema_string: str | None
) -> Iterator[tuple[str, str]]:
    """The writer features the table's metaData turns on, each with the setting that does."""

    def enabled(key: str) -> bool:
        return str(configuration.get(key) or "").lower() == "true"

    if enabled("delta.appendOnly"):
        yield "appendOnly", "delta.appendOnly=true"
    constraints = sorted(k for k in configuration if k.startswith("delta.constraints."))
    if constraints:
        yield "checkConstraints", ", ".join(constraints)
    if enabled("delta.enableChangeDataFeed"):
        yield "changeDataFeed", "delta.enableChangeDataFeed=true"
    mode = str(configuration.get("delta.columnMapping.mode") or "none").lower()
    if mode != "none":
        yield "columnMapping", f"delta.columnMapping.mode={mode}"
    if enabled("delta.enableDeletionVectors"):
        yield "deletionVectors", "delta.enableDeletionVectors=true"
    keys = _field_metadata_keys(schema_string)
    for feature, key in (
        ("invariants", "delta.invariants"),
        ("generatedColumns", "delta.generationExpression"),
    ):
        if key in keys:
            yield feature, f"a column with {key}"


def _field_metadata_keys(schema_string: str | None) -> set[str]:
    """Every metadata key of every (nested) field of a Delta schema string."""
    if not schema_string:
        return set()
    found: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, dict):
            metadata = node.get("metadata")
            if isinstance(metadata, dict) and "name" in node:
                found.update(metadata)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(json.loads(schema_string))
    return found


def _shown(root: str) -> str:
    """A table's place in a message: a URI as it is, a path made absolute."""
    return root if "://" in root else os.path.abspath(root)
