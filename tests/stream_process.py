"""A run of tests/stream_defs.py's streaming asset `events` that is SIGKILLed around the commit of
one micro-batch, for tests/test_streams.py:

    python -m tests.stream_process LAKE before_commit|after_commit BATCH

`before_commit`: the batch's Parquet files are written (staged) and the process dies before its
Delta commit. `after_commit`: the commit landed and the process dies before Spark records the
batch as done, so the next run replays it. Writes the pid of its JVM to LAKE/jvm.pid first, if
it has one of its own (on the warm Spark, its query dies with its next call into this process).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, materialize

import dagster_partlake.kinds.stream as sink


def main() -> None:
    lake, when, batch = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    os.environ["PARTLAKE_HOME"] = str(lake)
    real_commit = sink.commit

    def commit_and_die(*args: Any, **kwargs: Any) -> Any:
        dies = (kwargs.get("app_transaction") or (None, None))[1] == batch
        if dies and when == "before_commit":
            os.kill(os.getpid(), signal.SIGKILL)
        result = real_commit(*args, **kwargs)
        if dies and when == "after_commit":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    sink.commit = commit_and_die  # type: ignore[assignment]
    from tests.stream_defs import defs, events, landing

    spark = defs.resources["spark"].spark_session
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    if gateway.proc is not None:  # a JVM of its own; on the warm Spark, the host's JVM lives on
        (lake / "jvm.pid").write_text(str(gateway.proc.pid))
    materialize(
        [landing, events],
        selection=[events.key],
        resources=defs.resources,
        instance=DagsterInstance.ephemeral(),
    )


if __name__ == "__main__":
    main()
