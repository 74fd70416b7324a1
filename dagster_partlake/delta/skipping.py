"""Data skipping for a row predicate: which files cannot hold a matching row, from the log alone.

`partlake delete --where` rewrites only the files that hold matching rows. Spark decides which
rows match (it parses, resolves and evaluates the predicate: the only authority on its meaning);
this module only prunes the files Spark has to look at, as Delta's own data skipping does, from
each file's partition values and its min/max/null-count statistics (merge and scd2 write them for
the unique key, other writers for other columns).

It reads a small subset of Spark SQL: `AND`, `OR`, `NOT`, parentheses, comparisons of a column
with a literal (`=`, `==`, `<>`, `!=`, `<`, `<=`, `>`, `>=`), `[NOT] IN (...)`,
`[NOT] BETWEEN .. AND ..`, `IS [NOT] NULL`; literals are numbers, quoted strings,
`DATE 'yyyy-mm-dd'`, `TRUE`, `FALSE`. Anything else (a function call, a comparison of two
columns, a type it cannot compare exactly) says "may match", and so does a predicate it cannot
read at all: pruning is an optimization, never a source of wrong results.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# A file as the pruner sees it: per column, (low, high) values, whether it may hold nulls, and
# whether it may hold non-nulls; a column absent from the mapping may hold anything.
Bounds = Mapping[str, "ColumnBounds"]


@dataclass(frozen=True)
class ColumnBounds:
    low: object  # a statistic (None: unknown)
    high: object
    may_be_null: bool = True
    may_be_set: bool = True


Test = Callable[[Bounds], bool]  # True: the file may hold a matching row

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<number>-?\d+(?:\.\d+)?(?![\w.]))
    | (?P<string>'(?:[^'\\]|\\.|'')*')
    | (?P<quoted>`(?:[^`]|``)+`)
    | (?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,)
    | (?P<word>[A-Za-z_][A-Za-z_0-9]*)
    )""",
    re.VERBOSE,
)
_MAX_EXACT_STRING = 32
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "TRUE", "FALSE", "DATE"}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}
_NEGATE = {"=": "<>", "<>": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class _Column:
    name: str


@dataclass(frozen=True)
class _Literal:
    value: int | float | str | dt.date | bool


class _Unreadable(Exception):
    """The predicate is outside the subset this module reads."""


def file_test(predicate: str, columns: Sequence[str]) -> tuple[Test, tuple[str, ...]] | None:
    """A test telling which files may hold a row matching `predicate`, and the table columns it
    needs bounds of; None when the predicate is outside the subset read here (every file may).

    Args:
        predicate: a Spark SQL condition (already checked by Spark).
        columns: the table's columns; identifiers match them case-insensitively, as in Spark.
    """
    by_lower = {c.lower(): c for c in columns}
    try:
        parser = _Parser(_tokens(predicate), by_lower)
        test = parser.expression(negated=False)
        if parser.position != len(parser.tokens):
            raise _Unreadable("trailing input")
    except _Unreadable:
        return None
    return test, tuple(sorted(parser.used))


def _tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise _Unreadable(f"cannot read {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        value = match.group(kind)
        if kind == "word" and value.upper() in _KEYWORDS:
            kind, value = "keyword", value.upper()
        found.append((kind, value))
        position = match.end()
    return found


class _Parser:
    """Recursive descent over the tokens; negations are pushed down to the comparisons."""

    def __init__(self, tokens: list[tuple[str, str]], columns: Mapping[str, str]) -> None:
        self.tokens = tokens
        self.position = 0
        self.columns = columns
        self.used: set[str] = set()

    def peek(self, value: str | None = None) -> bool:
        if self.position >= len(self.tokens):
            return False
        return value is None or self.tokens[self.position][1] == value

    def take(self, value: str | None = None) -> tuple[str, str]:
        if not self.peek(value):
            raise _Unreadable(f"expected {value or 'more input'}")
        token = self.tokens[self.position]
        self.position += 1
        return token

    def expression(self, *, negated: bool) -> Test:
        # NOT (a OR b) = NOT a AND NOT b: under a negation OR combines like AND.
        parts = [self.conjunction(negated=negated)]
        while self.peek("OR"):
            self.take("OR")
            parts.append(self.conjunction(negated=negated))
        return _all(parts) if negated else _any(parts)

    def conjunction(self, *, negated: bool) -> Test:
        parts = [self.negation(negated=negated)]
        while self.peek("AND"):
            self.take("AND")
            parts.append(self.negation(negated=negated))
        return _any(parts) if negated else _all(parts)

    def negation(self, *, negated: bool) -> Test:
        if self.peek("NOT"):
            self.take("NOT")
            return self.negation(negated=not negated)
        if self.peek("("):
            self.take("(")
            inner = self.expression(negated=negated)
            self.take(")")
            return inner
        return self.comparison(negated=negated)

    def comparison(self, *, negated: bool) -> Test:
        left = self.operand()
        if self.peek("IS"):
            self.take("IS")
            is_not = self.peek("NOT") and bool(self.take("NOT"))
            self.take("NULL")
            return _null_test(left, wants_null=(not is_not) != negated)
        not_before = self.peek("NOT") and bool(self.take("NOT"))
        flip = negated != bool(not_before)
        if self.peek("IN"):
            self.take("IN")
            return _in_test(left, self.literal_list(), negated=flip)
        if self.peek("BETWEEN"):
            self.take("BETWEEN")
            low = self.operand()
            self.take("AND")
            high = self.operand()
            return _between_test(left, low, high, negated=flip)
        if not_before:
            raise _Unreadable("NOT before an operator")
        op = self.take()[1]
        op = "=" if op == "==" else "<>" if op == "!=" else op
        if op not in _NEGATE:
            raise _Unreadable(f"operator {op!r}")
        right = self.operand()
        return _compare_test(left, _NEGATE[op] if negated else op, right)

    def literal_list(self) -> list[_Column | _Literal]:
        self.take("(")
        values = [self.operand()]
        while self.peek(","):
            self.take(",")
            values.append(self.operand())
        self.take(")")
        return values

    def operand(self) -> _Column | _Literal:
        kind, value = self.take()
        if kind == "number":
            return _Literal(float(value) if "." in value else int(value))
        if kind == "string":
            return _Literal(_unquote_string(value))
        if kind == "keyword" and value in ("TRUE", "FALSE"):
            return _Literal(value == "TRUE")
        if kind == "keyword" and value == "DATE":
            text = self.take()
            if text[0] != "string":
                raise _Unreadable("DATE without a string")
            try:
                return _Literal(dt.date.fromisoformat(_unquote_string(text[1])))
            except ValueError as error:
                raise _Unreadable("bad date") from error
        if kind in ("word", "quoted"):
            if self.peek("("):
                raise _Unreadable("a function call")
            name = value[1:-1].replace("``", "`") if kind == "quoted" else value
            column = self.columns.get(name.lower())
            if column is None:
                raise _Unreadable(f"unknown column {name}")
            self.used.add(column)
            return _Column(column)
        raise _Unreadable(f"unexpected {value!r}")


def _unquote_string(token: str) -> str:
    body = token[1:-1]
    if "\\" in body:
        raise _Unreadable("escapes in a string")  # Spark's escape rules: leave it to Spark
    return body.replace("''", "'")


def _any(tests: list[Test]) -> Test:
    return tests[0] if len(tests) == 1 else (lambda bounds: any(t(bounds) for t in tests))


def _all(tests: list[Test]) -> Test:
    return tests[0] if len(tests) == 1 else (lambda bounds: all(t(bounds) for t in tests))


def _maybe(_bounds: Bounds) -> bool:
    return True


def _null_test(operand: _Column | _Literal, *, wants_null: bool) -> Test:
    if not isinstance(operand, _Column):
        return _maybe
    name = operand.name

    def test(bounds: Bounds) -> bool:
        known = bounds.get(name)
        if known is None:
            return True
        return known.may_be_null if wants_null else known.may_be_set

    return test


def _compare_test(left: _Column | _Literal, op: str, right: _Column | _Literal) -> Test:
    if isinstance(left, _Literal) and isinstance(right, _Column):
        left, right, op = right, left, _FLIP[op]
    if not isinstance(left, _Column) or not isinstance(right, _Literal):
        return _maybe  # two columns, or two literals: Spark knows
    name, value = left.name, right.value

    def test(bounds: Bounds) -> bool:
        known = bounds.get(name)
        if known is None:
            return True
        if not known.may_be_set:
            return False  # only nulls: no comparison is true
        low, high = _comparable(known.low, value), _comparable(known.high, value)
        target = _comparable(value, value)
        if low is None or high is None or target is None:
            return True
        if op == "=":
            return low <= target <= high
        if op == "<>":
            return not (low == high == target)
        if op == "<":
            return low < target
        if op == "<=":
            return low <= target
        if op == ">":
            return high > target
        return high >= target  # ">="

    return test


def _in_test(left: _Column | _Literal, values: list[_Column | _Literal], *, negated: bool) -> Test:
    if not all(isinstance(v, _Literal) for v in values):
        return _maybe
    if negated:
        # NOT IN: false for a file whose only value is in the list (nulls never match).
        return _all([_compare_test(left, "<>", v) for v in values])
    return _any([_compare_test(left, "=", v) for v in values])


def _between_test(
    operand: _Column | _Literal,
    low: _Column | _Literal,
    high: _Column | _Literal,
    *,
    negated: bool,
) -> Test:
    if negated:
        return _any([_compare_test(operand, "<", low), _compare_test(operand, ">", high)])
    return _all([_compare_test(operand, ">=", low), _compare_test(operand, "<=", high)])


def _comparable(value: object, literal: int | float | str | dt.date | bool) -> Any:
    """`value` in a form that compares exactly with `literal`, or None if it cannot."""
    if value is None or isinstance(value, bool) or isinstance(literal, bool):
        return None
    if isinstance(literal, int | float):
        return value if isinstance(value, int | float) else None
    if isinstance(literal, dt.date) and not isinstance(literal, dt.datetime):
        if isinstance(value, dt.datetime):
            return None
        if isinstance(value, dt.date):
            return value.isoformat()
        if isinstance(value, str) and _is_iso_date(value):
            return value
        return None
    if isinstance(literal, str):
        # A string literal compares with text columns exactly; with dates as Spark casts it.
        if isinstance(value, str):
            # Long string statistics may be truncated prefixes (Delta writers cut them).
            return value if len(value) < _MAX_EXACT_STRING else None
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return value.isoformat() if _is_iso_date(literal) else None
    return None


def _is_iso_date(text: str) -> bool:
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", text))
