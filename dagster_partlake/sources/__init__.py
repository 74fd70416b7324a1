"""Sources outside the lake: PostgreSQL tables and Kafka topics, Dagster-free.

Each kind gives what a Delta table or a folder gives (a source is one concept with
kinds): where it is, resolved once from its declaration (`PostgresTable`, `KafkaTopic`, stored
in the source asset's metadata without secrets); a state reader whose per-partition change
stamps the planner reads as it reads a Delta table's lastUpdated (`postgres.table_state`,
`kafka.topic_state`, both a `TableState`); and what a run needs to read the partitions it
consumes with Spark (`postgres.read_partitions`, `kafka.stream_options`). The planner never
asks which kind a source is.

May import the storage and the column-wise layers (`delta.state.TableState` is the state type
every source kind returns), never Dagster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.sources.kafka import KafkaTopic as KafkaTopic
    from dagster_partlake.sources.postgres import PostgresTable as PostgresTable

_LAZY = {
    "KafkaTopic": "dagster_partlake.sources.kafka",
    "PostgresTable": "dagster_partlake.sources.postgres",
}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
