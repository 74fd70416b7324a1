"""Tables by name: partlake's tables registered in a Hive metastore.

`config` holds `LakeCatalog`, the setting a code location names once (on the IO manager);
`naming` the rule from asset key to `schema.table`; `client` the metastore's Thrift API (the
only module that talks to a metastore); `register` what a commit and `partlake catalog sync`
do with it; `metastore` partlake's own metastore service; `sql_server` the SQL endpoint
(Spark's Thrift JDBC/ODBC server) on the same metastore. Planning never imports this folder:
the Delta log stays the truth. May import `spark`, `delta`, `storage` and the base modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.catalog.client import CatalogEntry, Metastore
    from dagster_partlake.catalog.config import LakeCatalog
    from dagster_partlake.catalog.register import Registration

__all__ = ["CatalogEntry", "LakeCatalog", "Metastore", "Registration"]

_LAZY = {
    "CatalogEntry": "dagster_partlake.catalog.client",
    "Metastore": "dagster_partlake.catalog.client",
    "LakeCatalog": "dagster_partlake.catalog.config",
    "Registration": "dagster_partlake.catalog.register",
}
__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
