"""Reading a Delta table's log with delta-rs: existence, schema, partition columns, live files.

Only the log is read here (checkpoint + JSON commits), never a data file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from deltalake import DeltaTable

from dagster_partlake.delta.selection import PartitionSelection, format_partition_value

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class LiveFile:
    """One file of the current table version."""

    path: str  # as stored in the log: relative to the table root, URL-encoded
    size: int
    partition_values: dict[str, str | None]
    num_records: int | None
    modification_time: int

    def absolute_path(self, root: str) -> str:
        return os.path.join(root, unquote(self.path))


def table_exists(root: str) -> bool:
    return os.path.isdir(os.path.join(root, "_delta_log")) and DeltaTable.is_deltatable(root)


def load_table(root: str) -> DeltaTable:
    return DeltaTable(root)


def arrow_schema(table: DeltaTable) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())


def live_files(table: DeltaTable, selection: PartitionSelection) -> list[LiveFile]:
    """The files of the loaded version whose partition values lie in `selection`."""
    partition_by = table.metadata().partition_columns
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    columns = {name: actions.column(name).to_pylist() for name in actions.column_names}
    files = []
    for i, path in enumerate(columns["path"]):
        values = {
            col: format_partition_value(columns[f"partition.{col}"][i]) for col in partition_by
        }
        if selection.contains(values):
            files.append(
                LiveFile(
                    path=path,
                    size=columns["size_bytes"][i],
                    partition_values=values,
                    num_records=columns["num_records"][i],
                    modification_time=columns["modification_time"][i],
                )
            )
    return files


def log_versions(root: str) -> list[int]:
    """Versions that have a JSON commit file in the log, ascending."""
    log = os.path.join(root, "_delta_log")
    try:
        names = os.listdir(log)
    except FileNotFoundError:
        return []
    return sorted(
        int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
    )


def commit_info(root: str, version: int) -> dict[str, Any]:
    """The commitInfo action of one commit, read from its JSON file ({} if it has none)."""
    path = os.path.join(root, "_delta_log", f"{version:020d}.json")
    with open(path, encoding="utf-8") as log_file:
        for line in log_file:
            if line.startswith('{"commitInfo"'):
                return dict(json.loads(line)["commitInfo"])
    return {}
