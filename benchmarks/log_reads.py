"""What one write reads of its table's Delta log, per model kind, for one or more checkouts.

    .venv/bin/python -m benchmarks.log_reads [--checkout PATH ...] [--out PATH]

For each checkout (default: this one) a fresh process imports that checkout's dagster_partlake
(PYTHONPATH), writes day 1 of a small daily asset of each kind (partition, tracked, append, merge,
scd2) through a real Dagster run, then counts what writing day 2 reads of the asset's table log
(`tests.log_reads`, which counts delta-rs loads and follows and the listings and file opens under
`_delta_log`, so it measures an older partlake the same way). JSON to stdout and `--out`:
per checkout, per kind, the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs inside the measured checkout's process: argv[1] the lake folder, argv[2] this checkout's
# counting helper (tests/log_reads.py, which an older checkout does not have).
_SCRIPT = r"""
import importlib.util, json, sys, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
from dagster import DailyPartitionsDefinition, DagsterInstance, asset, materialize
from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source
from tests.test_kinds import write_changes

spec = importlib.util.spec_from_file_location("log_reads_counter", sys.argv[2])
counter = importlib.util.module_from_spec(spec)
spec.loader.exec_module(counter)
counting_log_reads = counter.counting_log_reads

lake = Path(sys.argv[1])
daily = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
changes = partlake_source("changes", partitions_def=daily)
KINDS = {
    "partition": {},
    "tracked": {"partlake/kind": "tracked"},
    "append": {"partlake/kind": "append"},
    "merge": {"partlake/kind": "merge", "partlake/unique_key": ["id"]},
    "scd2": {"partlake/kind": "scd2", "partlake/unique_key": ["id"]},
}

def model(kind, metadata):
    @asset(name=f"m_{kind}", partitions_def=daily, code_version="1", metadata=metadata)
    def built(changes):
        columns = ["id", "name", "score"] if kind == "scd2" else ["date", "id", "name", "score"]
        return changes.select(*columns)
    return built

resources = {"spark": SparkResource(), "io_manager": DeltaPartitionIOManager(root=str(lake))}
spark = resources["spark"].spark_session
for day in ("2024-01-01", "2024-01-02"):
    write_changes(spark, lake, day, [(1, "a", 10), (2, "b", 20), (3, "c", 30)])
instance = DagsterInstance.ephemeral()
found = {}
for kind, metadata in KINDS.items():
    built = model(kind, metadata)
    run = lambda day: materialize([changes, built], partition_key=day, resources=resources,
                                  instance=instance, selection=[built.key])
    assert run("2024-01-01").success
    with counting_log_reads(lake / "warehouse" / f"m_{kind}") as reads:
        assert run("2024-01-02").success
    found[kind] = dict(reads)
print("LOG_READS " + json.dumps(found))
"""


def measure(checkout: Path, lake: Path) -> dict[str, dict[str, int]]:
    """The counts of one checkout, measured in a process of its own."""
    lake.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(lake), str(REPO / "tests" / "log_reads.py")],
        env=env,
        cwd=str(checkout),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("LOG_READS ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"measuring {checkout} failed:\n{done.stderr[-4000:]}")
    return json.loads(lines[-1].removeprefix("LOG_READS "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", action="append", type=Path, help="default: this one")
    parser.add_argument("--work", type=Path, default=REPO / ".partlake" / "bench-log-reads")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "log_reads.json")
    args = parser.parse_args(argv)
    checkouts = args.checkout or [REPO]
    result = {
        str(checkout): measure(checkout.resolve(), args.work / f"lake{i}")
        for i, checkout in enumerate(checkouts)
    }
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
