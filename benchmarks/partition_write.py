"""One small asset partition: partlake's write vs a hand-written delta-spark `replaceWhere`.

    .venv/bin/python -m benchmarks.partition_write [--sizes 200 20000] [--rounds 10]
        [--warmup 3] [--writer-rounds 10] [--spark-conf KEY=VALUE ...] [--event-log DIR]
        [--out benchmarks/out/partition_write.json]

In ONE process, on ONE warm local Spark session (Delta's JARs on it, as `SparkResource` puts
them), for each size a partition of the example's `raw_events` (daily x region) is cleaned into
a `clean_events`-like table (`definitions.assets.clean`) by three sides, interleaved round by
round in an order that rotates per round:

- `partlake_off`: `dagster.materialize` of one partition of an asset without gates, through
  `DeltaPartitionIOManager` (partlake's writer), on one ephemeral Dagster instance;
- `partlake_on`: the same with the example's `clean_events` constraints (not_null, unique,
  accepted_values, an expression, row_count);
- `spark`: the hand-written job on the same session: `spark.read.format("delta")` of the
  raw_events partition, the same `clean`, `df.write.format("delta").mode("overwrite")
  .option("replaceWhere", "date = '...' AND region = '...'").save(path)`.

Timed for partlake: the IO manager's `load_input`, the asset's function and `handle_output`
(the Spark job, the gates, the commit, the commit record, the materialization metadata and the
gates' asset check evaluations), not Dagster's run around them (reported apart as
`dagster_run_seconds`). Timed for the hand-written job: the read (a DataFrame over the
partition) and `save`. Phases: partlake's from its `partlake/*_seconds` materialization
metadata; the hand-written job's `save` is split by the files' modification times (the last
data file written, the commit file written, then what Delta does after its commit).

Untimed first: `--warmup` rounds of every side. Ratios: partlake / spark per round, median over
the rounds (and the ratio of the medians). The target (not a test): both ratios <= 1.2.

Then, per size, the file writers alone on the same cleaned rows, cached (`--writer-rounds`,
interleaved): partlake's `write_files` (Spark's Python workers, returning each file's facts)
against Spark's own Parquet writer (no facts, through `_temporary`). `--spark-conf` changes the
one session for every side (e.g. `spark.databricks.delta.snapshotPartitions=1`, the hand-written
job at its best); `--event-log` keeps Spark's event log, each job named by its side and round.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, asset, materialize
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from benchmarks.output import emit
from benchmarks.workload import load_average
from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source
from definitions.assets import clean
from definitions.ingest import write_partition
from definitions.partitions import REGIONS, daily_region

TARGET_RATIO = 1.2
SIDES = ("partlake_off", "partlake_on", "spark")
# Size -> the raw_events partition it reads (one partition per size, rewritten every round).
DATES = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
REGION = "eu"

# Dagster's console logger says only warnings (its debug lines would bury the progress lines).
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# Filled by the timed IO manager and asset: seconds of the current materialization's parts.
_TIMED: dict[str, float] = {}


def _session(extra: dict[str, str]) -> Any:
    """The one local session, built as `SparkResource` builds a local one (its conf: defaults,
    the fetched JARs, Delta; then `extra`), started here so no run's resource owns (and stops)
    it."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = SparkResource(master="local[2]").effective_conf()
    assert "io.delta.sql.DeltaSparkSessionExtension" in conf.get("spark.sql.extensions", ""), (
        "Delta's JARs are not fetched: run `make jars`"
    )
    builder = SparkSession.builder.master("local[2]").appName("partlake-partition-write")
    quiet = {"spark.ui.showConsoleProgress": "false"}
    for key, value in {**conf, **quiet, **extra}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


