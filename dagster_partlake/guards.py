"""Run guards: whether a run writes at all (`partlake/fail_if_no_input`, `partlake/conditions`).

Judged after the asset computed its output and before anything is staged, over the run's facts:
the partition keys, the rows each input held (from the Delta log where the read did not count
them), the watermarks read and the run's tags. A condition is a Spark SQL boolean that must hold
for the run to write; when it does not, `fail` fails the run with its description and `skip`
writes nothing but records the inputs as consumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_partlake.errors import PartlakeConfigError, PartlakeError
from dagster_partlake.incremental import (
    CONDITIONS_KEY,
    FAIL_IF_NO_INPUT_KEY,
    Condition,
    conditions_of,
    fact_name,
    fail_if_no_input,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class RunGuardError(PartlakeError):
    """A run guard stopped the run: nothing was written."""


@dataclass(frozen=True)
class RunFacts:
    """What a run's guards may look at."""

    partition_keys: Sequence[str]
    input_rows: Mapping[str, int]  # input asset -> rows it held this run
    watermarks: Mapping[str, str | None]  # input asset -> the watermark read, if incremental
    run_tags: Mapping[str, str]

    def row(self) -> tuple[str, dict[str, Any]]:
        """(Spark DDL schema, values) of the facts as one row."""
        fields = [
            ("partition_key", "string"),
            ("partition_keys", "array<string>"),
            ("input_rows", "bigint"),
            ("run_tags", "map<string,string>"),
        ]
        values: dict[str, Any] = {
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


def judge(
    spark: SparkSession, metadata: Mapping[str, Any], facts: RunFacts, *, asset_name: str
) -> Condition | None:
    """The skip condition that stops this run (None: write as usual).

    Raises:
        RunGuardError: `fail_if_no_input` and every input was empty, or a `fail` condition
            does not hold.
        PartlakeConfigError: a condition is not a valid boolean over the facts.
    """
    if fail_if_no_input(metadata, asset_name=asset_name) and facts.input_rows:
        if not any(facts.input_rows.values()):
            raise RunGuardError(
                f"{asset_name} read no rows ({', '.join(f'{n}: 0' for n in facts.input_rows)}) "
                f"and declares {FAIL_IF_NO_INPUT_KEY}; nothing was written. Write the upstream "
                "data first, or drop the flag to let such a run write nothing."
            )
    conditions = conditions_of(metadata, asset_name=asset_name)
    if not conditions:
        return None
    schema, values = facts.row()
    row = spark.createDataFrame([values], schema)
    for condition in conditions:
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


def _holds(row: Any, condition: Condition, asset_name: str) -> bool:
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
