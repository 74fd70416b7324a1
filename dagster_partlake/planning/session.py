"""The planning session: plan a code location from its tables, paying only for what changed.

`PlanningSession` is the entry point of the planning core. It gathers the planner's input from a
code location's graph (`LakeGraph`) and its tables (a `StateCache`), plans, and keeps between
plans what makes the next one cost only what changed:

- per table, its last `Conversion` to planner input (`dagster_partlake.planning.convert`): a
  table whose version did not move keeps it, one that moved converts only its new commits;
- the key id memos, shared by assets with the same partitions stored the same way;
- the last plan (`PlanMemo`), so the next is incremental (`dagster_partlake.planning.replan`);
- with an on-disk state cache, the plan saved next to the states (`planning.cache`),
  so a new process starts from the last one's plan.

The sensor keeps one session per code location across ticks, and `partlake plan` / `partlake
run` one per process. `make_plan` is a one-off plan (a new session); `runs_for` turns a plan into
runs (`dagster_partlake.planning.runs`) and `moved` is the sensor's quick check for new commits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from dagster_partlake.columnar.interner import Key
from dagster_partlake.columnar.memory import give_back
from dagster_partlake.delta.commit_scan import forget as forget_key_sequence
from dagster_partlake.delta.state import StateCache, TableState
from dagster_partlake.delta.table import table_exists
from dagster_partlake.errors import PartlakeConfigError, SourceError, TableUnreadableError
from dagster_partlake.incremental.spec import Incremental
from dagster_partlake.partitions.retention import retired_keys
from dagster_partlake.planning import cache as plan_cache
from dagster_partlake.planning.convert import (
    Conversion,
    KeyIds,
    KeySignature,
    Move,
    convert,
    key_ids,
    key_signature,
    read_state,
)
from dagster_partlake.planning.definition import (
    AbsentSource,
    Plan,
    PlanAsset,
    PlanInput,
    Retirement,
)
from dagster_partlake.planning.graph import LakeAsset, LakeGraph
from dagster_partlake.planning.planner import plan
from dagster_partlake.planning.replan import (
    PlanMemo,
    changed_partitions,
    full,
    remembered,
    replan,
)
from dagster_partlake.planning.retirement import cascaded
from dagster_partlake.planning.runs import RunPlan, runs_of
from dagster_partlake.records.queries import newest_record
from dagster_partlake.storage.location import TableLocation

if TYPE_CHECKING:
    from dagster import DagsterInstance

# Set (the tests do): every incremental plan and table conversion is also made in full and
# compared.
CHECK_REPLAN_ENV = "PARTLAKE_CHECK_REPLAN"


@dataclass(frozen=True)
class PlanResult:
    """A plan, the input it was made from, the table states read, and how long it took."""

    plan: Plan
    inputs: PlanInput
    states: dict[str, TableState | None]
    seconds: float
    # Where the plan found the keys of dynamic partitions: its runs are cut from the same ones.
    dynamic_partitions_store: DagsterInstance | None = field(default=None, compare=False)

    @property
    def versions(self) -> dict[str, int]:
        """Table version (folder: state hash) of every table that exists and could be read."""
        return {name: s.version for name, s in self.states.items() if s is not None}


class PlanningSession:
    """Plans of one code location over one state cache, each costing what changed since the
    last (see the module docstring).

    Example:
        .. code-block:: python

            session = PlanningSession(LakeGraph(defs), StateCache())
            result = session.plan()  # the first: every table read and judged
            result = session.plan()  # later: only what the new commits touched
            runs = session.runs(result)
    """

    def __init__(self, graph: LakeGraph, cache: StateCache | None = None) -> None:
        self.graph = graph
        self.cache = cache if cache is not None else StateCache()
        self._conversions: dict[str, Conversion] = {}
        # Per table whose last conversion followed known keys: what moved (until the plan).
        self._moves: dict[str, Move] = {}
        self._key_ids: dict[KeySignature, KeyIds] = {}
        self._memo: PlanMemo | None = None
        self._saved: plan_cache.Stamp | None = None  # the plan the on-disk cache holds

    @property
    def memo(self) -> PlanMemo | None:
        """The last plan with what it was made from (None before the first)."""
        return self._memo

    @property
    def moves(self) -> Mapping[str, Move]:
        """The tables whose conversion moved with known keys since the previous plan (read-only;
        cleared once a plan is made)."""
        return MappingProxyType(self._moves)

    def plan(
        self,
        *,
        select: Sequence[str] | None = None,
        dynamic_partitions_store: DagsterInstance | None = None,
    ) -> PlanResult:
        """Sync partition state, plan the whole graph, keep the selected assets' partitions.

        Raises:
            PartlakeConfigError: `select` names an asset the code location does not have.
        """
        started = time.perf_counter()
        if select:
            unknown = sorted(set(select) - set(self.graph.assets))
            if unknown:
                raise PartlakeConfigError(
                    f"unknown asset(s) {', '.join(unknown)}; the code location has "
                    f"{', '.join(sorted(self.graph.assets))}."
                )
        if self._memo is None and self.cache.persist_dir is not None:
            self._resume(dynamic_partitions_store)
        inputs, states = self.gather(dynamic_partitions_store)
        whole = self._plan(inputs)
        give_back()  # the plan's temporaries (`columnar.memory`)
        if self.cache.persist_dir is not None:
            self._save(self.cache.persist_dir, inputs, states, whole)
        result = _with_increments(self.graph, whole, states)
        result = replace(result, absent_sources=absent_sources(self.graph, states))
        if select:
            result = result.select(select)
        seconds = time.perf_counter() - started
        return PlanResult(result, inputs, states, seconds, dynamic_partitions_store)

    def runs(self, result: PlanResult, *, blocked: Mapping[str, set[Key]] | None = None) -> RunPlan:
        """The runs `result`'s plan becomes in this code location."""
        return runs_for(self.graph, result, blocked=blocked)

    def moved(self, versions: Mapping[str, int]) -> bool:
        """Whether any table may differ from `versions` (see `moved`)."""
        return moved(self.graph, self.cache, versions)

    def gather(
        self, dynamic_partitions_store: DagsterInstance | None = None
    ) -> tuple[PlanInput, dict[str, TableState | None]]:
        """Planner input for the whole graph, and the raw table states it was built from
        (tables that could not be read are left out of both and named in
        `PlanInput.unreadable`)."""
        raw: dict[str, TableState | None] = {}
        unreadable: dict[str, str] = {}
        for name, asset in self.graph.assets.items():
            try:
                raw[name] = read_state(asset, self.cache)
            except (TableUnreadableError, SourceError) as error:
                # A damaged log, or a database or broker that does not answer: what depends
                # on it is held back, the rest is planned.
                unreadable[name] = str(error)
        forget_key_sequence()  # kept only for the records of the tables read together
        return self._to_input(raw, unreadable, dynamic_partitions_store), raw

    def _to_input(
        self,
        raw: Mapping[str, TableState | None],
        unreadable: Mapping[str, str],
        dynamic_partitions_store: DagsterInstance | None,
    ) -> PlanInput:
        """The planner input of these table states, converting only what moved since this
        session's previous conversion of each table."""
        states = {}
        records = {}
        check = bool(os.environ.get(CHECK_REPLAN_ENV))
        for name, state in raw.items():
            asset = self.graph.assets[name]
            version = state.version if state is not None else -1
            conversion = self._conversions.get(name)
            if conversion is None or conversion.version != version:
                # Converting values to keys and commits to records is the costly part of a plan
                # at many partitions: a table whose version did not move keeps its conversion.
                conversion, move = convert(
                    asset, state, conversion, self._keys(asset, state), check=check
                )
                give_back()  # its temporaries, before the next table's (`columnar.memory`)
                self._conversions[name] = conversion
                self._moves.pop(name, None)
                if move is not None:
                    self._moves[name] = move
            states[name] = conversion.states
            if conversion.records is not None:
                records[name] = conversion.records
        assets = self.graph.plan_assets(dynamic_partitions_store)
        return PlanInput(
            assets,
            states,
            records,
            partition_keys=self.graph.root_partition_keys(dynamic_partitions_store),
            unreadable=unreadable,
            retired=retired_partitions(self.graph, assets, states),
        )

    def _keys(self, asset: LakeAsset, state: TableState | None) -> KeyIds | None:
        """The asset's key id memo for the table's column types (shared by assets with the
        same partitions stored the same way; it memoizes the key of every partition seen)."""
        if state is None or not asset.columns or asset.decoupled:
            return None  # a decoupled table's partitions are not the asset's Dagster partitions
        signature = key_signature(asset, state)
        found = self._key_ids.get(signature)
        if found is None:
            found = self._key_ids[signature] = key_ids(asset, state)
        return found

    def _plan(self, inputs: PlanInput) -> Plan:
        """The plan of `inputs`, incrementally from this session's previous plan where there is
        one. A table whose version did not move keeps its conversion (the same objects), so
        finding what changed costs only the moved tables."""
        memo = self._memo
        check = bool(os.environ.get(CHECK_REPLAN_ENV))
        if memo is None or self.graph.has_dynamic_partitions:
            memo = full(inputs)
        else:
            changed = self._changes(memo.inputs, inputs)
            if check:
                reference = changed_partitions(memo.inputs, inputs)
                missed = {a: k - changed.get(a, set()) for a, k in reference.items()}
                if any(missed.values()):
                    raise AssertionError(f"changed partitions not found: {missed}")
            # The conversions the moves hold before them are not needed any more (at a million
            # partitions per asset, tens of megabytes each).
            self._moves.clear()
            memo = replan(memo, inputs, changed)
            if check and memo.plan.items != plan(inputs).items:
                raise AssertionError(
                    f"the incremental plan differs from the full plan after changes {changed}: "
                    f"{memo.plan.items} != {plan(inputs).items}"
                )
        self._memo = memo
        # The previous conversions the moves name are no longer needed (at a million partitions
        # per asset, they are hundreds of megabytes).
        self._moves.clear()
        return memo.plan

    def _changes(self, old: PlanInput, new: PlanInput) -> dict[str, set[Key]]:
        """`changed_partitions(old, new)`, taking the keys that moved from the conversion where
        it knows them (`moves`) instead of comparing every partition."""
        changed: dict[str, set[Key]] = {}
        for name in old.states.keys() | new.states.keys():
            before = (old.states.get(name), old.records.get(name))
            after = (new.states.get(name), new.records.get(name))
            if before[0] is after[0] and before[1] is after[1]:
                continue
            move = self._moves.get(name)
            if move is not None and _same(move, before, after):
                keys: set[Key] = set(move.keys)
            else:
                one = changed_partitions(
                    PlanInput((), {name: before[0] or {}}, {name: before[1] or {}}),
                    PlanInput((), {name: after[0] or {}}, {name: after[1] or {}}),
                )
                keys = one.get(name, set())
            if keys:
                changed[name] = keys
        return changed

    def _resume(self, dynamic_partitions_store: DagsterInstance | None) -> None:
        """Start from the plan a previous process saved (`dagster_partlake.planning.cache`)
        when the on-disk states are at the versions it was made from: the next plan is then
        incremental, from those states to the tables now."""
        graph = self.graph
        assert self.cache.persist_dir is not None
        if _has_retention(graph):
            # A saved plan does not say which rules it was made under: plan in full.
            return
        signature = plan_cache.signature(graph, graph.root_partition_keys(dynamic_partitions_store))
        if signature is None:
            return
        saved = plan_cache.load(self.cache.persist_dir, graph, signature)
        if saved is None or set(saved.versions) != set(graph.assets):
            return
        raw: dict[str, TableState | None] = {}
        for name, asset in graph.assets.items():
            state = self.cache.persisted(asset.location, with_commits=not asset.is_source)
            if (state.version if state is not None else None) != saved.versions[name]:
                return
            raw[name] = state
        inputs = self._to_input(raw, {}, dynamic_partitions_store)
        if os.environ.get(CHECK_REPLAN_ENV) and plan(inputs).items != saved.plan.items:
            raise AssertionError("the saved plan differs from the plan of the saved states")
        self._memo = remembered(inputs, saved.plan)
        self._saved = plan_cache.Stamp(signature, saved.versions, saved.plan.items)

    def _save(
        self,
        persist_dir: str,
        inputs: PlanInput,
        states: Mapping[str, TableState | None],
        whole: Plan,
    ) -> None:
        """Keep `whole` on disk for the next process, unless it is the plan already kept."""
        if inputs.unreadable or self.graph.has_dynamic_partitions or _has_retention(self.graph):
            return
        signature = plan_cache.signature(self.graph, inputs.partition_keys)
        if signature is None:
            return
        versions = {n: (s.version if s is not None else None) for n, s in states.items()}
        stamp = plan_cache.Stamp(signature, versions, whole.items)
        if self._saved == stamp:
            return
        plan_cache.save(persist_dir, self.graph, signature, versions, whole)
        self._saved = stamp


