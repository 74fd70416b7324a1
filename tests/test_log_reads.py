"""One read of the log per write: each kind family's write of a new partition loads its table's
log once, never lists it, and afterwards reads only its own commit (to learn its version).

Real Dagster runs through `DeltaPartitionIOManager` on local Spark and real Delta tables; the
reads are counted where they happen (`tests.log_reads`: delta-rs loads and follows, listings and
file opens under `_delta_log`), not by partlake's own bookkeeping.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DailyPartitionsDefinition, asset, materialize
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source
from dagster_partlake.gates.spec import not_null
from dagster_partlake.kinds.spec import model_kind_metadata
from dagster_partlake.storage.location import table_path
from tests.log_reads import counting_log_reads
from tests.test_kinds import write_changes

pytestmark = pytest.mark.spark

daily = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
changes = partlake_source("changes", partitions_def=daily)


@asset(partitions_def=daily, code_version="1", metadata={"partlake/constraints": [not_null("id")]})
def replaced(changes: DataFrame) -> DataFrame:
    return changes.select("date", "id", "score")


@asset(partitions_def=daily, code_version="1", metadata=model_kind_metadata("append"))
def appended(changes: DataFrame) -> DataFrame:
    return changes.select("date", "id", "name")


@asset(
    partitions_def=daily, code_version="1", metadata=model_kind_metadata("merge", unique_key=["id"])
)
def merged(changes: DataFrame) -> DataFrame:
    return changes.select("date", "id", "name", "score")


@pytest.mark.parametrize("model", [replaced, appended, merged], ids=lambda a: a.key.path[-1])
def test_a_write_reads_its_log_once(spark, lake: Path, instance, model) -> None:
    resources = {
        "spark": SparkResource(),
        "io_manager": DeltaPartitionIOManager(root=str(lake)),
    }
    for day in ("2024-01-01", "2024-01-02"):
        write_changes(spark, lake, day, [(1, "a", 10), (2, "b", 20)])
    first = materialize(
        [changes, model],
        partition_key="2024-01-01",
        resources=resources,
        instance=instance,
        selection=[model.key],
    )
    assert first.success
    table = table_path(str(lake), model.key.path)
    with counting_log_reads(table) as reads:
        second = materialize(
            [changes, model],
            partition_key="2024-01-02",
            resources=resources,
            instance=instance,
            selection=[model.key],
        )
    assert second.success
    # The table's log loaded once (the write's snapshot), never listed, never followed; then
    # the commit's own file read once to learn its version, and nothing else of the log.
    assert (reads["load"], reads["list"], reads["follow"]) == (1, 0, 0), dict(reads)
    assert reads["commit"] <= (2 if model is merged else 1), dict(reads)
