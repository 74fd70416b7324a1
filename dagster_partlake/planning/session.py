"""Gather the planner's input from a code location's graph and storage, and plan.

The one place where storage state becomes planner input: each table's state
(`dagster_partlake.delta.state`) becomes lastUpdated per Dagster partition key, its commit records
become the planner's `Record`s, root assets get their existing partitions, and tables that cannot
be read are named instead of planned. `make_plan` runs the pure planner on it; the CLI, the sensor
and the runner all plan through here, and turn the plan into runs with `runs_for`. `moved` is the
sensor's quick check of the same state.
"""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dagster_partlake.columnar.interner import KEYS, VALUES
from dagster_partlake.columnar.intmap import ABSENT, NONE, IntMap
from dagster_partlake.delta.record import WHOLE_TABLE_ID
from dagster_partlake.delta.state import StateCache, TableState, Values, folder_state
from dagster_partlake.delta.table import newest_record, table_exists
from dagster_partlake.errors import PartlakeConfigError, TableUnreadableError
from dagster_partlake.incremental.spec import Incremental
from dagster_partlake.layout import log_dir
from dagster_partlake.partitions.keys import KeyCodec
from dagster_partlake.planning import cache as plan_cache
from dagster_partlake.planning.graph import LakeAsset, LakeGraph
from dagster_partlake.planning.planner import Key, PartitionState, Plan, PlanInput, Record, plan
from dagster_partlake.planning.replan import changed_partitions, full, remembered, replan
from dagster_partlake.planning.runs import RunPlan, plan_runs
from dagster_partlake.planning.state_maps import RecordMap, StateMap

# Set (the tests do): every incremental plan and table conversion is also made in full and
# compared.
CHECK_REPLAN_ENV = "PARTLAKE_CHECK_REPLAN"


def read_state(asset: LakeAsset, cache: StateCache) -> TableState | None:
    """The asset's table (or folder) state now.

    Raises:
        TableUnreadableError: the table's Delta log cannot be read.
    """
    if asset.is_folder:
        return folder_state(asset.path, [c.column for c in asset.columns])
    return cache.sync(asset.path, with_commits=not asset.is_source, name=asset.name)


class KeyIds:
    """Interned partition values -> the interned partition key holding them, for one asset's
    codec: memoized in an array indexed by the values' id (`planning.state_maps`)."""

    UNKNOWN, OUTSIDE = -1, -2

    def __init__(self, codec: KeyCodec, order: Sequence[int]) -> None:
        self.codec = codec
        self.order = list(order)
        self._memo = array("q")

    def memo(self) -> array:
        """Key ids by values id, `UNKNOWN` where not looked up yet (covers every values id)."""
        if len(self._memo) < len(VALUES.keys):
            self._memo.extend(array("q", [self.UNKNOWN]) * (len(VALUES.keys) - len(self._memo)))
        return self._memo

    def __call__(self, values_id: int) -> int:
        """The key's id, or `OUTSIDE` for values outside the asset's partitions."""
        memo = self.memo()
        found = memo[values_id]
        if found == self.UNKNOWN:
            values = VALUES.keys[values_id]
            key = self.codec.key([values[i] for i in self.order])
            found = memo[values_id] = self.OUTSIDE if key is None else KEYS.id(key)
        return found


def _column_order(asset: LakeAsset, state: TableState) -> list[int]:
    order = [
        state.partition_by.index(c.column) for c in asset.columns if c.column in state.partition_by
    ]
    if len(order) != len(asset.columns):
        raise PartlakeConfigError(
            f"table of asset {asset.name} at {asset.path} is partitioned by "
            f"({', '.join(state.partition_by) or 'nothing'}), but the asset's partitions are "
            f"stored in ({', '.join(c.column for c in asset.columns)}); fix partition_expr or "
            "the table."
        )
    return order


