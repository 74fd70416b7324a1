"""Which stale partitions' last run failed a quality gate, read from the Dagster instance.

A gate that fails commits nothing, so the partition stays stale with its reason unchanged; the
sensor backs it off like any failed run. `partlake plan` adds "last run failed: <check>" to such
a partition, from the newest evaluation of each of the asset's gate checks that covered it: a
failed one of severity error names the gate, a newer passed or warned one clears it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from dagster_partlake.columnar.interner import Key
from dagster_partlake.gates.checks import WRITTEN_PARTITIONS_KEY
from dagster_partlake.metadata import FAILING_PARTITIONS_KEY, plain

if TYPE_CHECKING:
    from dagster import AssetCheckEvaluation, AssetKey, DagsterInstance

    from dagster_partlake.compat import AssetCheckExecutionRecord

# Evaluations read per check, newest first: enough to cover the partitions of recent runs.
HISTORY_LIMIT = 200


def last_gate_failures(
    instance: DagsterInstance,
    gates: Mapping[str, tuple[AssetKey, Sequence[str]]],
    stale: Iterable[tuple[str, Key]],
) -> dict[tuple[str, Key], tuple[str, ...]]:
    """(asset, partition) -> the gates its newest evaluated run failed.

    Args:
        instance: the Dagster instance holding the check evaluations.
        gates: per asset with gates, its key and the names of its gates.
        stale: the (asset, partition) pairs to look up (a plan's stale partitions).
    """
    from dagster import AssetCheckKey, AssetCheckSeverity

    wanted: dict[str, set[Key]] = {}
    for asset_name, partition in stale:
        if gates.get(asset_name, (None, ()))[1]:
            wanted.setdefault(asset_name, set()).add(partition)
    found: dict[tuple[str, Key], tuple[str, ...]] = {}
    for name, partitions in wanted.items():
        asset_key, names = gates[name]
        failed: dict[Key, list[str]] = {}
        for gate in names:
            history = instance.event_log_storage.get_asset_check_execution_history(
                AssetCheckKey(asset_key, gate), limit=HISTORY_LIMIT
            )
            decided: set[Key] = set()
            for record in history:
                evaluation = _evaluation(record)
                if evaluation is None:
                    continue
                covered = _partitions(evaluation.metadata) & (partitions - decided)
                blocked = not evaluation.passed and evaluation.severity == AssetCheckSeverity.ERROR
                if blocked:
                    for partition in _failing(evaluation.metadata) & covered:
                        failed.setdefault(partition, []).append(gate)
                decided |= covered
                if decided >= partitions:
                    break
        for partition, names_failed in failed.items():
            found[(name, partition)] = tuple(names_failed)
    return found


def _evaluation(record: AssetCheckExecutionRecord) -> AssetCheckEvaluation | None:
    event = record.event
    if event is None or event.dagster_event is None:
        return None
    data = event.dagster_event.event_specific_data
    from dagster import AssetCheckEvaluation

    return data if isinstance(data, AssetCheckEvaluation) else None


def _keys(metadata: Mapping[str, Any], entry: str) -> set[Key]:
    keys = cast("list[str]", plain(metadata.get(entry)) or [])
    # An unpartitioned asset's write is recorded as its whole-table id; the plan's key is None.
    return {None if k == "__all__" else k for k in keys}


def _partitions(metadata: Mapping[str, Any]) -> set[Key]:
    return _keys(metadata, WRITTEN_PARTITIONS_KEY)


def _failing(metadata: Mapping[str, Any]) -> set[Key]:
    # Gates that cannot tell partitions apart (unique) blame every partition written.
    return _keys(metadata, FAILING_PARTITIONS_KEY) or _partitions(metadata)
