"""A PostgreSQL table (or query) as a partitioned source.

Declared with `PostgresTable` (`partlake_source(..., postgres=PostgresTable(...))`); its columns
named by the source's `partition_expr` hold the partition dimensions (a `date` column stands for
a daily dimension: its text is the key).

**Change stamps.** For a table, partlake keeps one row per partition in
`partlake.partition_stamps` of the same database: a stamp that grows with every change of the
partition's rows, and the partition's row count. Statement-level triggers on the table keep it
(installed by the first plan or run that reads the source, in one transaction, with the stamps
of the rows already there counted under a lock that holds writers back for that scan):

- an INSERT or DELETE stamps the partitions of the rows it touched;
- an UPDATE stamps the partitions whose rows changed: old and new rows are compared whole
  (`to_jsonb`), so an update that writes the same values stamps nothing, and a row moved to
  another partition stamps both;
- TRUNCATE stamps every partition (and empties their counts);
- VACUUM, ANALYZE, CLUSTER or a REINDEX change no row and fire no trigger: nothing moves.

A stamp is `max(previous + 1, the clock in ms)`, written in the changing transaction, so it is
visible exactly when the change is. A plan asks one query per source: the count, sum of stamps
and sum of rows of its stamps (an index scan of as many rows as it has partitions); only when
that moved does it read the stamps themselves. The cost is on the writers: each statement adds
an upsert per partition it touched, and concurrent transactions changing one partition wait for
each other's commit on that partition's stamp row.

For a `query` there are no triggers: each plan reads the query whole, grouped by its partition
columns, with a fingerprint of each partition's rows (`md5` of the rows in order): a full read
per plan, fit for small queries only.

**Reads.** A run reads exactly its partitions through Spark's JDBC source, in parallel queries
whose `WHERE` PostgreSQL receives (`read_by`):

- `partition`: one query per partition, on the partition columns; a partition with more than
  `split_rows` rows (its stamp's count) in ranges of `split_column`. Each query reads only its
  partition's pages when the partition's rows lie together (a table filled in time order).
- `range`: the partitions read together in ranges of a key (`split_column`, else the table's
  one-column integer primary key), each range filtered to the partitions wanted. When every
  page holds rows of many partitions, one query
  per partition would read the pages once per partition; ranges read each page once.
- `auto` (the default): `range` when the table has such a key and PostgreSQL's statistics
  (`pg_stats.correlation` of the partition columns, from ANALYZE or autovacuum) say no partition
  column follows the rows' physical order (|correlation| < 0.5 for each); else `partition`.

The stamps of the partitions read are taken before the rows, so a change in between is seen by
the next plan, never missed.

**Credentials** come from the declaration or the standard libpq variables (`PGHOST`, `PGPORT`,
`PGDATABASE`, `PGUSER`, and the password from the variable `password_env`, default
`PGPASSWORD`). A password given in code is kept in this process only: never in the asset's
metadata, a log, a message or Spark's plan (Spark redacts JDBC passwords).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.delta.state import VALUES, TableState
from dagster_partlake.errors import PartlakeConfigError, SourceError
from dagster_partlake.metadata import POSTGRES_KEY
from dagster_partlake.sources.declared import from_settings

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession

SCHEMA = "partlake"
STAMPS = "partition_stamps"
SOURCES = "sources"
# PostgreSQL's types a partition column may have, and the Delta type partlake keys it as.
# (Their text is the partition value: a non-date column keys as a string.)
_PARTITION_TYPES = {
    "date": "date",
    "text": "string",
    "character varying": "string",
    "character": "string",
    "integer": "string",
    "bigint": "string",
    "smallint": "string",
}
# How a run's partitions are read (see Reads above).
READ_BY = ("auto", "partition", "range")
# `auto` reads by ranges when no partition column's |pg_stats.correlation| reaches this.
SCATTERED_BELOW = 0.5
# Passwords given in code, by the settings they were given with (never in metadata).
_PASSWORDS: dict[str, str] = {}
# The last stamps read per source and process: a plan whose cheap query finds them unmoved
# returns them without reading them again.
_LAST: dict[str, tuple[tuple[int, int, int], TableState]] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class PostgresTable:
    """Where a PostgreSQL source is and how to read it.

    Example:
        .. code-block:: python

            orders = partlake_source(
                "orders",
                partitions_def=daily_region,
                postgres=PostgresTable(table="public.orders", database="shop", user="partlake"),
                metadata={"partition_expr": {"date": "order_date", "region": "region"}},
            )

    Args:
        table: `schema.table` (or a table on the search path); exclusive with `query`.
        query: a SELECT whose rows are the source (read whole by every plan: small ones only).
        host, port, database, user: the server and login; default `$PGHOST` (else
            127.0.0.1), `$PGPORT` (else 5432), `$PGDATABASE`, `$PGUSER`.
        password: the login's password; prefer `password_env`. Kept in this process only.
        password_env: the environment variable holding the password (default `PGPASSWORD`).
        split_column: a numeric column to read a large partition by in parallel ranges (and
            the key of `read_by="range"`).
        split_rows: a partition with more rows than this is split (with `split_column`); a
            range read has at least one range per this many rows.
        fetch_size: rows per round trip of Spark's JDBC reads.
        read_by: `"partition"` (a query per partition), `"range"` (the partitions together, in
            ranges of a key) or `"auto"`: see the module's Reads.
    """

    table: str | None = None
    query: str | None = None
    host: str | None = None
    port: int | None = None
    database: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False, compare=False)
    password_env: str = "PGPASSWORD"
    split_column: str | None = None
    split_rows: int = 1_000_000
    fetch_size: int = 10_000
    read_by: str = "auto"

    def __post_init__(self) -> None:
        if (self.table is None) == (self.query is None):
            raise PartlakeConfigError(
                "PostgresTable needs exactly one of table='schema.table' or query='select ...'."
            )
        if self.split_rows < 1 or self.fetch_size < 1:
            raise PartlakeConfigError("PostgresTable's split_rows and fetch_size must be >= 1.")
        if self.read_by not in READ_BY:
            raise PartlakeConfigError(
                f"PostgresTable(read_by={self.read_by!r}): use one of {', '.join(READ_BY)}."
            )
        if self.password is not None:
            _PASSWORDS[_key(self.settings())] = self.password

    def settings(self) -> dict[str, Any]:
        """What the asset's metadata keeps: everything but the password."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "password"}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *, source: str) -> PostgresTable:
        """The declaration kept in a source's metadata.

        Raises:
            PartlakeConfigError: an unknown or malformed entry.
        """
        return from_settings(cls, settings, source=source, key=POSTGRES_KEY, secret="password")

    # Resolved against the environment at use, so a process sees its own variables.

    @property
    def resolved_host(self) -> str:
        return self.host or os.environ.get("PGHOST") or "127.0.0.1"

    @property
    def resolved_port(self) -> int:
        return int(self.port or os.environ.get("PGPORT") or 5432)

    @property
    def resolved_database(self) -> str | None:
        return self.database or os.environ.get("PGDATABASE")

    @property
    def resolved_user(self) -> str | None:
        return self.user or os.environ.get("PGUSER")

    def resolved_password(self) -> str | None:
        return _PASSWORDS.get(_key(self.settings())) or os.environ.get(self.password_env)

    @property
    def address(self) -> str:
        """`host:port/database`, for messages."""
        return f"{self.resolved_host}:{self.resolved_port}/{self.resolved_database or '-'}"

    @property
    def identity(self) -> str:
        """The source's name in the stamps table: the server, database and relation."""
        what = self.table or hashlib.sha1((self.query or "").encode()).hexdigest()[:16]
        return f"{self.address}/{what}"

    def jdbc_url(self) -> str:
        server = f"{self.resolved_host}:{self.resolved_port}"
        return f"jdbc:postgresql://{server}/{self.resolved_database or ''}"


