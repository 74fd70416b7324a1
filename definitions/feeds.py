"""Demo source systems for incremental inputs: a change feed of user plans (a Delta table that
only grows) and a landing folder where payment files are dropped.

    python -m definitions.feeds changes --batch 1 [--users 20]
    python -m definitions.feeds payments --file 1 [--rows 100]

Batch N of the change feed holds one change per user whose id is a multiple of N (or every
user for N = 1), stamped `updated_at` = 2024-01-01 + N hours; file N of payments holds `--rows`
payments with ids N*100000.. . Both are pure functions of their arguments. Written with plain
delta-rs and pyarrow, like any upstream system.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

from definitions.lake import table

PLANS = ["free", "pro", "team"]


def changes(batch: int, users: int = 20) -> pa.Table:
    """Batch `batch` of the change feed: (user_id, plan, updated_at)."""
    ids = [u for u in range(1, users + 1) if u % batch == 0]
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=batch)
    return pa.table(
        {
            "user_id": pa.array(ids, pa.int64()),
            "plan": pa.array([PLANS[(u + batch) % len(PLANS)] for u in ids], pa.string()),
            "updated_at": pa.array([at] * len(ids), pa.timestamp("us", tz="UTC")),
        }
    )


def append_changes(batch: int, users: int = 20, root: str | None = None) -> str:
    """Append one batch to the change feed (never rewrites it); returns the table path."""
    location = table(["user_changes"], root)
    write_deltalake(
        location.delta_uri,
        changes(batch, users),
        mode="append",
        storage_options=location.delta_options,
    )
    return location.uri


def payments(number: int, rows: int = 100) -> pa.Table:
    """Payment file `number`: (payment_id, user_id, amount_cents)."""
    ids = list(range(number * 100_000, number * 100_000 + rows))
    return pa.table(
        {
            "payment_id": pa.array(ids, pa.int64()),
            "user_id": pa.array([1 + i % 20 for i in ids], pa.int64()),
            "amount_cents": pa.array([100 + i % 900 for i in ids], pa.int64()),
        }
    )


def drop_payments(number: int, rows: int = 100, root: str | None = None) -> str:
    """Drop payment file `number` into the landing folder, whole (on disk: write, then rename;
    an object store shows an object whole once its PUT is done)."""
    folder = table(["payment_files"], root)
    name = f"payments-{number:05d}.parquet"
    if not folder.is_local:
        buffer = pa.BufferOutputStream()
        pq.write_table(payments(number, rows), buffer)
        folder.store.write(name, buffer.getvalue().to_pybytes())
        return folder.join(name).uri
    os.makedirs(folder.path, exist_ok=True)
    path = os.path.join(folder.path, name)
    pq.write_table(payments(number, rows), path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m definitions.feeds", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    change = commands.add_parser("changes", help="append a batch to the user_changes feed")
    change.add_argument("--batch", type=int, action="append", required=True, help="N >= 1")
    change.add_argument("--users", type=int, default=20)
    payment = commands.add_parser("payments", help="drop a file into payment_files")
    payment.add_argument("--file", type=int, action="append", required=True, help="N >= 1")
    payment.add_argument("--rows", type=int, default=100)
    args = parser.parse_args(argv)
    numbers = args.batch if args.command == "changes" else args.file
    if any(n < 1 for n in numbers):
        parser.error("batch and file numbers start at 1")
    for n in numbers:
        if args.command == "changes":
            path = append_changes(n, args.users)
            print(f"appended change batch {n} to user_changes -> {path}")
        else:
            path = drop_payments(n, args.rows)
            print(f"dropped payments file {n} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
