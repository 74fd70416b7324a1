"""Table states as planner input: lastUpdated per Dagster partition key, and the records.

The one place where storage state becomes planner input. Each table's state
(`dagster_partlake.delta.state`) becomes lastUpdated per Dagster partition key
(`to_partition_states`; several table partitions may hold one Dagster partition), and its commit
records become the planner's `Record`s (`to_records`). `convert` does both for one table and,
given the table's previous `Conversion`, converts only what its new commits changed; the `Move`
it returns names the keys that may differ, so the planner compares only those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from dagster_partlake.columnar.interner import KEYS, VALUES, Key, KeyList, Values
from dagster_partlake.columnar.intmap import ABSENT, NONE, IntMap
from dagster_partlake.delta.payload import WHOLE_TABLE_ID
from dagster_partlake.delta.state import StateCache, TableState, folder_state
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.partitions.keys import KeyCodec
from dagster_partlake.planning.definition import PartitionState, Record
from dagster_partlake.planning.graph import LakeAsset
from dagster_partlake.planning.state_maps import RecordMap, StateMap
from dagster_partlake.records.record import CommitRecord

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt

    from dagster_partlake.sources.kafka import KafkaTopic
    from dagster_partlake.sources.postgres import PostgresTable


@dataclass(frozen=True)
class Conversion:
    """One table's planner input at one table version, and the state it was made from."""

    version: int  # the table version (folder: its state hash); -1: no table
    states: StateMap
    records: RecordMap | None  # None for a source: its records are not planner input
    state: TableState | None


@dataclass(frozen=True)
class Move:
    """A table's conversion and the one before it: `keys` are the partitions whose state or
    record may differ between them (every other key is the same in both)."""

    before: Conversion
    after: Conversion
    keys: frozenset[Key]


# What makes two assets' key ids interchangeable: their dimension columns (with the identity of
# their partitions definitions), the table's column types and its partitioning.
KeySignature = tuple[tuple[tuple[str, str, int], ...], str, tuple[str, ...]]


def key_signature(asset: LakeAsset, state: TableState) -> KeySignature:
    """Assets with the same partitions stored the same way share one `KeyIds` memo."""
    return (
        tuple((c.column, c.dimension, id(c.partitions_def)) for c in asset.columns),
        repr(sorted(state.column_types.items())),
        state.partition_by,
    )


def key_ids(asset: LakeAsset, state: TableState) -> KeyIds:
    """A new key id memo of the asset's partitions for the table's column types."""
    return KeyIds(KeyCodec(asset.columns, state.column_types), _column_order(asset, state))


def convert(
    asset: LakeAsset,
    state: TableState | None,
    previous: Conversion | None,
    keys: KeyIds | None,
    *,
    check: bool = False,
) -> tuple[Conversion, Move | None]:
    """The planner input of one table's `state`, converting only what moved since `previous`
    (its conversion at an earlier version), and the `Move` between them (None: not known).

    Args:
        asset: the table's asset.
        state: the table's state now (None: no table).
        previous: the table's conversion at an earlier version, if any.
        keys: the asset's key id memo (None for an unpartitioned asset or no table).
        check: also convert in full and fail if the followed conversion differs (the tests).
    """
    before = previous.state if previous is not None else None
    records: RecordMap | None = None
    record_keys: set[Key] | None = set()
    if not asset.is_source:
        previous_records = previous.records if previous is not None else None
        records, record_keys = _follow_records(asset, before, state, previous_records)
    if asset.decoupled:
        states = decoupled_states(records or RecordMap.empty(), state)
        state_keys = record_keys
        if changed_after_writes(state) is not None or changed_after_writes(before) is not None:
            state_keys = None  # every run partition may have moved: compare them all
    else:
        previous_states = previous.states if previous is not None else None
        states, state_keys = _follow_states(asset, before, state, previous_states, keys)
    if before is not None and check:
        _check_followed(asset, state, states, records or RecordMap.empty())
    now = Conversion(state.version if state is not None else -1, states, records, state)
    if previous is None or record_keys is None or state_keys is None:
        return now, None
    return now, Move(previous, now, frozenset(record_keys | state_keys))


