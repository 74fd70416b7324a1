"""Column-wise maps behave as the dicts they replace (a model test) and stay column-wise."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_partlake.columnar.interner import KEYS
from dagster_partlake.columnar.intmap import IntMap
from dagster_partlake.planning.planner import PartitionState, Record
from dagster_partlake.planning.state_maps import RecordMap, StateMap

ALL_KEYS = [f"k{i}" for i in range(40)] + [None]
keys = st.sampled_from(ALL_KEYS)
values = st.one_of(st.none(), st.integers(min_value=-(2**62), max_value=2**62))
steps = st.lists(
    st.tuples(st.dictionaries(keys, values, max_size=6), st.lists(keys, max_size=4)),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, values, max_size=20), steps)
def test_an_int_map_is_the_dict_it_replaces(start: dict, changes: list) -> None:
    model = dict(start)
    column = IntMap.build(KEYS, start.items())
    assert column == model and dict(column.items()) == model and len(column) == len(model)
    for setting, deleting in changes:
        before, previous = dict(model), column
        for key in deleting:
            model.pop(key, None)
        model.update(setting)
        column = column.updated(setting, [k for k in deleting if k not in setting])
        assert column == model and len(column) == len(model)
        assert all(column.get(k, "absent") == model.get(k, "absent") for k in ALL_KEYS)
        assert previous == before  # never changed in place
        assert (column == IntMap.build(KEYS, model.items())) and (column == previous) == (
            model == before
        )


def test_state_and_record_maps_make_values_on_access_and_share_records() -> None:
    states = StateMap.build([("a", PartitionState(5, 1)), ("b", PartitionState(7))])
    assert states == {"a": PartitionState(5, 1), "b": PartitionState(7)}
    assert states.updated({"c": PartitionState(9, 2)}, ["a"]) == {
        "b": PartitionState(7),
        "c": PartitionState(9, 2),
    }
    assert states == {"a": PartitionState(5, 1), "b": PartitionState(7)}
    consumed = {"up": IntMap.build(KEYS, [("a", 1)])}
    first = RecordMap(
        (Record("1", None, consumed, "run-1"),),
        IntMap.build(KEYS, [("a", 0), ("b", 0)]),
        IntMap.build(KEYS, [("a", 10), ("b", None)]),
    )
    later = RecordMap(
        (Record("2", None, {}, "run-2"),),
        IntMap.build(KEYS, [("b", 0)]),
        IntMap.build(KEYS, [("b", 20)]),
    )
    both = first.then(later)
    assert both == {
        "a": Record("1", 10, consumed, "run-1"),
        "b": Record("2", 20, {}, "run-2"),
    }
    assert first["b"] == Record("1", None, consumed, "run-1")
    assert both["a"] is both["a"]  # one object per commit and written lastUpdated


words = st.sampled_from(["2024-01-01", "2024-01-02", "eu", "us", "", "é", "a/b", "x\x00y"])
text_keys = st.lists(words, min_size=1, max_size=3).map("|".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), text_keys), max_size=60), max_size=8))
def test_an_interner_gives_each_key_one_id_however_it_is_asked(batches: list) -> None:
    """Keys interned one at a time, in bulk (as strings, as text, as word columns) and looked
    up again get one id each, give back the key, and no other key's."""
    import numpy as np

    from dagster_partlake.columnar.interner import Interner, _join_key, _split_key, _split_keys

    interner = Interner(_split_key, _join_key, _split_keys, "|")
    seen: dict[str | None, int] = {}
    for i, batch in enumerate(batches):
        how = i % 3
        if how == 0:
            ids = [interner.id(k) for k in batch]
        elif how == 1:
            ids = interner.ids_of(batch * 80)[: len(batch)]  # past the bulk threshold
        else:
            ids = interner.ids_of(batch)
        for key, found in zip(batch, ids, strict=True):
            assert seen.setdefault(key, found) == found
    assert len(interner) == len(seen) and sorted(seen.values()) == list(range(len(seen)))
    keys = list(seen)
    assert interner.keys_of(np.array([seen[k] for k in keys], np.int64)) == keys
    assert all(interner.find(k) == seen[k] for k in keys)
    assert interner.find_all(keys * 40 + ["never|seen"]).tolist() == [
        seen[k] for k in keys
    ] * 40 + [-1]
    text = [k for k in keys if k is not None and "\x00" not in k]
    if text:
        data = np.frombuffer("\x00".join(text).encode(), np.uint8)
        cuts = np.flatnonzero(data == 0)
        starts, ends = np.r_[0, cuts + 1], np.r_[cuts, len(data)]
        assert interner.ids_of_text(data, starts, ends).tolist() == [seen[k] for k in text]


@given(st.dictionaries(keys, st.one_of(st.none(), st.integers(-(2**31), 2**31))))
def test_an_int_map_of_small_values_is_narrow_and_reads_the_same(start: dict) -> None:
    column = IntMap.build(KEYS, start.items())
    small = all(v is None or -(2**31) + 2 <= v <= 2**31 - 1 for v in start.values())
    assert (column.column.typecode == "i") == (small and bool(start))
    assert column == start and dict(column.items()) == start
    assert all(column.get(k, "absent") == start.get(k, "absent") for k in ALL_KEYS)