def to_partition_states(
    asset: LakeAsset, state: TableState | None, keys: KeyIds | None = None
) -> StateMap:
    """lastUpdated per Dagster partition key (values outside the partitions are ignored)."""
    if state is None:
        return StateMap.build(())
    if not asset.columns:
        newest = max((t for t in state.last_updated.values() if t is not None), default=None)
        return StateMap.build(
            () if newest is None else [(None, PartitionState(newest, state.version))]
        )
    order = _column_order(asset, state)
    keys = keys or KeyIds(KeyCodec(asset.columns, state.column_types), order)
    memo = keys.memo()
    found = [
        (k if (k := memo[v]) != KeyIds.UNKNOWN else keys(v), t, v)
        for v, t in state.last_updated.raw_items()
    ]
    found = [f for f in found if f[0] >= 0]
    if not found:
        return StateMap.build(())
    base = min(f[0] for f in found)
    newest = array("q", [ABSENT]) * (max(f[0] for f in found) - base + 1)
    versions = array("q", newest)
    touched_in = state.touched_in
    for key_id, last_updated, values_id in found:
        # Several table partitions may hold one Dagster partition (the days of a month).
        if newest[key_id - base] == ABSENT or last_updated > newest[key_id - base]:
            newest[key_id - base] = last_updated
            version = touched_in.get(VALUES.keys[values_id])
            versions[key_id - base] = NONE if version is None else version
    size = len(newest) - newest.count(ABSENT)
    return StateMap(IntMap(KEYS, base, newest, size), IntMap(KEYS, base, versions, size))


def to_records(asset: LakeAsset, state: TableState | None) -> RecordMap:
    """The last partlake write of each partition, from the table's commit records."""
    if state is None:
        return RecordMap.empty()
    sources: list[Record] = []
    written: list[tuple[list[int], list[int]]] = []
    for commit in state.commits:  # oldest first: later writes replace earlier ones
        if commit.commit_time_ms is None:
            continue  # written before partlake recorded what it consumed: treat as unknown
        consumed = {
            upstream: (
                partitions
                if WHOLE_TABLE_ID not in partitions
                else {_key(k): v for k, v in partitions.items()}
            )
            for upstream, partitions in commit.consumed.items()
        }
        sources.append(Record(commit.code_version, None, consumed, commit.run_id))
        ids = KEYS.ids_of(_key(raw) for raw in commit.partition_ids)
        values = [commit.commit_time_ms] * len(ids)
        if commit.kept or commit.empty_partition_ids:
            values = [_unbox(commit.written_last_updated(raw)) for raw in commit.partition_ids]
        written.append((ids, values))
    every = [i for ids, _ in written for i in ids]
    if not every:
        return RecordMap.empty()
    base = min(every)
    which = array("q", [ABSENT]) * (max(every) - base + 1)
    last_updated = array("q", which)
    for source, (ids, values) in enumerate(written):
        for key_id, value in zip(ids, values, strict=True):
            which[key_id - base] = source
            last_updated[key_id - base] = value
    size = len(which) - which.count(ABSENT)
    return RecordMap(
        tuple(sources), IntMap(KEYS, base, which, size), IntMap(KEYS, base, last_updated, size)
    )


def _unbox(value: int | None) -> int:
    return NONE if value is None else value


def _check_followed(
    asset: LakeAsset,
    state: TableState | None,
    states: Mapping[Key, PartitionState],
    records: Mapping[Key, Record],
) -> None:
    """Under CHECK_REPLAN_ENV: the followed conversion equals the conversion from scratch."""
    full_records = RecordMap.empty() if asset.is_source else to_records(asset, state)
    full_states = (
        states_from_records(full_records) if asset.decoupled else to_partition_states(asset, state)
    )
    if (states, records) != (full_states, full_records):
        raise AssertionError(f"the followed state of {asset.name} differs from a full conversion")


def _follow_states(
    asset: LakeAsset,
    before: TableState | None,
    state: TableState | None,
    converted: StateMap | None,
    keys: KeyIds | None,
) -> tuple[StateMap, set[Key] | None]:
    """`to_partition_states(asset, state)`, updating `converted` (the conversion of `before`)
    where the table is partitioned exactly by the asset's columns: only the partitions whose
    lastUpdated or version changed are converted again. Also the keys that may have changed
    (None: not known, everything was converted)."""
    if (
        before is None
        or state is None
        or converted is None
        or keys is None
        or not asset.columns
        or before.partition_by != state.partition_by
        or before.column_types != state.column_types
        or tuple(c.column for c in asset.columns) != state.partition_by
    ):
        return to_partition_states(asset, state, keys), None
    old, new = before.last_updated, state.last_updated
    moved: Iterable[Values]
    if state.follows == before.version and state.moved is not None:
        moved = state.moved  # the state cache followed the new commits: it knows
    else:
        changed = {v for v, t in new.items() if old.get(v) != t}
        changed.update(v for v in old if v not in new)
        changed.update(
            v
            for v in {*state.touched_in, *before.touched_in}
            if state.touched_in.get(v) != before.touched_in.get(v)
        )
        moved = changed
    changes: dict[Key, PartitionState] = {}
    gone: list[Key] = []
    for values in moved:
        key_id = keys(VALUES.id(values))
        if key_id < 0:
            continue
        key = KEYS.keys[key_id]
        last_updated = new.get(values)
        if last_updated is not None:
            changes[key] = PartitionState(last_updated, state.touched_in.get(values))
        else:
            gone.append(key)
    return converted.updated(changes, gone), {*changes, *gone}


