"""A quality gate with a severity that does not exist."""

from __future__ import annotations

from dagster import asset
from pyspark.sql import DataFrame

from tests.bad_settings import DAILY, definitions


@asset(
    partitions_def=DAILY,
    metadata={"partlake/constraints": [{"not_null": ["id"], "severity": "fatal"}]},
)
def payments(context) -> DataFrame:  # noqa: ANN001 - never runs
    raise NotImplementedError


defs = definitions([payments])
