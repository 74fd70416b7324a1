"""The warm Spark's Python worker daemon: Spark's own (`pyspark.daemon`) with pyarrow imported.

The warm Spark serves many runs, so its workers are not reused (`spark.python.worker.reuse`
false): each task's worker is forked afresh from this daemon, and what one run's code leaves in
a worker's modules never reaches another run's task. Forking from a daemon that has already
imported pyarrow keeps that cheap for partlake's writer, whose workers use it.
"""

from __future__ import annotations

import pyarrow  # noqa: F401
import pyarrow.parquet  # noqa: F401
from pyspark import daemon

if __name__ == "__main__":
    daemon.manager()
