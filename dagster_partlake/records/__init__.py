"""The commit records: what a partlake write records in its Delta commit, and the queries over
them.

`record` defines `CommitRecord` (the asset, partitions, code version, run, what was consumed,
kinds' fields) and converts it to and from the storage layer's opaque payload
(`dagster_partlake.delta.payload.CommitPayload`); `queries` finds records in a table's log (a
commit's, a run's, the newest per partition, one of the same inputs); `writes` is the storage
adapter's own write with its record (`write_partitions`, `commit_staged`); `history` lists the
commits that changed some partitions with what their records say. A layer above `delta/`: it may
import `delta/`, `spark/` and the base modules; `delta/` names none of a record's fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:  # what type checkers see: each public name, re-exported (`X as X`)
    from dagster_partlake.records.history import HistoryEntry as HistoryEntry
    from dagster_partlake.records.history import table_history as table_history
    from dagster_partlake.records.record import CommitRecord as CommitRecord
    from dagster_partlake.records.writes import AlreadyWritten as AlreadyWritten
    from dagster_partlake.records.writes import CommitResult as CommitResult
    from dagster_partlake.records.writes import commit_staged as commit_staged
    from dagster_partlake.records.writes import write_partitions as write_partitions

# The public names: name -> the module defining it, imported on first use.
_LAZY = {
    "CommitRecord": "dagster_partlake.records.record",
    "HistoryEntry": "dagster_partlake.records.history",
    "table_history": "dagster_partlake.records.history",
    "AlreadyWritten": "dagster_partlake.records.writes",
    "CommitResult": "dagster_partlake.records.writes",
    "commit_staged": "dagster_partlake.records.writes",
    "write_partitions": "dagster_partlake.records.writes",
}
__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
