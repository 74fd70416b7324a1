"""Evaluate an asset's quality gates (`dagster_partlake.gates.spec`) with Spark, before the commit.

The row-level constraints, the per-partition row counts and the new side of the column audits
are counted by the write job itself, per file, while Spark writes the rows (`extras`: a flag per
counted constraint, a sum per audited column), and arrive here per Dagster key (`counted`); so no
aggregation over the new rows is needed. Without those counts (a decoupled write, whose files
name no Dagster key; a merge's or scd2's incoming batch) they are one aggregation over the rows,
grouped by the asset's partition columns. `unique` compares keys as SQL's UNIQUE does: a key with
a null column is never a duplicate (`not_null` is the gate for nulls). It is judged by the write
job too when one Spark task wrote every row (a small write): that task counts the rows whose key
has no null column and a hash another such row has (`repeats`), and none means no key repeats;
otherwise (several tasks, a hash repeated, a key Spark's hash does not follow) it is its own
grouping of the rows with a full key. Offending rows are fetched only for a gate that failed (at
most `MAX_SAMPLES`). The old side of the audits is the partitions' current rows: counts from the
Delta log (no data read), sums and means in one aggregation over their live files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from dagster_partlake.delta.selection import format_partition_value
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.gates.spec import MAX_SAMPLES, Gate, GateResult, Gates

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row

# Constraints counted row by row (in the one aggregation, or while the write stages the rows).
_COUNTED = ("not_null", "accepted_values", "expression")

KeyOf = Callable[[Mapping[str, str | None]], str]


@dataclass(frozen=True)
class GateInput:
    """What one write offers its gates."""

    asset_name: str
    # The rows about to be committed, or a function making them (called only when a gate must
    # look at rows: `rows`).
    new: DataFrame | Callable[[], DataFrame]
    partition_columns: Sequence[str]  # the columns of the Dagster partitions ([] if none)
    keys: Sequence[str]  # the Dagster partition keys written (their ids for an unpartitioned one)
    key_of: KeyOf  # partition column values (Delta strings) -> Dagster key
    old: DataFrame | None = None  # the current rows of those partitions (audits)
    old_rows: Mapping[str, int] | None = None  # key -> current row count, from the log
    # Key -> `_rows` and what the write counted of `extras` (flags `_bad{i}` as counts, sums
    # `_new{i}` as (sum, non-null count)); None: count them from `new`.
    counted: Mapping[str, Mapping[str, Any]] | None = None
    # What the write counted of `repeats` (`_dup{i}`: rows whose key hash another row has,
    # over the whole write; None: not counted).
    repeated: Mapping[str, int | None] | None = None

    @cached_property
    def rows(self) -> DataFrame:
        from pyspark.sql import DataFrame

        return self.new if isinstance(self.new, DataFrame) else self.new()


def extras(gates: Gates) -> tuple[dict[str, Column], dict[str, Column]]:
    """(flags, sums): the per-row values a write counts and sums while it writes the rows, so
    that `evaluate` need not read them: a violation flag per counted constraint, the value of
    each summed or averaged column."""
    from pyspark.sql import functions as F

    flags = {f"_bad{i}": _violates(gate) for i, gate in enumerate(_counted(gates))}
    sums = {f"_new{i}": F.col(gate.columns[0]) for i, gate in enumerate(_sums(gates))}
    return flags, sums


def repeats(gates: Gates) -> dict[str, tuple[str, ...]]:
    """The keys of the `unique` constraints (`_dup{i}`), whose repeated rows a write counts
    while it writes them (`delta.files.Extras.repeats`)."""
    return {f"_dup{i}": gate.columns for i, gate in enumerate(_uniques(gates))}


def evaluate(gates: Gates, given: GateInput) -> tuple[GateResult, ...]:
    """Every gate's result on this write, constraints first.

    Raises:
        PartlakeConfigError: a gate names a column the data lacks or an invalid expression.
    """
    from pyspark.errors import AnalysisException

    try:
        return _evaluate(gates, given)
    except AnalysisException as error:
        names = ", ".join(g.name for g in gates.all)
        first = str(error).strip().splitlines()[0]
        raise PartlakeConfigError(
            f"a quality gate of asset {given.asset_name} ({names}) cannot be evaluated on its "
            f"data: {first}. Fix the column names or expressions in partlake/constraints or "
            "partlake/audits. Nothing was committed."
        ) from error


def _counted(gates: Gates) -> list[Gate]:
    return [g for g in gates.constraints if g.type in _COUNTED]


def _uniques(gates: Gates) -> list[Gate]:
    return [g for g in gates.constraints if g.type == "unique"]


def _sums(gates: Gates) -> list[Gate]:
    return [g for g in gates.audits if g.type in ("column_sum", "column_mean")]


def _violations(gate: Gate) -> Column:
    from pyspark.sql import functions as F

    return F.sum(F.when(_violates(gate), 1).otherwise(0))


def _per_partition(gates: Gates, given: GateInput) -> dict[str, dict[str, Any]]:
    """Per written partition key: `_rows`, each counted constraint's `_bad{i}`, each audited
    sum or mean's `_new{i}`; from the write's counts when it took them."""
    from pyspark.sql import functions as F

    counted, sums = _counted(gates), _sums(gates)
    if given.counted is not None:
        measures = {i: gate for i, gate in enumerate(sums)}
        per_key: dict[str, dict[str, Any]] = {}
        for key, values in given.counted.items():
            row: dict[str, Any] = {"_rows": values.get("_rows", 0)}
            row.update({f"_bad{i}": values.get(f"_bad{i}", 0) for i in range(len(counted))})
            for i, gate in measures.items():
                total, n = values.get(f"_new{i}", (0.0, 0))
                row[f"_new{i}"] = (total if gate.type == "column_sum" else total / n) if n else None
            per_key[key] = row
        return per_key
    aggregates = [F.count(F.lit(1)).alias("_rows")]
    aggregates += [_violations(gate).alias(f"_bad{i}") for i, gate in enumerate(counted)]
    aggregates += [_measure(gate).alias(f"_new{i}") for i, gate in enumerate(sums)]
    by = list(given.partition_columns)
    return {
        _key(row, by, given.key_of): row.asDict()
        for row in given.rows.groupBy(*by).agg(*aggregates).collect()
    }


def _evaluate(gates: Gates, given: GateInput) -> tuple[GateResult, ...]:
    counted, sums = _counted(gates), _sums(gates)
    uniques = _uniques(gates)
    per_partition = _per_partition(gates, given)
    written = list(dict.fromkeys([*given.keys, *per_partition]))
    total_rows = sum(p["_rows"] for p in per_partition.values())

    results: dict[str, GateResult] = {}
    for i, gate in enumerate(counted):
        bad_by_key = {k: p[f"_bad{i}"] or 0 for k, p in per_partition.items()}
        offending = sum(bad_by_key.values())
        samples = _samples(given.rows, _violates(gate)) if offending else ()
        results[gate.name] = GateResult(
            gate,
            passed=offending == 0,
            offending=offending,
            checked=total_rows,
            samples=samples,
            failing_partitions=tuple(sorted(k for k, n in bad_by_key.items() if n)),
        )
    for gate in gates.constraints:
        if gate.type == "unique":
            repeated = (given.repeated or {}).get(f"_dup{uniques.index(gate)}")
            results[gate.name] = (
                GateResult(gate, passed=True, offending=0, checked=total_rows)
                if repeated == 0
                else _unique(gate, given.rows, total_rows)
            )
        elif gate.type == "row_count":
            rows = {k: per_partition.get(k, {}).get("_rows", 0) for k in written}
            bad = {
                k: n
                for k, n in rows.items()
                if (gate.minimum is not None and n < gate.minimum)
                or (gate.maximum is not None and n > gate.maximum)
            }
            results[gate.name] = _partition_result(gate, bad, len(rows), "rows")

    if gates.audits:
        new_rows = {k: per_partition.get(k, {}).get("_rows", 0) for k in written}
        old_rows = dict(given.old_rows or {})
        old_measures = _old_measures(sums, given) if sums else {}
        for gate in gates.audits:
            if gate.type == "row_count_change":
                bad = {
                    k: {"old_rows": old_rows[k], "new_rows": n}
                    for k, n in new_rows.items()
                    if old_rows.get(k) and _changed_too_much(old_rows[k], n, gate.max_change)
                }
            elif gate.type == "no_partition_emptied":
                bad = {
                    k: {"old_rows": old_rows[k], "new_rows": 0}
                    for k, n in new_rows.items()
                    if n == 0 and old_rows.get(k)
                }
            else:
                i = sums.index(gate)
                bad = {}
                for k in written:
                    old = old_measures.get(k, {}).get(i)
                    value = per_partition.get(k, {}).get(f"_new{i}")
                    new_value = float(value) if value is not None else 0.0
                    if old is not None and _changed_too_much(old, new_value, gate.max_change):
                        bad[k] = {"old": old, "new": new_value}
            results[gate.name] = _partition_result(gate, bad, len(new_rows), None)
    return tuple(results[g.name] for g in gates.all)


def _violates(gate: Gate) -> Column:
    from pyspark.sql import functions as F

    if gate.type == "not_null":
        condition = F.col(gate.columns[0]).isNull()
        for column in gate.columns[1:]:
            condition = condition | F.col(column).isNull()
        return condition
    if gate.type == "accepted_values":
        value = F.col(gate.columns[0])
        return value.isNotNull() & ~value.isin(list(gate.values))
    # An expression that is false or null (unknown) is violated.
    return ~F.coalesce(F.expr(gate.expression), F.lit(False))


def _measure(gate: Gate) -> Column:
    from pyspark.sql import functions as F

    column = F.col(gate.columns[0])
    return F.sum(column) if gate.type == "column_sum" else F.avg(column)


def _key(row: Row, by: Sequence[str], key_of: KeyOf) -> str:
    return key_of({c: format_partition_value(row[c]) for c in by})


def _samples(df: DataFrame, condition: Column) -> tuple[Mapping[str, object], ...]:
    return tuple(_plain(r.asDict()) for r in df.filter(condition).limit(MAX_SAMPLES).collect())


def _plain(row: Mapping[str, object]) -> dict[str, object]:
    return {
        k: v if isinstance(v, int | float | str | bool) or v is None else str(v)
        for k, v in row.items()
    }


def _unique(gate: Gate, new: DataFrame, total_rows: int) -> GateResult:
    from pyspark.sql import functions as F

    columns = list(gate.columns)
    # As SQL's UNIQUE: a key with a null column equals no other key (not_null catches nulls).
    keyed = new
    for column in columns:
        keyed = keyed.where(F.col(column).isNotNull())
    duplicated = keyed.groupBy(*columns).agg(F.count(F.lit(1)).alias("rows")).filter("rows > 1")
    found = duplicated.agg(F.sum("rows").alias("rows")).collect()[0]["rows"] or 0
    samples = (
        tuple(_plain(r.asDict()) for r in duplicated.limit(MAX_SAMPLES).collect()) if found else ()
    )
    return GateResult(gate, passed=found == 0, offending=found, checked=total_rows, samples=samples)


def _partition_result(
    gate: Gate, bad: Mapping[str, Any], checked: int, label: str | None
) -> GateResult:
    samples = tuple(
        {"partition": k, **({label: v} if label else dict(v))}
        for k, v in sorted(bad.items())[:MAX_SAMPLES]
    )
    return GateResult(
        gate,
        passed=not bad,
        offending=len(bad),
        checked=checked,
        samples=samples,
        failing_partitions=tuple(sorted(bad)),
    )


def _changed_too_much(old: float, new: float, max_change: float | None) -> bool:
    if old == 0:
        return new != 0
    return abs(new - old) / abs(old) > (max_change or 0.0)


def _old_measures(sums: Sequence[Gate], given: GateInput) -> dict[str, dict[int, float]]:
    if given.old is None:
        return {}
    by = list(given.partition_columns)
    rows = given.old.groupBy(*by).agg(*[_measure(g).alias(f"_old{i}") for i, g in enumerate(sums)])
    measures: dict[str, dict[int, float]] = {}
    for row in rows.collect():
        values = {i: row[f"_old{i}"] for i in range(len(sums)) if row[f"_old{i}"] is not None}
        measures[_key(row, by, given.key_of)] = {i: float(v) for i, v in values.items()}
    return measures