class TimedIOManager(DeltaPartitionIOManager):
    """partlake's IO manager, its two calls timed."""

    def load_input(self, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return super().load_input(context)
        finally:
            _TIMED["load_input"] = time.perf_counter() - started

    def handle_output(self, context: Any, obj: Any) -> None:
        started = time.perf_counter()
        try:
            super().handle_output(context, obj)
        finally:
            _TIMED["handle_output"] = time.perf_counter() - started


raw_events = partlake_source("raw_events", partitions_def=daily_region)


@asset(partitions_def=daily_region, code_version="1")
def clean_events_off(raw_events: DataFrame) -> DataFrame:
    started = time.perf_counter()
    df = clean(raw_events)
    _TIMED["asset"] = time.perf_counter() - started
    return df


@asset(
    partitions_def=daily_region,
    code_version="1",
    metadata={
        "partlake/constraints": [  # the example's clean_events
            {"not_null": ["user_id", "event_id"]},
            {"unique": ["event_id"]},
            {"accepted_values": {"region": list(REGIONS)}},
            {"expression": "amount >= 0", "name": "non_negative"},
            {"row_count": {"min": 1}},
        ]
    },
)
def clean_events_on(raw_events: DataFrame) -> DataFrame:
    started = time.perf_counter()
    df = clean(raw_events)
    _TIMED["asset"] = time.perf_counter() - started
    return df


ASSETS = {"partlake_off": clean_events_off, "partlake_on": clean_events_on}


def _partlake(which: str, key: str, resources: dict, instance: Any) -> dict:
    """One materialization of one partition; partlake's part and its phases."""
    _TIMED.clear()
    target = ASSETS[which]
    started = time.perf_counter()
    result = materialize(
        [raw_events, target],
        selection=[target.key],
        partition_key=key,
        resources=resources,
        instance=instance,
        run_config=QUIET,
    )
    run = time.perf_counter() - started
    assert result.success
    (event,) = result.asset_materializations_for_node(target.key.path[-1])
    meta = {k: v.value for k, v in event.metadata.items()}

    def m(name: str) -> float:
        return float(meta.get(f"partlake/{name}_seconds", 0.0) or 0.0)

    read = _TIMED["load_input"]
    output = _TIMED["handle_output"]
    total = read + _TIMED["asset"] + output
    write = m("write")
    stage = m("stage") + m("staged_files")
    phases = {
        "read_inputs": read,
        "asset_function": _TIMED["asset"],
        "open_and_check": write - stage - m("gates") - m("commit"),
        "write_files": stage,
        "gates": m("gates"),
        "commit": m("commit"),
        "record_and_metadata": output - write,
    }
    return {
        "seconds": total,
        "dagster_run_seconds": run - total,
        "rows": int(meta["dagster/row_count"]),
        "phases": phases,
    }


def _spark(spark: Any, raw: str, out: str, date: str) -> dict:
    """The hand-written job: read the partition, clean it, overwrite it with replaceWhere."""
    started = time.perf_counter()
    src = (
        spark.read.format("delta")
        .load(raw)
        .where((F.col("date") == F.lit(date).cast("date")) & (F.col("region") == REGION))
    )
    df = clean(src)
    read = time.perf_counter() - started
    wall = time.time()
    saving = time.perf_counter()
    (
        df.write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", f"date = '{date}' AND region = '{REGION}'")
        .partitionBy("date", "region")
        .save(out)
    )
    save = time.perf_counter() - saving
    files_done, committed, rows = _landed(out)
    write_files = max(0.0, min(save, files_done - wall))
    commit = max(0.0, min(save - write_files, committed - files_done))
    return {
        "seconds": read + save,
        "rows": rows,
        "phases": {
            "read_inputs": read,
            "write_files": write_files,
            "commit": commit,
            "after_commit": save - write_files - commit,
        },
    }


def _landed(table: str) -> tuple[float, float, int]:
    """The newest commit of a Delta table: when its last data file and its commit file were
    written (epoch seconds), and the rows it added."""
    log = Path(table) / "_delta_log"
    newest = max(log.glob("*.json"), key=lambda p: int(p.stem))
    actions = [json.loads(line) for line in newest.read_text().splitlines() if line]
    adds = [a["add"] for a in actions if "add" in a]
    files = max((os.stat(Path(table) / a["path"]).st_mtime for a in adds), default=0.0)
    rows = sum(json.loads(a["stats"])["numRecords"] for a in adds if a.get("stats"))
    return files, os.stat(newest).st_mtime, rows


def _writers(spark: Any, raw: str, work: str, date: str, rounds: int) -> dict[str, Any]:
    """The file writers alone, on the same cleaned rows (cached in one partition, so a job is
    one task writing one file), interleaved: partlake's (`delta.files.write_files`: Spark's
    Python workers, each file's facts returned) and Spark's own Parquet writer (`partitionBy`,
    through `_temporary`, no facts). Medians of `rounds`, after one untimed write each."""
    from dagster_partlake.delta.files import write_files
    from dagster_partlake.delta.schema import spark_to_arrow
    from dagster_partlake.storage.location import TableLocation

    rows = clean(
        spark.read.format("delta")
        .load(raw)
        .where((F.col("date") == F.lit(date).cast("date")) & (F.col("region") == REGION))
    )
    rows = rows.select(*[c for c in rows.columns if c not in ("date", "region")], "date", "region")
    # One partition, as Spark plans such a partition's write (a cache keeps its partitioning).
    rows = rows.coalesce(1).cache()
    rows.count()
    schema = spark_to_arrow(rows.schema)
    location = TableLocation.parse(os.path.join(work, "writers", date, "python"))
    folder = os.path.join(work, "writers", date, "spark")
    times: dict[str, list[float]] = {"python_workers": [], "spark_parquet_writer": []}
    for n in range(rounds + 1):
        started = time.perf_counter()
        write_files(rows, location, partition_by=["date", "region"], schema=schema)
        python = time.perf_counter() - started
        started = time.perf_counter()
        rows.write.mode("append").partitionBy("date", "region").parquet(folder)
        jvm = time.perf_counter() - started
        if n:
            times["python_workers"].append(python)
            times["spark_parquet_writer"].append(jvm)
    rows.unpersist()
    return {k: round(statistics.median(v), 4) for k, v in times.items()}


def _source(work: str, sizes: list[int]) -> str:
    """raw_events with one partition per size, written as an upstream system does."""
    for size, date in zip(sizes, DATES, strict=False):
        root = write_partition(dt.date.fromisoformat(date), REGION, rows=size, root=work)
    return root


def _median_phases(samples: list[dict]) -> dict[str, float]:
    names = list(samples[0]["phases"])
    return {n: round(statistics.median(s["phases"][n] for s in samples), 4) for n in names}


def _summary(size: int, samples: dict[str, list[dict]]) -> dict[str, Any]:
    medians = {s: statistics.median(x["seconds"] for x in samples[s]) for s in SIDES}
    ratios: dict[str, Any] = {}
    for side, label in (("partlake_off", "gates_off"), ("partlake_on", "gates_on")):
        per_round = [
            p["seconds"] / h["seconds"]
            for p, h in zip(samples[side], samples["spark"], strict=True)
        ]
        median = statistics.median(per_round)
        ratios[label] = {
            "median_of_round_ratios": round(median, 3),
            "ratio_of_medians": round(medians[side] / medians["spark"], 3),
            "met": median <= TARGET_RATIO,
        }
    return {
        "rows": samples["spark"][0]["rows"],
        "median_seconds": {s: round(v, 4) for s, v in medians.items()},
        "ratios": ratios,
        "phases": {s: _median_phases(samples[s]) for s in SIDES},
        "dagster_run_seconds": {
            s: round(statistics.median(x["dagster_run_seconds"] for x in samples[s]), 4)
            for s in ("partlake_off", "partlake_on")
        },
        "samples": {
            s: [
                {
                    "seconds": round(x["seconds"], 4),
                    "phases": {k: round(v, 4) for k, v in x["phases"].items()},
                }
                for x in samples[s]
            ]
            for s in SIDES
        },
    }


def _table(size: int, summary: dict[str, Any]) -> str:
    """The phase table of one size, as the docs show it."""
    lines = [f"{size} rows in ({summary['rows']} out): median seconds per phase"]
    names: list[str] = []
    for side in SIDES:
        names += [n for n in summary["phases"][side] if n not in names]
    lines.append("| phase | " + " | ".join(SIDES) + " |")
    lines.append("| --- |" + " ---: |" * len(SIDES))
    for name in names:
        cells = [summary["phases"][s].get(name) for s in SIDES]
        lines.append(
            f"| {name} | " + " | ".join("" if c is None else f"{c:.3f}" for c in cells) + " |"
        )
    lines.append(
        "| **total** | "
        + " | ".join(f"**{summary['median_seconds'][s]:.3f}**" for s in SIDES)
        + " |"
    )
    r = summary["ratios"]
    lines.append(
        f"partlake/spark: gates off {r['gates_off']['median_of_round_ratios']}, "
        f"gates on {r['gates_on']['median_of_round_ratios']} (target <= {TARGET_RATIO})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 20_000])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--writer-rounds",
        type=int,
        default=10,
        help="rounds of the file writers alone (partlake's vs Spark's Parquet writer)",
    )
    parser.add_argument("--work", default="/tmp/partlake_partition_write_bench")
    parser.add_argument("--out", default="benchmarks/out/partition_write.json")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the one session, for both sides (repeatable)",
    )
    parser.add_argument(
        "--event-log", metavar="DIR", help="write Spark's event log (uncompressed) into DIR"
    )
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.spark_conf)
    if args.event_log:
        os.makedirs(args.event_log, exist_ok=True)
        extra.update(
            {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": Path(args.event_log).resolve().as_uri(),
                "spark.eventLog.compress": "false",
            }
        )
    if len(args.sizes) > len(DATES):
        parser.error(f"at most {len(DATES)} sizes")

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    load_before = load_average()
    started = time.perf_counter()
    spark = _session(extra)
    raw = _source(args.work, args.sizes)
    spark_table = os.path.join(args.work, "warehouse", "clean_events_spark")
    spark_resource = SparkResource(master="local[2]")
    resources = {
        "spark": spark_resource,
        "io_manager": TimedIOManager(spark=spark_resource, root=args.work),
    }
    samples: dict[int, dict[str, list[dict]]] = {s: {k: [] for k in SIDES} for s in args.sizes}

    with DagsterInstance.ephemeral() as instance:
        cases: dict[str, Callable[[int, str], dict]] = {
            "partlake_off": lambda _s, d: _partlake(
                "partlake_off", f"{d}|{REGION}", resources, instance
            ),
            "partlake_on": lambda _s, d: _partlake(
                "partlake_on", f"{d}|{REGION}", resources, instance
            ),
            "spark": lambda _s, d: _spark(spark, raw, spark_table, d),
        }
        for n in range(args.warmup + args.rounds):
            timed = n >= args.warmup
            for size, date in zip(args.sizes, DATES, strict=False):
                shift = n % len(SIDES)
                for side in SIDES[shift:] + SIDES[:shift]:
                    # Names the side's jobs in Spark's event log (`--event-log`).
                    spark.sparkContext.setJobDescription(f"{side} {size} round {n + 1}")
                    sample = cases[side](size, date)
                    if timed:
                        samples[size][side].append(sample)
                print(
                    f"{'round' if timed else 'warm-up'} {n + 1 - (args.warmup if timed else 0)}"
                    f" {size} rows: "
                    + ", ".join(
                        f"{s} {samples[size][s][-1]['seconds']:.3f}"
                        for s in SIDES
                        if timed and samples[size][s]
                    ),
                    file=sys.stderr,
                )
    for size in args.sizes:
        rows = {s: samples[size][s][0]["rows"] for s in SIDES}
        assert len(set(rows.values())) == 1, f"the sides wrote different rows: {rows}"
    summaries = {str(s): _summary(s, samples[s]) for s in args.sizes}
    for size, date in zip(args.sizes, DATES, strict=False):
        spark.sparkContext.setJobDescription(f"writers {size}")
        summaries[str(size)]["writers_alone"] = _writers(
            spark, raw, args.work, date, args.writer_rounds
        )
        print(
            f"{size} rows, the writers alone: {summaries[str(size)]['writers_alone']}",
            file=sys.stderr,
        )
    for size in args.sizes:
        print("\n" + _table(size, summaries[str(size)]), file=sys.stderr)
    result = {
        "benchmark": "partition_write",
        "what": (
            "seconds per asset partition on one warm local Spark session: partlake = the IO "
            "manager's load_input + the asset's function + handle_output (Spark job, gates, "
            "delta-rs commit, commit record, metadata, check evaluations), Dagster's run "
            "around them excluded (dagster_run_seconds); spark = spark.read.format('delta') "
            "of the partition + the same transformation + df.write.format('delta')"
            ".mode('overwrite').option('replaceWhere', ...).save(path)"
        ),
        "target_ratio": TARGET_RATIO,
        "sizes": summaries,
        "spark_conf": extra,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup,
        "seconds_total": round(time.perf_counter() - started, 1),
        "load_average": {"before": load_before, "after": load_average()},
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    spark.stop()
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