def _has_retention(graph: LakeGraph) -> bool:
    return any(spec.retention is not None for spec in graph.specs.values())


def retired_partitions(
    graph: LakeGraph, assets: Sequence[PlanAsset], states: Mapping[str, Mapping[Key, object]]
) -> dict[str, Retirement]:
    """The retired partitions of each asset with a retention rule or under a cascade
    (`planning.retirement`); a `keep_last` window counts back from the newest partition present
    in the asset's table (`states`)."""
    own: dict[str, Retirement] = {}
    cascading = set()
    for name, spec in graph.specs.items():
        rule = spec.retention
        if rule is None:
            continue
        if rule.cascade:
            cascading.add(name)
        found = retired_keys(rule, spec.columns, states.get(name, {}))
        if found is not None:
            own[name] = Retirement(found.rule, found.contains)
    if not own:
        return {}
    return cascaded(assets, own, cascading)


def _same(
    move: Move,
    before: tuple[object | None, object | None],
    after: tuple[object | None, object | None],
) -> bool:
    """Whether `move` is between exactly these two inputs of a table (the same objects)."""
    return (
        move.before.states is before[0]
        and move.before.records is before[1]
        and move.after.states is after[0]
        and move.after.records is after[1]
    )


def make_plan(
    graph: LakeGraph,
    cache: StateCache,
    *,
    select: Sequence[str] | None = None,
    dynamic_partitions_store: DagsterInstance | None = None,
) -> PlanResult:
    """One plan of `graph` over `cache`, in a new `PlanningSession` (keep a session to plan
    again incrementally).

    Raises:
        PartlakeConfigError: `select` names an asset the code location does not have.
    """
    return PlanningSession(graph, cache).plan(
        select=select, dynamic_partitions_store=dynamic_partitions_store
    )


