"""Demo source system for the model kinds: a daily export of every user and their plan.

    python -m definitions.exports --date 2024-01-02 [--users 50] [--seed 0]

Each export is the full list of users on that day (user_id, name, plan); users join, change plan
and leave from day to day. The rows are a pure function of (date, users, seed), so writing the
same export again gives the same rows. Written with plain delta-rs, like any upstream system.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import zlib
from collections.abc import Sequence

import pyarrow as pa
from deltalake import write_deltalake

from definitions.lake import table
from definitions.partitions import EXPORTS_END, EXPORTS_START

PLANS = ["free", "pro", "team"]
START_DATE, END_DATE = EXPORTS_START, EXPORTS_END


def generate(date: dt.date, users: int, seed: int = 0) -> pa.Table:
    """Users 1..users, minus those who left before `date`; plans change now and then."""
    day = (date - dt.date.fromisoformat(START_DATE)).days
    rows = []
    for user_id in range(1, users + 1):
        h = zlib.crc32(f"{user_id}|{seed}".encode())
        joined, left = h % 4, 3 + h % 7  # days on which the user joins and leaves
        if not joined <= day < left:
            continue
        changes = zlib.crc32(f"{user_id}|{day // 2}|{seed}".encode())  # a plan holds 2 days
        rows.append((user_id, f"user{user_id}", PLANS[changes % len(PLANS)]))
    return pa.table(
        {
            "user_id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "plan": pa.array([r[2] for r in rows], pa.string()),
            "date": pa.array([date] * len(rows), pa.date32()),
        }
    )


def write_export(date: dt.date, users: int = 50, seed: int = 0, root: str | None = None) -> str:
    """Write (or replace) one day's export; returns the table path (or URI)."""
    location = table(["user_exports"], root)
    write_deltalake(
        location.delta_uri,
        generate(date, users, seed),
        mode="overwrite",
        partition_by=["date"],
        predicate=f"date = '{date.isoformat()}'",
        storage_options=location.delta_options,
    )
    return location.uri


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m definitions.exports", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--date", action="append", required=True, help="YYYY-MM-DD (repeatable)")
    parser.add_argument("--users", type=int, default=50, help="users in the system (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="change it for different users")
    args = parser.parse_args(argv)
    for raw in args.date:
        try:
            date = dt.date.fromisoformat(raw)
        except ValueError:
            parser.error(f"--date {raw!r} is not a date like 2024-01-02")
        if not START_DATE <= date.isoformat() < END_DATE:
            parser.error(f"--date {raw} is outside the exports' week {START_DATE}..{END_DATE}")
    for raw in args.date:
        path = write_export(dt.date.fromisoformat(raw), args.users, args.seed)
        print(f"wrote user_exports {raw} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
