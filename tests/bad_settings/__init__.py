"""Small code locations, each with one bad partlake setting (tests/test_settings.py).

Each module is a code location of its own (`dagster dev -m tests.bad_settings.kind`, `partlake
plan -m ...`): `good` loads; every other one fails at load, naming its asset and the setting.
Most declare their checks with `partlake_asset_checks`, as the example does; `unknown_key` has
only the invalidation sensor, whose asset selection checks the settings when Dagster snapshots
the code location.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster import DailyPartitionsDefinition, Definitions

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    build_invalidation_sensor,
    partlake_asset_checks,
)

DAILY = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")


def definitions(assets: Sequence[Any], *, checks: bool = True) -> Definitions:
    """A code location of `assets` with partlake's IO manager and sensor; `checks`: its asset
    checks too (`partlake_asset_checks`, which checks the settings at import)."""
    spark = SparkResource()
    return Definitions(
        assets=assets,
        asset_checks=partlake_asset_checks(assets) if checks else None,
        sensors=[build_invalidation_sensor()],
        resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
    )
