"""What a `partlake plan` costs on local disk and on S3: seconds, and on S3 the requests counted
at the server's door.

    .venv/bin/python -m benchmarks.plan_requests [--parts 30] [--repeats 3]
        [--out benchmarks/out/plan_requests.json]

The code location is tests/s3_defs.py (two tables, `parts -> part_totals`, `--parts` static
partitions), its lake filled once by `partlake run` (setup, timed but not the measure), once on
local disk and once on S3 (s3proxy from scripts/s3_server.py, its filesystem backend on this
machine's disk). Then, per place, `partlake plan --json` in fresh processes: the first with an
empty state cache (`cold`), then `--repeats` with nothing changed (`no_change`, the state cache
filled by the first). On S3 every request of the plan goes through the counting proxy
(scripts/s3_counter.py), so delta-rs, pyarrow and Spark are all counted; requests are reported by
kind (`list`, `head`, `get_log`, `get_data`, ...) and per table. The seconds are the `partlake
plan` process' wall time (Python's and Dagster's imports included).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.backfill import PARTLAKE, PY, REPO, _free_port, run_timed
from benchmarks.backfill_s3 import BUCKET, S3_SCRIPT, start_server
from benchmarks.workload import load_average

MODULE = "tests.s3_defs"
TABLES = ("parts", "part_totals")


def counter_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("s3_counter", REPO / "scripts/s3_counter.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def counted(endpoint: str, reset: bool = False) -> list[list[Any]]:
    """The proxy's records (or, with `reset`, forget them)."""
    if reset:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/_counter/reset", method="POST"))
        return []
    with urllib.request.urlopen(f"{endpoint}/_counter") as answer:
        return json.loads(answer.read())


def per_table(counter: ModuleType, records: list[list[Any]]) -> dict[str, dict[str, int]]:
    """Requests by kind for each table (a request names its table in its path or prefix)."""
    result: dict[str, dict[str, int]] = {}
    for table in TABLES:
        mine = [
            r for r in records
            if f"/warehouse/{table}/" in str(r[1]) or f"warehouse%2F{table}%2F" in str(r[2])
        ]  # fmt: skip
        result[table] = counter.summary(mine)
    return result


def env_for(work: Path, name: str, lake: str, parts: int, aws: dict[str, str]) -> dict[str, str]:
    home = work / name / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").touch()
    env = dict(os.environ)
    env.update(aws)
    env.update(
        PYTHONPATH=str(REPO),
        PARTLAKE_LAKE_ROOT=lake,
        PARTLAKE_HOME=str(work / name / "partlake"),
        PARTLAKE_CACHE_DIR=str(work / name / "state-cache"),
        DAGSTER_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        S3_TEST_PARTS=",".join(f"p{i}" for i in range(parts)),
    )
    return env


def plan_once(env: dict[str, str], label: str) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [*PARTLAKE, "plan", "-m", MODULE, "--json"], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if proc.returncode != 0 or json.loads(proc.stdout) != []:
        raise SystemExit(f"{label}: not fresh ({proc.returncode}): {proc.stderr[-3000:]}")
    print(f"  {label}: {seconds:.1f} s", file=sys.stderr)
    return seconds


def measure(
    env: dict[str, str], place: str, repeats: int, counter: ModuleType | None, endpoint: str
) -> dict[str, Any]:
    """The cold plan and `repeats` no-change plans of one place."""
    samples: dict[str, list[dict[str, Any]]] = {"cold": [], "no_change": []}
    for case, count in (("cold", 1), ("no_change", repeats)):
        for i in range(count):
            if counter is not None:
                counted(endpoint, reset=True)
            sample: dict[str, Any] = {"seconds": round(plan_once(env, f"{place} {case} {i}"), 2)}
            if counter is not None:
                records = counted(endpoint)
                sample["requests"] = counter.summary(records)
                sample["requests_per_table"] = per_table(counter, records)
            samples[case].append(sample)
    return {
        case: {
            "samples": runs,
            "median_seconds": round(statistics.median(r["seconds"] for r in runs), 2),
            **(
                {
                    "requests": runs[-1]["requests"],
                    "requests_per_table": runs[-1]["requests_per_table"],
                }
                if counter is not None
                else {}
            ),
        }  # fmt: skip
        for case, runs in samples.items()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "plan_requests.json"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="partlake-plan-requests-"))
    state = work / "s3"
    result: dict[str, Any] = {
        "code_location": f"{MODULE}: {', '.join(TABLES)}, {args.parts} partitions each",
        "machine": {
            "cores": os.cpu_count(),
            "load_average_at_start": load_average(),
            "note": "a 2-core machine shared with other engineers' test runs and benchmarks",
        },
    }
    counter = counter_module()
    proxy = None
    try:
        aws = start_server(state)
        proxy_port = _free_port()
        proxy = counter.serve(aws["AWS_ENDPOINT_URL"].removeprefix("http://"), proxy_port)
        endpoint = f"http://127.0.0.1:{proxy_port}"
        places = {
            "disk": env_for(work, "disk", str(work / "lake"), args.parts, {}),
            "s3": env_for(work, "s3", f"s3://{BUCKET}/bench", args.parts, aws),
        }
        for place, env in places.items():
            fill = run_timed([*PARTLAKE, "run", "-m", MODULE], env, f"fill ({place})")
            result[f"fill_{place}_seconds"] = round(fill.seconds, 1)
            shutil.rmtree(work / place / "state-cache", ignore_errors=True)
            if place == "s3":
                env = {**env, "AWS_ENDPOINT_URL": endpoint}
            result[place] = measure(
                env, place, args.repeats, counter if place == "s3" else None, endpoint
            )
        result["machine"]["load_average_at_end"] = load_average()
    finally:
        if proxy is not None:
            proxy.shutdown()
            proxy.server_close()
        subprocess.run(
            [PY, str(S3_SCRIPT), "--state", str(state), "stop"], stdout=sys.stderr, timeout=120
        )
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
