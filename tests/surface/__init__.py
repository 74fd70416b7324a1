"""Tests written the way users write code: each module writes its own code location as a module
in a temporary folder, runs the real `partlake` / `dagster` commands in subprocesses from there,
and checks the rows with deltalake and that the plan is empty after the run.

`options` lists every public entry point, documented argument and `partlake/*` setting, and
which test covers each (`covers`); `test_coverage` fails when one is not covered and keeps the
docs page docs/reference/surface.md equal to the mapping.
"""
