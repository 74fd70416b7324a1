"""`partlake`: the command line, one module per command (as dbt's `task/`).

`main` holds the command group; `plan`, `run`, `history`, `restore`, `delete`, `maintain`,
`spark` and `sql` each add their command to it; `common` holds the one error boundary and what
the commands share (the Dagster instance, planning a code location, the tables of an asset, a
Spark session); `render` shapes what the terminal shows;
`location` loads a code location's `Definitions`. The top layer: may import everything.
"""

# Each module adds its command to `main` when imported.
from dagster_partlake.cli import delete, history, maintain, plan, restore, run, spark, sql  # noqa: E402, F401, I001
from dagster_partlake.cli.main import main

__all__ = ["main"]
