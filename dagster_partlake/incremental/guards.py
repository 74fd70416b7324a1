"""Run guards: whether a run writes at all (`partlake/fail_if_no_input`, `partlake/conditions`).

Judged after the asset computed its output and before anything is staged, over the run's facts:
the partition keys, the rows each input held (from the Delta log where the read did not count
them), the watermarks read and the run's tags. A condition is a Spark SQL boolean that must hold
for the run to write; when it does not, `fail` fails the run with its description and `skip`
writes nothing but records the inputs as consumed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.metadata import plain

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


FAIL_IF_NO_INPUT_KEY = "partlake/fail_if_no_input"
CONDITIONS_KEY = "partlake/conditions"

Action = Literal["skip", "fail"]


@dataclass(frozen=True)
class Condition:
    """A run guard: a Spark SQL boolean over the run's facts."""

    expression: str
    description: str
    action: Action


@dataclass(frozen=True)
class RunGuards:
    """An asset's run guards, parsed (`guards_of`)."""

    fail_if_no_input: bool = False
    conditions: tuple[Condition, ...] = ()


class RunGuardError(PartlakeError):
    """A run guard stopped the run: nothing was written."""


@dataclass(frozen=True)
class RunFacts:
    """What a run's guards may look at."""

    partition_keys: Sequence[str]
    input_rows: Mapping[str, int]  # input asset -> rows it held this run
    watermarks: Mapping[str, str | None]  # input asset -> the watermark read, if incremental
    run_tags: Mapping[str, str]

    def row(self) -> tuple[str, dict[str, object]]:
        """(Spark DDL schema, values) of the facts as one row."""
        fields = [
            ("partition_key", "string"),
            ("partition_keys", "array<string>"),
            ("input_rows", "bigint"),
            ("run_tags", "map<string,string>"),
        ]
        values: dict[str, object] = {
            "partition_key": self.partition_keys[0] if len(self.partition_keys) == 1 else None,
            "partition_keys": list(self.partition_keys),
            "input_rows": sum(self.input_rows.values()),
            "run_tags": dict(self.run_tags),
        }
        for name, rows in sorted(self.input_rows.items()):
            fields.append((fact_name(name, "rows"), "bigint"))
            values[fact_name(name, "rows")] = rows
        for name, mark in sorted(self.watermarks.items()):
            fields.append((fact_name(name, "watermark"), "string"))
            values[fact_name(name, "watermark")] = mark
        return ", ".join(f"`{n}` {t}" for n, t in fields), values


def fail_if_no_input(metadata: Mapping[str, Any], *, asset_name: str) -> bool:
    """Whether a run with only empty inputs must fail (`partlake/fail_if_no_input`)."""
    value = plain(metadata.get(FAIL_IF_NO_INPUT_KEY, False))
    if not isinstance(value, bool):
        raise PartlakeConfigError(
            f"{FAIL_IF_NO_INPUT_KEY} of asset {asset_name} is {value!r}; use true or false."
        )
    return value


def conditions_of(metadata: Mapping[str, Any], *, asset_name: str) -> tuple[Condition, ...]:
    """The asset's run guards (`partlake/conditions`), in declaration order.

    Raises:
        PartlakeConfigError: an entry is malformed.
    """
    value = plain(metadata.get(CONDITIONS_KEY))
    if value is None:
        return ()
    example = (
        '[{"expression": "input_rows < 1000000", "description": "no more than a day of '
        'events", "action": "fail"}]'
    )
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise PartlakeConfigError(
            f"{CONDITIONS_KEY} of asset {asset_name} is {value!r}; give a list such as {example}."
        )
    conditions = []
    for entry in value:
        if (
            not isinstance(entry, Mapping)
            or not set(entry) <= {"expression", "description", "action"}
            or not isinstance(entry.get("expression"), str)
            or not entry["expression"].strip()
            or entry.get("action", "fail") not in ("skip", "fail")
        ):
            raise PartlakeConfigError(
                f"{CONDITIONS_KEY} entry {entry!r} of asset {asset_name} needs an expression, "
                f'a description and an action "skip" or "fail", such as {example}.'
            )
        conditions.append(
            Condition(
                expression=entry["expression"],
                description=str(entry.get("description") or entry["expression"]),
                action=entry.get("action", "fail"),
            )
        )
    return tuple(conditions)


def guards_of(metadata: Mapping[str, Any], *, asset_name: str) -> RunGuards:
    """The asset's run guards (`partlake/fail_if_no_input`, `partlake/conditions`).

    Raises:
        PartlakeConfigError: either is malformed.
    """
    return RunGuards(
        fail_if_no_input(metadata, asset_name=asset_name),
        conditions_of(metadata, asset_name=asset_name),
    )


def fact_name(input_name: str, fact: str) -> str:
    """The column of a per-input fact: `<input>_rows`, `<input>_watermark`."""
    return re.sub(r"[^A-Za-z0-9_]", "_", f"{input_name}_{fact}")


def judge(
    spark: SparkSession, metadata: Mapping[str, Any], facts: RunFacts, *, asset_name: str
) -> Condition | None:
    """The skip condition that stops this run (None: write as usual), from the asset's
    definition metadata; `judge_guards` with the guards already parsed.

    Raises:
        RunGuardError: `fail_if_no_input` and every input was empty, or a `fail` condition
            does not hold.
        PartlakeConfigError: a guard is malformed, or a condition is not a valid boolean over
            the facts.
    """
    return judge_guards(spark, guards_of(metadata, asset_name=asset_name), facts, asset_name)


def judge_guards(
    spark: SparkSession, guards: RunGuards, facts: RunFacts, asset_name: str
) -> Condition | None:
    """The skip condition of `guards` that stops this run (None: write as usual).

    Raises:
        RunGuardError: `fail_if_no_input` and every input was empty, or a `fail` condition
            does not hold.
        PartlakeConfigError: a condition is not a valid boolean over the facts.
    """
    if guards.fail_if_no_input and facts.input_rows:
        if not any(facts.input_rows.values()):
            raise RunGuardError(
                f"{asset_name} read no rows ({', '.join(f'{n}: 0' for n in facts.input_rows)}) "
                f"and declares {FAIL_IF_NO_INPUT_KEY}; nothing was written. Write the upstream "
                "data first, or drop the flag to let such a run write nothing."
            )
    if not guards.conditions:
        return None
    schema, values = facts.row()
    row = spark.createDataFrame([values], schema)
    for condition in guards.conditions:
        holds = _holds(row, condition, asset_name)
        if holds:
            continue
        if condition.action == "fail":
            raise RunGuardError(
                f"{asset_name}: run condition '{condition.description}' "
                f"({condition.expression}) does not hold; nothing was written."
            )
        return condition
    return None


def _holds(row: DataFrame, condition: Condition, asset_name: str) -> bool:
    from pyspark.errors import AnalysisException, ParseException

    try:
        value = row.selectExpr(f"CAST(({condition.expression}) AS BOOLEAN) AS holds").first()
    except (AnalysisException, ParseException) as error:
        first = str(error).strip().splitlines()[0]
        schema, _ = RunFacts((), {}, {}, {}).row()
        raise PartlakeConfigError(
            f"{CONDITIONS_KEY} of asset {asset_name}: {condition.expression!r} is not a boolean "
            f"over the run's facts ({first}). The facts are {schema}, plus <input>_rows and "
            "<input>_watermark per input."
        ) from error
    return bool(value is not None and value["holds"])
