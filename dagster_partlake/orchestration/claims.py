"""Which run computes which asset partition: one run per partition, decided one run at a time.

Two runs can be asked for the same asset partitions at once: a refresh's run requesting the next
level and the sensor's tick a moment before it (Dagster's run-key check is not atomic), two
`partlake run`s on one stale plan, a materialization from the UI beside the sensor's run. Before
a run computes anything, it claims its asset partitions here; the claim is made or refused under
one lock (a file lock in the Dagster instance's folder), so of two runs starting together one
computes and the other sees the first's claim. A run that cannot claim, or whose planned
partitions are all already written from the inputs it would read, ends at once (`decide`):
without Spark, with the reason in its log.

A claim lasts while its run does: a finished run's claims, and those of a run whose worker
process is gone, count for nothing; a claim made for a run not created yet (by `partlake run`,
just before it creates the run) counts for `PENDING_SECONDS`. Claims are kept in one JSON file
beside the lock (`<DAGSTER_HOME>/partlake/claims.json`), pruned each time it is read.

The lock is a file lock: it holds for the processes of one machine (every process of a local
Dagster instance). Processes of several machines sharing a PostgreSQL instance each see only
their machine's claims; the write's own check (a planned run commits nothing another run wrote
from the same inputs) still keeps their tables right.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dagster import DagsterRunStatus, RunsFilter

from dagster_partlake.orchestration.workers import alive, instance_dir, worker_of_run
from dagster_partlake.processes import file_lock

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from dagster_partlake.planning.planner import Key
    from dagster_partlake.planning.session import PlanningSession

Target = tuple[str, "Key"]  # (asset name, partition key; None: unpartitioned)

# A claim for a run that does not exist yet lasts this long.
PENDING_SECONDS = 120.0
FINISHED = {
    DagsterRunStatus.SUCCESS,
    DagsterRunStatus.FAILURE,
    DagsterRunStatus.CANCELED,
}


@dataclass(frozen=True)
class Decision:
    """Whether a run computes (`compute`), or ends at once and why (`reason`), naming the run
    that computes (`held`: a live run holds its partitions) or computed them (`by`)."""

    compute: bool
    reason: str = ""
    by: str | None = None
    held: bool = False
    partitions: str = ""  # the asset partitions concerned, in words


def _key(target: Target) -> str:
    asset, partition = target
    return json.dumps([asset, partition])


def _unkey(text: str) -> Target:
    asset, partition = json.loads(text)
    return asset, partition


class Claims:
    """The claims of one Dagster instance (see the module docstring)."""

    def __init__(self, instance: DagsterInstance) -> None:
        self.instance = instance
        home = instance_dir(instance) or os.environ.get("DAGSTER_HOME") or os.getcwd()
        self.folder = Path(home) / "partlake"

    def locked(self, say: Callable[[str], object] | None = None) -> AbstractContextManager[None]:
        """Hold the claims' lock (every other process that claims waits meanwhile)."""
        return file_lock(self.folder / "claims.lock", "another run deciding what it computes", say)

    def holders(
        self, targets: Collection[Target], *, exclude: str | None = None
    ) -> dict[Target, str]:
        """The live runs (other than `exclude`) that hold any of `targets` (hold the lock)."""
        live = self._live()
        return {
            t: run_id
            for t in targets
            if (run_id := live.get(_key(t))) is not None and run_id != exclude
        }

    def claim(self, targets: Collection[Target], run_id: str) -> None:
        """Record that `run_id` computes `targets` (hold the lock, after `holders`)."""
        claims = self._read()
        now = time.time()
        for target in targets:
            claims[_key(target)] = {"run": run_id, "at": now}
        self._write(claims)

    def _live(self) -> dict[str, str]:
        """Target key -> run id of every claim that still counts; the others are dropped."""
        claims = self._read()
        runs = {c["run"] for c in claims.values()}
        found = (
            {r.run_id: r for r in self.instance.get_runs(filters=RunsFilter(run_ids=sorted(runs)))}
            if runs
            else {}
        )
        now = time.time()
        live: dict[str, str] = {}
        for key, claim in claims.items():
            run = found.get(claim["run"])
            if run is None:
                if now - claim["at"] < PENDING_SECONDS:
                    live[key] = claim["run"]
                continue
            if run.status in FINISHED:
                continue
            worker = worker_of_run(self.instance, run)
            if worker is not None and alive(worker) is False:
                continue
            live[key] = claim["run"]
        if len(live) != len(claims):
            self._write({k: v for k, v in claims.items() if k in live})
        return live

    def _read(self) -> dict[str, dict]:
        try:
            return json.loads((self.folder / "claims.json").read_text())
        except (OSError, ValueError):
            return {}

    def _write(self, claims: Mapping[str, dict]) -> None:
        temp = self.folder / "claims.json.tmp"
        temp.write_text(json.dumps(claims))
        os.replace(temp, self.folder / "claims.json")


def decide(
    claims: Claims,
    run_id: str,
    targets: Collection[Target],
    *,
    written: Callable[[], str | None] | None,
) -> Decision:
    """Whether run `run_id` computes `targets`, decided under the claims' lock, and if so,
    claimed for it: not when a live run holds any of them; nor, for a run partlake planned
    (the sensor's, a refresh's, `partlake run`'s: `written` given), when none of them is stale
    any more, their inputs being what another run already wrote them from (`written()`: the run
    that wrote them; None while some are stale). A run a user started otherwise always
    computes."""
    holders = claims.holders(targets, exclude=run_id)
    if holders:
        holder = next(iter(holders.values()))
        listed = _listed(holders)
        return Decision(
            False,
            f"{listed} being computed by run {holder[:8]}: this run computes nothing",
            holder,
            held=True,
            partitions=listed,
        )
    if written is not None and targets:
        by = written()
        if by is not None:
            return Decision(
                False,
                f"{_listed(targets)} already written by run {by[:8]} from the inputs this run "
                "would read: this run computes nothing",
                by,
            )
    claims.claim(targets, run_id)
    return Decision(True)


def _listed(targets: Collection[Target]) -> str:
    shown = sorted(targets, key=str)
    more = f" (+{len(shown) - 3})" if len(shown) > 3 else ""
    return ", ".join(_render(t) for t in shown[:3]) + more


def _render(target: Target) -> str:
    asset, key = target
    return asset if key is None else f"{asset}[{key}]"


def already_written(
    session: PlanningSession, targets: Collection[Target], instance: DagsterInstance
) -> str | None:
    """The run that wrote `targets` from the inputs a run would read now: when a new plan of
    `session` finds none of them stale and partlake's records say which run wrote each (the
    first one's); None when some are stale, held back, or not written by partlake at all."""
    from dagster_partlake.delta.payload import WHOLE_TABLE_ID
    from dagster_partlake.records.queries import latest_records

    graph = session.graph
    assets = sorted({a for a, _ in targets})
    store = instance if graph.has_dynamic_partitions else None
    result = session.plan(select=assets, dynamic_partitions_store=store)
    stale = {(i.asset, i.partition) for i in result.plan.items}
    held = {a for u in result.plan.unreadable for a in u.held}
    if any(t in stale or t[0] in held for t in targets):
        return None
    writers: list[str] = []
    for asset in assets:
        ids = [k if k is not None else WHOLE_TABLE_ID for a, k in targets if a == asset]
        found = latest_records(graph.assets[asset].location, ids)
        if any(found.get(i) is None or not found[i].run_id for i in ids):
            return None  # never written, or not by a partlake run: nothing to match
        writers.extend(found[i].run_id or "" for i in ids)
    return writers[0] if writers else None
