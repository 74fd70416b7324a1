"""partlake's verdicts where Dagster shows them: the `partlake_fresh` check and its reports.

`check` declares `partlake_fresh` (with the gates' checks: `partlake_asset_checks`) and reports the
partitions a run wrote; `report` turns a plan's changed verdicts into check results (the sensor,
`partlake plan --report`); `automation` is `partlake_stale()`, the Declarative Automation
condition true for exactly the stale partitions. May import the planning core and every layer
below it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.freshness.automation import PartlakeStale, partlake_stale
    from dagster_partlake.freshness.check import (
        fresh_checks,
        fresh_evaluation,
        partlake_asset_checks,
        stale_evaluation,
    )
    from dagster_partlake.freshness.report import FreshnessReport, FreshnessReporter

__all__ = [
    "PartlakeStale",
    "FreshnessReport",
    "FreshnessReporter",
    "fresh_checks",
    "fresh_evaluation",
    "partlake_asset_checks",
    "partlake_stale",
    "stale_evaluation",
]

_LAZY = {
    "PartlakeStale": "dagster_partlake.freshness.automation",
    "partlake_stale": "dagster_partlake.freshness.automation",
    "fresh_checks": "dagster_partlake.freshness.check",
    "fresh_evaluation": "dagster_partlake.freshness.check",
    "partlake_asset_checks": "dagster_partlake.freshness.check",
    "stale_evaluation": "dagster_partlake.freshness.check",
    "FreshnessReport": "dagster_partlake.freshness.report",
    "FreshnessReporter": "dagster_partlake.freshness.report",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
