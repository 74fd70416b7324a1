"""An incremental input in a form partlake does not know (`"logs"`)."""

from __future__ import annotations

from dagster import AssetIn, asset
from pyspark.sql import DataFrame

from dagster_partlake import partlake_source
from tests.bad_settings import DAILY, definitions

clicks = partlake_source("clicks", partitions_def=DAILY)


@asset(partitions_def=DAILY, ins={"clicks": AssetIn(metadata={"partlake/incremental": "logs"})})
def sessions(clicks: DataFrame) -> DataFrame:
    return clicks


defs = definitions([clicks, sessions])