def _follow_records(
    asset: LakeAsset,
    before: TableState | None,
    state: TableState | None,
    converted: RecordMap | None,
) -> tuple[RecordMap, set[Key] | None]:
    """`to_records(asset, state)`, applying only the commits `state` has after those of
    `before` to `converted` (the records of `before`) when its commits extend them; also the
    keys whose record may have changed (None: not known)."""
    if before is None or state is None or converted is None:
        return to_records(asset, state), None
    known = len(before.commits)
    if state.commits[:known] != before.commits:
        return to_records(asset, state), None
    tail = to_records(asset, replace(state, commits=state.commits[known:]))
    return converted.then(tail), set(tail)


def _keys(graph: LakeGraph, asset: LakeAsset, state: TableState | None) -> KeyIds | None:
    """The asset's key ids for the table's column types, kept on the graph (they memoize the
    key of every partition seen)."""
    if state is None or not asset.columns:
        return None
    # Assets with the same partitions stored the same way share one memo.
    signature = (
        tuple((c.column, c.dimension, id(c.partitions_def)) for c in asset.columns),
        repr(sorted(state.column_types.items())),
        state.partition_by,
    )
    keys = graph.codecs.get(signature)
    if keys is None:
        keys = graph.codecs[signature] = KeyIds(
            KeyCodec(asset.columns, state.column_types), _column_order(asset, state)
        )
    return keys


def states_from_records(records: Mapping[Key, Record]) -> StateMap:
    """lastUpdated per Dagster partition of a decoupled table (its table partitions are not
    Dagster partitions): what the last write of each gave it. Writes by others go unseen."""
    if isinstance(records, RecordMap):
        found = [(i, v) for i, v in records.written.raw_items() if v != NONE]
        ids = [i for i, _ in found]
        return StateMap(
            IntMap.from_ids(KEYS, ids, (v for _, v in found)),
            IntMap.from_ids(KEYS, ids, [None] * len(ids)),
        )
    return StateMap.build(
        (key, PartitionState(r.written_last_updated))
        for key, r in records.items()
        if r.written_last_updated is not None
    )


def _key(raw: str) -> Key:
    return None if raw == WHOLE_TABLE_ID else raw


def gather_plan_input(
    graph: LakeGraph, cache: StateCache, *, dynamic_partitions_store: Any = None
) -> tuple[PlanInput, dict[str, TableState | None]]:
    """Planner input for the whole graph, and the raw table states it was built from (tables
    that could not be read are left out of both and named in `PlanInput.unreadable`)."""
    raw: dict[str, TableState | None] = {}
    unreadable: dict[str, str] = {}
    for name, asset in graph.assets.items():
        try:
            raw[name] = read_state(asset, cache)
        except TableUnreadableError as error:
            unreadable[name] = str(error)
    return _to_input(graph, raw, unreadable, dynamic_partitions_store), raw


