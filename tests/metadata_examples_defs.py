"""A code location carrying the example of every metadata key (`SETTINGS`, the Metadata keys
page): each example on an asset, source or input it fits, checked by `partlake_asset_checks`
while the module loads, as any code location's settings are. `PLACED` says where each key went;
tests/test_metadata_page.py checks it names every key."""

from __future__ import annotations

from typing import Any

import dagster as dg

from dagster_partlake import (
    DeltaPartitionIOManager,
    SparkResource,
    partlake_asset_checks,
    partlake_source,
)
from dagster_partlake.spec.settings import SETTINGS

EXAMPLE = {s.key: s.example for s in SETTINGS}
PLACED: dict[str, list[str]] = {}  # key -> where its example went


def _examples(owner: str, *keys: str, **given: Any) -> dict[str, Any]:
    """The examples of `keys` as metadata of `owner`, with what else it needs (`given`)."""
    for key in keys:
        PLACED.setdefault(key, []).append(owner)
    return {**given, **{key: EXAMPLE[key] for key in keys}}


days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
daily_region = dg.MultiPartitionsDefinition(
    {"date": days, "region": dg.StaticPartitionsDefinition(["eu", "us"])}
)

orders = partlake_source("orders", partitions_def=daily_region)
landing = partlake_source(
    "landing",
    partitions_def=days,
    metadata=_examples("landing", "partlake/format", "partlake/path", "partlake/after_commit"),
)
remote_orders = partlake_source(
    "remote_orders", partitions_def=days, metadata=_examples("remote_orders", "partlake/root")
)
shop_orders = partlake_source(
    "shop_orders",
    partitions_def=days,
    metadata=_examples("shop_orders", "partlake/postgres", **{"partlake/format": "postgres"}),
)
clicks = partlake_source(
    "clicks", metadata=_examples("clicks", "partlake/kafka", **{"partlake/format": "kafka"})
)


@dg.asset(
    partitions_def=daily_region,
    ins={"orders": dg.AssetIn(metadata=_examples("input orders", "partlake/incremental"))},
    metadata=_examples(
        "clean_orders",
        "partition_expr",
        "schema_mode",
        "partlake/constraints",
        "partlake/audits",
        "partlake/incremental",
        "partlake/fail_if_no_input",
        "partlake/conditions",
        "partlake/writer",
        "partlake/sql_path",
        "partlake/retention",
    ),
)
def clean_orders(orders):  # noqa: ANN001, ANN201 - never run: only loaded
    return orders


@dg.asset(
    metadata=_examples(
        "order_history", "partlake/kind", "partlake/unique_key", "partlake/partition_by"
    )
)
def order_history(clean_orders):  # noqa: ANN001, ANN201
    return clean_orders


@dg.asset(metadata=_examples("click_events", "partlake/stream"))
def click_events(clicks):  # noqa: ANN001, ANN201
    return clicks


@dg.asset(
    ins={
        "order_history": dg.AssetIn(metadata=_examples("input order_history", "partlake/version")),
        "click_events": dg.AssetIn(metadata=_examples("input click_events", "partlake/timestamp")),
    }
)
def pinned(order_history, click_events):  # noqa: ANN001, ANN201
    return order_history


spark = SparkResource(master="local[1]")
assets = [
    orders,
    landing,
    remote_orders,
    shop_orders,
    clicks,
    clean_orders,
    order_history,
    click_events,
    pinned,
]
defs = dg.Definitions(
    assets=assets,
    asset_checks=partlake_asset_checks(assets),  # every asset's settings checked at load
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
)
