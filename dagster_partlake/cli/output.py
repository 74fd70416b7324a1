"""What `partlake` shows on the terminal, and where everything else goes.

A command prints its own lines only: one per asset partition, a progress bar on a terminal, a
summary. Everything the engines print while it works (Dagster's event lines, Spark and log4j,
Python warnings, tracebacks) goes to a log file under `$PARTLAKE_HOME/logs/`, whose path a
failure prints. While a command runs, the process's file descriptors 1 and 2 point at that file,
so a JVM or a subprocess started meanwhile writes there too; the command writes to a copy of the
original terminal. `-v/--verbose` leaves both on the terminal, as they were.

The log of a command that changed nothing (`plan`, `history`) is removed when it succeeds; the
others' stay (a week).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from dagster_partlake.layout import resolve_root

if TYPE_CHECKING:
    from tqdm import tqdm

# The answers of a command that finds nothing to do (`render`, and the shortcut that gives them
# without planning: `dagster_partlake.cli.shortcut`).
NOTHING_TO_RUN = "Everything is fresh: nothing to run."
PLAN_FRESH = "Everything is fresh: no asset partition needs to run."
PLAN_FRESH_JSON = "[]"  # `partlake plan --json`: no stale partition

LOG_DIR = "logs"
PACKAGE_LOGGER = "dagster_partlake"  # its warnings reach the terminal (`_TerminalWarnings`)
KEEP_LOGS_SECONDS = 7 * 24 * 3600
# Commands whose log is removed after a success: they changed nothing worth a record.
READ_ONLY = frozenset({"plan", "history", "sql-render", "sql-lint"})


@dataclass
class Terminal:
    """Where a command's own lines go."""

    out: TextIO
    err: TextIO
    log_path: str | None = None  # the engines' output, when it is not on the terminal
    _bar: tqdm | None = field(default=None, repr=False)

    def echo(self, text: str = "", *, err: bool = False) -> None:
        """One line (above the progress bar, if one is shown)."""
        stream = self.err if err else self.out
        if self._bar is not None and not err:
            self._bar.write(text, file=stream)
        else:
            stream.write(text + "\n")
            stream.flush()

    @contextmanager
    def progress(self, total: int, unit: str) -> Iterator[_Progress]:
        """A progress bar of `total` `unit`s on a terminal; nothing elsewhere."""
        if not _is_tty(self.out) or total <= 0:
            yield _Progress(None)
            return
        from tqdm import tqdm

        # A terminal that reports no width (0 columns) gets 80: tqdm would draw nothing.
        sized = os.get_terminal_size(self.out.fileno()).columns > 0
        bar = tqdm(
            total=total,
            unit=f" {unit}",
            file=self.out,
            leave=False,
            dynamic_ncols=sized,
            ncols=None if sized else 80,
        )
        self._bar = bar
        try:
            yield _Progress(bar)
        finally:
            self._bar = None
            bar.close()


@dataclass
class _Progress:
    bar: tqdm | None

    def advance(self, count: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(count)


_current = Terminal(sys.stdout, sys.stderr)


def terminal() -> Terminal:
    """The terminal of the command running in this process."""
    return _current


def echo(text: str = "", *, err: bool = False) -> None:
    """One line to the terminal of the running command."""
    _current.echo(text, err=err)


@contextmanager
def captured(command: str, *, verbose: bool) -> Iterator[Terminal]:
    """Run a command with the engines' output in a log file (see the module docstring)."""
    global _current
    stdout = _real_stream(sys.stdout)
    if verbose or stdout is None:
        # Verbose, or run inside another program that replaced sys.stdout (click's test
        # runner): leave everything where it goes.
        _current = Terminal(sys.stdout, sys.stderr)
        yield _current
        return
    path = _log_path(command)
    with _warnings_shown():
        yield from _captured_in(path, command)


def _captured_in(path: str, command: str) -> Iterator[Terminal]:
    global _current
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    out = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    err = os.fdopen(os.dup(saved[1]), "w", buffering=1)
    ok = False
    with open(path, "a", encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        _current = Terminal(out, err, path)
        try:
            yield _current
            ok = True
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            out.close()
            err.close()
            _current = Terminal(sys.stdout, sys.stderr, path)
    if ok and command in READ_ONLY:
        with contextlib.suppress(OSError):
            os.remove(path)


class _TerminalWarnings(logging.Handler):
    """partlake's own warnings (a server that does not answer, a report that failed) as
    `[WARN] ...` lines on the terminal: what a command waits for is never only in its log."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _current.echo(f"[WARN] {record.getMessage()}", err=True)
        except Exception:  # noqa: BLE001 - a closed terminal must not end the command
            self.handleError(record)


@contextmanager
def _warnings_shown() -> Iterator[None]:
    logger = logging.getLogger(PACKAGE_LOGGER)
    handler = _TerminalWarnings(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _real_stream(stream: TextIO) -> TextIO | None:
    """`stream` when it is the process's file descriptor 1, else None."""
    try:
        return stream if stream.fileno() == 1 else None
    except (AttributeError, OSError, ValueError):
        return None


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _log_path(command: str) -> str:
    folder = os.path.join(resolve_root(None), LOG_DIR)
    os.makedirs(folder, exist_ok=True)
    _remove_old(folder)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(folder, f"partlake-{command}-{stamp}-{os.getpid()}.log")


def _remove_old(folder: str) -> None:
    cutoff = time.time() - KEEP_LOGS_SECONDS
    for entry in os.scandir(folder):
        with contextlib.suppress(OSError):
            if entry.name.startswith("partlake-") and entry.stat().st_mtime < cutoff:
                os.remove(entry.path)
