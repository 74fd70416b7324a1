"""Judging the example lake by its data: readable by two readers, and equal to a recomputation.

The fault drills and the soak end here. Every table is read by delta-rs and, over the same live
files, by DuckDB (whose `delta_scan` cannot load its extension offline: GOTCHAS). The
lakehouse group's managed tables and the example's SQL models are compared with what
`raw_events` gives when recomputed from scratch in DuckDB SQL, as multisets: a row lost or
written twice is a difference.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import duckdb
import pyarrow as pa
from deltalake import DeltaTable

# Asset name -> the name its table has in the SQL below.
TABLES = {
    "raw_events": "raw_events",
    "clean_events": "clean_events",
    "daily_region_stats": "daily_region_stats",
    "monthly_region_stats": "monthly_region_stats",
    "staging/events": "staging_events",
    "marts/user_activity": "user_activity",
    "marts/monthly_region_summary": "monthly_region_summary",
}

# The example's assets (definitions/assets.py: clean, daily_stats, monthly_stats) in SQL.
EXPECTED = {
    "clean_events": """
        SELECT event_id, user_id, lower(event_type) AS event_type,
               greatest(amount, 0::DECIMAL(10, 2)) AS amount, event_ts, date, region
        FROM raw_events WHERE user_id IS NOT NULL""",
    "daily_region_stats": """
        SELECT date, region, count(*) AS events, count(DISTINCT user_id) AS users,
               sum(CASE WHEN event_type = 'purchase' THEN 1 ELSE 0 END) AS purchases,
               sum(CASE WHEN event_type = 'purchase' THEN amount END) AS revenue
        FROM clean_events_expected GROUP BY date, region""",
    "monthly_region_stats": """
        SELECT date_trunc('month', date)::DATE AS month, region, sum(events) AS events,
               sum(purchases) AS purchases, sum(revenue) AS revenue, count(*) AS days
        FROM daily_region_stats_expected GROUP BY 1, 2""",
    # The example's SQL models (definitions/sql/): the same rules in SQL, and a merge on
    # (user_id, region) applied one day after the other: each user's latest day per region.
    "staging_events": "SELECT * FROM clean_events_expected",
    "monthly_region_summary": "SELECT * FROM monthly_region_stats_expected",
    "user_activity": """
        WITH days AS (
            SELECT user_id, region, date, max(event_ts) AS last_seen, count(*) AS events,
                   sum(CASE WHEN event_type = 'purchase' THEN amount END) AS revenue
            FROM clean_events_expected GROUP BY user_id, region, date),
        ranked AS (
            SELECT *, row_number() OVER (PARTITION BY user_id, region ORDER BY date DESC) AS n
            FROM days)
        SELECT user_id, region, last_seen, date AS last_date, events, revenue
        FROM ranked WHERE n = 1""",
}


def read_table(path: Path) -> pa.Table:
    """The table as delta-rs reads it, after checking that DuckDB reads as many rows from the
    same live files."""
    table = DeltaTable(str(path))
    rows = table.to_pyarrow_table()
    uris = table.file_uris()
    counted = (
        duckdb.connect()
        .execute(f"SELECT count(*) FROM read_parquet({uris!r}, hive_partitioning = true)")
        .fetchall()[0][0]
        if uris
        else 0
    )
    assert counted == rows.num_rows, f"{path}: DuckDB read {counted} rows, delta-rs {rows.num_rows}"
    return rows


def compare_lake(lake: Path, assets: Collection[str] = TABLES) -> dict[str, tuple[int, int]]:
    """Per managed table of `assets` (all of the example's by default), (expected rows missing,
    rows not expected) against its recomputation from raw_events; every table is read by both
    readers first."""
    con = duckdb.connect()
    for asset, name in TABLES.items():
        if asset in assets or asset == "raw_events":
            con.register(name, read_table(lake / "warehouse" / asset))
    differences = {}
    for name, sql in EXPECTED.items():
        con.execute(f"CREATE TABLE {name}_expected AS {sql}")  # later ones read earlier ones
        if not any(TABLES[a] == name for a in assets):
            continue
        columns = ", ".join(c for c in con.table(f"{name}_expected").columns)
        actual = f"SELECT {columns} FROM {name}"
        missing = con.execute(
            f"SELECT count(*) FROM (SELECT * FROM {name}_expected EXCEPT ALL {actual})"
        ).fetchall()[0][0]
        extra = con.execute(
            f"SELECT count(*) FROM ({actual} EXCEPT ALL SELECT * FROM {name}_expected)"
        ).fetchall()[0][0]
        differences[name] = (missing, extra)
    return differences


def check_lake(lake: Path, assets: Collection[str] = TABLES) -> None:
    """Every table of `assets` readable; each managed one equal, row for row, to its
    recomputation."""
    for name, (missing, extra) in compare_lake(lake, assets).items():
        assert (missing, extra) == (0, 0), (
            f"{name}: {missing} expected row(s) missing, {extra} row(s) not expected "
            "(lost or written twice)"
        )
