"""Where a backfill's wall-clock time went, for benchmarks/backfill.py.

A `partlake run` is split from what its process left behind: the Dagster instance under the lake
copy's DAGSTER_HOME (run and step start/end times, the events each run stored) and the timings
partlake puts in each output's materialization metadata (`partlake/*_seconds`, the same on every
partition of a run). The floor job prints its own phases (benchmarks/floor_job.py).

Phases of a partlake run (they add up to its wall-clock time):

- spark_start: starting the process's Spark session (a JVM for local Spark; a client connection
  on Spark Connect); `partlake run` does it before its first run.
- read_inputs: load_input of the upstream partitions (their Delta log, their live files' list,
  Spark's read plan).
- spark_compute_stage: Spark computing each output and writing its Parquet files into staging.
- staged_files: listing the staged files and reading their footers (row counts).
- gates: the assets' quality gates (Spark jobs on the staged files; results logged to Dagster).
- publish: moving the staged files into the table's partition folders.
- commit: the Delta commit (table load, the files to remove, the transaction, finding it landed).
- write_other: the rest of the IO manager's write (schema checks, the record).
- output_other: handle_output outside the write: the output's partition keys validated, the
  DataFrame's schema (on Spark Connect an analysis on the server: a lazy read's file listing
  happens here), the run guards.
- dagster_step: a step's time outside partlake's load_input and handle_output: Dagster's input
  and output handling, the materialization events of every partition, the asset function.
- dagster_run: a run's time outside its steps, from its creation to its end: Dagster's run
  bookkeeping (the run's record, its execution plan, resources, run start and end events).
- before_runs: process start, imports, the code location, the plan (up to the first run's
  creation, Spark's start excepted).
- between_runs: from one run's end to the next run's creation (partlake's outcome queries).
- after_runs: from the last run's end to the process's exit (outcome queries, Spark's stop).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

PARTLAKE_PHASES = (
    "spark_start",
    "read_inputs",
    "spark_compute_stage",
    "staged_files",
    "gates",
    "publish",
    "commit",
    "write_other",
    "output_other",
    "dagster_step",
    "dagster_run",
    "before_runs",
    "between_runs",
    "after_runs",
)
FLOOR_PHASES = (
    "process",
    "spark_start",
    "source_files",
    "clean_events",
    "daily_region_stats",
    "monthly_region_stats",
    "spark_stop",
)
# Who each partlake phase belongs to, for the summary of the gap over the floor: Spark's own
# work (which the floor does too), the gates (Spark jobs the floor does not run), partlake's
# code, Dagster's bookkeeping, and the process around the runs (interpreter start, imports, the
# code location and the plan; after the runs, the outcomes, Spark's stop and the exit).
OWNER = {
    "spark_start": "spark",
    "read_inputs": "spark",
    "spark_compute_stage": "spark",
    "gates": "gates",
    "staged_files": "partlake",
    "publish": "partlake",
    "commit": "partlake",
    "write_other": "partlake",
    # On Spark Connect this also holds the server's analysis of the lazy read (its file
    # listing), which local Spark does in read_inputs.
    "output_other": "partlake",
    "between_runs": "partlake",
    "dagster_step": "dagster",
    "dagster_run": "dagster",
    "before_and_after_runs": "process",
}
_METADATA = {
    "output": "partlake/output_seconds",
    "write": "partlake/write_seconds",
    "commit": "partlake/commit_seconds",
    "publish": "partlake/publish_seconds",
    "stage": "partlake/stage_seconds",
    "staged_files": "partlake/staged_files_seconds",
    "gates": "partlake/gates_seconds",
    "read": "partlake/read_seconds",
    "spark_start": "partlake/spark_start_seconds",
}


def partlake_phases(dagster_home: Path, started: float, ended: float) -> dict[str, Any]:
    """The phases of the one `partlake run` recorded in the instance at `dagster_home`, which
    ran from `started` to `ended` (epoch seconds, as seen by the benchmark).

    Returns:
        {"phases": {phase: seconds}, "wall": ..., "runs": [per run: its assets, step seconds,
        the partlake timings of each output, the events it stored by type]}.
    """
    from dagster import DagsterEventType, DagsterInstance

    instance = DagsterInstance.from_config(str(dagster_home))
    try:
        records = sorted(
            (r for r in instance.get_run_records() if r.start_time and r.end_time),
            key=lambda r: r.start_time or 0.0,
        )
        runs = []
        for record in records:
            run_id = record.dagster_run.run_id
            steps = {
                s.step_key: (s.end_time or 0.0) - (s.start_time or 0.0)
                for s in instance.get_run_step_stats(run_id)
            }
            events = instance.all_logs(run_id)
            outputs: dict[str, dict[str, float]] = {}
            for event in events:
                dagster_event = event.dagster_event
                if dagster_event is None or dagster_event.step_key in outputs:
                    continue
                if dagster_event.event_type != DagsterEventType.ASSET_MATERIALIZATION:
                    continue
                metadata = dagster_event.step_materialization_data.materialization.metadata
                outputs[dagster_event.step_key or ""] = {
                    name: float(metadata[key].value)
                    for name, key in _METADATA.items()
                    if key in metadata
                }
            counts = Counter(
                e.dagster_event.event_type_value for e in events if e.dagster_event is not None
            )
            runs.append(
                {
                    "run_id": run_id[:8],
                    "created": record.create_timestamp.timestamp(),
                    "start": record.start_time,
                    "end": record.end_time,
                    "seconds": round((record.end_time or 0.0) - (record.start_time or 0.0), 3),
                    "created_to_start": round(
                        (record.start_time or 0.0) - record.create_timestamp.timestamp(), 3
                    ),
                    "step_seconds": {k: round(v, 3) for k, v in steps.items()},
                    "outputs": outputs,
                    "events": dict(sorted(counts.items())),
                    "events_total": sum(counts.values()),
                }
            )
    finally:
        instance.dispose()
    return {
        "wall": round(ended - started, 3),
        "phases": _split(runs, started, ended),
        "runs": [
            {k: v for k, v in r.items() if k not in ("created", "start", "end")} for r in runs
        ],
    }


def _split(runs: Sequence[Mapping[str, Any]], started: float, ended: float) -> dict[str, float]:
    outputs = [o for r in runs for o in r["outputs"].values()]

    def total(name: str) -> float:
        return sum(o.get(name, 0.0) for o in outputs)

    steps = sum(sum(r["step_seconds"].values()) for r in runs)
    in_runs = _union([(r["created"], r["end"]) for r in runs])
    first = min((r["created"] for r in runs), default=ended)
    last = max((r["end"] for r in runs), default=ended)
    write, commit, publish = total("write"), total("commit"), total("publish")
    stage, listing, gates = total("stage"), total("staged_files"), total("gates")
    phases = {
        "spark_start": total("spark_start"),
        "read_inputs": total("read"),
        "spark_compute_stage": stage,
        "staged_files": listing,
        "gates": gates,
        "publish": publish,
        "commit": commit - publish,
        "write_other": write - stage - listing - gates - commit,
        "output_other": total("output") - write,
        "dagster_step": steps - total("output") - total("read"),
        "dagster_run": in_runs - steps,
        # partlake run starts its Spark session before the first run.
        "before_runs": first - started - total("spark_start"),
        "between_runs": (last - first) - in_runs if runs else 0.0,
        "after_runs": ended - last,
    }
    return {k: round(v, 3) for k, v in phases.items()}


def _union(intervals: Iterable[tuple[float, float]]) -> float:
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        covered += end - max(start, reach)
        reach = end
    return covered


def floor_phases(stdout: str, wall: float) -> dict[str, float]:
    """The floor job's own phases (its `floor phases:` line), and `process`: the rest of its
    wall-clock time (interpreter start, imports, exit)."""
    line = next(x for x in stdout.splitlines() if x.startswith("floor phases: "))
    phases: dict[str, float] = json.loads(line.removeprefix("floor phases: "))
    return {"process": round(wall - sum(phases.values()), 3), **phases}


def median_phases(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per phase, the median over the repeats."""
    names = list(dict.fromkeys(k for s in samples for k in s))
    return {k: round(statistics.median(s.get(k, 0.0) for s in samples), 2) for k in names}


