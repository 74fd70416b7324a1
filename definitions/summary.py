"""Prints where the demo tables are and how to look at them (the end of `make demo`)."""

from __future__ import annotations

import os

import pyarrow as pa
from deltalake import DeltaTable

from dagster_partlake.layout import WAREHOUSE_DIR
from dagster_partlake.storage.location import lake_location
from definitions.lake import lake_root, table

TABLES = [
    "raw_events",
    "clean_events",
    "daily_region_stats",
    "monthly_region_stats",
    # The SQL models of definitions/sql/ (group sql).
    "staging/events",
    "marts/user_activity",
    "marts/monthly_region_summary",
]


def main() -> None:
    lake = lake_location(lake_root())
    print(f"\nDelta tables under {lake.join(WAREHOUSE_DIR)}:")
    for name in TABLES:
        location = table(name.split("/"))
        if not DeltaTable.is_deltatable(location.delta_uri, location.delta_options):
            print(f"  {name:<28} (not written yet)")
            continue
        delta = DeltaTable(location.delta_uri, storage_options=location.delta_options)
        actions = pa.table(delta.get_add_actions(flatten=True))
        rows = sum(n or 0 for n in actions.column("num_records").to_pylist())
        print(f"  {name:<28} version {delta.version():>3}  {rows:>8,} rows  {location}")
    dagster_home = os.environ.get("DAGSTER_HOME", "")
    print(
        "\nOpen the Dagster UI on these runs and tables:\n"
        f"  DAGSTER_HOME={dagster_home} PARTLAKE_HOME={os.environ.get('PARTLAKE_HOME', '')} "
        ".venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000   (or: make dev)\n"
        "  then browse http://127.0.0.1:3000 (Assets -> lakehouse, sql)."
    )


if __name__ == "__main__":
    main()
