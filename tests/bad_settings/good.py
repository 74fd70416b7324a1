"""A code location whose settings are all fine: it loads."""

from __future__ import annotations

from dagster import AssetIn, asset
from pyspark.sql import DataFrame

from dagster_partlake import partlake_source
from tests.bad_settings import DAILY, definitions

events = partlake_source("events", partitions_def=DAILY)


@asset(
    partitions_def=DAILY,
    ins={"events": AssetIn(metadata={"partlake/incremental": "log"})},
    metadata={
        "partlake/kind": "merge",
        "partlake/unique_key": ["id"],
        "partlake/constraints": [{"not_null": ["id"]}],
        "partlake/fail_if_no_input": True,
    },
)
def users(events: DataFrame) -> DataFrame:
    return events


defs = definitions([events, users])
