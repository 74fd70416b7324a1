"""`partlake`: the command line, one module per command (as dbt's `task/`).

`main` holds the command group; `plan`, `run`, `history`, `restore`, `delete`, `maintain`,
`spark` and `sql` each add their command to it when the command is first used (`main` imports
them lazily); `common` holds the one error boundary and what
the commands share (the Dagster instance, planning a code location, the tables of an asset, a
Spark session); `render` shapes what the terminal shows;
`location` loads a code location's `Definitions`; `shortcut` answers a no-op from the last plan
without importing the code location. The top layer: may import everything.
"""

from dagster_partlake.cli.main import main

__all__ = ["main"]
