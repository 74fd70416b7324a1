"""How a long Delta log slows a cold `StateCache().sync`, and what `checkpoint_table` gives back.

Builds one table partitioned by `part` (`--partitions`, default 100) with `--commits` commits
(default 10000): each commit rewrites one partition (a new one-row Parquet file written with
pyarrow, the old file removed, a partlake `CommitRecord` in the commit info, the file's
modification time = the commit time, as partlake's writer does). No Spark. The build keeps
delta-rs's automatic checkpoints (every 100 commits; without them each commit got slower as the
log grew). Then, each in a fresh Python process, a cold `StateCache().sync(root)` is timed
(imports excluded; best of `--repeat`): with those checkpoints (the state replays the newest
checkpoint and the JSON commits after it; the records still come from every JSON commit); with
them deleted (all JSON, as a table without checkpoints has it); and after
`checkpoint_table(root, keep_log_hours=0)` (a checkpoint, and only the JSON commits holding
records the planner reads). The state (lastUpdated and the newest record of every partition) is
checked to be the same in all three.

Usage:
    .venv/bin/python -m benchmarks.state_sync_commits [--commits 10000] [--partitions 100]

Prints the JSON to stdout (progress to stderr) and writes it to --out
(default benchmarks/out/state_sync_commits.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The timed child: a cold process syncing the table once; prints seconds and a digest of the state.
_CHILD = """
import json, sys, time
from dagster_partlake.delta.state import StateCache
started = time.perf_counter()
state = StateCache().sync(sys.argv[1])
seconds = time.perf_counter() - started
newest = {}
for record in state.commits:
    for pid in record.partition_ids:
        newest[pid] = record.table_version
print(json.dumps({
    "seconds": seconds,
    "version": state.version,
    "last_updated": sorted([list(k), v] for k, v in state.last_updated.items()),
    "newest_record_version": sorted(newest.items()),
}))
"""


def build_table(
    root: str, *, commits: int, partitions: int, checkpoints: bool = False, log: bool = False
) -> None:
    """A table at `root` with `commits` partlake commits, each rewriting one of `partitions`
    partitions `part=p000...` in turn (the table's creation is version 0); the checkpoints
    delta-rs writes on the way are deleted at the end unless `checkpoints`."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.transaction import (
        AddAction,
        CommitProperties,
        PostCommitHookProperties,
        RemoveAction,
    )

    from dagster_partlake.records.record import CommitRecord

    shutil.rmtree(root, ignore_errors=True)
    table = DeltaTable.create(
        root, pa.schema([("x", pa.int64()), ("part", pa.string())]), partition_by=["part"]
    )
    hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
    current: dict[str, tuple[str, int]] = {}
    started = time.perf_counter()
    for n in range(commits):
        part = f"p{n % partitions:03d}"
        relative = f"part={part}/{n:07d}-{uuid.uuid4().hex[:8]}.parquet"
        os.makedirs(os.path.join(root, f"part={part}"), exist_ok=True)
        pq.write_table(pa.table({"x": [n]}), os.path.join(root, relative))
        size = os.path.getsize(os.path.join(root, relative))
        now_ms = int(time.time() * 1000)
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                path=relative,
                size=size,
                partition_values={"part": part},
                modification_time=now_ms,
                data_change=True,
                stats=json.dumps({"numRecords": 1}),
            )
        ]
        if part in current:
            old, old_size = current[part]
            actions.append(
                RemoveAction(
                    path=old,
                    data_change=True,
                    deletion_timestamp=now_ms,
                    size=old_size,
                    partition_values={"part": part},
                )
            )
        record = CommitRecord(
            asset_key="bench", partition_keys=(part,), code_version="1", run_id=f"run-{n}"
        ).committed(write_id=uuid.uuid4().hex, commit_time_ms=now_ms)
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            partition_by=["part"],
            commit_properties=CommitProperties(custom_metadata=record.to_commit_info()),
            post_commithook_properties=hooks,
        )
        # The object stays at the version it loaded: without this, each commit is checked for
        # conflicts against every commit since, and the build slows to a few commits a second.
        table.update_incremental()
        current[part] = (relative, size)
        if log and (n + 1) % 1000 == 0:
            rate = (n + 1) / (time.perf_counter() - started)
            print(f"  {n + 1} commits ({rate:.0f}/s)", file=sys.stderr)
    if not checkpoints:
        remove_checkpoints(root)


def remove_checkpoints(root: str) -> None:
    log_dir = os.path.join(root, "_delta_log")
    for name in os.listdir(log_dir):
        if ".checkpoint." in name or name == "_last_checkpoint":
            os.remove(os.path.join(log_dir, name))


def cold_sync(root: str, repeat: int) -> dict:
    """The fastest of `repeat` cold syncs, each in a fresh process."""
    best: dict | None = None
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    for _ in range(repeat):
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, root],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
            env=env,
        )
        result = json.loads(proc.stdout)
        if best is None or result["seconds"] < best["seconds"]:
            best = result
    assert best is not None
    return best


def json_files(root: str) -> int:
    return sum(1 for name in os.listdir(os.path.join(root, "_delta_log")) if name.endswith(".json"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="cold syncs per case (best kept)")
    parser.add_argument("--work", default="/tmp/partlake_state_sync_bench")
    parser.add_argument("--out", default="benchmarks/out/state_sync_commits.json")
    args = parser.parse_args(argv)

    from deltalake import DeltaTable

    from dagster_partlake.maintenance.checkpoint import checkpoint_table

    root = os.path.join(args.work, "table")
    print(f"building {args.commits} commits over {args.partitions} partitions", file=sys.stderr)
    started = time.perf_counter()
    build_table(root, commits=args.commits, partitions=args.partitions, checkpoints=True, log=True)
    build_seconds = time.perf_counter() - started
    json_before = json_files(root)
    print("cold sync with delta-rs' automatic checkpoints", file=sys.stderr)
    automatic = cold_sync(root, args.repeat)
    remove_checkpoints(root)
    print("cold sync before (all JSON)", file=sys.stderr)
    before = cold_sync(root, args.repeat)
    started = time.perf_counter()
    checkpoint = checkpoint_table(root, keep_log_hours=0)
    checkpoint_seconds = time.perf_counter() - started
    print("cold sync after", file=sys.stderr)
    after = cold_sync(root, args.repeat)
    same = all(
        before[k] == after[k] == automatic[k]
        for k in ("version", "last_updated", "newest_record_version")
    )
    results = {
        "benchmark": "state_sync_commits",
        "commits": args.commits,
        "partitions": args.partitions,
        "table_version": DeltaTable(root).version(),
        "build_seconds": round(build_seconds, 1),
        "checkpoint_table_seconds": round(checkpoint_seconds, 3),
        "cold_sync_seconds_automatic_checkpoints": round(automatic["seconds"], 4),
        "cold_sync_seconds_before": round(before["seconds"], 4),
        "cold_sync_seconds_after": round(after["seconds"], 4),
        "speedup": round(before["seconds"] / after["seconds"], 1),
        "json_files_before": json_before,
        "json_files_after": json_files(root),
        "json_kept_for_records": len(checkpoint.json_kept_for_records),
        "state_unchanged": same,
        "repeat": args.repeat,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
