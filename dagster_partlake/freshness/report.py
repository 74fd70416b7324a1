"""Reporting `partlake_fresh` results: only the verdicts that changed since the last report.

At a hundred thousand partitions per asset, reporting every verdict on every tick would cost
minutes of Dagster event writes. A `FreshnessReporter` remembers what it last said per asset:
the plan's stale partitions of that asset (the same mapping object the planning session keeps,
so an asset whose verdicts did not move is skipped by one identity test). A report then says
failed (warn) for each partition stale now with another verdict than before, and passed for each
partition no longer stale. Before its first report of an asset, it reads what the instance holds
(the latest result per partition), so a new process neither repeats every passed result nor
leaves a partition failed that became fresh while nothing reported. A report holds at most
`limit` results (None: no limit); the rest follow in the next ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster import AssetCheckKey, AssetKey

from dagster_partlake.compat import record_check_evaluations
from dagster_partlake.freshness.check import fresh_evaluation, stale_evaluation
from dagster_partlake.metadata import FRESH_CHECK

if TYPE_CHECKING:
    from dagster import AssetCheckEvaluation, DagsterInstance

    from dagster_partlake.columnar.interner import Key
    from dagster_partlake.planning.planner import StalePartition
    from dagster_partlake.planning.session import PlanResult

# Results per report: what a sensor tick writes to the instance at most (about 330 a second).
DEFAULT_LIMIT = 5_000
# What the sensor and `partlake plan` say when the code location registers no partlake_fresh.
MISSING_CHECKS = (
    "partlake_fresh is not registered, so the UI cannot show which partitions are stale: add "
    "asset_checks=partlake_asset_checks(assets) to the code location's Definitions."
)


@dataclass(frozen=True)
class FreshnessReport:
    """The results to record now, and how many changed verdicts wait for the next report."""

    evaluations: tuple[AssetCheckEvaluation, ...]
    waiting: int

    @property
    def failed(self) -> int:
        return sum(not e.passed for e in self.evaluations)


class FreshnessReporter:
    """What the `partlake_fresh` check last said of each partition, kept by a long-lived process
    (the sensor's code server) across plans."""

    def __init__(self, limit: int | None = DEFAULT_LIMIT) -> None:
        self.limit = limit
        # Per asset: the stale partitions last reported (the plan memo's own mapping).
        self._said: dict[str, Mapping[Key, StalePartition]] = {}
        # Partitions whose change was not reported yet (over the limit), per asset.
        self._backlog: dict[str, set[Key]] = {}

    def report(
        self,
        instance: DagsterInstance,
        result: PlanResult,
        verdicts: Mapping[str, Mapping[Key, StalePartition]],
        checked: Mapping[str, AssetKey],
    ) -> FreshnessReport:
        """The results that tell what changed in `verdicts` (the stale partitions per asset of
        `result`'s plan, as the session memo holds them), for the assets in `checked` (name ->
        key of the assets that have the check)."""
        for name, key in checked.items():
            now = verdicts.get(name, _NONE)
            before = self._said.get(name)
            if before is None:
                before = _stored_failures(instance, key)
            if before is not now:
                keys = {k for k, item in now.items() if before.get(k) != item}
                keys.update(k for k in before if k not in now)
                if keys:
                    self._backlog.setdefault(name, set()).update(keys)
            self._said[name] = now
        evaluations: list[AssetCheckEvaluation] = []
        shown = _as_shown(result, set(self._backlog))
        for name in list(self._backlog):
            keys = self._backlog[name]
            while (
                keys and name in checked and (self.limit is None or len(evaluations) < self.limit)
            ):
                partition = keys.pop()
                evaluations.append(self._evaluation(name, partition, checked[name], result, shown))
            if not keys or name not in checked:
                del self._backlog[name]
        waiting = sum(len(keys) for keys in self._backlog.values())
        return FreshnessReport(tuple(evaluations), waiting)

    def _evaluation(
        self,
        name: str,
        partition: Key,
        key: AssetKey,
        result: PlanResult,
        shown: Mapping[tuple[str, Key], StalePartition],
    ) -> AssetCheckEvaluation:
        state = result.inputs.states.get(name, {}).get(partition)
        updated = state.last_updated if state is not None else None
        item = self._said[name].get(partition)
        if item is None:
            return fresh_evaluation(key, partition, updated)
        return stale_evaluation(key, shown.get((name, partition), item), updated)


_NONE: Mapping[Key, StalePartition] = {}


def record_report(instance: DagsterInstance, report: FreshnessReport) -> None:
    """Record a report's results in the instance (one report id for all of them)."""
    if report.evaluations:
        record_check_evaluations(instance, report.evaluations, f"partlake-fresh-{uuid.uuid4()}")


def _as_shown(result: PlanResult, assets: Collection[str]) -> dict[tuple[str, Key], StalePartition]:
    """The plan's items of `assets` as `partlake plan --json` shows them (an incremental
    input's `because` names the range it reads, not the upstream partitions)."""
    if not assets:
        return {}
    return {(i.asset, i.partition): i for i in result.plan.items if i.asset in assets}


def _stored_failures(instance: DagsterInstance, key: AssetKey) -> Mapping[Key, StalePartition]:
    """The partitions whose latest stored `partlake_fresh` result failed, as stale with an
    unknown verdict (so each is reported again: passed if fresh now, its verdict if stale)."""
    from dagster_partlake.compat import CHECK_FAILED

    infos = instance.event_log_storage.get_asset_check_partition_info(
        [AssetCheckKey(key, FRESH_CHECK)]
    )
    return {
        info.partition_key: _UNKNOWN
        for info in infos
        if info.latest_execution_status == CHECK_FAILED
    }


def checked_assets(asset_check_keys: Collection[AssetCheckKey]) -> dict[str, AssetKey]:
    """Name -> key of the assets that have `partlake_fresh` among `asset_check_keys`."""
    return {
        k.asset_key.to_user_string(): k.asset_key for k in asset_check_keys if k.name == FRESH_CHECK
    }


class _Unknown:
    """A verdict no plan gave: unequal to every stale item, so a partition holding it is
    reported again."""

    def __eq__(self, other: object) -> bool:
        return other is self

    __hash__ = object.__hash__


_UNKNOWN: StalePartition = _Unknown()  # type: ignore[assignment]
