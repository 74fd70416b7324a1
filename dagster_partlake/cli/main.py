"""The `partlake` command group; each command lives in its own module of this package.

A command's module is imported when the command is called (or listed, for `--help`), not when
the group is: `partlake run` pays only for `run`'s imports, and a no-op answered from the last
plan (`dagster_partlake.cli.shortcut`) never imports Dagster.
"""

from __future__ import annotations

import importlib

import click

# Command name -> the module of this package that adds it to `main`.
COMMAND_MODULES = {
    "delete": "delete",
    "history": "history",
    "maintain": "maintain",
    "plan": "plan",
    "restore": "restore",
    "run": "run",
    "spark": "spark",
    "sql": "sql",
}


class _LazyGroup(click.Group):
    """A click group whose commands are added by their modules on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMAND_MODULES, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"dagster_partlake.cli.{module}")
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup)
def main() -> None:
    """Partition-aware incremental lakehouse on Dagster, Spark and Delta Lake."""
