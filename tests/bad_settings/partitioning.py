"""`partition_expr` naming a dimension the asset does not have (`day`, not `date`)."""

from __future__ import annotations

from dagster import MultiPartitionsDefinition, StaticPartitionsDefinition, asset
from pyspark.sql import DataFrame

from tests.bad_settings import DAILY, definitions

DAILY_REGION = MultiPartitionsDefinition(
    {"date": DAILY, "region": StaticPartitionsDefinition(["eu", "us"])}
)


@asset(partitions_def=DAILY_REGION, metadata={"partition_expr": {"day": "event_date"}})
def visits(context) -> DataFrame:  # noqa: ANN001 - never runs
    raise NotImplementedError


defs = definitions([visits])
