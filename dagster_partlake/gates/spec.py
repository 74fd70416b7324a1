"""Quality gates: constraints and audits an asset declares, checked before its Delta commit.

Dagster's blocking asset checks run after the data is written, so readers already see a bad batch
when the check fails. Ours run on the staged files, before the commit: a failed gate of severity
`error` means no commit (the table stays as it was) and a failed step; severity `warn` records
the result and commits anyway. Each gate is also a Dagster asset check on its asset
(`dagster_partlake.gates.checks`), so the UI lists it and shows its result per run.

Declared in the asset's definition metadata (the helpers below build the same entries):

    metadata={
        "partlake/constraints": [
            {"not_null": ["user_id"]},
            {"unique": ["event_id"]},                      # in the written partitions; nulls pass
            {"accepted_values": {"region": ["eu", "us"]}},  # nulls are accepted
            {"expression": "amount >= 0", "name": "non_negative"},  # false or null violates
            {"row_count": {"min": 1, "max": 100000}},      # per written partition
        ],
        "partlake/audits": [
            {"row_count_change": {"max_change": 0.5}},     # |new - old| / old per partition
            {"no_partition_emptied": True},
            {"column_sum": {"column": "amount", "max_change": 0.2}},
            {"column_mean": {"column": "amount", "max_change": 0.2}},
        ],
    }

Any entry may add `"severity": "warn"` and `"name"`. Audits compare the new data with the
partitions it replaces, so they apply to the kinds that replace partitions (`partition`,
`table`, `tracked`); constraints apply to every kind. This module is pure: parsing and naming.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.metadata import plain

CONSTRAINTS_KEY = "partlake/constraints"
AUDITS_KEY = "partlake/audits"

ConstraintType = Literal["not_null", "unique", "accepted_values", "expression", "row_count"]
AuditType = Literal["row_count_change", "no_partition_emptied", "column_sum", "column_mean"]
Severity = Literal["error", "warn"]
Outcome = Literal["passed", "failed", "warned"]

CONSTRAINT_TYPES: tuple[ConstraintType, ...] = (
    "not_null",
    "unique",
    "accepted_values",
    "expression",
    "row_count",
)
AUDIT_TYPES: tuple[AuditType, ...] = (
    "row_count_change",
    "no_partition_emptied",
    "column_sum",
    "column_mean",
)
ROW_LEVEL = ("not_null", "unique", "accepted_values", "expression")
# Kinds whose write replaces partitions, which is what an audit compares against.
AUDITED_KINDS = ("partition", "table", "tracked")
MAX_SAMPLES = 5


@dataclass(frozen=True)
class Gate:
    """One constraint or audit of an asset."""

    name: str  # the Dagster asset check's name
    family: Literal["constraint", "audit"]
    type: str  # a ConstraintType or an AuditType
    severity: Severity
    columns: tuple[str, ...] = ()  # not_null, unique, accepted_values (one), column_sum/mean
    values: tuple[object, ...] = ()  # accepted_values
    expression: str = ""  # expression
    minimum: int | None = None  # row_count
    maximum: int | None = None  # row_count
    max_change: float | None = None  # row_count_change, column_sum, column_mean

    def describe(self) -> str:
        """What the gate requires, in words."""
        if self.type == "not_null":
            return f"{', '.join(self.columns)} not null"
        if self.type == "unique":
            return f"({', '.join(self.columns)}) unique within the written partitions"
        if self.type == "accepted_values":
            shown = ", ".join(map(repr, self.values))
            return f"{self.columns[0]} in ({shown})"
        if self.type == "expression":
            return self.expression
        if self.type == "row_count":
            return f"rows per written partition in [{self.minimum or 0}, {self.maximum or 'inf'}]"
        if self.type == "row_count_change":
            return f"rows per partition change by at most {self.max_change:.0%}"
        if self.type == "no_partition_emptied":
            return "no partition that had rows is left empty"
        what = "sum" if self.type == "column_sum" else "mean"
        return f"{what} of {self.columns[0]} per partition changes by at most {self.max_change:.0%}"


@dataclass(frozen=True)
class Gates:
    """The gates of one asset."""

    constraints: tuple[Gate, ...] = ()
    audits: tuple[Gate, ...] = ()

    @property
    def all(self) -> tuple[Gate, ...]:
        return self.constraints + self.audits

    def __bool__(self) -> bool:
        return bool(self.constraints or self.audits)


@dataclass(frozen=True)
class GateResult:
    """A gate evaluated on one write: what it found and what happens next."""

    gate: Gate
    passed: bool
    offending: int  # rows (constraints) or partitions (row_count, audits) that violate it
    checked: int  # rows (constraints) or partitions (row_count, audits) looked at
    samples: tuple[Mapping[str, object], ...] = ()  # up to MAX_SAMPLES offending rows/partitions
    failing_partitions: tuple[str, ...] = ()  # Dagster partition keys with a violation

    @property
    def outcome(self) -> Outcome:
        if self.passed:
            return "passed"
        return "warned" if self.gate.severity == "warn" else "failed"

    @property
    def blocks(self) -> bool:
        return self.outcome == "failed"

    def summary(self, *, samples: bool = True) -> str:
        """`constraint non_negative failed: 3 of 200 rows violate 'amount >= 0'` (then, with
        `samples`, the first offending rows)."""
        unit = "rows" if self.gate.type in ROW_LEVEL else "partitions"
        text = (
            f"{self.gate.family} {self.gate.name} {self.outcome}: {self.offending:,} of "
            f"{self.checked:,} {unit} violate '{self.gate.describe()}'"
        )
        if samples and self.samples:
            text += "; " + self.show_samples()
        return text

    def show_samples(self) -> str:
        return f"first {len(self.samples)}: " + "; ".join(_show(s) for s in self.samples)


class GateFailedError(PartlakeError):
    """A gate of severity error failed: nothing was committed."""

    def __init__(self, asset_name: str, failed: Sequence[GateResult]) -> None:
        self.asset_name = asset_name
        self.failed = tuple(failed)
        details = " | ".join(r.summary(samples=False) for r in failed)
        samples = " | ".join(f"{r.gate.name}: {r.show_samples()}" for r in failed if r.samples)
        super().__init__(
            f"quality gate failed on {asset_name}: {details}. Nothing was committed; the table is "
            "as it was. Fix the data or its upstream, or declare the gate with "
            f'"severity": "warn" to commit anyway. Offending: {samples or "-"}'
        )


def gates_of(metadata: Mapping[str, Any], *, asset_name: str, kind: str | None = None) -> Gates:
    """The gates declared in an asset's definition metadata.

    Raises:
        PartlakeConfigError: an entry is malformed, two gates share a name, or audits are
            declared on a kind that replaces no partitions.
    """
    constraints = tuple(
        _constraint(entry, i, asset_name)
        for i, entry in enumerate(_entries(metadata, CONSTRAINTS_KEY, asset_name))
    )
    audits = tuple(
        _audit(entry, i, asset_name)
        for i, entry in enumerate(_entries(metadata, AUDITS_KEY, asset_name))
    )
    if audits and kind is not None and kind not in AUDITED_KINDS:
        raise PartlakeConfigError(
            f"asset {asset_name} of kind {kind} declares {AUDITS_KEY}, but audits compare a "
            f"write with the partitions it replaces, which only kinds {', '.join(AUDITED_KINDS)} "
            f"do; use {CONSTRAINTS_KEY} for this asset."
        )
    seen: set[str] = set()
    for gate in constraints + audits:
        if gate.name in seen:
            raise PartlakeConfigError(
                f"asset {asset_name} has two gates named {gate.name!r}; give one of them a "
                'different "name".'
            )
        seen.add(gate.name)
    return Gates(constraints, audits)


def _entries(metadata: Mapping[str, Any], key: str, asset_name: str) -> list[Mapping[str, Any]]:
    raw = metadata.get(key)
    value = plain(raw)
    if value is None:
        return []
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise PartlakeConfigError(
            f"{key} of asset {asset_name} is {value!r}; give a list of entries such as "
            '[{"not_null": ["id"]}].'
        )
    for entry in value:
        if not isinstance(entry, Mapping):
            raise PartlakeConfigError(
                f"{key} of asset {asset_name} holds {entry!r}; each entry is a mapping such as "
                '{"not_null": ["id"]}.'
            )
    return list(value)


def _split(
    entry: Mapping[str, Any], types: Sequence[str], key: str, asset_name: str
) -> tuple[str, object, Severity, str | None]:
    found = [t for t in types if t in entry]
    extra = set(entry) - set(types) - {"severity", "name"}
    if len(found) != 1 or extra:
        raise PartlakeConfigError(
            f"{key} entry {dict(entry)!r} of asset {asset_name} must name exactly one of "
            f"{', '.join(types)} (plus optional severity and name)."
        )
    severity = entry.get("severity", "error")
    if severity not in ("error", "warn"):
        raise PartlakeConfigError(
            f"{key} entry {dict(entry)!r} of asset {asset_name} has severity {severity!r}; use "
            '"error" (the default: nothing is committed) or "warn" (commit and record).'
        )
    name = entry.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise PartlakeConfigError(
            f"{key} entry {dict(entry)!r} of asset {asset_name} has name {name!r}; use a "
            "non-empty string."
        )
    return found[0], entry[found[0]], severity, name


def _columns(value: object, what: str, asset_name: str) -> tuple[str, ...]:
    columns = [value] if isinstance(value, str) else value
    if (
        not isinstance(columns, Sequence)
        or not columns
        or not all(isinstance(c, str) and c for c in columns)
    ):
        raise PartlakeConfigError(
            f"{what} of asset {asset_name} needs a column name or a list of them, got {value!r}."
        )
    return tuple(columns)


def _constraint(entry: Mapping[str, Any], index: int, asset_name: str) -> Gate:
    kind, value, severity, name = _split(entry, CONSTRAINT_TYPES, CONSTRAINTS_KEY, asset_name)
    where = f"{CONSTRAINTS_KEY} entry {kind}"
    if kind in ("not_null", "unique"):
        columns = _columns(value, where, asset_name)
        return Gate(
            name or _identifier(f"{kind}_{'_'.join(columns)}"),
            "constraint",
            kind,
            severity,
            columns=columns,
        )
    if kind == "accepted_values":
        if (
            not isinstance(value, Mapping)
            or len(value) != 1
            or not isinstance(next(iter(value.values())), Sequence)
            or isinstance(next(iter(value.values())), str)
        ):
            raise PartlakeConfigError(
                f"{where} of asset {asset_name} needs one column and its values, such as "
                f'{{"accepted_values": {{"region": ["eu", "us"]}}}}; got {value!r}.'
            )
        column, values = next(iter(value.items()))
        return Gate(
            name or _identifier(f"accepted_values_{column}"),
            "constraint",
            kind,
            severity,
            columns=(str(column),),
            values=tuple(values),
        )
    if kind == "expression":
        if not isinstance(value, str) or not value.strip():
            raise PartlakeConfigError(
                f"{where} of asset {asset_name} needs a Spark SQL boolean expression such as "
                f'"amount >= 0", got {value!r}.'
            )
        return Gate(
            name or f"expression_{index + 1}", "constraint", kind, severity, expression=value
        )
    # row_count
    if not isinstance(value, Mapping) or not set(value) <= {"min", "max"} or not value:
        raise PartlakeConfigError(
            f"{where} of asset {asset_name} needs min and/or max, such as "
            f'{{"row_count": {{"min": 1, "max": 100000}}}}; got {value!r}.'
        )
    bounds = {k: v for k, v in value.items() if v is not None}
    if not all(isinstance(v, int) and v >= 0 for v in bounds.values()):
        raise PartlakeConfigError(
            f"{where} of asset {asset_name} has bounds {value!r}; use non-negative integers."
        )
    return Gate(
        name or "row_count",
        "constraint",
        kind,
        severity,
        minimum=bounds.get("min"),
        maximum=bounds.get("max"),
    )


def _audit(entry: Mapping[str, Any], index: int, asset_name: str) -> Gate:
    kind, value, severity, name = _split(entry, AUDIT_TYPES, AUDITS_KEY, asset_name)
    where = f"{AUDITS_KEY} entry {kind}"
    if kind == "no_partition_emptied":
        if value is not True:
            raise PartlakeConfigError(
                f"{where} of asset {asset_name} is switched on with true, got {value!r}."
            )
        return Gate(name or kind, "audit", kind, severity)
    allowed = {"max_change"} if kind == "row_count_change" else {"column", "max_change"}
    if not isinstance(value, Mapping) or set(value) != allowed:
        example = (
            '{"max_change": 0.5}'
            if kind == "row_count_change"
            else '{"column": "amount", "max_change": 0.2}'
        )
        raise PartlakeConfigError(
            f"{where} of asset {asset_name} needs {example} (max_change: the largest allowed "
            f"|new - old| / old), got {value!r}."
        )
    change = value["max_change"]
    if not isinstance(change, int | float) or isinstance(change, bool) or change < 0:
        raise PartlakeConfigError(
            f"{where} of asset {asset_name} has max_change {change!r}; use a number >= 0 "
            "(0.5 allows a 50% change)."
        )
    if kind == "row_count_change":
        return Gate(name or kind, "audit", kind, severity, max_change=float(change))
    column = _columns(value["column"], where, asset_name)
    return Gate(
        name or _identifier(f"{kind}_{column[0]}"),
        "audit",
        kind,
        severity,
        columns=column,
        max_change=float(change),
    )


def _identifier(text: str) -> str:
    """A Dagster check name: letters, digits and underscores."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def _show(sample: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in sample.items()) + "}"


