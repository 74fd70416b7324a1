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