def _to_input(
    graph: LakeGraph,
    raw: Mapping[str, TableState | None],
    unreadable: Mapping[str, str],
    dynamic_partitions_store: Any,
) -> PlanInput:
    """The planner input of these table states, converting only what moved since the graph's
    previous conversion."""
    states: dict[str, StateMap] = {}
    records: dict[str, RecordMap] = {}
    for name, state in raw.items():
        asset = graph.assets[name]
        version = state.version if state is not None else -1
        cached = graph.converted.get(name)
        if cached is None or cached[0] != version:
            # Converting values to keys and commits to records is the costly part of a plan at
            # many partitions; a table whose version did not move keeps its conversion, and one
            # that moved converts only what its new commits changed.
            before = cached[3] if cached is not None else None
            asset_records: RecordMap = RecordMap.empty()
            record_keys: set[Key] | None = set()
            if not asset.is_source:
                asset_records, record_keys = _follow_records(
                    asset, before, state, cached[2] if cached else None
                )
            if asset.decoupled:
                asset_states, state_keys = states_from_records(asset_records), record_keys
            else:
                asset_states, state_keys = _follow_states(
                    asset, before, state, cached[1] if cached else None, _keys(graph, asset, state)
                )
            if before is not None and os.environ.get(CHECK_REPLAN_ENV):
                _check_followed(asset, state, asset_states, asset_records)
            graph.moved.pop(name, None)
            if cached is not None and record_keys is not None and state_keys is not None:
                # What moved between the previous conversion and this one, for `_changes`.
                # (A source's records are not planner input: None, as `_changes` sees them.)
                graph.moved[name] = (
                    cached[1],
                    None if asset.is_source else cached[2],
                    asset_states,
                    None if asset.is_source else asset_records,
                    record_keys | state_keys,
                )
            cached = (version, asset_states, asset_records, state)
            graph.converted[name] = cached
        states[name] = cached[1]
        if not asset.is_source:
            records[name] = cached[2]
    return PlanInput(
        graph.plan_assets(dynamic_partitions_store),
        states,
        records,
        partition_keys=graph.root_partition_keys(dynamic_partitions_store),
        unreadable=unreadable,
    )


@dataclass(frozen=True)
class PlanResult:
    plan: Plan
    inputs: PlanInput
    states: dict[str, TableState | None]
    seconds: float

    @property
    def versions(self) -> dict[str, int]:
        """Table version (folder: state hash) of every table that exists and could be read."""
        return {name: s.version for name, s in self.states.items() if s is not None}


def make_plan(
    graph: LakeGraph,
    cache: StateCache,
    *,
    select: Sequence[str] | None = None,
    dynamic_partitions_store: Any = None,
) -> PlanResult:
    """Sync partition state, plan the whole graph, keep the selected assets' partitions.

    Raises:
        PartlakeConfigError: `select` names an asset the code location does not have.
    """
    started = time.perf_counter()
    if select:
        unknown = sorted(set(select) - set(graph.assets))
        if unknown:
            raise PartlakeConfigError(
                f"unknown asset(s) {', '.join(unknown)}; the code location has "
                f"{', '.join(sorted(graph.assets))}."
            )
    if graph.plan_memo is None and cache.persist_dir is not None:
        _resume(graph, cache, dynamic_partitions_store)
    inputs, states = gather_plan_input(
        graph, cache, dynamic_partitions_store=dynamic_partitions_store
    )
    whole = _plan(graph, inputs)
    if cache.persist_dir is not None:
        _save(graph, cache.persist_dir, inputs, states, whole)
    result = _with_increments(graph, whole, states)
    if select:
        result = result.select(select)
    return PlanResult(result, inputs, states, time.perf_counter() - started)


def _resume(graph: LakeGraph, cache: StateCache, dynamic_partitions_store: Any) -> None:
    """Start this graph from the plan a previous process saved (`dagster_partlake.planning.cache`)
    when the on-disk states are at the versions it was made from: the next plan is then
    incremental, from those states to the tables now."""
    assert cache.persist_dir is not None
    graph_signature = plan_cache.signature(
        graph, graph.root_partition_keys(dynamic_partitions_store)
    )
    saved = (
        None
        if graph_signature is None
        else plan_cache.load(cache.persist_dir, graph, graph_signature)
    )
    if saved is None or set(saved.versions) != set(graph.assets):
        return
    raw: dict[str, TableState | None] = {}
    for name, asset in graph.assets.items():
        state = cache.persisted(asset.path, with_commits=not asset.is_source)
        if (state.version if state is not None else None) != saved.versions[name]:
            return
        raw[name] = state
    inputs = _to_input(graph, raw, {}, dynamic_partitions_store)
    if os.environ.get(CHECK_REPLAN_ENV) and plan(inputs).items != saved.plan.items:
        raise AssertionError("the saved plan differs from the plan of the saved states")
    graph.plan_memo = remembered(inputs, saved.plan)
    graph.saved_plan = (graph_signature, saved.versions, saved.plan.items)


