"""What tables by name cost: registering on a first commit and on later ones, and the no-change
plan and no-op `partlake run` of a code location with and without a catalog.

    make bench-catalog      (or: .venv/bin/python -m benchmarks.catalog --repeats 5)

In a temporary lake home: partlake's own metastore (embedded Derby) on a free port; `--tables`
small Delta tables written by delta-rs. `register_first` times `register()` of each new table
(the metastore entry created), `register_later` the step a later commit takes for a table already
registered (`after_commit`: one connection, the entry read, the table's schema read from its log,
compared; nothing written), `metastore_start` partlake's own metastore starting on a first commit.

Then a code location of two daily assets, written once by `partlake run` with the catalog: each
repeat times, in an order that rotates, `partlake plan` and `partlake run` (nothing stale) of the
same lake through a module without a catalog and one with it, while the metastore is STOPPED:
the plan and the no-op run must succeed and say the same as without a catalog, which shows they
make no metastore call (one would fail or wait). Medians and the per-repeat ratio with/without.
JSON on stdout and in `--out`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.output import emit

REPO = Path(__file__).resolve().parents[1]

MODULE = """
import dagster as dg
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, LakeCatalog, SparkResource

days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-08")
one_run = dg.BackfillPolicy.single_run()


@dg.asset(partitions_def=days, backfill_policy=one_run)
def visits(context: dg.AssetExecutionContext, spark: SparkResource) -> DataFrame:
    rows = [(d, i) for d in context.partition_keys for i in range(10)]
    return spark.spark_session.createDataFrame(rows, "date string, n long")


@dg.asset(partitions_def=days, backfill_policy=one_run)
def visit_counts(visits: DataFrame) -> DataFrame:
    return visits.groupBy("date").count()


spark = SparkResource(master="local[1]")
defs = dg.Definitions(
    assets=[visits, visit_counts],
    resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark{catalog})},
    executor=dg.in_process_executor,
)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _registration(home: str, tables: int, repeats: int) -> dict[str, object]:
    import pyarrow as pa
    from deltalake import write_deltalake

    from dagster_partlake.catalog.config import LakeCatalog
    from dagster_partlake.catalog.register import after_commit, register
    from dagster_partlake.storage import TableLocation

    os.environ["PARTLAKE_HOME"] = home
    catalog = LakeCatalog(port=_free_port())
    started = time.perf_counter()
    catalog.connect(start=True).close()
    start_seconds = time.perf_counter() - started
    locations = []
    for i in range(tables):
        where = os.path.join(home, "warehouse", f"t{i}")
        write_deltalake(
            where, pa.table({"date": ["2024-01-01"] * 3, "n": [1, 2, 3]}), partition_by=["date"]
        )
        locations.append(TableLocation.parse(where))
    first = []
    with catalog.connect() as metastore:
        for i, location in enumerate(locations):
            began = time.perf_counter()
            assert register(metastore, f"lake.t{i}", location).outcome == "registered"
            first.append(time.perf_counter() - began)
    later = []
    for _ in range(repeats):
        for i, location in enumerate(locations):
            began = time.perf_counter()
            done = after_commit(catalog, f"lake.t{i}", location, warn=print)
            later.append(time.perf_counter() - began)
            assert done is not None and done.outcome == "unchanged"
    return {
        "metastore_start_seconds": round(start_seconds, 2),
        "register_first_seconds": _stats(first),
        "register_later_seconds": _stats(later),
        "catalog": catalog,
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "max": round(max(values), 4),
        "count": len(values),
    }


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    began = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}")
    return seconds, proc.stdout


def _plans(home: str, port: int, repeats: int) -> dict[str, object]:
    from dagster_partlake.catalog.metastore import stop_metastore

    code = Path(home) / "code"
    code.mkdir()
    (code / "plain_location.py").write_text(MODULE.replace("{catalog}", ""))
    (code / "named_location.py").write_text(
        MODULE.replace("{catalog}", f", catalog=LakeCatalog(port={port})")
    )
    env = {**os.environ, "PARTLAKE_HOME": home, "DAGSTER_HOME": str(Path(home) / "dagster")}
    Path(env["DAGSTER_HOME"]).mkdir()
    partlake = str(Path(sys.executable).parent / "partlake")
    _timed([partlake, "run", "-m", "named_location"], code, env)
    stop_metastore(home)  # from here on, any metastore call would fail
    times: dict[str, list[float]] = {}
    outputs: dict[str, set[str]] = {}
    names = [
        (f"{command}_{variant}", [partlake, command, "-m", f"{variant}_location"])
        for command in ("plan", "run")
        for variant in ("plain", "named")
    ]
    for round_ in range(repeats + 1):
        for name, argv in names[round_ % len(names) :] + names[: round_ % len(names)]:
            seconds, out = _timed(argv, code, env)
            if round_:  # the first round warms up
                times.setdefault(name, []).append(seconds)
            outputs.setdefault(name, set()).add(out.strip().splitlines()[-1])
    for command in ("plan", "run"):
        if outputs[f"{command}_plain"] != outputs[f"{command}_named"]:
            raise SystemExit(f"{command} differs with the catalog: {outputs}")
    result: dict[str, object] = {k: _stats(v) for k, v in times.items()}
    for command in ("plan", "run"):
        ratios = [
            n / p for n, p in zip(times[f"{command}_named"], times[f"{command}_plain"], strict=True)
        ]
        result[f"{command}_named_over_plain"] = round(statistics.median(ratios), 3)
    result["last_line"] = {k: sorted(v)[0] for k, v in outputs.items()}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "catalog.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="partlake-bench-catalog-") as home:
        from dagster_partlake.catalog.metastore import stop_metastore

        try:
            registration = _registration(home, args.tables, args.repeats)
            catalog = registration.pop("catalog")
            plans = _plans(home, catalog.port, args.repeats)  # type: ignore[attr-defined]
        finally:
            stop_metastore(home)
    result = {
        "benchmark": "catalog",
        "tables": args.tables,
        "repeats": args.repeats,
        "registration": registration,
        "no_change": plans,
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
