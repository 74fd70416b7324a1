"""Spark for partlake: the session resource, its settings and local servers.

Holds `SparkResource` (a dagster-pyspark resource: local, a standalone cluster or Spark
Connect), partlake's Spark settings (`conf`) and the Spark Connect / standalone servers
`partlake spark start` and the tests run on 127.0.0.1 (`server`). May import the base modules
(`errors`) only: nothing here knows about tables or plans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.spark.conf import DEFAULT_CONF
    from dagster_partlake.spark.resource import SparkResource, running_session
    from dagster_partlake.spark.server import (
        ServerInfo,
        start_connect,
        start_standalone,
        status,
        stop,
    )

__all__ = [
    "DEFAULT_CONF",
    "ServerInfo",
    "SparkResource",
    "running_session",
    "start_connect",
    "start_standalone",
    "status",
    "stop",
]

_LAZY = {
    "SparkResource": "dagster_partlake.spark.resource",
    "running_session": "dagster_partlake.spark.resource",
    "DEFAULT_CONF": "dagster_partlake.spark.conf",
    "ServerInfo": "dagster_partlake.spark.server",
    "start_connect": "dagster_partlake.spark.server",
    "start_standalone": "dagster_partlake.spark.server",
    "status": "dagster_partlake.spark.server",
    "stop": "dagster_partlake.spark.server",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
