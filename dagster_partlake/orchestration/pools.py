"""How many partition runs execute at once: Dagster concurrency pools.

Managed assets declare a Dagster pool (the example's use `pool=POOL`). Before a step runs it
claims a slot of its pool from the Dagster instance, whoever launched the run: the daemon for the
sensor's requests (the run queue also holds runs whose pool is full), `dagster asset materialize`,
the UI, or `partlake run`. One instance setting therefore limits them all together:
`concurrency: pools: default_limit: N` in dagster.yaml, or `dagster instance concurrency set
partlake N`. `partlake run` executes as many runs at once as that limit allows, or
`--max-parallel` runs (more than the limit only queue for slots).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_partlake.errors import PartlakeConfigError

if TYPE_CHECKING:
    from dagster import DagsterInstance

POOL = "partlake"


@dataclass(frozen=True)
class Parallelism:
    runs: int  # runs `partlake run` executes at once
    pool_limits: dict[str, int]  # limited pools of the assets that will run -> slots

    def describe(self) -> str:
        if not self.pool_limits:
            return f"up to {self.runs} run(s) at a time (no Dagster pool limit applies)"
        pools = ", ".join(f"{name} (limit {n})" for name, n in sorted(self.pool_limits.items()))
        return f"up to {self.runs} run(s) at a time; Dagster pool {pools} caps steps across runs"


def pool_limits(instance: DagsterInstance, pools: Iterable[str]) -> dict[str, int]:
    """Slots per pool on this Dagster instance, for the pools that have a limit.

    Raises:
        PartlakeConfigError: a pool's limit is 0, so its steps could never run.
    """
    storage = instance.event_log_storage
    wanted = sorted(set(pools))
    if not wanted or not storage.supports_global_concurrency_limits:
        return {}
    # The limit set with `dagster instance concurrency set`, else the dagster.yaml default.
    limits = {pool: storage.get_concurrency_info(pool).limit for pool in wanted}
    closed = sorted(pool for pool, limit in limits.items() if limit == 0)
    if closed:
        raise PartlakeConfigError(
            f"Dagster pool {', '.join(closed)} has limit 0 on this instance, so no step in it can "
            f"run; raise it, e.g. `dagster instance concurrency set {closed[0]} 2`."
        )
    return {pool: limit for pool, limit in limits.items() if limit is not None}


def parallelism(
    instance: DagsterInstance, pools: Iterable[str], max_parallel: int | None
) -> Parallelism:
    """Runs to execute at once: `max_parallel` if given, else the smallest pool limit, else 1."""
    limits = pool_limits(instance, pools)
    if max_parallel is not None:
        runs = max_parallel
    else:
        runs = min(limits.values()) if limits else 1
    return Parallelism(max(1, runs), limits)


@dataclass(frozen=True)
class PoolWait:
    """A step of a run waiting for a slot of a pool, and the runs whose steps hold its slots."""

    run_id: str
    step_key: str
    pool: str
    limit: int | None
    holders: tuple[str, ...]  # run ids
    since: float  # when the step started waiting (epoch seconds)


def pool_waits(
    instance: DagsterInstance, pools: Iterable[str], run_ids: Collection[str]
) -> list[PoolWait]:
    """The steps of `run_ids` waiting for a slot of one of `pools`."""
    storage = instance.event_log_storage
    if not run_ids or not storage.supports_global_concurrency_limits:
        return []
    waits = []
    for pool in sorted(set(pools)):
        info = storage.get_concurrency_info(pool)
        holders = tuple(sorted({slot.run_id for slot in info.claimed_slots}))
        for step in info.pending_steps:
            if step.run_id in run_ids and step.assigned_timestamp is None:
                waits.append(
                    PoolWait(
                        step.run_id,
                        step.step_key,
                        pool,
                        info.limit,
                        holders,
                        step.enqueued_timestamp.timestamp(),
                    )
                )
    return waits
