"""Data skipping for delete predicates (`delta.skipping`), checked against brute force: a file is
ruled out only when none of its possible rows can match. No Spark."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_partlake.delta.skipping import ColumnBounds, file_test

COLUMNS = ["id", "region", "day"]


def test_simple_comparisons_prune_by_bounds() -> None:
    test, used = file_test("id = 42", COLUMNS)
    assert used == ("id",)
    assert test({"id": ColumnBounds(40, 50)})
    assert not test({"id": ColumnBounds(0, 24)})
    assert test({})  # no statistics: may match
    test, _ = file_test("ID >= 10 AND region = 'eu'", COLUMNS)
    assert not test({"id": ColumnBounds(0, 9), "region": ColumnBounds("eu", "eu")})
    assert not test({"id": ColumnBounds(0, 20), "region": ColumnBounds("us", "us")})
    assert test({"id": ColumnBounds(0, 20), "region": ColumnBounds("eu", "eu")})


def test_negations_nulls_and_sets() -> None:
    test, _ = file_test("NOT (id < 10 OR id > 20)", COLUMNS)
    assert not test({"id": ColumnBounds(0, 5)})
    assert test({"id": ColumnBounds(15, 30)})
    test, _ = file_test("id NOT IN (1, 2)", COLUMNS)
    assert not test({"id": ColumnBounds(1, 1)})
    assert test({"id": ColumnBounds(1, 2)})
    test, _ = file_test("region IS NULL", COLUMNS)
    assert not test({"region": ColumnBounds("eu", "eu", may_be_null=False)})
    test, _ = file_test("id BETWEEN 5 AND 7", COLUMNS)
    assert not test({"id": ColumnBounds(8, 9)})
    test, _ = file_test("day = DATE '2024-01-02'", COLUMNS)
    assert test({"day": ColumnBounds(dt.date(2024, 1, 1), dt.date(2024, 1, 3))})
    assert not test({"day": ColumnBounds("2024-01-03", "2024-01-09")})


@pytest.mark.parametrize(
    "predicate",
    ["abs(id) = 1", "id = region", "id = 1 AND", "nosuch = 1", "id = '1'", "region = 'it''s\\n'"],
)
def test_what_it_cannot_read_may_match(predicate: str) -> None:
    found = file_test(predicate, COLUMNS)
    if found is not None:  # read, but it cannot compare: may match
        assert found[0]({"id": ColumnBounds(5, 5), "region": ColumnBounds("a", "a")})


def test_long_string_statistics_are_not_trusted() -> None:
    test, _ = file_test("region > 'b'", COLUMNS)
    long = "a" * 40  # a truncated maximum might stand for a longer, greater value
    assert test({"region": ColumnBounds("a", long)})


CONDITIONS = ["id = {v}", "id < {v}", "id >= {v}", "id <> {v}", "id IN ({v}, {w})", "id IS NULL"]


@settings(max_examples=300, deadline=None)
@given(
    shape=st.lists(
        st.tuples(st.sampled_from(CONDITIONS), st.integers(0, 9), st.integers(0, 9)),
        min_size=1,
        max_size=3,
    ),
    joins=st.lists(st.sampled_from(["AND", "OR"]), min_size=2, max_size=2),
    negate=st.booleans(),
    low=st.integers(0, 9),
    width=st.integers(0, 3),
    nulls=st.booleans(),
)
def test_never_rules_out_a_file_that_holds_a_match(shape, joins, negate, low, width, nulls):
    parts = [c.format(v=v, w=w) for c, v, w in shape]
    gaps = [*joins[: len(parts) - 1], ""]
    words = itertools.chain.from_iterable(zip(parts, gaps, strict=True))
    predicate = " ".join(words).strip()
    if negate:
        predicate = f"NOT ({predicate})"
    found = file_test(predicate, COLUMNS)
    assert found is not None
    values = [*range(low, low + width + 1), *([None] if nulls else [])]
    may = found[0]({"id": ColumnBounds(low, low + width, may_be_null=nulls)})
    if any(_evaluate(predicate, v) for v in values):
        assert may, f"{predicate} ruled out a file holding a match ({values})"


def _evaluate(predicate: str, value: int | None) -> bool:
    """SQL truth of `predicate` for one row (three-valued; only true matches), by Python."""
    import re

    text = predicate
    text = re.sub(r"id IS NULL", "_Tri(X is None)", text)
    text = re.sub(r"id IN \((\d), (\d)\)", r"_in(X, (\1, \2))", text)
    text = re.sub(r"id (=|<>|<|>=) (\d)", lambda m: f"_cmp(X, '{m[1]}', {m[2]})", text)
    text = text.replace("AND", "&").replace("OR", "|").replace("NOT", "~")
    scope = {"X": value, "_in": _in, "_cmp": _cmp, "_Tri": _Tri}
    return _truth(eval(text, scope)) is True


class _Tri:
    def __init__(self, v: bool | None) -> None:
        self.v = v

    def __and__(self, o: _Tri) -> _Tri:
        if self.v is False or o.v is False:
            return _Tri(False)
        return _Tri(None if None in (self.v, o.v) else True)

    def __or__(self, o: _Tri) -> _Tri:
        if self.v is True or o.v is True:
            return _Tri(True)
        return _Tri(None if None in (self.v, o.v) else False)

    def __invert__(self) -> _Tri:
        return _Tri(None if self.v is None else not self.v)


def _cmp(x: int | None, op: str, v: int) -> _Tri:
    if x is None:
        return _Tri(None)
    return _Tri({"=": x == v, "<>": x != v, "<": x < v, ">=": x >= v}[op])


def _in(x: int | None, values: tuple[int, ...]) -> _Tri:
    return _Tri(None) if x is None else _Tri(x in values)


def _truth(value: object) -> bool | None:
    return value.v if isinstance(value, _Tri) else bool(value)
