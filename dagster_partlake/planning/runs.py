"""The runs a plan becomes: one frozen value that `partlake plan` shows and that `partlake run`
and the sensor execute, so what a user reads is what runs.

`plan_runs` batches the stale partitions round by round (`planning.batches`): the first
round is what can run now; each later round is what can run once the earlier rounds' partitions
are written. Every run lists the runs it waits for: those that write an upstream partition its
partitions read (through the partition mappings). Partitions behind blocked ones (running
elsewhere, or backing off after a failure) are not scheduled: `RunPlan.waiting` lists them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from dagster import BackfillPolicy, DagsterInstance, PartitionsDefinition

from dagster_partlake.compat import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from dagster_partlake.metadata import PARTITIONS_TAG, REASONS_TAG
from dagster_partlake.planning.batches import RunRules, make_batches
from dagster_partlake.planning.definition import Key, Plan, PlanAsset, StalePartition

MAX_KEYS_IN_TAG = 10


@dataclass(frozen=True)
class PlannedRun:
    """One Dagster run: assets sharing a partitions definition, over one key or one range."""

    number: int  # 1-based, upstream runs first
    assets: tuple[str, ...]
    keys: tuple[Key, ...]  # every partition key the run covers, in order
    partition_range: tuple[str, str] | None  # (first, last) when the run is a range
    items: tuple[StalePartition, ...]
    waits_for: tuple[int, ...] = ()  # numbers of the runs that must succeed first
    # Reads a partition that a run it waits for may leave unchanged (early cutoff): whether it
    # runs at all is known only once that run has committed.
    after_cutoff: bool = False
    # The partitions (asset, key) of the runs it waits for that it reads: it can run once those
    # are written, even if another asset of such a run failed.
    reads: tuple[tuple[str, Key], ...] = ()

    @property
    def partition_key(self) -> str | None:
        """The run's single partition key (None for a range or an unpartitioned run)."""
        return self.keys[0] if self.partition_range is None and self.keys else None

    @property
    def targets(self) -> tuple[tuple[str, Key], ...]:
        """Every (asset, partition key) the run writes."""
        return tuple((asset, key) for asset in self.assets for key in self.keys)

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(sorted({i.reason for i in self.items}))

    def describe_partitions(self) -> str:
        """'2024-01-02|eu', '2024-01-01|eu...2024-01-03|us (6 partitions)' or '-'."""
        if self.partition_range is not None:
            first, last = self.partition_range
            return f"{first}...{last} ({len(self.keys)} partitions)"
        return self.keys[0] if self.keys and self.keys[0] is not None else "-"

    def run_tags(self) -> dict[str, str]:
        """Tags of the run: the partition range, and why and what, for the UI."""
        shown = [k for k in self.keys if k is not None]
        more = len(shown) - MAX_KEYS_IN_TAG
        tags = {
            REASONS_TAG: ", ".join(self.reasons),
            PARTITIONS_TAG: ", ".join(shown[:MAX_KEYS_IN_TAG])
            + (f" (+{more})" if more > 0 else ""),
        }
        if self.partition_range is not None:
            tags[ASSET_PARTITION_RANGE_START_TAG] = self.partition_range[0]
            tags[ASSET_PARTITION_RANGE_END_TAG] = self.partition_range[1]
        return tags

    def to_json(self) -> dict[str, object]:
        return {
            "run": self.number,
            "assets": list(self.assets),
            "partition_key": self.partition_key,
            "partition_range": list(self.partition_range) if self.partition_range else None,
            "partitions": list(self.keys),
            "reasons": list(self.reasons),
            "waits_for": list(self.waits_for),
        }


@dataclass(frozen=True)
class RunPlan:
    """A plan's stale partitions as Dagster runs, upstream runs first."""

    plan: Plan
    runs: tuple[PlannedRun, ...]
    waiting: tuple[StalePartition, ...] = ()  # behind blocked partitions: not scheduled

    @property
    def ready(self) -> tuple[PlannedRun, ...]:
        """The runs that wait for no other run."""
        return tuple(r for r in self.runs if not r.waits_for)

    def to_json(self) -> list[dict[str, object]]:
        return [run.to_json() for run in self.runs]


def plan_runs(
    plan: Plan,
    assets: Sequence[PlanAsset],
    partitions_defs: Mapping[str, PartitionsDefinition | None],
    policies: Mapping[str, BackfillPolicy | None],
    *,
    blocked: Mapping[str, set[Key]] | None = None,
    units: Mapping[str, Sequence[str]] | None = None,
    cutoff: Collection[str] = (),
    dynamic_partitions_store: DagsterInstance | None = None,
) -> RunPlan:
    """Every run the plan needs, with what each waits for (`RunRules` spells out the arguments
    but `plan` and `blocked`; `runs_of` takes them as one value).

    Args:
        plan: from `planner.plan`.
        blocked: partitions not to run (already running, or backing off after a failure); the
            partitions that depend on them are left waiting too.
        dynamic_partitions_store: the Dagster instance holding the keys of dynamic partitions
            definitions, when a range of them may be cut.
    """
    rules = RunRules(
        assets,
        partitions_defs,
        policies,
        units or {},
        cutoff,
        dynamic_partitions_store=dynamic_partitions_store,
    )
    return runs_of(plan, rules, blocked=blocked)


def runs_of(
    plan: Plan, rules: RunRules, *, blocked: Mapping[str, set[Key]] | None = None
) -> RunPlan:
    """Every run the plan needs under `rules`, round by round, with what each waits for."""
    remaining = list(plan.items)
    writer_of: dict[tuple[str, Key], int] = {}
    runs: list[PlannedRun] = []
    while remaining:
        batches = make_batches(
            Plan(tuple(remaining), plan.asset_order), rules, blocked=blocked
        ).ready
        if not batches:
            break
        written: dict[tuple[str, Key], int] = {}
        for batch in batches:
            number = len(runs) + 1
            read = [up for item in batch.items for up in rules.reads(item) if up in writer_of]
            waits = {writer_of[up] for up in read}
            runs.append(
                PlannedRun(
                    number,
                    batch.assets,
                    batch.keys,
                    batch.partition_range,
                    batch.items,
                    tuple(sorted(waits)),
                    after_cutoff=any(up[0] in rules.cutoff for up in read),
                    reads=tuple(dict.fromkeys(read)),
                )
            )
            written.update({(i.asset, i.partition): number for i in batch.items})
        # Recorded after the round: assets joined into one run do not wait for themselves.
        writer_of.update(written)
        remaining = [i for i in remaining if (i.asset, i.partition) not in written]
    return RunPlan(plan, tuple(runs), tuple(remaining))
