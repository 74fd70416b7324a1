"""`DeltaPartitionIOManager`: Spark DataFrames in and out of partitioned Delta tables.

`manager` is the IO manager Dagster calls; `inputs` holds what `load_input` reads besides a
plain Delta table (folders, landing folders, decoupled tables, pinned versions). May import
every layer below the planning core: `kinds/`, `gates/`, `incremental/`, `partitions/`,
`spark/`, `delta/` and the base modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.io_manager.manager import DeltaPartitionIOManager

__all__ = [
    "DeltaPartitionIOManager",
]

_LAZY = {
    "DeltaPartitionIOManager": "dagster_partlake.io_manager.manager",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
