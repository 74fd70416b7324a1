"""What keeps partitions fresh: the sensor, `partlake run`'s runner, pools, run workers, sources.

`sensor` requests runs for the stale partitions on every tick, and `chain` a refresh's next level
once a run has committed, both what `run_requests` says a refresh requests next; `runner`
executes a `RunPlan` in this process (`partlake run`); `pools` reads the Dagster concurrency
pools that cap steps across runs and what waits for them; `workers` knows which process runs a
run and whether it is alive, and `launcher` lets Dagster's run monitoring ask it; `sources`
declares source assets partlake observes. May import every layer below: the planning core and
everything under it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.orchestration.launcher import MonitoredRunLauncher
    from dagster_partlake.orchestration.pools import POOL, Parallelism, parallelism, pool_limits
    from dagster_partlake.orchestration.runner import Outcome, execute_runs, refresh
    from dagster_partlake.orchestration.sensor import build_invalidation_sensor
    from dagster_partlake.orchestration.sources import partlake_source

__all__ = [
    "POOL",
    "MonitoredRunLauncher",
    "Outcome",
    "Parallelism",
    "build_invalidation_sensor",
    "execute_runs",
    "parallelism",
    "partlake_source",
    "pool_limits",
    "refresh",
]

_LAZY = {
    "MonitoredRunLauncher": "dagster_partlake.orchestration.launcher",
    "build_invalidation_sensor": "dagster_partlake.orchestration.sensor",
    "Outcome": "dagster_partlake.orchestration.runner",
    "execute_runs": "dagster_partlake.orchestration.runner",
    "refresh": "dagster_partlake.orchestration.runner",
    "POOL": "dagster_partlake.orchestration.pools",
    "Parallelism": "dagster_partlake.orchestration.pools",
    "parallelism": "dagster_partlake.orchestration.pools",
    "pool_limits": "dagster_partlake.orchestration.pools",
    "partlake_source": "dagster_partlake.orchestration.sources",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
