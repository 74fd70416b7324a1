"""A PostgreSQL table's change stamps (`dagster_partlake.sources.postgres`) on a real server: each
kind of change stamps exactly its partitions, what changes no row stamps nothing, and a plan
with nothing changed asks one query and reads none of the table's rows. No Spark."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dagster_partlake.errors import SourceError
from dagster_partlake.sources.postgres import PostgresTable, table_state
from tests.conftest import PG_PASSWORD, postgres_connection, postgres_table

pytestmark = [pytest.mark.postgres]

_names = itertools.count()
Values = tuple[str | None, ...]


@pytest.fixture
def orders(postgres_source: Any) -> Iterator[tuple[PostgresTable, psycopg.Connection[Any]]]:
    """A fresh table of 1,200 orders over 3 days x 2 regions, and a connection to change it."""
    name = f"orders_{next(_names)}"
    server = postgres_source
    table: PostgresTable = postgres_table(server, name)
    with postgres_connection(server) as connection:
        connection.execute(
            f"CREATE TABLE {name} (id bigint PRIMARY KEY, order_date date, region text, "
            "amount numeric(10, 2))"
        )
        connection.execute(
            f"INSERT INTO {name} SELECT g, date '2024-01-01' + (g % 3), "
            "CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g FROM generate_series(1, 1200) g"
        )
        yield table, connection


def _stamps(table: PostgresTable) -> dict[Values, int]:
    state = table_state(table, ["order_date", "region"], source="orders")
    assert state is not None
    return {values: stamp for values, stamp in state.last_updated.items() if stamp is not None}


def _changed(before: dict[Values, int], after: dict[Values, int]) -> list[Values]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def test_each_change_stamps_exactly_its_partitions(
    orders: tuple[PostgresTable, psycopg.Connection[Any]],
) -> None:
    table, connection = orders
    relation = table.table
    before = _stamps(table)
    assert len(before) == 6 and before[("2024-01-01", "eu")] > 0
    cases: list[tuple[str, str, list[Values]]] = [
        ("an insert into an old partition",
         f"INSERT INTO {relation} VALUES (5000, '2024-01-01', 'eu', 1)",
         [("2024-01-01", "eu")]),
        ("an update of one row",
         f"UPDATE {relation} SET amount = amount + 1 WHERE id = 2",
         [("2024-01-03", "eu")]),
        ("a delete of one row",
         f"DELETE FROM {relation} WHERE id = 3",
         [("2024-01-01", "us")]),
        ("a new partition",
         f"INSERT INTO {relation} VALUES (5001, '2024-01-05', 'eu', 1)",
         [("2024-01-05", "eu")]),
        ("a row moved to another partition",
         f"UPDATE {relation} SET region = 'us' WHERE id = 8",
         [("2024-01-03", "eu"), ("2024-01-03", "us")]),
        ("an update that writes the same values",
         f"UPDATE {relation} SET amount = amount WHERE id = 4",
         []),
        ("VACUUM", f"VACUUM {relation}", []),
        ("ANALYZE", f"ANALYZE {relation}", []),
        ("VACUUM FULL (every row rewritten)", f"VACUUM FULL {relation}", []),
        ("a partition emptied",
         f"DELETE FROM {relation} WHERE order_date = '2024-01-05'",
         [("2024-01-05", "eu")]),
    ]  # fmt: skip
    for what, statement, expected in cases:
        connection.execute(statement)
        after = _stamps(table)
        assert _changed(before, after) == expected, what
        before = after
    assert ("2024-01-05", "eu") not in before, "an emptied partition is no longer there"


def test_a_plan_with_nothing_changed_asks_one_query_and_reads_no_row_of_the_table(
    orders: tuple[PostgresTable, psycopg.Connection[Any]], postgres_source: Any
) -> None:
    """The cost per plan: measured with PostgreSQL's own statement and table statistics."""
    table, connection = orders
    _stamps(table)  # installs the triggers and stamps the rows already there
    relation = table.table
    assert relation is not None
    name = relation.split(".")[1]

    def scans() -> tuple[int, int, int]:
        connection.execute("SELECT pg_stat_force_next_flush()")
        connection.execute("SELECT pg_stat_clear_snapshot()")
        row = connection.execute(
            "SELECT seq_scan, seq_tup_read, coalesce(idx_scan, 0) FROM pg_stat_user_tables "
            "WHERE relname = %s",
            (name,),
        ).fetchone()
        assert row is not None
        return row

    log = Path(postgres_source.data) / "server.log"
    table_before, logged = scans(), len(log.read_bytes())
    for _ in range(5):
        _stamps(table)  # five plans, nothing changed
    table_after = scans()
    assert table_after == table_before, "a no-change plan read the source table"
    sent = [
        line
        for line in log.read_text(errors="replace")[logged:].splitlines()
        # The server logs each statement partlake's connections (application "partlake") send.
        if " partlake: LOG:  " in line and ("statement:" in line or "execute" in line)
    ]
    assert len(sent) == 5, sent  # one query per plan
    assert all("FROM partlake.partition_stamps WHERE source" in line for line in sent), sent


def test_a_wrong_password_a_missing_table_and_no_server_name_the_source(
    postgres_source: Any,
) -> None:
    server = postgres_source
    base = {"port": server.port, "database": server.db, "user": server.user}
    wrong = PostgresTable(table="public.nope", password="not-the-password", **base)
    with pytest.raises(SourceError) as refused:
        table_state(wrong, ["d"], source="orders")
    assert str(refused.value).startswith("source orders: PostgreSQL at 127.0.0.1:")
    assert "refused the password of user dagster" in str(refused.value)
    assert "not-the-password" not in str(refused.value)
    missing = PostgresTable(table="public.nope", password=PG_PASSWORD, **base)
    with pytest.raises(SourceError, match=r"source orders: table public.nope does not exist"):
        table_state(missing, ["d"], source="orders")
    closed = PostgresTable(table="public.nope", host="127.0.0.1", port=1, database="x")
    with pytest.raises(SourceError, match=r"source orders: cannot reach PostgreSQL at 127.0.0.1:1"):
        table_state(closed, ["d"], source="orders")
    for error in (refused,):
        assert len(str(error.value).splitlines()) == 1