def absent_sources(
    graph: LakeGraph, states: Mapping[str, TableState | None]
) -> tuple[AbsentSource, ...]:
    """The Delta and folder sources with nothing where they are declared (a database table or
    a topic that is not there is an error of its reader instead), by name, each with its
    readers by name: the same lines from every process (the graph's order follows Dagster's
    sets, which differ from one process to the next)."""
    return tuple(
        AbsentSource(
            name,
            str(asset.location),
            tuple(sorted(graph.downstream(name))),
            "folder" if asset.is_folder else "table",
        )
        for name, asset in sorted(graph.assets.items())
        if asset.is_source and asset.external is None and name in states and states[name] is None
    )


def _with_increments(
    graph: LakeGraph, result: Plan, states: Mapping[str, TableState | None]
) -> Plan:
    """For an incremental input, `because` names the range it will read instead of the
    upstream partitions: `events[versions 4..6]`, `changes[updated_at > 2024-01-02 10:00:00]`."""
    ranges: dict[str, dict[str, str]] = {}
    inputs: dict[str, Mapping[str, Incremental]] = {}
    for name in {item.asset for item in result.items}:
        found = graph.incremental_inputs(name)
        if found:
            inputs[name] = found
    if not inputs:
        return result
    items = []
    for item in result.items:
        incremental = inputs.get(item.asset)
        if not incremental:
            items.append(item)
            continue
        if item.asset not in ranges:
            ranges[item.asset] = _ranges(graph, item.asset, incremental, states)
        described = ranges[item.asset]
        because: list[str] = []
        for entry in item.because:
            upstream = entry.split("[", 1)[0]
            shown = f"{upstream}[{described[upstream]}]" if upstream in described else entry
            if shown not in because:
                because.append(shown)
        items.append(replace(item, because=tuple(because)))
    return replace(result, items=tuple(items))


