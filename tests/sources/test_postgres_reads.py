"""How a run reads a PostgreSQL source's partitions (`PostgresTable(read_by=...)`), on a real
server with Spark's JDBC source: a query per partition, or the partitions together in ranges
of a key when PostgreSQL's statistics say their rows are spread over the table; each way reads
exactly the partitions' rows, and the server receives the predicates."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.sources.postgres import PostgresTable, read_partitions
from tests.conftest import postgres_connection, postgres_table

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

_names = itertools.count()
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]


@pytest.fixture
def connection(postgres_source: Any) -> Iterator[psycopg.Connection[Any]]:
    with postgres_connection(postgres_source) as connection:
        yield connection


def _table(postgres_source: Any, connection: Any, layout: str, **options: Any) -> PostgresTable:
    """A table of 2,000 orders over 4 days: `spread` (the days cycle row by row) or `in_order`
    (day after day), analyzed; `unanalyzed` is spread without statistics."""
    name = f"reads_{next(_names)}"
    day = "(g % 4)" if layout != "in_order" else "((g - 1) / 500)"
    connection.execute(
        f"CREATE TABLE {name} (id bigint PRIMARY KEY, order_date date, amount bigint) "
        "WITH (autovacuum_enabled = false)"
    )
    connection.execute(
        f"INSERT INTO {name} SELECT g, date '2024-01-01' + {day}::int, g "
        "FROM generate_series(1, 2000) g"
    )
    if layout != "unanalyzed":
        connection.execute(f"ANALYZE {name}")
    table: PostgresTable = postgres_table(postgres_source, name, split_rows=300, **options)
    return table


def _read(
    spark: Any, server: Any, table: PostgresTable, days: list[str]
) -> tuple[list[str], list[tuple[int, str]]]:
    """The JDBC queries the server received for a read of `days`, and the rows read."""
    log = Path(server.data) / "server.log"
    logged = len(log.read_bytes())
    read = read_partitions(spark, table, ["order_date"], [(d,) for d in days], source="orders")
    rows = sorted((r["id"], str(r["order_date"])) for r in read.df.collect())
    assert read.queries == read.df.rdd.getNumPartitions()
    received = [
        line
        for line in log.read_text(errors="replace")[logged:].splitlines()
        # (not Spark's query for the columns, WHERE 1=0)
        if "PostgreSQL JDBC Driver:" in line
        and f"FROM {table.table} " in line
        and "1=0" not in line
    ]
    return received, rows


def _expected(connection: Any, table: PostgresTable, days: list[str]) -> list[tuple[int, str]]:
    found = connection.execute(
        f"SELECT id, order_date::text FROM {table.table} WHERE order_date::text = ANY(%s)",
        (days,),
    ).fetchall()
    return sorted((int(i), str(d)) for i, d in found)


def test_auto_reads_spread_rows_in_ranges_of_the_primary_key(
    spark: Any, postgres_source: Any, connection: Any
) -> None:
    table = _table(postgres_source, connection, "spread")
    # Three of four days: one filter for the three, in ranges of the primary key (id, found
    # in the catalog): 1,500 rows / 300 a range = 5 queries, each page read once.
    received, rows = _read(spark, postgres_source, table, DAYS[:3])
    assert rows == _expected(connection, table, DAYS[:3])
    assert len(received) == 5, received
    assert all(
        """"order_date" IN ('2024-01-01', '2024-01-02', '2024-01-03')""" in line
        for line in received
    ), received
    assert all('"id" ' in line for line in received), received
    # The four days of a table that now has a fifth: filtered, so the fifth's row stays out
    # (as a day inserted after the run read the stamps would).
    connection.execute(f"INSERT INTO {table.table} VALUES (9001, '2024-01-09', 1)")
    received, rows = _read(spark, postgres_source, table, DAYS)
    assert rows == _expected(connection, table, DAYS)
    assert len(received) == 7, received  # 2,000 rows / 300
    assert all("'2024-01-04')" in line for line in received), received


def test_auto_reads_rows_in_day_order_and_unanalyzed_ones_by_partition(
    spark: Any, postgres_source: Any, connection: Any
) -> None:
    for layout in ("in_order", "unanalyzed"):
        table = _table(postgres_source, connection, layout)
        received, rows = _read(spark, postgres_source, table, DAYS[:3])
        assert rows == _expected(connection, table, DAYS[:3]), layout
        for day in DAYS[:3]:
            assert sum(f""""order_date" = '{day}'""" in line for line in received) == 1, received
        assert len(received) == 3, (layout, received)


def test_read_by_forces_either_way(spark: Any, postgres_source: Any, connection: Any) -> None:
    table = _table(postgres_source, connection, "spread", read_by="partition")
    received, rows = _read(spark, postgres_source, table, DAYS[:2])
    assert rows == _expected(connection, table, DAYS[:2])
    assert len(received) == 2, received
    table = _table(postgres_source, connection, "in_order", read_by="range", split_column="id")
    received, rows = _read(spark, postgres_source, table, DAYS[1:3])
    assert rows == _expected(connection, table, DAYS[1:3])
    assert len(received) == 4 and all("IN ('2024-01-02', '2024-01-03')" in x for x in received)


def test_a_range_read_without_a_key_and_an_unknown_read_by_name_the_fix(
    spark: Any, postgres_source: Any, connection: Any
) -> None:
    name = f"reads_{next(_names)}"
    connection.execute(f"CREATE TABLE {name} (order_date date, amount bigint)")
    connection.execute(f"INSERT INTO {name} VALUES ('2024-01-01', 1)")
    table = postgres_table(postgres_source, name, read_by="range")
    with pytest.raises(
        PartlakeConfigError, match=r"read_by='range' needs a numeric key.*split_column"
    ):
        read_partitions(spark, table, ["order_date"], [("2024-01-01",)], source="orders")
    with pytest.raises(PartlakeConfigError, match="read_by='ranges'.*auto, partition, range"):
        PostgresTable(table="t", read_by="ranges")
