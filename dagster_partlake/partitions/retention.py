"""Partition retention: which partitions of an asset are retired on purpose (`partlake/retention`).

A rule, in an asset's definition metadata, as SmartDataLakeBuilder declares its
`PartitionRetentionMode` per DataObject:

    {"keep_last": 30}                         # the newest 30 partitions of the time dimension
    {"keep_last": 12, "dimension": "month"}   # ... of a named time dimension
    {"condition": "region = 'test' AND date < '2024-02-01'"}   # a SQL condition
    {"keep_last": 30, "archive": "archive/raw_events"}   # copied there before the removal
    {"keep_last": 365, "compact_after": 30}   # older than the newest 30: one file each
    {"cascade": true}                         # retired when what it reads is retired

`keep_last` counts the time windows back from the NEWEST PARTITION PRESENT in the asset's table
(not from today and not from the partitions definition's last window): a lake whose newest day
is 2024-02-10 keeps 2024-01-12..2024-02-10 with `keep_last: 30`, whenever it is planned, so a
lake that stops receiving data does not retire everything it holds. A `condition` is a SQL
boolean over the partition's dimension values (as strings: 'date', 'region', the parts of a
combined dimension), evaluated in Python by sqlglot: comparisons, `AND`/`OR`/`NOT`, `IN`,
`LIKE`, `BETWEEN`; a date compares as its ISO text. `cascade` retires a partition when any
upstream partition it reads is retired (a downstream that must forget too, such as a privacy
rule); without it, what reads a retired partition keeps its verdict. A partition retired by
its own rule or by a cascade is neither `missing` nor stale (`planning.planner`), and
`partlake maintain --retention` removes its rows (`maintenance.retention`).

Checked when the code location loads (`spec.model`): known keys, a rule of one kind, a dimension
the asset has (a time dimension for `keep_last`), a condition that parses and names only the
asset's dimensions, a window that keeps something (`keep_last` >= 1; a condition true for every
partition that exists is refused), no rule on an unpartitioned asset, no `cascade` on a source
(partlake never removes a source's rows) and no `archive` or `compact_after` on one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from dagster import TimeWindowPartitionsDefinition

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.metadata import RETENTION_KEY, plain
from dagster_partlake.partitions.keys import (
    DimensionColumn,
    all_keys,
    is_dynamic,
    key_dimension_values,
)

if TYPE_CHECKING:
    from dagster import PartitionsDefinition

_FIELDS = ("keep_last", "dimension", "condition", "cascade", "archive", "compact_after")
# At load, a condition is tried on at most this many partitions of the definition.
_CHECK_KEYS = 100_000


@dataclass(frozen=True)
class RetentionRule:
    """One asset's `partlake/retention`, parsed."""

    keep_last: int | None = None  # the newest N windows of `dimension` stay
    dimension: str | None = None  # the time dimension `keep_last` counts
    condition: str | None = None  # a SQL boolean over the dimension values: true = retired
    cascade: bool = False  # retired when an upstream partition it reads is retired
    archive: str | None = None  # where retired partitions are copied before their removal
    compact_after: int | None = None  # windows older than the newest N: one file per partition

    @property
    def retires(self) -> bool:
        """Whether the rule retires partitions of its own (not only by a cascade)."""
        return self.keep_last is not None or self.condition is not None

    def describe(self) -> str:
        """The rule in words, as `partlake plan` shows it."""
        parts = []
        if self.keep_last is not None:
            parts.append(f"keep the last {self.keep_last} {self.dimension} partition(s)")
        if self.condition is not None:
            parts.append(f"retire where {self.condition}")
        if self.cascade:
            parts.append("cascade from upstream retirements")
        if self.archive:
            parts.append(f"archive to {self.archive}")
        if self.compact_after is not None:
            parts.append(f"compact all but the last {self.compact_after} {self.dimension}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in _FIELDS if getattr(self, f) not in (None, False)}


@dataclass(frozen=True)
class RetiredKeys:
    """The partitions a rule retires given the partitions present: `rule` says which in words
    (two equal `rule`s retire the same keys), `contains` decides one key."""

    rule: str
    contains: Callable[[str | None], bool]


def retention_of(
    value: object,
    partitions_def: PartitionsDefinition | None,
    columns: Sequence[DimensionColumn],
    *,
    asset_name: str,
) -> RetentionRule | None:
    """Parse and check an asset's `partlake/retention` (None: no rule).

    Raises:
        PartlakeConfigError: naming the asset, what is wrong and the fix.
    """
    value = plain(value)
    if value is None:
        return None
    where = f"{RETENTION_KEY} of asset {asset_name}"
    if not isinstance(value, Mapping):
        raise PartlakeConfigError(
            f"{where} is {value!r}; give a dict such as {{'keep_last': 30}} or "
            "{'condition': \"date < '2024-01-01'\"}."
        )
    unknown = sorted(set(value) - set(_FIELDS))
    if unknown:
        raise PartlakeConfigError(
            f"{where} has unknown key(s) {', '.join(map(str, unknown))}; the keys are "
            f"{', '.join(_FIELDS)}."
        )
    if partitions_def is None:
        raise PartlakeConfigError(
            f"{where}: the asset is not partitioned, so it has no partitions to retire; remove "
            "the rule or give the asset a partitions_def."
        )
    keep_last, condition = value.get("keep_last"), value.get("condition")
    cascade, archive = value.get("cascade", False), value.get("archive")
    compact_after = value.get("compact_after")
    if keep_last is not None and condition is not None:
        raise PartlakeConfigError(
            f"{where} sets both keep_last and condition; keep one (a condition can say "
            "everything keep_last says)."
        )
    if not isinstance(cascade, bool):
        raise PartlakeConfigError(f"{where} has cascade {cascade!r}; use true or false.")
    if keep_last is None and condition is None and not cascade and compact_after is None:
        raise PartlakeConfigError(
            f"{where} retires nothing; set keep_last (e.g. 30), condition, cascade or "
            "compact_after."
        )
    _check_values(where, keep_last, compact_after, archive)
    dimension = value.get("dimension")
    if keep_last is not None or compact_after is not None:
        dimension = _time_dimension(dimension, columns, where)
    elif dimension is not None:
        raise PartlakeConfigError(
            f"{where} names dimension {dimension!r} without keep_last or compact_after; remove "
            "it (a condition names its dimensions itself)."
        )
    if condition is not None:
        compiled = compile_condition(condition, columns, where=where)
        _check_keeps_something(compiled, partitions_def, columns, where)
    return RetentionRule(
        keep_last=keep_last,
        dimension=dimension,
        condition=condition,
        cascade=cascade,
        archive=archive,
        compact_after=compact_after,
    )


def check_source_rule(rule: RetentionRule | None, asset_name: str) -> None:
    """Refuse what only a managed asset's rule may say on a source's (`asset_name`): a source
    is written by another system and partlake never removes or rewrites its rows. Checked
    where a code location loads (`spec.load.graph_specs`, `partlake_source`), not where a run
    parses an upstream that its job holds as a stub.

    Raises:
        PartlakeConfigError: the rule has cascade, archive or compact_after.
    """
    if rule is None or not (
        rule.cascade or rule.archive is not None or rule.compact_after is not None
    ):
        return
    raise PartlakeConfigError(
        f"{RETENTION_KEY} of asset {asset_name}: {asset_name} is a source, written by another "
        "system, and partlake never removes or rewrites a source's rows, so a cascade cannot "
        "reach it (and it has no archive or compaction); keep only keep_last or condition on "
        "it (what it still holds of a retired range is not read), and put cascade on the "
        "managed assets that read it."
    )


def _check_values(where: str, keep_last: object, compact_after: object, archive: object) -> None:
    """`keep_last` (1 or more), `compact_after` (0 or more) and `archive` (a location) of a
    rule, each checked.

    Raises:
        PartlakeConfigError: naming the value and what to give instead.
    """
    for name, number in (("keep_last", keep_last), ("compact_after", compact_after)):
        if number is not None and (isinstance(number, bool) or not isinstance(number, int)):
            raise PartlakeConfigError(f"{where} has {name} {number!r}; give a whole number.")
    if isinstance(keep_last, int) and keep_last < 1:
        raise PartlakeConfigError(
            f"{where} has keep_last {keep_last}, a window that would retire every partition; "
            "keep at least 1 (delete the asset's partitions with `partlake delete` to drop "
            "them all)."
        )
    if isinstance(compact_after, int) and compact_after < 0:
        raise PartlakeConfigError(f"{where} has compact_after {compact_after}; give 0 or more.")
    if archive is not None and (not isinstance(archive, str) or not archive):
        raise PartlakeConfigError(
            f"{where} has archive {archive!r}; give a location relative to the lake root "
            "(e.g. 'archive/raw_events') or a URI."
        )


def _time_dimension(dimension: object, columns: Sequence[DimensionColumn], where: str) -> str:
    times = [c.name for c in columns if c.is_time]
    names = [c.name for c in columns]
    if dimension is None:
        if len(times) != 1:
            raise PartlakeConfigError(
                f"{where} counts windows of a time dimension, but the asset has "
                f"{'none' if not times else 'several: ' + ', '.join(times)}; "
                + ("use a condition instead." if not times else "name one with 'dimension'.")
            )
        return times[0]
    if dimension not in names:
        raise PartlakeConfigError(
            f"{where} names dimension {dimension!r}, which the asset does not have; its "
            f"dimensions are {', '.join(names)}."
        )
    if dimension not in times:
        raise PartlakeConfigError(
            f"{where} counts windows of dimension {dimension!r}, which is not a time dimension; "
            "use a condition over it instead."
        )
    return str(dimension)


def compile_condition(
    condition: object, columns: Sequence[DimensionColumn], *, where: str
) -> Callable[[Mapping[str, str]], bool]:
    """A SQL condition as a Python function of a partition's dimension values.

    Raises:
        PartlakeConfigError: it does not parse, names an unknown dimension, or uses what the
            evaluator cannot compute.
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError
    from sqlglot.executor.env import ENV
    from sqlglot.executor.python import Python

    names = [c.name for c in columns]
    if not isinstance(condition, str) or not condition.strip():
        raise PartlakeConfigError(
            f"{where} has condition {condition!r}; give a SQL condition such as "
            "\"date < '2024-01-01'\"."
        )
    try:
        tree = sqlglot.parse_one(condition, read="spark")
    except (ParseError, TokenError) as error:
        raise PartlakeConfigError(
            f"{where}: condition {condition!r} does not parse ({str(error).splitlines()[0]}); "
            "write a SQL condition such as \"date < '2024-01-01'\"."
        ) from error
    used = sorted({c.name for c in tree.find_all(exp.Column)})
    unknown = [u for u in used if u not in names]
    if unknown:
        raise PartlakeConfigError(
            f"{where}: condition {condition!r} names unknown dimension(s) {', '.join(unknown)}; "
            f"the asset's dimensions are {', '.join(names)}."
        )
    tree = tree.transform(
        lambda node: (
            exp.column(exp.to_identifier(node.name, quoted=True))
            if isinstance(node, exp.Column)
            else node
        )
    )
    code = compile(Python().generate(tree), f"<{RETENTION_KEY}>", "eval")

    def evaluate(values: Mapping[str, str]) -> bool:
        try:
            return bool(eval(code, {**ENV, "scope": {None: values}}))  # noqa: S307 - sqlglot's own
        except Exception as error:
            raise PartlakeConfigError(
                f"{where}: condition {condition!r} cannot be evaluated over partition values "
                f"({type(error).__name__}: {error}); use comparisons of the dimension values "
                "as text (dates in ISO form), AND/OR/NOT, IN, LIKE, BETWEEN."
            ) from error

    evaluate({n: "2024-01-01" for n in names})  # what the evaluator lacks fails at load
    return evaluate


def _check_keeps_something(
    evaluate: Callable[[Mapping[str, str]], bool],
    partitions_def: PartitionsDefinition,
    columns: Sequence[DimensionColumn],
    where: str,
) -> None:
    if is_dynamic(partitions_def):
        return  # its keys live in the instance: judged where they are known
    keys = all_keys(partitions_def)[:_CHECK_KEYS]
    if keys and all(evaluate(_values(columns, k)) for k in keys):
        raise PartlakeConfigError(
            f"{where}: the condition is true for every partition the asset has "
            f"({len(keys)}), a window that would retire every partition; narrow it."
        )


def _values(columns: Sequence[DimensionColumn], key: str) -> dict[str, str]:
    return key_dimension_values(columns, key) if len(columns) > 1 else {columns[0].name: key}


def retired_keys(
    rule: RetentionRule, columns: Sequence[DimensionColumn], present: Iterable[str | None]
) -> RetiredKeys | None:
    """What `rule` retires, given the partitions present in the asset's table (`keep_last`
    counts back from the newest of them). None: it retires nothing of its own."""
    if rule.condition is not None:
        evaluate = compile_condition(rule.condition, columns, where=RETENTION_KEY)
        return RetiredKeys(
            f"where {rule.condition}",
            _cached(lambda key: evaluate(_values(columns, key))),
        )
    if rule.keep_last is None:
        return None
    cutoff = window_cutoff(rule.dimension, rule.keep_last, columns, present)
    if cutoff is None:
        return None
    column, start = cutoff

    def before(key: str) -> bool:
        try:
            return _start(column, _values(columns, key)[column.name]) < start
        except Exception:  # not a key of the definition (Dagster says why where it matters)
            return False

    return RetiredKeys(f"{rule.dimension} before {start}", _cached(before))


def window_cutoff(
    dimension: str | None,
    keep: int,
    columns: Sequence[DimensionColumn],
    present: Iterable[str | None],
) -> tuple[DimensionColumn, str] | None:
    """(the time column, the start of the oldest window kept) when the newest `keep` windows
    of `dimension` are kept, counted back from the newest present (None: nothing present)."""
    column = next(c for c in columns if c.name == dimension)
    values = {_values(columns, k)[column.name] for k in present if k is not None}
    starts = {}
    for value in values:
        try:
            starts[value] = _start(column, value)
        except Exception:  # a value outside the definition is no anchor
            continue
    if not starts:
        return None
    newest = max(starts, key=starts.__getitem__)
    partitions_def = column.partitions_def
    assert isinstance(partitions_def, TimeWindowPartitionsDefinition)
    window = partitions_def.time_window_for_partition_key(newest)
    for _ in range(keep - 1):
        earlier = partitions_def.get_prev_partition_window(window.start)
        if earlier is None:
            break
        window = earlier
    return column, window.start.isoformat()


def window_start(column: DimensionColumn, key: str, columns: Sequence[DimensionColumn]) -> str:
    """The start (ISO) of the time window of `column` in partition `key`."""
    return _start(column, _values(columns, key)[column.name])


def _start(column: DimensionColumn, value: str) -> str:
    return _window_start(column.partitions_def, value)


@lru_cache(maxsize=65536)
def _window_start(partitions_def: Any, value: str) -> str:
    return str(partitions_def.time_window_for_partition_key(value).start.isoformat())


def _cached(decide: Callable[[str], bool]) -> Callable[[str | None], bool]:
    seen: dict[str, bool] = {}

    def contains(key: str | None) -> bool:
        if key is None:
            return False
        found = seen.get(key)
        if found is None:
            found = seen[key] = decide(key)
        return found

    return contains
