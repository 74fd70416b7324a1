"""Demo source system: writes or rewrites partitions of the raw_events Delta table.

    python -m definitions.ingest --date 2024-01-02 --region eu [--rows 1000] [--seed 0]

It writes like an upstream system that knows nothing of Dagster or Spark: plain delta-rs
(`write_deltalake` with a partition predicate), one commit per partition. The rows are a pure
function of (date, region, rows, seed), so reruns with the same arguments give the same rows.
`--date` and `--region` may be repeated to write every combination.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import zlib
from collections.abc import Sequence
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

from definitions.lake import table
from definitions.partitions import REGIONS, START_DATE

EVENT_TYPES = ["view", "click", "purchase", "refund"]
EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
SCHEMA = pa.schema(
    [
        ("event_id", pa.int64()),
        ("user_id", pa.int64()),
        ("event_type", pa.string()),
        ("amount", pa.decimal128(10, 2)),
        ("event_ts", pa.timestamp("us", tz="UTC")),
        ("date", pa.date32()),
        ("region", pa.string()),
    ]
)


def raw_events_path(root: str | None = None) -> str:
    return table(["raw_events"], root).uri


def _region_code(region: str) -> int:
    """The event id slot (below 100) of a region outside REGIONS. The benchmarks' r0, r1, ...
    get len(REGIONS) + N: a hash modulo 97 gave r0 and r2 the same event ids, which the
    unique_event_id gate of clean_events then refused in a backfill of both."""
    if region[:1] == "r" and region[1:].isdigit() and len(REGIONS) + int(region[1:]) < 100:
        return len(REGIONS) + int(region[1:])
    return zlib.crc32(region.encode()) % 97


def generate(
    date: dt.date, region: str, rows: int, seed: int = 0, missing_ids: int = 0
) -> pa.Table:
    """Deterministic events of one day and region; a few rows are dirty on purpose, and the
    first `missing_ids` rows lack their event id (a bad batch that clean_events' gate stops)."""
    rng = np.random.default_rng(zlib.crc32(f"{date}|{region}|{seed}".encode()))
    user_id = rng.integers(1, 5_000, rows)
    user_mask = rng.random(rows) < 0.02  # 2% of rows lack a user: clean_events drops them
    event_type = np.array(EVENT_TYPES)[rng.integers(0, len(EVENT_TYPES), rows)]
    cents = rng.integers(0, 50_000, rows)
    start = dt.datetime.combine(date, dt.time(0), tzinfo=dt.UTC)
    offsets_us = np.sort(rng.integers(0, 86_400_000_000, rows))
    region_code = REGIONS.index(region) if region in REGIONS else _region_code(region)
    base_id = ((date.toordinal() * 100 + region_code) * 10_000_000) + seed * 1_000_000_000_000
    # Vectorized (no Python objects per row): the benchmarks generate tens of millions of rows.
    amount = pc.cast(
        pc.multiply(
            pa.array(cents, pa.int64()).cast(pa.decimal128(21, 2)),
            pa.scalar(Decimal("0.01"), pa.decimal128(3, 2)),
        ),
        pa.decimal128(10, 2),
    )
    start_us = int(start.timestamp()) * 1_000_000
    return pa.table(
        {
            "event_id": pa.array(
                base_id + np.arange(rows), pa.int64(), mask=np.arange(rows) < missing_ids
            ),
            "user_id": pa.array(user_id, pa.int64(), mask=user_mask),
            "event_type": pa.array(event_type, pa.string()),
            "amount": amount,
            "event_ts": pa.array(start_us + offsets_us, pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "date": pa.array(
                np.full(rows, date.toordinal() - EPOCH_ORDINAL, np.int32), pa.date32()
            ),
            "region": pa.array(np.full(rows, region, dtype=object), pa.string()),
        },
        schema=SCHEMA,
    )


def write_partition(
    date: dt.date,
    region: str,
    rows: int = 1000,
    seed: int = 0,
    root: str | None = None,
    missing_ids: int = 0,
) -> str:
    """Write (or replace) one partition of raw_events; returns the table path (or URI)."""
    location = table(["raw_events"], root)
    write_deltalake(
        location.delta_uri,
        generate(date, region, rows, seed, missing_ids),
        mode="overwrite",
        partition_by=["date", "region"],
        predicate=f"date = '{date.isoformat()}' AND region = '{region}'",
        storage_options=location.delta_options,
    )
    return location.uri


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m definitions.ingest", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--date", action="append", required=True, help="YYYY-MM-DD (repeatable)")
    parser.add_argument(
        "--region", action="append", required=True, help=f"one of {', '.join(REGIONS)} (repeatable)"
    )
    parser.add_argument("--rows", type=int, default=1000, help="rows per partition (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="change it to produce different rows")
    parser.add_argument(
        "--missing-ids",
        type=int,
        default=0,
        help="blank the event id of the first N rows: a bad batch for the quality gates",
    )
    args = parser.parse_args(argv)
    start = dt.date.fromisoformat(START_DATE)
    for raw_date in args.date:
        try:
            date = dt.date.fromisoformat(raw_date)
        except ValueError:
            parser.error(f"--date {raw_date!r} is not a date like 2024-01-02")
        if date < start:
            parser.error(f"--date {raw_date} is before the first partition {START_DATE}")
        for region in args.region:
            if region not in REGIONS:
                parser.error(f"--region {region!r} is not one of {', '.join(REGIONS)}")
    if args.rows < 0:
        parser.error("--rows must be 0 or more")
    if not 0 <= args.seed < 9_000:
        parser.error("--seed must be between 0 and 8999 (it offsets the event ids)")
    for raw_date in args.date:
        for region in args.region:
            path = write_partition(
                dt.date.fromisoformat(raw_date),
                region,
                args.rows,
                args.seed,
                missing_ids=args.missing_ids,
            )
            print(f"wrote raw_events {raw_date}|{region}: {args.rows} rows -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
