"""Where the example's lake lives, for the demo's source systems and its IO manager.

`$PARTLAKE_LAKE_ROOT` when set (a path, `file://...` or an object store URI such as
`s3://lake/demo`; `make demo-s3` sets it, with the AWS variables of the local S3 server), else
the default: `$PARTLAKE_HOME` on local disk. Credentials come from the standard environment
variables (`AWS_ACCESS_KEY_ID`, ...), as they do for the IO manager and the Spark resource.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from dagster_partlake.storage.location import TableLocation, table_location

LAKE_ROOT_ENV = "PARTLAKE_LAKE_ROOT"


def lake_root() -> str | None:
    """The example's lake root, None for the default (`$PARTLAKE_HOME`)."""
    return os.environ.get(LAKE_ROOT_ENV) or None


def table(parts: Sequence[str], root: str | None = None) -> TableLocation:
    """The location of the example table `parts` (an asset key's path) under `root`, else
    under the example's lake."""
    return table_location(root if root is not None else lake_root(), list(parts))