def _key(settings: Mapping[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


@contextmanager
def connect(table: PostgresTable, *, source: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the source's server (autocommit), its failures one line naming the
    source.

    Raises:
        SourceError: the server refused the login, does not answer, or the database is missing.
    """
    try:
        import psycopg
    except ImportError as error:  # pragma: no cover - an install without the extra
        raise PartlakeConfigError(
            "PostgreSQL sources need psycopg: pip install 'dagster-partlake[postgres]'."
        ) from error
    try:
        connection = psycopg.connect(
            host=table.resolved_host,
            port=table.resolved_port,
            dbname=table.resolved_database,
            user=table.resolved_user,
            password=table.resolved_password(),
            connect_timeout=10,
            autocommit=True,
            application_name="partlake",
        )
    except psycopg.OperationalError as error:
        raise SourceError(_login_error(table, source, error)) from None
    try:
        yield connection
    except psycopg.errors.UndefinedTable as error:
        raise SourceError(
            f"source {source}: {_relation(table)} does not exist in {table.address} "
            f"({_first(error)}); create it, or fix PostgresTable(table=...)."
        ) from None
    except psycopg.errors.InsufficientPrivilege as error:
        raise SourceError(
            f"source {source}: user {table.resolved_user} may not {_first(error)} in "
            f"{table.address}; partlake needs SELECT on the table and, for a table, the right "
            f"to create schema {SCHEMA} and triggers on it once (see the PostgreSQL guide)."
        ) from None
    except psycopg.OperationalError as error:
        raise SourceError(
            f"source {source}: the PostgreSQL server {table.address} stopped answering: "
            f"{_first(error)}"
        ) from None
    finally:
        connection.close()


def _login_error(table: PostgresTable, source: str, error: Exception) -> str:
    text = str(error)
    lowered = text.lower()
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return (
            f"source {source}: PostgreSQL at {table.address} refused the password of user "
            f"{table.resolved_user} (set it in ${table.password_env}, or "
            "PostgresTable(password_env=...))."
        )
    if "does not exist" in lowered and "database" in lowered:
        return (
            f"source {source}: database {table.resolved_database} does not exist at "
            f"{table.address}."
        )
    if "connection refused" in lowered or "timeout" in lowered or "could not" in lowered:
        return (
            f"source {source}: cannot reach PostgreSQL at {table.resolved_host}:"
            f"{table.resolved_port} ({_first(error)}); start the server or fix "
            "PostgresTable(host=..., port=...) / $PGHOST, $PGPORT."
        )
    return f"source {source}: PostgreSQL at {table.address} refused the connection: {_first(error)}"


def _first(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _relation(table: PostgresTable) -> str:
    return f"table {table.table}" if table.table else "the query's relation"


def _ident(name: str) -> str:
    """A quoted identifier (`schema.table` quoted part by part)."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# -- the state the planner reads ------------------------------------------------------------------


def table_state(table: PostgresTable, columns: Sequence[str], *, source: str) -> TableState | None:
    """The source's partitions with their change stamps (as lastUpdated) and row counts: one
    cheap query when nothing moved since this process last read them.

    Returns:
        None when the source holds no rows.

    Raises:
        SourceError: see `connect`; PartlakeConfigError: a partition column is missing or of a
            type that cannot key a partition.
    """
    with connect(table, source=source) as connection:
        if table.query is not None:
            return _scanned_state(connection, table, columns, source=source)
        digest = _digest(connection, table)
        with _LOCK:
            last = _LAST.get(table.identity)
        if digest is not None and last is not None and last[0] == digest:
            # Nothing moved since this process last read it: the one query of a plan.
            return last[1] if last[1].last_updated else None
        types = _column_types(connection, table, columns, source=source)
        if digest is None:
            install(connection, table, columns, source=source)
            digest = _digest(connection, table)
            assert digest is not None
        rows = connection.execute(
            f"SELECT part, stamp FROM {SCHEMA}.{STAMPS} WHERE source = %s AND rows > 0",
            (table.identity,),
        ).fetchall()
    state = _state(table, columns, types, digest, {tuple(part): stamp for part, stamp in rows})
    with _LOCK:
        _LAST[table.identity] = (digest, state)
    return state if rows else None


def _state(
    table: PostgresTable,
    columns: Sequence[str],
    types: Mapping[str, str],
    digest: tuple[int, int, int],
    stamps: Mapping[tuple[str | None, ...], int],
) -> TableState:
    version = int(hashlib.sha1(repr(digest).encode()).hexdigest()[:12], 16)
    return TableState(
        root=table.identity,
        version=version,
        partition_by=tuple(columns),
        column_types=dict(types),
        last_updated=IntMap.build(VALUES, stamps.items()),
    )


def _digest(
    connection: psycopg.Connection[Any], table: PostgresTable
) -> tuple[int, int, int] | None:
    """(partitions, sum of stamps, sum of rows) of the source's stamps; None: not installed."""
    import psycopg

    try:
        found = connection.execute(
            f"SELECT (SELECT 1 FROM {SCHEMA}.{SOURCES} WHERE source = %s), count(*), "
            f"coalesce(sum(stamp), 0), coalesce(sum(rows), 0) "
            f"FROM {SCHEMA}.{STAMPS} WHERE source = %s",
            (table.identity, table.identity),
        ).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    assert found is not None
    installed, count, stamps, rows = found
    return None if installed is None else (int(count), int(stamps), int(rows))


def _column_types(
    connection: psycopg.Connection[Any],
    table: PostgresTable,
    columns: Sequence[str],
    *,
    source: str,
) -> dict[str, str]:
    """The Delta type each partition column is keyed as (from PostgreSQL's catalog)."""
    assert table.table is not None
    found = connection.execute(
        "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
        (table.table,),
    ).fetchall()
    if not found:
        raise SourceError(
            f"source {source}: table {table.table} does not exist in {table.address}; create "
            "it, or fix PostgresTable(table=...)."
        )
    types = dict(found)
    result = {}
    for column in columns:
        if column not in types:
            raise PartlakeConfigError(
                f"source {source}: table {table.table} has no column {column!r} for a partition "
                f"dimension (its columns: {', '.join(types)}); name the column with the "
                "source's metadata partition_expr."
            )
        kind = _PARTITION_TYPES.get(types[column])
        if kind is None:
            raise PartlakeConfigError(
                f"source {source}: column {column} of {table.table} is {types[column]}, which "
                f"cannot key a partition; use one of {', '.join(_PARTITION_TYPES)} (a date "
                "column for a daily dimension)."
            )
        result[column] = kind
    return result


def _scanned_state(
    connection: psycopg.Connection[Any],
    table: PostgresTable,
    columns: Sequence[str],
    *,
    source: str,
) -> TableState | None:
    """A query's partitions, each stamped by a fingerprint of its rows (read whole)."""
    assert table.query is not None
    keys = [f"q.{_ident(c)}::text" for c in columns]
    array = f"ARRAY[{', '.join(keys)}]::text[]" if keys else "ARRAY[]::text[]"
    # 60 bits of an md5 over the md5 of each row, in order: equal rows, equal stamp.
    fingerprint = (
        "('x' || substr(md5(string_agg(md5(q::text), '' ORDER BY md5(q::text))), 1, 15))"
        "::bit(60)::bigint"
    )
    group = " GROUP BY 1" if keys else ""
    rows = connection.execute(
        f"SELECT {array}, {fingerprint} FROM ({table.query}) AS q{group}"
    ).fetchall()
    stamps = {tuple(part): int(stamp) for part, stamp in rows if stamp is not None}
    if not stamps:
        return None
    digest = (len(stamps), sum(stamps.values()) % (1 << 62), 0)
    types = {c: "string" for c in columns}
    return _state(table, columns, types, digest, stamps)


# -- the triggers ---------------------------------------------------------------------------------


def _trigger_body(identity: str, part: str) -> str:
    """The PL/pgSQL body of the source's statement triggers: each statement's inserted, deleted
    and changed rows counted into the stamps of their partitions (`part`, an SQL array of the
    row's partition values), every touched partition's stamp moved forward."""
    upsert = (
        f"INSERT INTO {SCHEMA}.{STAMPS} AS s (source, part, stamp, rows) "
        "SELECT {literal}, part, now_ms, sum(delta) FROM changed GROUP BY part "
        "ON CONFLICT (source, part) DO UPDATE SET "
        "stamp = greatest(s.stamp + 1, excluded.stamp), rows = s.rows + excluded.rows"
    ).replace("{literal}", _literal(identity))
    body = f"""
DECLARE now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN
    WITH changed AS (SELECT {part} AS part, 1 AS delta FROM partlake_new r) {upsert};
  ELSIF TG_OP = 'DELETE' THEN
    WITH changed AS (SELECT {part} AS part, -1 AS delta FROM partlake_old r) {upsert};
  ELSIF TG_OP = 'UPDATE' THEN
    WITH n AS (SELECT {part} AS part, to_jsonb(r) AS row FROM partlake_new r),
         o AS (SELECT {part} AS part, to_jsonb(r) AS row FROM partlake_old r),
         added AS (SELECT part, row FROM n EXCEPT ALL SELECT part, row FROM o),
         removed AS (SELECT part, row FROM o EXCEPT ALL SELECT part, row FROM n),
         changed AS (SELECT part, 1 AS delta FROM added
                     UNION ALL SELECT part, -1 AS delta FROM removed)
    {upsert};
  ELSIF TG_OP = 'TRUNCATE' THEN
    UPDATE {SCHEMA}.{STAMPS} SET stamp = greatest(stamp + 1, now_ms), rows = 0
      WHERE source = {_literal(identity)};
  END IF;
  RETURN NULL;
END"""
    return body


def install(
    connection: psycopg.Connection[Any],
    table: PostgresTable,
    columns: Sequence[str],
    *,
    source: str,
) -> None:
    """Create the stamps (schema `partlake`), the trigger function and the triggers of the
    table, and stamp the partitions of its current rows, in one transaction that holds the
    table's writers back while it counts them (a second install waits, then finds it done)."""
    assert table.table is not None
    identity = table.identity
    function = f"{SCHEMA}.stamp_{hashlib.sha1(identity.encode()).hexdigest()[:16]}"
    parts = ", ".join(f"r.{_ident(c)}::text" for c in columns)
    part = f"ARRAY[{parts}]::text[]" if columns else "ARRAY[]::text[]"
    body = _trigger_body(identity, part)
    relation = _ident(table.table)
    name = hashlib.sha1(identity.encode()).hexdigest()[:12]
    with connection.transaction():
        connection.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{SOURCES} (source text PRIMARY KEY, "
            "relation text NOT NULL, columns text[] NOT NULL, "
            "installed timestamptz NOT NULL DEFAULT now())"
        )
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{STAMPS} (source text NOT NULL, "
            "part text[] NOT NULL, stamp bigint NOT NULL, rows bigint NOT NULL, "
            "PRIMARY KEY (source, part))"
        )
        # Writers wait while the current rows are counted: none is missed or counted twice.
        connection.execute(f"LOCK TABLE {relation} IN SHARE ROW EXCLUSIVE MODE")
        done = connection.execute(
            f"SELECT columns FROM {SCHEMA}.{SOURCES} WHERE source = %s", (identity,)
        ).fetchone()
        if done is not None and list(done[0]) == list(columns):
            return  # another process installed it meanwhile
        connection.execute(f"DELETE FROM {SCHEMA}.{STAMPS} WHERE source = %s", (identity,))
        connection.execute(
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$partlake${body}$partlake$"
        )
        events = {
            "ins": ("INSERT", "REFERENCING NEW TABLE AS partlake_new"),
            "upd": ("UPDATE", "REFERENCING OLD TABLE AS partlake_old NEW TABLE AS partlake_new"),
            "del": ("DELETE", "REFERENCING OLD TABLE AS partlake_old"),
            "trn": ("TRUNCATE", ""),
        }
        for suffix, (event, referencing) in events.items():
            trigger = f'"partlake_{name}_{suffix}"'
            connection.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {relation}")
            connection.execute(
                f"CREATE TRIGGER {trigger} AFTER {event} ON {relation} {referencing} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
            )
        connection.execute(
            f"INSERT INTO {SCHEMA}.{STAMPS} (source, part, stamp, rows) "
            f"SELECT %s, {part}, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, count(*) "
            f"FROM {relation} r GROUP BY 2",
            (identity,),
        )
        connection.execute(
            f"INSERT INTO {SCHEMA}.{SOURCES} (source, relation, columns) VALUES (%s, %s, %s) "
            "ON CONFLICT (source) DO UPDATE SET relation = excluded.relation, "
            "columns = excluded.columns, installed = now()",
            (identity, table.table, list(columns)),
        )


# -- reads ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionsRead:
    """What a run read of the source: its rows and the stamps of the partitions read."""

    df: DataFrame
    stamps: dict[tuple[str | None, ...], int]  # partition values -> stamp when read
    queries: int  # the parallel queries Spark sent


def read_partitions(
    spark: SparkSession,
    table: PostgresTable,
    columns: Sequence[str],
    partitions: Sequence[tuple[str | None, ...]] | None,
    *,
    source: str,
) -> PartitionsRead:
    """The rows of `partitions` (values of `columns`; None: every row) with Spark's JDBC
    source, in parallel queries as `table.read_by` says, and their stamps taken first."""
    # The stamps first: a change after them is seen by the next plan.
    state = table_state(table, columns, source=source)
    known = {v: t for v, t in state.last_updated.items() if t is not None} if state else {}
    wanted = list(known) if partitions is None else [tuple(p) for p in partitions]
    stamps = {p: known[p] for p in wanted if p in known}
    predicates = _predicates(table, columns, wanted, source=source)
    relation = table.table if table.table is not None else f"({table.query}) AS partlake_source"
    properties = {
        "driver": "org.postgresql.Driver",
        "fetchsize": str(table.fetch_size),
        **({"user": table.resolved_user} if table.resolved_user else {}),
        **({"password": pw} if (pw := table.resolved_password()) else {}),
    }
    df = spark.read.jdbc(table.jdbc_url(), relation, predicates=predicates, properties=properties)
    return PartitionsRead(df, stamps, len(predicates))


def _predicates(
    table: PostgresTable,
    columns: Sequence[str],
    wanted: Sequence[tuple[str | None, ...]],
    *,
    source: str,
) -> list[str]:
    """The WHERE of each parallel query reading the `wanted` partitions (one connection for
    the catalog, the stamps' row counts and the key's bounds)."""
    if not wanted:
        return ["FALSE"]  # no partition to read: the columns, no rows
    with connect(table, source=source) as connection:
        layout = _layout(connection, table, columns)
        if _by_range(table, layout, source=source):
            assert layout.key is not None
            # Filtered even when every partition is wanted: rows of a partition inserted after
            # the stamps were read are not the run's to write.
            rows = sum(_counts(connection, table, wanted).values())
            pieces = min(MAX_RANGES, max(len(wanted), -(-rows // table.split_rows)))
            return _ranges(connection, table, layout.key, _any_of(columns, wanted), pieces)
        counts = _counts(connection, table, wanted) if table.split_column else {}
        predicates: list[str] = []
        for values in wanted:
            where = " AND ".join(_equals(c, v) for c, v in zip(columns, values, strict=True))
            where = where or "TRUE"
            rows = counts.get(values, 0)
            if table.split_column and rows > table.split_rows:
                pieces = -(-rows // table.split_rows)
                predicates.extend(
                    _ranges(connection, table, table.split_column, where, pieces, bound=where)
                )
            else:
                predicates.append(where)
        return predicates


# A range read is cut into at most this many queries.
MAX_RANGES = 256


@dataclass(frozen=True)
class _Layout:
    """What PostgreSQL's catalog says about reading the table."""

    key: str | None  # split_column, else a one-column integer primary key
    correlations: dict[str, float]  # the partition columns' pg_stats.correlation, when analyzed


def _layout(
    connection: psycopg.Connection[Any], table: PostgresTable, columns: Sequence[str]
) -> _Layout:
    if table.table is None or table.read_by == "partition":
        # A query's rows have no primary key or statistics; `partition` needs neither.
        return _Layout(table.split_column, {})
    key = table.split_column
    if key is None:
        primary = connection.execute(
            "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary",
            (table.table,),
        ).fetchall()
        if len(primary) == 1 and primary[0][1] in ("smallint", "integer", "bigint"):
            key = str(primary[0][0])
    found = connection.execute(
        "SELECT s.attname, s.correlation FROM pg_stats s "
        "JOIN pg_class c ON c.relname = s.tablename "
        "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname "
        "WHERE c.oid = to_regclass(%s) AND s.attname = ANY(%s) AND s.correlation IS NOT NULL",
        (table.table, list(columns)),
    ).fetchall()
    return _Layout(key, {str(name): float(c) for name, c in found if name in columns})


def _by_range(table: PostgresTable, layout: _Layout, *, source: str) -> bool:
    """Whether the partitions are read together in ranges of the layout's key.

    Raises:
        PartlakeConfigError: `read_by="range"` on a table without a key to range over.
    """
    if table.read_by == "range" and layout.key is None:
        raise PartlakeConfigError(
            f"source {source}: read_by='range' needs a numeric key to read {_relation(table)} "
            "by: set PostgresTable(split_column=...) (or give the table a one-column integer "
            "primary key)."
        )
    if table.read_by != "auto" or layout.key is None:
        return table.read_by == "range"
    correlations = layout.correlations
    # Unanalyzed columns, or one that follows the rows' order: a query per partition.
    return bool(correlations) and all(abs(c) < SCATTERED_BELOW for c in correlations.values())


def _any_of(columns: Sequence[str], wanted: Sequence[tuple[str | None, ...]]) -> str:
    """One condition true for the rows of the `wanted` partitions."""
    if len(columns) == 1:
        values = [v[0] for v in wanted]
        listed = [_literal(v) for v in values if v is not None]
        parts = [f"{_ident(columns[0])} IN ({', '.join(listed)})"] if listed else []
        if None in values:
            parts.append(f"{_ident(columns[0])} IS NULL")
        return " OR ".join(parts)
    return " OR ".join(
        "(" + " AND ".join(_equals(c, v) for c, v in zip(columns, values, strict=True)) + ")"
        for values in wanted
    )


def _equals(column: str, value: str | None) -> str:
    quoted = _ident(column)
    # An untyped literal takes the column's type: an index on the column serves the read.
    return f"{quoted} IS NULL" if value is None else f"{quoted} = {_literal(value)}"


def _counts(
    connection: psycopg.Connection[Any],
    table: PostgresTable,
    partitions: Sequence[tuple[str | None, ...]],
) -> dict[tuple[str | None, ...], int]:
    """Rows per partition, from the stamps (no scan of the table)."""
    if table.query is not None:
        return {}
    rows = connection.execute(
        f"SELECT part, rows FROM {SCHEMA}.{STAMPS} WHERE source = %s",
        (table.identity,),
    ).fetchall()
    wanted = set(partitions)
    return {tuple(part): int(n) for part, n in rows if tuple(part) in wanted}


def _ranges(
    connection: psycopg.Connection[Any],
    table: PostgresTable,
    key: str,
    where: str,
    pieces: int,
    *,
    bound: str = "TRUE",
) -> list[str]:
    """`where` cut into `pieces` ranges of `key` between its least and greatest value among the
    rows matching `bound` (TRUE: the table's, which an index on `key` answers at once)."""
    column = _ident(key)
    relation = _ident(table.table) if table.table else f"({table.query}) AS q"
    low, high = connection.execute(
        f"SELECT min({column}), max({column}) FROM {relation} WHERE {bound}"
    ).fetchone() or (None, None)
    if low is None or high is None:
        return [where]
    step = max(1, -(-(int(high) - int(low) + 1) // max(1, pieces)))
    bounds = list(range(int(low), int(high) + 1, step))
    ranges = []
    for i, start in enumerate(bounds):
        parts = []
        if i > 0:
            parts.append(f"{column} >= {start}")
        if i < len(bounds) - 1:
            parts.append(f"{column} < {start + step}")
        condition = " AND ".join(parts) or "TRUE"
        if i == 0:  # rows without a value go with the first range
            condition = f"({condition} OR {column} IS NULL)"
        ranges.append(
            f"({where}) AND {condition}" if " OR " in where else f"{where} AND {condition}"
        )
    return ranges


def describe(table: PostgresTable) -> dict[str, Any]:
    """The declaration as shown in messages and the UI: no password."""
    shown = asdict(table)
    shown.pop("password", None)
    return shown