def extra_over_floor(partlake: Mapping[str, float], floor: Mapping[str, float]) -> dict[str, float]:
    """partlake's phases against their counterparts in the floor (medians): Spark's start,
    reading the inputs (the floor lists the source's files and plans its read) and Spark
    computing the tables are compared with the floor's; partlake's time before and after its
    runs with the floor's process overhead and Spark stop; the other phases the floor does not
    have."""
    floor_compute = sum(
        floor.get(k, 0.0) for k in ("clean_events", "daily_region_stats", "monthly_region_stats")
    )
    extra = {
        "spark_start": partlake.get("spark_start", 0.0) - floor.get("spark_start", 0.0),
        "read_inputs": partlake.get("read_inputs", 0.0) - floor.get("source_files", 0.0),
        "spark_compute_stage": partlake.get("spark_compute_stage", 0.0) - floor_compute,
        "before_and_after_runs": partlake.get("before_runs", 0.0)
        + partlake.get("after_runs", 0.0)
        - floor.get("process", 0.0)
        - floor.get("spark_stop", 0.0),
    }
    for name in PARTLAKE_PHASES:
        if name not in extra and name not in ("before_runs", "after_runs"):
            extra[name] = partlake.get(name, 0.0)
    return {k: round(v, 2) for k, v in extra.items()}


def by_owner(extra: Mapping[str, float]) -> dict[str, float]:
    """The extra seconds over the floor summed by who they belong to (`OWNER`)."""
    owners: dict[str, float] = {}
    for name, seconds in extra.items():
        owner = OWNER[name]
        owners[owner] = round(owners.get(owner, 0.0) + seconds, 2)
    return owners
