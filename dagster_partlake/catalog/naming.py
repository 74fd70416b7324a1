"""A table's name in the catalog, from its asset key: one rule for writers, sync and the UI."""

from __future__ import annotations

import re
from collections.abc import Sequence

from dagster_partlake.catalog.client import split_name
from dagster_partlake.errors import CatalogError

TABLE_NAME_KEY = "dagster/table_name"  # Dagster's TableMetadataSet.table_name
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


def table_name(key_path: Sequence[str], default_schema: str, explicit: str | None = None) -> str:
    """`schema.table` of the asset whose key is `key_path`: `explicit` (its own
    `dagster/table_name`) if given; else the key's first part is the schema and the rest,
    joined by `_`, the table (`marts/user_activity` -> marts.user_activity); a one-part key
    goes to `default_schema`.

    Raises:
        CatalogError: the name is not `schema.table` of letters, digits and `_`.
    """
    if explicit:
        schema, table = split_name(explicit)
    elif len(key_path) == 1:
        schema, table = default_schema.lower(), key_path[0].lower()
    else:
        schema, table = key_path[0].lower(), "_".join(key_path[1:]).lower()
    for part in (schema, table):
        if not _IDENTIFIER.match(part):
            raise CatalogError(
                f"{schema}.{table} (asset {'/'.join(key_path)}) is not a name the metastore "
                "keeps: use letters, digits and _, not starting with a digit; set the asset's "
                "`dagster/table_name` metadata to another name."
            )
    return f"{schema}.{table}"
