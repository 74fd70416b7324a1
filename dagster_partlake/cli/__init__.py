"""`partlake`: the command line, one module per command (as dbt's `task/`).

`main` holds the command group and its one error boundary; `plan`, `run`, `history`, `restore`,
`maintain` and `spark` each add their command; `render` and `output` shape what the terminal
shows; `location` loads a code location's `Definitions`. The top layer: may import everything.
"""

from dagster_partlake.cli.main import main

__all__ = ["main"]
