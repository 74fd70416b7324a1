"""A model kind that does not exist (`partlake/kind: "upsert"`)."""

from __future__ import annotations

from dagster import asset
from pyspark.sql import DataFrame

from tests.bad_settings import DAILY, definitions


@asset(partitions_def=DAILY, metadata={"partlake/kind": "upsert"})
def orders(context) -> DataFrame:  # noqa: ANN001 - never runs
    raise NotImplementedError


defs = definitions([orders])
