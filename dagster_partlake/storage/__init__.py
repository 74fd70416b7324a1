"""Where tables live: `TableLocation` (a URI and its storage options) and its `Store`.

The floor under the storage adapter and the Spark resource: imports only the base modules. The
one place that turns a table into a path or URI for Spark, delta-rs or Arrow (`location`), maps
storage options to each engine (`options`), reads and deletes files (`store`) and explains an
object store's failures (`errors`).
"""

from __future__ import annotations

from dagster_partlake.storage.location import TableLocation, as_location

__all__ = ["TableLocation", "as_location"]