def _ranges(
    graph: LakeGraph,
    asset: str,
    incremental: Mapping[str, Incremental],
    states: Mapping[str, TableState | None],
) -> dict[str, str]:
    root = graph.assets[asset].location
    previous = newest_record(root) if table_exists(root) else None
    described = {}
    for upstream, how in incremental.items():
        state = states.get(upstream)
        if how.mode == "log":
            since = None if previous is None else previous.upstream_versions.get(upstream)
            now = state.version if state is not None else "?"
            described[upstream] = "all" if since is None else f"versions {since + 1}..{now}"
        else:
            mark = None if previous is None else previous.watermarks.get(upstream)
            described[upstream] = "all" if mark is None else f"{how.column} > {mark['value']}"
    return described


def runs_for(
    graph: LakeGraph, result: PlanResult, *, blocked: Mapping[str, set[Key]] | None = None
) -> RunPlan:
    """The runs `result`'s plan becomes in this code location (`planning.runs`), over the
    dynamic partitions it was planned with."""
    rules = graph.run_rules(result.inputs.assets, result.dynamic_partitions_store)
    return runs_of(result.plan, rules, blocked=blocked)


def _may_exist(location: TableLocation) -> bool:
    from dagster_partlake.delta.log_files import LogFiles

    return LogFiles(location).table_may_exist()


def moved(graph: LakeGraph, cache: StateCache, versions: Mapping[str, int]) -> bool:
    """Whether any table may differ from `versions` (a `PlanResult.versions` of an earlier plan
    with the same cache): a cheap check, a couple of `stat`s per table."""
    for name, asset in graph.assets.items():
        if asset.is_folder or asset.external is not None:
            # A folder's one walk; a database's or topic's one cheap query.
            try:
                state = read_state(asset, cache)
            except SourceError:
                return True  # the plan says what does not answer
            if (state.version if state else None) != versions.get(name):
                return True
            continue
        version = versions.get(name)
        if version is None:
            if _may_exist(asset.location):
                return True
        elif cache.moved(asset.location, version):
            return True
    return False
