"""The planner's data, frozen: what a plan is made from and what it is.

In: `PlanInput` (the assets as `PlanAsset`s with their `Dependency` edges, each partition's
`PartitionState` and the `Record` of its last write). Out: a `Plan` of `StalePartition`s, each
with its `Reason` and the upstream partitions that caused it, and the tables it could not read
(`UnreadableTable`). Shared by the planner (`planning.planner`), its bulk pass
(`planning.bulk`), incremental replanning (`planning.replan`) and the column-wise input maps
(`planning.state_maps`); it imports nothing of partlake but the partition `Key` (`columnar`), so
none of them imports another to reach the types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from dagster_partlake.columnar.interner import Key

__all__ = [
    "REASONS",
    "Dependency",
    "Key",
    "KeyMap",
    "PartitionState",
    "Plan",
    "PlanAsset",
    "PlanInput",
    "Reason",
    "Record",
    "Retirement",
    "StalePartition",
    "UnreadableTable",
    "render_partition",
]

Reason = Literal["missing", "code_changed", "out_of_band", "upstream_changed"]
# The reasons in the order the rule tries them (`planning.rule.RULE`): the first that applies.
REASONS: tuple[Reason, ...] = ("missing", "code_changed", "out_of_band", "upstream_changed")
KeyMap = Callable[[Key], Iterable[Key]]


@dataclass(frozen=True)
class Dependency:
    """An edge of the asset graph with its partition mapping, as two functions."""

    upstream: str
    upstream_keys: KeyMap  # downstream key -> the upstream keys it reads
    downstream_keys: KeyMap  # upstream key -> the downstream keys that read it
    identity: bool = False  # both maps are k -> [k]; lets the planner skip the calls
    # An asset's dependency on its own previous partition that exists only to order its writes
    # (`merge` and `scd2` apply their time partitions in order; see `planning.planner`).
    order_only: bool = False


@dataclass(frozen=True)
class PlanAsset:
    name: str
    deps: tuple[Dependency, ...] = ()
    code_version: str | None = None
    is_source: bool = False
    partitioned: bool = True
    stream: bool = False  # judged as a whole (`planner.judge_stream`)


@dataclass(frozen=True, slots=True)  # a plan at scale makes 100,000s
class PartitionState:
    last_updated: int  # ms since epoch
    version: int | None = None  # table version that last touched it, where known


@dataclass(frozen=True, slots=True)  # a plan at scale makes 100,000s
class Record:
    code_version: str | None
    written_last_updated: int | None  # None: the write produced no rows for this partition
    consumed: Mapping[str, Mapping[Key, int]] = field(default_factory=dict)
    run_id: str | None = None


@dataclass(frozen=True)
class Retirement:
    """The partitions of an asset retired on purpose (`partlake/retention`, cascades included,
    `planning.retirement`): `rule` says which in words, and two equal rules retire the same
    partitions (incremental replanning compares them); `contains` decides one key."""

    rule: str
    contains: Callable[[Key], bool] = field(compare=False, repr=False)


@dataclass(frozen=True)
class PlanInput:
    assets: Sequence[PlanAsset]
    states: Mapping[str, Mapping[Key, PartitionState]]
    records: Mapping[str, Mapping[Key, Record]]
    # The partitions that exist now of managed assets without upstream assets (time windows up
    # to the current one, static keys, registered dynamic keys): each is due until written.
    partition_keys: Mapping[str, Sequence[Key]] = field(default_factory=dict)
    # Tables whose state could not be read: asset -> the error message.
    unreadable: Mapping[str, str] = field(default_factory=dict)
    # The retired partitions of the assets that have any (`planning.retirement.cascaded`).
    retired: Mapping[str, Retirement] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)  # a plan at scale makes 100,000s
class StalePartition:
    asset: str
    partition: Key
    reason: Reason
    because: tuple[str, ...] = ()  # upstream asset partitions, rendered 'asset[key]'

    def to_json(self) -> dict[str, object]:
        return {
            "asset": self.asset,
            "partition": self.partition,
            "reason": self.reason,
            "because": list(self.because),
        }


@dataclass(frozen=True)
class UnreadableTable:
    """A table whose state could not be read, and the assets not planned because of it."""

    asset: str
    message: str
    held: tuple[str, ...]  # the asset itself (if managed) and every managed asset downstream


@dataclass(frozen=True)
class AbsentSource:
    """A source with no table (or folder) where it is declared: nothing of it can be read, so
    nothing reading it is planned; said once per source, since a typo in `path=` looks the same."""

    asset: str
    location: str  # where it was looked for (no credentials)
    waiting: tuple[str, ...]  # the managed assets downstream of it
    what: str = "table"  # "table", or "folder" for a landing folder

    @property
    def message(self) -> str:
        readers = f" ({', '.join(self.waiting)})" if self.waiting else ""
        return (
            f"source {self.asset}: no {self.what} at {self.location}; what reads it{readers} has "
            "nothing of it to plan until one is written there. Check the source's path= or "
            "root= if it should be there."
        )


@dataclass(frozen=True)
class Plan:
    """Stale asset partitions in dependency order (upstream assets first)."""

    items: tuple[StalePartition, ...]
    asset_order: tuple[str, ...]
    unreadable: tuple[UnreadableTable, ...] = ()
    absent_sources: tuple[AbsentSource, ...] = ()
    # Data written into a retired range since it was read or written (`retired_writes`):
    # 'asset[key]', sorted; a warning, never a rebuild.
    retired_writes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.items)

    def by_asset(self) -> dict[str, list[StalePartition]]:
        grouped: dict[str, list[StalePartition]] = {}
        for item in self.items:
            grouped.setdefault(item.asset, []).append(item)
        return grouped

    def sorted_items(self) -> list[StalePartition]:
        """Sorted by asset name, then partition key (the `--json` order)."""
        return sorted(self.items, key=lambda i: (i.asset, i.partition or ""))

    def select(self, assets: Iterable[str]) -> Plan:
        wanted = set(assets)
        return Plan(
            tuple(i for i in self.items if i.asset in wanted),
            self.asset_order,
            tuple(u for u in self.unreadable if wanted & {u.asset, *u.held}),
            tuple(a for a in self.absent_sources if wanted & {a.asset, *a.waiting}),
            tuple(w for w in self.retired_writes if w.split("[", 1)[0] in wanted),
        )


def render_partition(asset: str, key: Key) -> str:
    """An asset partition as `because` and the CLI name it: 'asset[key]', or 'asset'."""
    return asset if key is None else f"{asset}[{key}]"