def _save(
    graph: LakeGraph,
    persist_dir: str,
    inputs: PlanInput,
    states: Mapping[str, TableState | None],
    whole: Plan,
) -> None:
    """Keep `whole` on disk for the next process, unless it is the plan already kept."""
    if inputs.unreadable or graph.has_dynamic_partitions:
        return
    graph_signature = plan_cache.signature(graph, inputs.partition_keys)
    if graph_signature is None:
        return
    versions = {n: (s.version if s is not None else None) for n, s in states.items()}
    if graph.saved_plan == (graph_signature, versions, whole.items):
        return
    plan_cache.save(persist_dir, graph, graph_signature, versions, whole)
    graph.saved_plan = (graph_signature, versions, whole.items)


def _plan(graph: LakeGraph, inputs: PlanInput) -> Plan:
    """The plan of `inputs`, incrementally from this graph's previous plan where there is one
    (`planning.replan`). A table whose version did not move keeps its converted states
    and records (the same objects), so finding what changed costs only the moved tables."""
    memo = graph.plan_memo
    if memo is None or graph.has_dynamic_partitions:
        memo = full(inputs)
    else:
        changed = _changes(graph, memo.inputs, inputs)
        if os.environ.get(CHECK_REPLAN_ENV):
            reference = changed_partitions(memo.inputs, inputs)
            missed = {a: k - changed.get(a, set()) for a, k in reference.items()}
            if any(missed.values()):
                raise AssertionError(f"changed partitions not found: {missed}")
        memo = replan(memo, inputs, changed)
        if os.environ.get(CHECK_REPLAN_ENV) and memo.plan.items != plan(inputs).items:
            raise AssertionError(
                f"the incremental plan differs from the full plan after changes {changed}: "
                f"{memo.plan.items} != {plan(inputs).items}"
            )
    graph.plan_memo = memo
    # The previous conversions it names are no longer needed (at a million partitions per
    # asset, they are hundreds of megabytes).
    graph.moved.clear()
    return memo.plan


def _changes(graph: LakeGraph, old: PlanInput, new: PlanInput) -> dict[str, set[Key]]:
    """`changed_partitions(old, new)`, taking the keys that moved from the conversion where it
    knows them (`LakeGraph.moved`) instead of comparing every partition."""
    changed: dict[str, set[Key]] = {}
    for name in old.states.keys() | new.states.keys():
        before = (old.states.get(name), old.records.get(name))
        after = (new.states.get(name), new.records.get(name))
        if before[0] is after[0] and before[1] is after[1]:
            continue
        known = graph.moved.get(name)
        if known is not None and all(
            a is b for a, b in zip(known[:4], (*before, *after), strict=True)
        ):
            keys = known[4]
        else:
            one = changed_partitions(
                PlanInput((), {name: before[0] or {}}, {name: before[1] or {}}),
                PlanInput((), {name: after[0] or {}}, {name: after[1] or {}}),
            )
            keys = one.get(name, set())
        if keys:
            changed[name] = set(keys)
    return changed


def _with_increments(
    graph: LakeGraph, result: Plan, states: Mapping[str, TableState | None]
) -> Plan:
    """For an incremental input, `because` names the range it will read instead of the
    upstream partitions: `events[versions 4..6]`, `changes[updated_at > 2024-01-02 10:00:00]`."""
    ranges: dict[str, dict[str, str]] = {}
    items = []
    for item in result.items:
        incremental = graph.incremental_inputs(item.asset)
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
    root = graph.assets[asset].path
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
    """The runs `result`'s plan becomes in this code location (`dagster_partlake.planning.runs`)."""
    return plan_runs(
        result.plan,
        result.inputs.assets,
        graph.partitions_defs(),
        graph.policies(),
        blocked=blocked,
        units=graph.units(),
        cutoff=graph.cutoff(),
    )


def moved(graph: LakeGraph, cache: StateCache, versions: Mapping[str, int]) -> bool:
    """Whether any table may differ from `versions` (a `PlanResult.versions` of an earlier plan
    with the same cache): a cheap check, a couple of `stat`s per table."""
    for name, asset in graph.assets.items():
        if asset.is_folder:
            state = folder_state(asset.path, [c.column for c in asset.columns])
            if (state.version if state else None) != versions.get(name):
                return True
            continue
        version = versions.get(name)
        if version is None:
            if os.path.isdir(log_dir(asset.path)):
                return True
        elif cache.moved(asset.path, version):
            return True
    return False
