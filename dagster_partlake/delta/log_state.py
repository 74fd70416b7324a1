"""A table's live files per partition, replayed from its Delta log with Arrow (no delta-rs).

delta-rs keeps every live file of a loaded snapshot in memory (about 500 bytes per file, not
given back to the system after the table is dropped), while partition state needs three numbers
per partition. So a first read replays the log itself: the newest classic checkpoint (one Parquet
file, as delta-rs writes them; only the `add` column is read) and the JSON commits after it, read
in one pass by Arrow's JSON reader with only the fields needed. A file is live when its last
action is an `add`.

Returns None where this reader would have to know more of the protocol than it does, and the
caller then asks delta-rs: multi-part or V2 checkpoints, column mapping, deletion vectors, a
partition column whose JSON text is not the Arrow text delta-rs gives (timestamps, decimals), a
log with gaps, or anything it cannot parse.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from dagster_partlake.layout import commit_version, log_dir

# Delta partition types whose JSON commit value is the text Arrow casts them to.
TEXT_TYPES = frozenset({"string", "date", "byte", "short", "integer", "long"})
# Reader features this replay handles (neither changes which files are live or when).
_READER_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})


@dataclass(frozen=True)
class LogFiles:
    """The live files of the latest version: one row per file, as Arrow arrays."""

    version: int
    partition_by: tuple[str, ...]
    column_types: dict[str, Any]
    files: Any  # pyarrow.Table: `partition.<column>` (string) and `modification_time` (int64)


def read_live_files(root: str) -> LogFiles | None:
    """The live files of the table at `root` from its log, or None (see the module docstring)."""
    try:
        return _read(root)
    except Exception:  # noqa: BLE001 - any failure here only means "ask delta-rs"
        return None  # delta-rs reads it, and raises the error worth showing if it is damaged


def _read(root: str) -> LogFiles | None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    log = log_dir(root)
    names = os.listdir(log)
    versions = sorted(v for v in map(commit_version, names) if v is not None)
    checkpoint = _newest_checkpoint(log, names)
    if checkpoint is False:
        return None
    start = 0 if checkpoint is None else checkpoint[0] + 1
    wanted = [v for v in versions if v >= start]
    if wanted != list(range(start, start + len(wanted))) or (checkpoint is None and not wanted):
        return None  # a gap in the log
    chunks = []
    for version in wanted:
        with open(os.path.join(log, f"{version:020d}.json"), "rb") as commit:
            chunk = commit.read()
        chunks.append(chunk if chunk.endswith(b"\n") else chunk + b"\n")
    text = b"".join(chunks)
    del chunks
    checkpoint_rows = None
    if checkpoint is not None:
        import pyarrow.parquet as pq

        checkpoint_rows = pq.read_table(checkpoint[1], columns=["add", "metaData", "protocol"])
    metadata = _last_action(text, b'{"metaData"', checkpoint_rows, "metaData")
    protocol = _last_action(text, b'{"protocol"', checkpoint_rows, "protocol")
    if metadata is None or protocol is None or not _supported(metadata, protocol):
        return None
    partition_by = tuple(metadata["partitionColumns"])
    fields = json.loads(metadata["schemaString"])["fields"]
    column_types = {f["name"]: f["type"] for f in fields}
    if any(column_types.get(c) not in TEXT_TYPES for c in partition_by):
        return None
    values_type = pa.struct([(c, pa.string()) for c in partition_by])
    schema = pa.schema(
        [
            (
                "add",
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("partitionValues", values_type),
                        ("modificationTime", pa.int64()),
                    ]
                ),
            ),
            ("remove", pa.struct([("path", pa.string())])),
        ]
    )
    parts = []
    if checkpoint_rows is not None:
        adds = checkpoint_rows.column("add").combine_chunks()
        adds = adds.filter(pc.is_valid(adds))
        stored = pc.struct_field(adds, "partitionValues")
        parts.append(
            pa.table(
                {
                    "path": pc.struct_field(adds, "path"),
                    **{f"partition.{c}": pc.map_lookup(stored, c, "first") for c in partition_by},
                    "modification_time": pc.struct_field(adds, "modificationTime"),
                    "is_add": pa.array([True] * len(adds), pa.bool_()),
                }
            )
        )
        del checkpoint_rows
    if text:
        actions = pj.read_json(
            io.BytesIO(text),
            read_options=pj.ReadOptions(block_size=1 << 24),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
        del text
        add, remove = (actions.column(n).combine_chunks() for n in ("add", "remove"))
        is_add = pc.is_valid(add)
        keep = pc.or_(is_add, pc.is_valid(remove))
        add, remove, is_add = add.filter(keep), remove.filter(keep), is_add.filter(keep)
        stored = pc.struct_field(add, "partitionValues")
        parts.append(
            pa.table(
                {
                    "path": pc.if_else(
                        is_add, pc.struct_field(add, "path"), pc.struct_field(remove, "path")
                    ),
                    **{f"partition.{c}": pc.struct_field(stored, c) for c in partition_by},
                    "modification_time": pc.struct_field(add, "modificationTime"),
                    "is_add": is_add,
                }
            )
        )
    every = pa.concat_tables(parts)
    paths = every.column("path")
    if pc.any(pc.match_substring(paths, "%")).as_py():
        # Writers differ in whether a remove names the path URL-encoded, as its add did.
        every = every.set_column(
            0, "path", pa.array([unquote(p) for p in paths.to_pylist()], pa.string())
        )
    # A file is live when the last action naming it (in log order) is an add.
    every = every.append_column("order", pa.array(range(every.num_rows), pa.int64()))
    last = every.group_by("path").aggregate([("order", "max")]).column("order_max")
    live = every.take(last)
    live = live.filter(live.column("is_add"))
    for c in partition_by:  # an empty partition value is null, as delta-rs reads it
        column = live.column(f"partition.{c}")
        live = live.set_column(
            live.column_names.index(f"partition.{c}"),
            f"partition.{c}",
            pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column),
        )
    return LogFiles(
        version=wanted[-1] if wanted else start - 1,
        partition_by=partition_by,
        column_types=column_types,
        files=live.select([*(f"partition.{c}" for c in partition_by), "modification_time"]),
    )


def _newest_checkpoint(log: str, names: list[str]) -> tuple[int, str] | None | bool:
    """(version, file) of the newest checkpoint; None if there is none; False if it is of a
    kind this reader does not read (multi-part, V2)."""
    found: dict[int, list[str]] = {}
    for name in names:
        head, _, rest = name.partition(".checkpoint")
        if rest and len(head) == 20 and head.isdigit():
            found.setdefault(int(head), []).append(rest)
    if not found:
        return None
    version = max(found)
    if found[version] != [".parquet"]:
        return False
    return version, os.path.join(log, f"{version:020d}.checkpoint.parquet")


def _last_action(text: bytes, marker: bytes, checkpoint: Any, column: str) -> dict[str, Any] | None:
    """The last `metaData` / `protocol` action: in the JSON commits, else in the checkpoint."""
    at = text.rfind(b"\n" + marker)
    at = at + 1 if at >= 0 else (0 if text.startswith(marker) else -1)
    if at >= 0:
        end = text.find(b"\n", at)
        return json.loads(text[at:end])[column]
    if checkpoint is None:
        return None
    for row in checkpoint.column(column).to_pylist():
        if row is not None:
            if column == "metaData":
                row["configuration"] = dict(row.get("configuration") or [])
            return row
    return None


def _supported(metadata: dict[str, Any], protocol: dict[str, Any]) -> bool:
    configuration = metadata.get("configuration") or {}
    if configuration.get("delta.columnMapping.mode", "none") != "none":
        return False  # partition values are keyed by physical column names
    features = set(protocol.get("readerFeatures") or ())
    return int(protocol.get("minReaderVersion", 1)) < 3 or features <= _READER_FEATURES
