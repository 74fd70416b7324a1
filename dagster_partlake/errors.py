"""The one exception hierarchy of dagster_partlake.

Callers catch `PartlakeError` for anything this library refuses; the subclasses exist for the
cases a caller may want to handle differently. Every message names the offending value and what
would be valid, so the user can act without reading a traceback.
"""

from __future__ import annotations


class PartlakeError(Exception):
    """Base class of every error raised by dagster_partlake."""


class PartlakeConfigError(PartlakeError):
    """A setting, metadata entry or environment prerequisite is wrong or missing."""


class SchemaMismatchError(PartlakeError):
    """The data to write is not compatible with the schema of the existing Delta table."""


class PartitionMismatchError(PartlakeError):
    """A partition key or a row's partition value is outside what the write or read allows."""


class CommitConflictError(PartlakeError):
    """A Delta commit kept conflicting with concurrent writers after all retries."""


class TableUnreadableError(PartlakeError):
    """A table's Delta log cannot be read (a damaged or missing commit file)."""


class StorageError(PartlakeError):
    """An object store refused a request or did not answer (credentials, bucket, endpoint)."""


class TableFeatureError(PartlakeError):
    """A valid Delta table needs a protocol feature (or version) partlake does not support for
    what was asked: writing to it, or, as `UnreadableTableFeatureError`, reading it."""


class UnreadableTableFeatureError(TableFeatureError, TableUnreadableError):
    """A valid Delta table needs a reader feature (or version) partlake does not read: what
    depends on it is held back like a table whose log cannot be read."""


class SourceError(PartlakeError):
    """A source outside the lake (a PostgreSQL server, a Kafka broker) refused a request, does
    not answer, or lacks the table or topic declared: the message names the source."""


class SparkUnavailableError(PartlakeError):
    """The Spark Connect server did not answer (stopped, restarted, unreachable)."""


class SqlModelError(PartlakeConfigError):
    """A SQL model file is wrong: its message starts with `file:line:`, and nothing was loaded."""

    def __init__(self, path: str, line: int, message: str) -> None:
        self.path = path
        self.line = line
        self.problem = message
        super().__init__(f"{path}:{line}: {message}")


class InvalidPredicateError(PartlakeError):
    """A row predicate (`partlake delete --where`) does not parse, is not a condition, or names a
    column the table lacks."""


class UpstreamRunFailedError(PartlakeError):
    """A run requested to wait for the runs writing what it reads found one failed, canceled or
    never started: it computed and committed nothing."""


class CatalogError(PartlakeError):
    """The Hive metastore cannot be reached or started, or a table name there is taken by a
    table that is not this Delta table (another location, another format)."""