def read_state(asset: LakeAsset, cache: StateCache) -> TableState | None:
    """The asset's table (or folder) state now.

    Raises:
        TableUnreadableError: the table's Delta log cannot be read.
    """
    if asset.is_folder:
        return folder_state(asset.location, [c.column for c in asset.columns])
    if asset.external is not None:
        return external_state(asset.external, [c.column for c in asset.columns], asset.name)
    return cache.sync(asset.location, with_commits=not asset.is_source, name=asset.name)


def external_state(
    external: PostgresTable | KafkaTopic, columns: Sequence[str], name: str
) -> TableState | None:
    """A source outside the lake's state: its partitions' change stamps (`sources`).

    Raises:
        SourceError: its server refused or did not answer (the message names the source).
    """
    from dagster_partlake.sources.postgres import PostgresTable, table_state

    if isinstance(external, PostgresTable):
        return table_state(external, columns, source=name)
    from dagster_partlake.sources.kafka import topic_state

    return topic_state(external, source=name)


class KeyIds:
    """Interned partition values -> the interned partition key holding them, for one asset's
    codec: memoized in an array indexed by the values' id (`planning.state_maps`)."""

    UNKNOWN, OUTSIDE = -1, -2

    def __init__(self, codec: KeyCodec, order: Sequence[int]) -> None:
        import numpy as np

        self.codec = codec
        self.order = list(order)
        self._memo = np.zeros(0, np.int64)

    def memo(self) -> npt.NDArray[np.int64]:
        """Key ids by values id, `UNKNOWN` where not looked up yet (covers every values id)."""
        import numpy as np

        if len(self._memo) < len(VALUES):
            grown = np.full(max(len(VALUES), len(self._memo) * 5 // 4), self.UNKNOWN, np.int64)
            grown[: len(self._memo)] = self._memo
            self._memo = grown
        return self._memo

    def bulk(
        self, values_ids: npt.NDArray[np.int64], *, ascending: bool = False
    ) -> npt.NDArray[np.int64]:
        """The key id of each values id (`OUTSIDE` for values outside the partitions), looking
        up the ones not memoized yet together, a column at a time (`KeyCodec.key_words`).
        `ascending`: the values ids are distinct and ascending already."""
        import numpy as np

        memo = self.memo()
        values_ids = np.asarray(values_ids, np.int64)
        unknown = values_ids[memo[values_ids] == self.UNKNOWN]
        if not ascending:
            unknown = np.unique(unknown)
        if len(unknown):
            memo[unknown] = self._look_up(np, unknown)
        return memo[values_ids]

    def _look_up(self, np: ModuleType, unknown: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        columns = VALUES.words_of(unknown)
        keyed = None
        if columns is not None and len(columns) > max(self.order, default=-1):
            words = VALUES.words
            keyed = self.codec.key_words([(columns[i], words) for i in self.order])
        if keyed is None:  # keys that are not their dimension keys joined by "|": as strings
            rows = VALUES.keys_of(unknown)
            table = list(zip(*rows, strict=True)) if rows else []
            keys = self.codec.keys([table[i] for i in self.order]) if table else []
            found = [self.OUTSIDE if k is None else KEYS.id(k) for k in keys]
            return np.asarray(found, np.int64)
        parts, inside = keyed
        out = np.full(len(unknown), self.OUTSIDE, np.int64)
        chosen = [(codes[inside], words) for codes, words in parts]
        out[inside] = KEYS.ids_of_words(chosen, int(inside.sum()))
        return out

    def __call__(self, values_id: int) -> int:
        """The key's id, or `OUTSIDE` for values outside the asset's partitions."""
        memo = self.memo()
        found = int(memo[values_id])
        if found == self.UNKNOWN:
            values = VALUES.key(values_id)
            key = self.codec.key([values[i] for i in self.order])
            found = self.OUTSIDE if key is None else KEYS.id(key)
            memo[values_id] = found
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
        latest = max((t for t in state.last_updated.values() if t is not None), default=None)
        return StateMap.build(
            () if latest is None else [(None, PartitionState(latest, state.version))]
        )
    order = _column_order(asset, state)
    keys = keys or KeyIds(KeyCodec(asset.columns, state.column_types), order)
    return _newest_per_key(state, keys)


def _newest_per_key(state: TableState, keys: KeyIds) -> StateMap:
    """Per Dagster key, the newest lastUpdated of the table partitions holding it (several may:
    the days of a month) and the version that touched that one, on whole columns."""
    import numpy as np

    column = state.last_updated.slots()
    positions = np.flatnonzero(column != ABSENT)
    if not len(positions):
        return StateMap.build(())
    values_ids = positions + state.last_updated.base
    key_ids = keys.bulk(values_ids, ascending=True)
    inside = key_ids >= 0
    values_ids, key_ids, times = values_ids[inside], key_ids[inside], column[positions[inside]]
    if not len(key_ids):
        return StateMap.build(())
    del positions, inside
    # The newest per key; of equal times the first values id, as a loop in id order would keep
    # (unbuffered reductions over the keys' slots: no sort of a million rows).
    base = int(key_ids.min())
    at = key_ids - base
    newest = np.full(int(key_ids.max()) - base + 1, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(newest, at, times)
    best = at[times == newest[at]]
    chosen = np.full(len(newest), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(chosen, best, values_ids[times == newest[at]])
    present = chosen != np.iinfo(np.int64).max
    newest[~present] = ABSENT
    version_column = np.full(len(newest), ABSENT, np.int64)
    version_column[present] = NONE
    touched = state.touched_in.slots()
    if len(touched):
        which = chosen[present] - state.touched_in.base
        found = (which >= 0) & (which < len(touched))
        versions = np.full(len(which), NONE, np.int64)
        versions[found] = touched[which[found]]
        versions[versions == ABSENT] = NONE
        version_column[present] = versions
    return StateMap(
        IntMap.of_slots(KEYS, base, newest), IntMap.of_slots(KEYS, base, version_column)
    )


def to_records(asset: LakeAsset, state: TableState | None) -> RecordMap:
    """The last partlake write of each partition, from the table's commit records (a streaming
    asset's: its newest commit, under the key None: it is planned as a whole)."""
    if state is None:
        return RecordMap.empty()
    if asset.stream is not None:
        return _stream_record(state)
    sources: list[Record] = []
    written: list[tuple[Sequence[int] | npt.NDArray[np.int64], list[int] | int]] = []
    for payload in state.commits:  # oldest first: later writes replace earlier ones
        if payload.commit_time_ms is None:
            continue  # written before partlake recorded what it consumed: treat as unknown
        commit = CommitRecord.from_payload(payload)
        # Partition ids are partition keys, but a whole table's id, which is the key None.
        consumed: dict[str, Mapping[Key, int]] = {
            upstream: (
                cast("Mapping[Key, int]", partitions)  # read-only: its str keys are Keys
                if WHOLE_TABLE_ID not in partitions
                else {_key(k): v for k, v in partitions.items()}
            )
            for upstream, partitions in commit.consumed.items()
        }
        sources.append(Record(commit.code_version, None, consumed, commit.run_id))
        raw_ids = payload.partition_ids
        ids: Sequence[int] | npt.NDArray[np.int64]
        if isinstance(raw_ids, KeyList) and WHOLE_TABLE_ID not in raw_ids:
            ids = raw_ids.ids.astype("int64")  # a compact record's keys: their ids already
        else:
            ids = KEYS.ids_of(raw_ids if WHOLE_TABLE_ID not in raw_ids else map(_key, raw_ids))
        values: list[int] | int = payload.commit_time_ms
        if payload.kept or payload.empty_partition_ids:
            values = [_unbox(payload.written_last_updated(raw)) for raw in payload.partition_ids]
        written.append((ids, values))
    if not any(len(ids) for ids, _ in written):
        return RecordMap.empty()
    return _record_columns(tuple(sources), written)


def _record_columns(
    sources: tuple[Record, ...],
    written: Sequence[tuple[Sequence[int] | npt.NDArray[np.int64], list[int] | int]],
) -> RecordMap:
    """The records of `sources` (oldest first), each written for its key ids with its written
    lastUpdated (one for all, or one per key), as `RecordMap` columns: later writes win."""
    import numpy as np

    every = [np.asarray(ids, np.int64) for ids, _ in written]
    base = min(int(ids.min()) for ids in every if len(ids))
    end = max(int(ids.max()) for ids in every if len(ids)) + 1
    which = np.full(end - base, ABSENT, np.int64)
    last_updated = which.copy()
    for source, (ids, (_, values)) in enumerate(zip(every, written, strict=True)):
        which[ids - base] = source
        last_updated[ids - base] = np.asarray(values, np.int64)
    return RecordMap(
        sources, IntMap.of_slots(KEYS, base, which), IntMap.of_slots(KEYS, base, last_updated)
    )


def _stream_record(state: TableState) -> RecordMap:
    timed = next((c for c in reversed(state.commits) if c.commit_time_ms is not None), None)
    if timed is None:
        return RecordMap.empty()
    newest = CommitRecord.from_payload(timed)
    consumed = {
        upstream: {_key(k): v for k, v in partitions.items()}
        for upstream, partitions in newest.consumed.items()
    }
    record = Record(newest.code_version, None, consumed, newest.run_id)
    assert newest.commit_time_ms is not None
    ids = KEYS.ids_of([None])
    return RecordMap(
        (record,),
        IntMap.from_ids(KEYS, ids, [0]),
        IntMap.from_ids(KEYS, ids, [newest.commit_time_ms]),
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
        decoupled_states(full_records, state)
        if asset.decoupled
        else to_partition_states(asset, state)
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
    import numpy as np

    if state.follows == before.version and state.moved is not None:
        moved = state.moved  # the state cache followed the new commits: it knows
    else:
        moved = np.union1d(
            _differing(np, before.last_updated, state.last_updated),
            _differing(np, before.touched_in, state.touched_in),
        )
    key_ids = keys.bulk(moved)
    inside = key_ids >= 0
    moved, key_ids = moved[inside], key_ids[inside]
    if not len(moved):
        return converted, set()
    times = _values_at(np, state.last_updated, moved)
    present = (times != ABSENT) & (times != NONE)
    versions = _values_at(np, state.touched_in, moved)
    versions[versions == ABSENT] = NONE
    # Of several moved partitions holding one key, the newest one's state (the first id of
    # equal times).
    order = np.lexsort((moved, -times, ~present, key_ids))
    first = order[np.r_[True, key_ids[order][1:] != key_ids[order][:-1]]]
    keep, gone = first[present[first]], first[~present[first]]
    updated = converted.updated_ids(key_ids[keep], times[keep], versions[keep], key_ids[gone])
    return updated, set(KEYS.keys_of(key_ids[first]))


def _differing(np: ModuleType, old: IntMap[Values], new: IntMap[Values]) -> npt.NDArray[np.int64]:
    """The ids whose value differs between two maps (present in one only included)."""
    bounds = [(m.base, m.base + len(m.column)) for m in (old, new) if len(m.column)]
    if not bounds:
        return np.zeros(0, np.int64)
    low, high = min(b[0] for b in bounds), max(b[1] for b in bounds)
    return np.flatnonzero(old.over(low, high).slots() != new.over(low, high).slots()) + low


def _values_at(
    np: ModuleType, values: IntMap[Values], ids: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """The stored value of each id (`ABSENT` where none)."""
    slots = values.slots()
    out = np.full(len(ids), ABSENT, np.int64)
    at = ids - values.base
    inside = (at >= 0) & (at < len(slots))
    out[inside] = slots[at[inside]]
    return out


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


def decoupled_states(records: RecordMap, state: TableState | None) -> StateMap:
    """lastUpdated per Dagster partition of a decoupled table: what partlake's last write of
    each gave it (`states_from_records`), unless the table's files changed after partlake's
    last write (a row delete, a restore, another writer): that change may touch any run
    partition, so each one written gets the time of that change, and the planner sees it
    `out_of_band`."""
    states = states_from_records(records)
    changed = changed_after_writes(state)
    if changed is None:
        return states
    return StateMap.build((key, PartitionState(changed)) for key in states)


def changed_after_writes(state: TableState | None) -> int | None:
    """The time of a table's newest change (its newest lastUpdated: `delta.change_rule`), if it
    is newer than its newest partlake commit (its files changed after partlake last wrote it);
    None otherwise."""
    if state is None or not state.commits:
        return None
    newest_file = max((t for t in state.last_updated.values() if t is not None), default=None)
    newest_write = max((c.commit_time_ms or 0 for c in state.commits), default=0)
    if newest_file is None or newest_file <= newest_write:
        return None
    return newest_file


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
