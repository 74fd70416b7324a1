"""Local Spark start-up with and without the class-data-sharing archive (`spark.cds`).

    make bench-spark-start     (or: .venv/bin/python -m benchmarks.spark_start --repeats 5)

Each repeat starts two fresh processes, one after the other (order alternating): one whose
`SparkResource()` maps the archive, one with `class_data_sharing=False`. Each measures its
session's start and then its first job, a partitioned Parquet write and an aggregation reading it
back (what a partlake run's first step does). The archive is built first if missing. JSON on
stdout and in `--out`: per-repeat seconds, medians, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys, tempfile, time
from dagster_partlake.spark.resource import SparkResource
resource = SparkResource(class_data_sharing=sys.argv[1] == "on")
started = time.perf_counter()
resource._init_session()
session = resource._spark_session
ready = time.perf_counter()
with tempfile.TemporaryDirectory() as scratch:
    rows = session.range(20000).selectExpr("id", "id % 7 as k", "cast(id as double) as v")
    rows.write.partitionBy("k").parquet(scratch + "/t")
    session.read.parquet(scratch + "/t").groupBy("k").sum("v").collect()
done = time.perf_counter()
print(json.dumps({"start": ready - started, "first_job": done - ready}))
"""


def probe(mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "spark_start.json"))
    args = parser.parse_args(argv)

    from dagster_partlake.spark import cds

    path = cds.archive_path()
    assert path is not None, "no java found"
    if not os.path.isfile(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        cds.build(path)
    samples: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    for number in range(args.repeats):
        for mode in ("on", "off") if number % 2 == 0 else ("off", "on"):
            samples[mode].append(probe(mode))
            print(f"[bench-spark-start] {mode}: {samples[mode][-1]}", file=sys.stderr, flush=True)
    median = {
        mode: {k: round(statistics.median(s[k] for s in runs), 2) for k in ("start", "first_job")}
        for mode, runs in samples.items()
    }
    for mode in median:
        median[mode]["total"] = round(median[mode]["start"] + median[mode]["first_job"], 2)
    result = {
        "benchmark": "spark_start",
        "cores": os.cpu_count(),
        "archive": path,
        "archive_bytes": os.path.getsize(path),
        "repeats": args.repeats,
        "samples": {
            m: [{k: round(v, 2) for k, v in s.items()} for s in r] for m, r in samples.items()
        },
        "median_s": median,
        "ratio_on_over_off": {
            k: round(median["on"][k] / median["off"][k], 2) for k in ("start", "first_job", "total")
        },
    }
    text = json.dumps(result, indent=2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
