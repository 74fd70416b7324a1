"""The `partlake` command group; each command lives in its own module of this package.

A command's module is imported when the command is called, not when the group is: `partlake
run` pays only for `run`'s imports, and a no-op answered from the last plan
(`dagster_partlake.cli.shortcut`) never imports Dagster. Listing the commands (`--help`, the
docs) imports them all.
"""

from __future__ import annotations

import importlib
from collections import UserDict
from collections.abc import Iterator

import click

# Command name -> the module of this package that adds it to `main`.
COMMAND_MODULES = {
    "catalog": "catalog",
    "delete": "delete",
    "history": "history",
    "maintain": "maintain",
    "plan": "plan",
    "restore": "restore",
    "run": "run",
    "spark": "spark",
    "sql": "sql",
    "sql-server": "sql_server",
}


class _Commands(UserDict[str, click.Command]):
    """`main.commands`: a command is there once asked for (its module imported then); going
    through all of them imports every command module."""

    def _load(self, name: object) -> None:
        module = COMMAND_MODULES.get(name) if isinstance(name, str) else None
        if module is not None and name not in self.data:
            importlib.import_module(f"dagster_partlake.cli.{module}")

    def __getitem__(self, name: str) -> click.Command:
        self._load(name)
        return self.data[name]

    def __contains__(self, name: object) -> bool:
        self._load(name)
        return name in self.data

    def __iter__(self) -> Iterator[str]:
        for name in COMMAND_MODULES:
            self._load(name)
        return iter(self.data)

    def __len__(self) -> int:
        return len(list(iter(self)))


@click.group(commands=_Commands())
def main() -> None:
    """Partition-aware incremental lakehouse on Dagster, Spark and Delta Lake."""
