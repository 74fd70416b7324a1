"""Local Spark start-up with and without the class-data-sharing archive (`spark.cds`), and with
and without the fetched JARs (hadoop-aws, the AWS SDK bundle, Delta: `spark.jars`).

    make bench-spark-start     (or: .venv/bin/python -m benchmarks.spark_start --repeats 5)

Each repeat starts one fresh process per mode, one after the other (order rotating): `on` and
`off` map the archive or not (`class_data_sharing`), `+jars` adds the fetched JARs and Delta's
settings (`add_jars`, the default when they were fetched). Each measures its session's start and
then its first job, a partitioned Parquet write and an aggregation reading it back (what a
partlake run's first step does), and the CPU seconds the JVM used until then (steadier than
wall time on a shared machine). The archives are built first if missing. JSON on stdout and in
`--out`: per-repeat samples, medians, and the ratios of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.output import emit

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, os, sys, tempfile, time
from dagster_partlake.spark.resource import SparkResource
resource = SparkResource(class_data_sharing=sys.argv[1] == "on", add_jars=sys.argv[2] == "jars")
started = time.perf_counter()
resource._init_session()
session = resource._spark_session
ready = time.perf_counter()
with tempfile.TemporaryDirectory() as scratch:
    rows = session.range(20000).selectExpr("id", "id % 7 as k", "cast(id as double) as v")
    rows.write.partitionBy("k").parquet(scratch + "/t")
    session.read.parquet(scratch + "/t").groupBy("k").sum("v").collect()
done = time.perf_counter()
jvm = session.sparkContext._gateway.proc.pid
with open(f"/proc/{jvm}/stat") as stat:
    ticks = stat.read().rsplit(") ", 1)[1].split()
cpu = (int(ticks[11]) + int(ticks[12])) / os.sysconf("SC_CLK_TCK")
print(json.dumps({"start": ready - started, "first_job": done - ready, "jvm_cpu": cpu}))
"""
MODES = ("on", "off", "on+jars", "off+jars")
KEYS = ("start", "first_job", "jvm_cpu")


def probe(mode: str) -> dict[str, float]:
    cds_mode, _, jars = mode.partition("+")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, cds_mode, jars or "none"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,  # a session on a shared 2-core machine at load 30 took minutes
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "spark_start.json"))
    args = parser.parse_args(argv)

    from dagster_partlake.spark import cds
    from dagster_partlake.spark.jars import local_jars

    jars = [str(j) for j in local_jars()]
    assert jars, "the JARs were not fetched: run `make install`"
    archives = {}
    for name, extra in (("on", []), ("on+jars", jars)):
        path = cds.archive_path(extra)
        assert path is not None, "no java found"
        if not os.path.isfile(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            cds.build(path, extra, timeout=3600)  # a busy shared machine: minutes
        archives[name] = {"path": path, "bytes": os.path.getsize(path)}
    samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for number in range(args.repeats):
        shift = number % len(MODES)
        for mode in MODES[shift:] + MODES[:shift]:
            samples[mode].append(probe(mode))
            print(f"[bench-spark-start] {mode}: {samples[mode][-1]}", file=sys.stderr, flush=True)
    median = {
        mode: {k: round(statistics.median(s[k] for s in runs), 2) for k in KEYS}
        for mode, runs in samples.items()
    }
    for mode in median:
        median[mode]["total"] = round(median[mode]["start"] + median[mode]["first_job"], 2)
    keys = ("start", "first_job", "total", "jvm_cpu")

    def ratio(a: str, b: str) -> dict[str, float]:
        return {k: round(median[a][k] / median[b][k], 2) for k in keys}

    result = {
        "benchmark": "spark_start",
        "cores": os.cpu_count(),
        "load_average_at_end": os.getloadavg()[0],
        "archives": archives,
        "jars": [os.path.basename(j) for j in jars],
        "repeats": args.repeats,
        "samples": {
            m: [{k: round(v, 2) for k, v in s.items()} for s in r] for m, r in samples.items()
        },
        "median_s": median,
        "ratio_on_over_off": ratio("on", "off"),
        "ratio_on_over_off_with_jars": ratio("on+jars", "off+jars"),
        "ratio_jars_over_none_cds_on": ratio("on+jars", "on"),
        "ratio_jars_over_none_cds_off": ratio("off+jars", "off"),
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