def not_null(*columns: str, severity: Severity = "error", name: str | None = None) -> dict:
    """`{"not_null": [...]}` for `partlake/constraints`."""
    return _entry({"not_null": list(columns)}, severity, name)


def unique(*columns: str, severity: Severity = "error", name: str | None = None) -> dict:
    """`{"unique": [...]}` for `partlake/constraints`."""
    return _entry({"unique": list(columns)}, severity, name)


def accepted_values(
    column: str, values: Sequence[object], *, severity: Severity = "error", name: str | None = None
) -> dict:
    """`{"accepted_values": {column: [...]}}` for `partlake/constraints`."""
    return _entry({"accepted_values": {column: list(values)}}, severity, name)


def expression(sql: str, *, name: str, severity: Severity = "error") -> dict:
    """`{"expression": sql, "name": name}` for `partlake/constraints`."""
    return _entry({"expression": sql}, severity, name)


def row_count(
    *, min: int | None = None, max: int | None = None, severity: Severity = "error"
) -> dict:
    """`{"row_count": {"min": .., "max": ..}}` for `partlake/constraints` (per partition)."""
    bounds = {k: v for k, v in (("min", min), ("max", max)) if v is not None}
    return _entry({"row_count": bounds}, severity, None)


def _entry(body: dict, severity: Severity, name: str | None) -> dict:
    if severity != "error":
        body["severity"] = severity
    if name is not None:
        body["name"] = name
    return body


@dataclass(frozen=True)
class GateReport:
    """All gate results of one write."""

    results: tuple[GateResult, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> tuple[GateResult, ...]:
        return tuple(r for r in self.results if r.blocks)
