"""The warm Spark's host: `python -m dagster_partlake.spark.host FOLDER` (see `spark.warm`).

Started detached by the first run that needs it, in FOLDER (its working directory). Reads the
JVM's settings from `conf.json` and the s3a keys from one line of its standard input, starts
the JVM with pyspark's own launcher, writes `state.json` (its pid, the JVM's, the gateway's port
and secret), warms the JVM with a few small jobs while the first run may already use it, and, every
second: forgets attached processes that are gone, touches `active` while one is attached, and,
`idle_seconds` after the last one left, stops. SIGTERM stops it at once. Stopping takes the
folder's lock, so no process attaches to a host on its way out.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dagster_partlake.spark import warm

POLL_SECONDS = 1.0


def main(argv: list[str]) -> int:
    folder = Path(argv[0]).resolve()
    conf = json.loads((folder / warm.CONF).read_text())
    secrets = json.loads(sys.stdin.readline() or "{}")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    session = _start(conf, secrets)
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    assert gateway is not None
    jvm_process = gateway.proc
    started = time.time()
    warm.write_state(
        folder,
        {
            "pid": os.getpid(),
            "jvm_pid": jvm_process.pid if jvm_process is not None else None,
            "port": gateway.java_parameters.port,
            "secret": gateway.java_parameters.auth_token,
            "started": started,
            "idle_seconds": int(conf["idle_seconds"]),
            "master": conf["master"],
            "app_name": conf["app_name"],
        },
    )
    _say(f"ready: {conf['master']}, JVM pid {jvm_process.pid if jvm_process else '?'}")
    (folder / warm.ACTIVE).touch()
    # Warmed while the first run already uses it: its jobs queue behind a few small ones at
    # most, instead of waiting for all of them.
    threading.Thread(target=_warm_up, args=(session, conf), daemon=True).start()
    reason = _serve(folder, int(conf["idle_seconds"]), stopping, jvm_process)
    _say(f"stopping: {reason}")
    try:
        session.stop()
    except Exception as error:  # the JVM is already gone
        _say(f"Spark did not stop cleanly: {error}")
    return 0


def _serve(folder: Path, idle_seconds: int, stopping: threading.Event, jvm: Any) -> str:
    """Wait until the host should stop; why."""
    last_seen = time.time()
    while not stopping.wait(POLL_SECONDS):
        if jvm is not None and jvm.poll() is not None:
            (folder / warm.STATE).unlink(missing_ok=True)
            return f"the JVM exited with code {jvm.returncode}"
        if warm.prune_clients(folder):
            last_seen = time.time()
            (folder / warm.ACTIVE).touch()
            continue
        if time.time() - last_seen < idle_seconds:
            continue
        with warm.locked(folder):
            # Decided under the lock: a process attaching now waits, then finds no host.
            if warm.prune_clients(folder):
                last_seen = time.time()
                continue
            (folder / warm.STATE).unlink(missing_ok=True)
            return f"no run attached for {idle_seconds} s"
    # Whoever sent SIGTERM removed the state file (under the lock) first.
    return "asked to stop (SIGTERM)"


def _start(conf: dict[str, Any], secrets: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    from dagster_partlake.spark.cds import java_options
    from dagster_partlake.spark.storage import apply_hadoop

    launch = {
        # The progress bar would only fill the log.
        "spark.ui.showConsoleProgress": "false",
        # A worker per task, forked from a daemon that has pyarrow: no run's module state
        # reaches another's tasks (`spark.daemon`).
        "spark.python.worker.reuse": "false",
        "spark.python.daemon.module": "dagster_partlake.spark.daemon",
        **conf["launch_conf"],
    }
    if conf.get("class_data_sharing") and conf["master"].startswith("local"):
        jars = [j for j in launch.get("spark.driver.extraClassPath", "").split(os.pathsep) if j]
        options = java_options(extra_jars=jars)
        if options:
            extra = launch.get("spark.driver.extraJavaOptions", "")
            launch["spark.driver.extraJavaOptions"] = f"{extra} {options}".strip()
    builder = SparkSession.builder.master(conf["master"]).appName(conf["app_name"])
    for key, value in launch.items():
        builder = builder.config(key, value)
    began = time.perf_counter()
    for key, value in conf["session_conf"].items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    apply_hadoop(session, secrets)
    _say(f"JVM started in {time.perf_counter() - began:.1f} s")
    return session


def _warm_up(session: Any, conf: dict[str, Any]) -> None:
    """Spark's first jobs, paid here once instead of by the first runs: a partitioned Parquet
    write and read with an aggregation, Arrow batches through Python workers, and a Delta write
    and read when Delta is on the JVM. Small on purpose: on 2 cores it competes with the run
    that started the host."""
    import tempfile

    from dagster_partlake.spark.jars import DELTA_EXTENSION

    began = time.perf_counter()
    try:
        own = session.newSession()
        with tempfile.TemporaryDirectory() as scratch:
            rows = own.range(200).selectExpr(
                "id", "cast(id % 3 as string) as date", "id * 1.5 as v"
            )
            rows.write.partitionBy("date").parquet(f"{scratch}/p")
            read = own.read.parquet(f"{scratch}/p")
            read.groupBy("date").agg({"v": "sum"}).collect()
            read.mapInArrow(_batches, read.schema).count()
            if DELTA_EXTENSION in conf["launch_conf"].get("spark.sql.extensions", ""):
                rows.write.format("delta").save(f"{scratch}/d")
                own.read.format("delta").load(f"{scratch}/d").count()
    except Exception as error:  # only slower first runs
        _say(f"warm-up failed (runs are not affected): {error}")
        return
    _say(f"warmed up in {time.perf_counter() - began:.1f} s")


def _batches(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def _say(text: str) -> None:
    sys.stdout.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} partlake warm Spark: {text}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
