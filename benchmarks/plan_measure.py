"""The planning benchmark's measuring tools: one fresh process per measured case, its time, CPU,
memory and profile.

`run_child` runs a task in a new `plan_scale.py _task` process (each case gets its own peak
memory) and reads back its result line; `timed` wraps a call with `RssSampler` (RSS sampled by a
thread, CPU time); `profiled` and `memory_profile` say where a separate call of the same kind
spent its time and kept its memory.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ENTRY = Path(__file__).with_name("plan_scale.py")  # children run `plan_scale.py _task`
RESULT_MARK = "@@PLAN_SCALE_RESULT@@"  # starts the child's result line on its stdout


def mb(value: float) -> float:
    return round(value / 2**20, 1)


def self_peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class RssSampler:
    """Peak RSS of this process during a block, sampled every `interval` s by a thread."""

    def __init__(self, interval: float = 0.005) -> None:
        import psutil

        self._process = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self.before = self.peak = self.after = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(self._interval)

    def __enter__(self) -> RssSampler:
        self.cpu = time.process_time()
        self.before = self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.after = self._process.memory_info().rss
        self.peak = max(self.peak, self.after)
        self.cpu = time.process_time() - self.cpu

    def report(self) -> dict[str, float]:
        return {
            "rss_before_mb": mb(self.before),
            "rss_peak_during_mb": mb(self.peak),
            "rss_after_mb": mb(self.after),
            # CPU seconds of the process (all its threads, the sampler's too) during the call:
            # steadier than wall time on a shared machine.
            "cpu_s": round(self.cpu, 3),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }


def timed(fn: Callable[[], Any]) -> tuple[Any, float, dict[str, float]]:
    with RssSampler() as sampler:
        started = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - started
    return value, round(seconds, 4), sampler.report()


def top_functions(profile: cProfile.Profile, limit: int = 12) -> dict[str, list[str]]:
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, func), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        name = filename
        for marker in ("site-packages/", str(REPO) + "/"):
            if marker in name:
                name = name.split(marker, 1)[1]
        rows.append((cumtime, tottime, calls, f"{name}:{line}({func})"))

    def fmt(row: tuple) -> str:
        return f"{row[3]} cum={row[0]:.3f}s self={row[1]:.3f}s calls={row[2]}"

    return {
        "by_cumulative": [fmt(r) for r in sorted(rows, key=lambda r: -r[0])[:limit]],
        "by_self": [fmt(r) for r in sorted(rows, key=lambda r: -r[1])[:limit]],
        "total_s": round(max((r[0] for r in rows), default=0.0), 3),
    }


def profiled(fn: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    profile = cProfile.Profile()
    profile.enable()
    try:
        value = fn()
    finally:
        profile.disable()
    return value, top_functions(profile)


def memory_profile(fn: Callable[[], Any], limit: int = 10) -> dict[str, Any]:
    """Python allocations still held after `fn` (tracemalloc, by line), and the RSS growth.

    The RSS growth includes tracemalloc's own bookkeeping (a traceback per block, millions of
    blocks at 100k), so `native_or_untraced_mb` overstates native memory; compare
    `python_traced_mb` with the cold make_plan RSS growth of the timed run instead."""
    import tracemalloc

    gc.collect()
    rss_before = rss()
    tracemalloc.start()
    value = fn()
    snapshot = tracemalloc.take_snapshot()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_growth = rss() - rss_before
    rows = []
    for stat in snapshot.statistics("lineno")[:limit]:
        frame = stat.traceback[0]
        name = frame.filename
        for marker in ("site-packages/", str(REPO) + "/"):
            if marker in name:
                name = name.split(marker, 1)[1]
        rows.append(f"{name}:{frame.lineno} {mb(stat.size)} MB in {stat.count} blocks")
    del value
    return {
        "python_traced_mb": mb(traced),
        "rss_growth_mb": mb(rss_growth),
        "native_or_untraced_mb": mb(rss_growth - traced),
        "top_lines": rows,
    }


def run_child(task: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run `task` in a fresh Python process; its result dict (or an error dict)."""
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(ENTRY), "_task"],
            input=json.dumps(task),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(REPO),
        )
    except subprocess.TimeoutExpired:
        return {
            "error": f"timed out after {timeout:.0f} s",
            "wall_s": round(time.perf_counter() - started, 1),
        }
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK) :])
            result["process_wall_s"] = round(time.perf_counter() - started, 2)
            return result
    return {
        "error": f"exit code {proc.returncode}",
        "stderr_tail": proc.stderr[-3000:],
        "wall_s": round(time.perf_counter() - started, 1),
    }
