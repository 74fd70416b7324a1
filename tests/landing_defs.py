"""A landing folder consumed once by an append asset, for tests/test_landing.py and its crash
process (tests/landing_process.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import AssetsDefinition, asset
from pyspark.sql import DataFrame

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    model_kind_metadata,
    partlake_source,
)


def landing_assets(after_commit: str) -> list[Any]:
    landing = partlake_source("landing", folder=True, after_commit=after_commit)  # type: ignore[arg-type]

    @asset(metadata=model_kind_metadata("append"))
    def arrivals(landing: DataFrame) -> DataFrame:
        return landing.select("id", "name")

    return [landing, arrivals]


def consumer(assets: list[Any]) -> AssetsDefinition:
    return assets[1]


def resources(lake: Path) -> dict[str, Any]:
    spark = SparkResource(master="local[1]")
    return {"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake))}


def drop_file(lake: Path, name: str, ids: range) -> str:
    """Another system drops a Parquet file into the landing folder; returns its path."""
    folder = lake / "warehouse" / "landing"
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / name)
    table = pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]})
    pq.write_table(table, path + ".tmp")
    os.replace(path + ".tmp", path)  # appears whole, as a landing system should drop files
    return path
