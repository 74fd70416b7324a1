"""`python -m dagster_partlake.cli`: the `partlake` command."""

from dagster_partlake.cli import main

main()
