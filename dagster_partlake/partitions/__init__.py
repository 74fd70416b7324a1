"""Dagster partitions in table terms: keys, dimension columns and partition mappings.

`keys` turns a Dagster partition key into the table partitions that hold it (the dimension
columns, `KeyCodec`, `selection_for_keys`, `validate_keys`); `mappings` turns a Dagster
`PartitionMapping` into two plain functions over keys, which the planner walks; `dimensions`
builds definitions of any number of dimensions (`partlake_partitions`) and the mappings between
them (`partlake_mapping`). May import the
base modules and the storage adapter's `delta.selection` (the table side of a key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.partitions.dimensions import partlake_mapping, partlake_partitions
    from dagster_partlake.partitions.keys import (
        COMBINED,
        DimensionColumn,
        KeyCodec,
        all_keys,
        combined_parts,
        describe_partitions,
        dimension_columns,
        is_dynamic,
        key_dimension_values,
        key_dimensions,
        key_values,
        multi_key,
        partitions_horizon,
        selection_for_keys,
        validate_keys,
    )
    from dagster_partlake.partitions.mappings import key_maps, previous_partition_maps

__all__ = [
    "COMBINED",
    "DimensionColumn",
    "KeyCodec",
    "all_keys",
    "combined_parts",
    "describe_partitions",
    "dimension_columns",
    "is_dynamic",
    "key_dimension_values",
    "key_dimensions",
    "key_maps",
    "key_values",
    "multi_key",
    "partitions_horizon",
    "partlake_mapping",
    "partlake_partitions",
    "previous_partition_maps",
    "selection_for_keys",
    "validate_keys",
]

_LAZY = {
    "COMBINED": "dagster_partlake.partitions.keys",
    "DimensionColumn": "dagster_partlake.partitions.keys",
    "combined_parts": "dagster_partlake.partitions.keys",
    "key_dimension_values": "dagster_partlake.partitions.keys",
    "partlake_mapping": "dagster_partlake.partitions.dimensions",
    "partlake_partitions": "dagster_partlake.partitions.dimensions",
    "KeyCodec": "dagster_partlake.partitions.keys",
    "all_keys": "dagster_partlake.partitions.keys",
    "describe_partitions": "dagster_partlake.partitions.keys",
    "dimension_columns": "dagster_partlake.partitions.keys",
    "is_dynamic": "dagster_partlake.partitions.keys",
    "key_dimensions": "dagster_partlake.partitions.keys",
    "key_values": "dagster_partlake.partitions.keys",
    "multi_key": "dagster_partlake.partitions.keys",
    "partitions_horizon": "dagster_partlake.partitions.keys",
    "selection_for_keys": "dagster_partlake.partitions.keys",
    "validate_keys": "dagster_partlake.partitions.keys",
    "key_maps": "dagster_partlake.partitions.mappings",
    "previous_partition_maps": "dagster_partlake.partitions.mappings",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
