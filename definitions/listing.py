"""The example's lake as its store lists it: `python -m definitions.listing` (`make demo-s3` shows
the lake on the S3 server this way, through the server's own listing)."""

from __future__ import annotations

import os

from dagster_partlake.storage.location import lake_location
from definitions.lake import lake_root


def show(root: str) -> None:
    """Print the lake under `root` as its store lists it (on S3: the server's ListObjectsV2):
    per table, its log files and data files with their bytes."""
    from collections import defaultdict

    lake = lake_location(root).join("warehouse")
    files = lake.store.walk("", skip_hidden=False)
    # A table is a folder holding `_delta_log` (asset keys may be nested: a/b); its files are
    # those below it.
    roots = sorted({e.name.split("/_delta_log/")[0] for e in files if "/_delta_log/" in e.name})
    tables: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for entry in files:
        owner = max((r for r in roots if entry.name.startswith(r + "/")), key=len, default="")
        tables[owner or "(not in a table)"].append((entry.name[len(owner) + 1 :], entry.size))
    print(f"{lake.uri}: {len(files)} objects in {len(tables)} tables")
    for name, entries in sorted(tables.items()):
        log = [e for e in entries if e[0].startswith("_delta_log/")]
        data = [e for e in entries if not e[0].startswith("_delta_log/")]
        print(
            f"  {name:<40} {len(log):>3} log files  {len(data):>4} data files "
            f"{sum(size for _, size in data):>12,} bytes"
        )


if __name__ == "__main__":
    show(lake_root() or os.environ.get("PARTLAKE_HOME", ".partlake"))
