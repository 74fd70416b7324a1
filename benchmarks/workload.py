"""The backfill benchmarks' workload: days x regions x rows of raw_events
(benchmarks/backfill_defs.py), shared by benchmarks/backfill.py, backfill_s3.py and
native_writer.py: its arguments, its size and how it is reported."""

from __future__ import annotations

import argparse
import datetime as dt
import os
from dataclasses import dataclass
from typing import Any

START = dt.date(2024, 1, 1)


@dataclass(frozen=True)
class Workload:
    """`days` from 2024-01-01 x `regions` source partitions of `rows` rows each."""

    days: int
    regions: int
    rows: int

    @property
    def region_names(self) -> list[str]:
        return [f"r{i}" for i in range(self.regions)]

    @property
    def months(self) -> list[str]:
        return sorted({(START + dt.timedelta(days=d)).strftime("%Y-%m") for d in range(self.days)})

    @property
    def daily_partitions(self) -> int:
        return self.days * self.regions

    @property
    def monthly_partitions(self) -> int:
        return len(self.months) * self.regions

    @property
    def asset_partitions(self) -> int:
        """clean_events and daily_region_stats per day, monthly_region_stats per month."""
        return 2 * self.daily_partitions + self.monthly_partitions

    def as_json(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "regions": self.regions,
            "rows_per_partition": self.rows,
            "source_rows": self.days * self.regions * self.rows,
            "daily_partitions": self.daily_partitions,
            "monthly_partitions": self.monthly_partitions,
            "asset_partitions": self.asset_partitions,
        }


def add_workload_arguments(parser: argparse.ArgumentParser, *, days: int) -> None:
    """`--days` (default `days`), `--regions` and `--rows`."""
    parser.add_argument("--days", type=int, default=days)
    parser.add_argument("--regions", type=int, default=8)
    parser.add_argument("--rows", type=int, default=28_000, help="rows per source partition")


def workload_of(args: argparse.Namespace) -> Workload:
    """The parsed workload; the code location of benchmarks/backfill_defs.py reads the region
    count from BENCH_REGIONS, so it is set here for every process the benchmark starts."""
    os.environ["BENCH_REGIONS"] = str(args.regions)
    return Workload(args.days, args.regions, args.rows)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
