"""Schemas across Spark, Arrow and Delta, and the compatibility rule for a write into a table.

Delta type names (from `deltalake.Schema`) are the common language: two columns are compatible
when their Delta types are equal. Nullability is not compared: every column we create is nullable,
since Spark marks almost everything nullable and a NOT NULL column would reject later writes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypeAlias

from dagster_partlake.errors import SchemaMismatchError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

# A column's Delta type as the table's schema JSON holds it: a name like 'long', or an object
# for a nested type (struct, array, map).
DeltaType: TypeAlias = str | dict[str, object]


def spark_to_arrow(schema: StructType) -> pa.Schema:
    """Arrow schema for a Spark schema; Spark timestamps become UTC-aware (Delta `timestamp`)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema, timezone="UTC")
    import pyarrow as pa

    return pa.schema([field.with_nullable(True) for field in arrow])


def arrow_to_spark(schema: pa.Schema) -> StructType:
    """Spark schema for an Arrow schema read from a Delta table."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=False)


def delta_types(schema: pa.Schema) -> dict[str, DeltaType]:
    """Column name -> Delta type (a name like 'long', or a dict for nested types), in order."""
    from deltalake import Schema as DeltaSchema

    fields = json.loads(DeltaSchema.from_arrow(schema).to_json())["fields"]
    return {field["name"]: field["type"] for field in fields}


def merge_for_write(
    table: pa.Schema,
    incoming: pa.Schema,
    *,
    table_name: str,
    allow_new_columns: bool,
) -> pa.Schema:
    """The table schema after writing `incoming`, or SchemaMismatchError if they are incompatible.

    Args:
        table: schema of the existing table.
        incoming: schema of the data to write.
        table_name: used in the error message.
        allow_new_columns: accept columns the table does not have yet (added as nullable).

    Raises:
        SchemaMismatchError: a table column is missing from the data, a type changed, or the data
            has new columns and `allow_new_columns` is false.
    """
    old, new = delta_types(table), delta_types(incoming)
    missing = [name for name in old if name not in new]
    changed = [
        f"{name} ({_show(old[name])} -> {_show(new[name])})"
        for name in old
        if name in new and old[name] != new[name]
    ]
    added = [name for name in new if name not in old]
    problems = []
    if missing:
        problems.append(f"missing columns: {', '.join(missing)}")
    if changed:
        problems.append(f"changed types: {', '.join(changed)}")
    if added and not allow_new_columns:
        problems.append(
            f"new columns: {', '.join(added)} (to add them, set metadata "
            "{'schema_mode': 'add_columns'} on the asset)"
        )
    if problems:
        raise SchemaMismatchError(
            f"data for table {table_name} does not match its schema; {'; '.join(problems)}. "
            "Make the asset return the table's columns and types, or write to a new table."
        )
    by_name = {field.name: field for field in incoming}
    import pyarrow as pa

    return pa.schema([*table, *(by_name[name].with_nullable(True) for name in added)])


def _show(delta_type: DeltaType) -> str:
    return delta_type if isinstance(delta_type, str) else json.dumps(delta_type)
