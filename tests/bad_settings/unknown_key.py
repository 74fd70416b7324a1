"""A misspelt setting (`partlake/uniqe_key`), in a code location without partlake_asset_checks:
the invalidation sensor's asset selection refuses it when Dagster snapshots the code location."""

from __future__ import annotations

from dagster import asset
from pyspark.sql import DataFrame

from tests.bad_settings import DAILY, definitions


@asset(partitions_def=DAILY, metadata={"partlake/kind": "merge", "partlake/uniqe_key": ["id"]})
def accounts(context) -> DataFrame:  # noqa: ANN001 - never runs
    raise NotImplementedError


defs = definitions([accounts], checks=False)
