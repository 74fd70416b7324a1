"""The `partlake` command group; each command lives in its own module of this package."""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """Partition-aware incremental lakehouse on Dagster, Spark and Delta Lake."""
