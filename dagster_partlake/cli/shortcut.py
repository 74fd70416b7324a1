"""A no-op `partlake run` (and a fresh `partlake plan`) answered from the last plan, without
importing the code location.

Importing a code location costs Dagster, PySpark and the models (a second or more), while its
plan, when nothing moved, is the plan the last process made. So every plan of a code location
keeps a `Shortcut` next to the table states (`layout.default_persist_dir`): which assets the
whole plan found stale, and everything that plan was computed from, each in a form that a `stat`
checks. A later process answers from it, importing neither Dagster nor the code location, when
all of these still hold, and otherwise plans as usual:

- how the code location was run: the same working directory, module, interpreter, `sys.path`
  and environment (a digest of every variable but `_`);
- the code: every file of a module the saving process had imported (the code location's
  modules, partlake's, Dagster's, ...), every other file the code location's import read (its SQL
  model files) and every folder it listed (a new model file), and the folders on `sys.path`
  (a package installed or removed): each with the size and modification time it had;
- the tables: per asset, the commit of the table version the plan saw is the same file (size
  and modification time) and no commit follows it; a table that did not exist still has no log;
  a folder source has the same folders and files (names, sizes, modification times), walked
  before the plan;
- time: no time window of a time partitions definition has begun since (a new partition);
- the Dagster instance: the plan needed nothing from it (no dynamic partitions, whose keys live
  there) and no `partlake run` process is registered in it (a dead one's runs must be marked
  failed by the full path).

A plan is kept only when it can be described that way: its module was imported by this process
(not before, so its reads were recorded), no table was unreadable, no asset is dynamically
partitioned and every table and folder is on local disk (one on an object store would cost
requests to check, and correctness comes first: such a code location always plans in full,
from its on-disk table states), and no source is a PostgreSQL table or a Kafka topic (they
change without a file to `stat`). This assumes what Dagster's own code servers assume: a code
location's `Definitions` (its assets, partitions, mappings) follow from its code and
environment, and from the time only through time partitions. `PARTLAKE_PLAN_SHORTCUT=0` turns
the shortcut off (no answer from it, none kept). With `PARTLAKE_CHECK_REPLAN` set (the tests),
an answer from the shortcut is followed by the full path anyway, and a full plan that is not
fresh fails loudly.

This module imports only the standard library and partlake's base layer at import time: it is
what a no-op pays for.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster_partlake.layout import (
    RUN_REGISTRY_DIR,
    commit_file,
    default_persist_dir,
    log_dir,
)

if TYPE_CHECKING:
    from dagster_partlake.planning.definition import Plan
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession, PlanResult

SHORTCUT_ENV = "PARTLAKE_PLAN_SHORTCUT"
CHECK_ENV = "PARTLAKE_CHECK_REPLAN"  # planning.session.CHECK_REPLAN_ENV, without importing it
_FORMAT = (4, marshal.version, *sys.version_info[:2])
# Environment variables that differ between two runs of the same command for no reason of ours.
_VOLATILE_ENV = frozenset({"_"})
# Files that are not code: they change on their own (kernel views, devices).
_NOT_CODE = ("/proc/", "/sys/", "/dev/")

Stat = tuple[int, int]  # size, modification time in ns


@dataclass(frozen=True)
class Shortcut:
    """The last plan of a code location, reduced to what a no-op needs, and what it was
    computed from (see the module docstring)."""

    how: str  # digest of the working directory, module, interpreter, sys.path, environment
    valid_until: float | None  # epoch seconds at which a new time window begins (None: never)
    files: tuple[tuple[str, int, int], ...]  # path, size, mtime_ns
    folders: tuple[tuple[str, int], ...]  # path, mtime_ns (-1: did not exist)
    # Asset table root, the version the plan saw (None: no table), its commit file's stat.
    tables: tuple[tuple[str, int | None, int, int], ...]
    trees: tuple[tuple[str, str], ...]  # folder source root, digest of its folders and files
    assets: tuple[str, ...]
    stale: tuple[str, ...]  # assets with stale partitions in the whole plan
    warning: str | None  # what `partlake plan` prints on stderr before the plan
    # What `partlake plan` and `partlake run` print on stderr of each source with no table,
    # with the assets that select it (the source and what reads it), as `Plan.select` keeps it.
    absent: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # What `partlake plan` says of the retention rules (`planning.retained`): per asset with a
    # rule, its line and its JSON object ("" when its retired partitions hold no data, as
    # `--json` lists only those); and the writes into a retired range.
    retention: tuple[tuple[str, str, str], ...] = ()
    retired_writes: tuple[str, ...] = ()

    def to_data(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "how": self.how,
            "valid_until": self.valid_until,
            "files": [list(f) for f in self.files],
            "folders": [list(f) for f in self.folders],
            "tables": [list(t) for t in self.tables],
            "trees": [list(t) for t in self.trees],
            "assets": list(self.assets),
            "stale": list(self.stale),
            "warning": self.warning,
            "absent": [[line, list(names)] for line, names in self.absent],
            "retention": [list(r) for r in self.retention],
            "retired_writes": list(self.retired_writes),
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Shortcut | None:
        """The shortcut `to_data` gave, None for another format."""
        if data.get("format") != _FORMAT:
            return None
        return cls(
            how=data["how"],
            valid_until=data["valid_until"],
            files=tuple((p, s, m) for p, s, m in data["files"]),
            folders=tuple((p, m) for p, m in data["folders"]),
            tables=tuple((r, v, s, m) for r, v, s, m in data["tables"]),
            trees=tuple((r, d) for r, d in data["trees"]),
            assets=tuple(data["assets"]),
            stale=tuple(data["stale"]),
            warning=data["warning"],
            absent=tuple((line, tuple(names)) for line, names in data["absent"]),
            retention=tuple((a, line, body) for a, line, body in data["retention"]),
            retired_writes=tuple(data["retired_writes"]),
        )

    def holds(self, how: str, now: float) -> bool:
        """Whether everything the plan was computed from is as it was (see the module
        docstring); stops at the first difference."""
        if how != self.how or (self.valid_until is not None and now >= self.valid_until):
            return False
        for root, version, size, mtime in self.tables:
            if version is None:
                if os.path.isdir(log_dir(root)):
                    return False
            elif _stat(commit_file(root, version)) != (size, mtime) or os.path.exists(
                commit_file(root, version + 1)
            ):
                return False
        if any(_tree(root) != digest for root, digest in self.trees):
            return False
        if any(_mtime(path) != mtime for path, mtime in self.folders):
            return False
        return all(_stat(path) == (size, mtime) for path, size, mtime in self.files)

    def absent_lines(self, select: Sequence[str] | None) -> list[str]:
        """The lines of the sources with no table that the full path prints for `select`."""
        wanted = None if select is None else set(select)
        return [line for line, names in self.absent if wanted is None or wanted & set(names)]

    def fresh(self, select: Sequence[str] | None) -> bool | None:
        """Whether the selected assets (all: None) have no stale partition; None when the
        selection names an asset the code location does not have (the full path says so)."""
        if select is None:
            return not self.stale
        if not set(select) <= set(self.assets):
            return None
        return not set(select) & set(self.stale)


def answer(module: str, select: Sequence[str] | None) -> Shortcut | None:
    """The kept shortcut of `module` if the selected assets are fresh and it still holds, else
    None (plan as usual)."""
    if _off() or registered_runs():
        return None
    try:
        with open(_file(module), "rb") as kept:
            shortcut = Shortcut.from_data(marshal.load(kept))
        if (
            shortcut is None
            or not shortcut.fresh(select)
            or not shortcut.holds(how(module), time.time())
        ):
            return None
    except (OSError, ValueError, EOFError, TypeError, KeyError, AttributeError, IndexError):
        return None  # none kept, or damaged: plan
    return shortcut


def checking() -> bool:
    """Whether an answer must be checked against the full path (`PARTLAKE_CHECK_REPLAN`)."""
    return bool(os.environ.get(CHECK_ENV))


def confirm(fresh: bool) -> None:
    """After an answer under `checking()`: fail loudly when the full path found work.

    Raises:
        AssertionError: the full path is not fresh.
    """
    if not fresh:
        raise AssertionError(
            "the plan shortcut answered 'fresh' but the full plan has stale partitions or dead "
            f"runs to mark; see {__name__}"
        )


def how(module: str) -> str:
    """A digest of how this process runs `module` (see the module docstring)."""
    env = sorted((k, v) for k, v in os.environ.items() if k not in _VOLATILE_ENV)
    described = repr((os.getcwd(), module, sys.executable, sys.version, list(sys.path), env))
    return hashlib.sha1(described.encode()).hexdigest()


@dataclass
class Loading:
    """What importing a code location read: files opened for reading, folders listed."""

    module: str
    fresh: bool  # the module was not imported before (so its reads are all here)
    how: str
    started: float  # epoch seconds before the import (the plan's "now" for time windows)
    opened: set[str] = field(default_factory=set)
    listed: set[str] = field(default_factory=set)
    trees: dict[str, str] = field(default_factory=dict)  # folder source root -> `_tree`

    def walk_folders(self, graph: LakeGraph) -> None:
        """Note the folder sources as they are before the plan (a file landing while it plans
        then makes the next process plan again)."""
        if not _off():
            self.trees = {
                a.path: _tree(a.path)
                for a in graph.assets.values()
                if a.is_folder and a.location.is_local
            }


_loading: list[Loading] = []  # the recording in progress (at most one)
_hooked = False


@contextmanager
def recording(module: str) -> Iterator[Loading]:
    """Record the files and folders read in the block (the code location's import)."""
    global _hooked
    loading = Loading(
        module=module, fresh=module not in sys.modules, how=how(module), started=time.time()
    )
    if _off():
        yield loading  # nothing will be kept
        return
    if not _hooked:
        sys.addaudithook(_audit)  # audit hooks stay for the process: it checks `_loading`
        _hooked = True
    _loading.append(loading)
    try:
        yield loading
    finally:
        _loading.remove(loading)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _loading:
        return
    if event == "open":
        path, mode, flags = args
        if isinstance(path, int) or path is None:
            return
        writing = (
            any(c in mode for c in "wax+")
            if isinstance(mode, str)
            else bool(flags & (os.O_WRONLY | os.O_RDWR))
        )
        if not writing:
            _loading[-1].opened.add(os.path.abspath(os.fsdecode(path)))
    elif event in ("os.listdir", "os.scandir"):
        path = args[0] if args else None
        if path is None or isinstance(path, int):
            path = "."
        _loading[-1].listed.add(os.path.abspath(os.fsdecode(path)))


def keep(loading: Loading, session: PlanningSession, result: PlanResult) -> None:
    """Keep the shortcut of this plan for the next process, if it can be described (see the
    module docstring); otherwise remove the one kept before. Turned off
    (`PARTLAKE_PLAN_SHORTCUT=0`), it leaves the kept one as it is."""
    if _off():
        return
    shortcut = _describe(loading, session, result)
    path = _file(loading.module)
    import tempfile

    try:
        if shortcut is None:
            if os.path.exists(path):
                os.remove(path)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(handle, "wb") as saved:
            marshal.dump(shortcut.to_data(), saved)
        os.replace(temp, path)  # a concurrent reader sees the old file or the new one
    except (OSError, ValueError):
        pass  # an optimization only


def _describe(loading: Loading, session: PlanningSession, result: PlanResult) -> Shortcut | None:
    from dagster_partlake.planning.session import absent_sources

    graph = session.graph
    memo = session.memo
    if (
        not loading.fresh
        or memo is None
        or result.inputs.unreadable
        or result.plan.unreadable
        or graph.has_dynamic_partitions
        or session.cache.persist_dir is None
        or any(not asset.location.is_local for asset in graph.assets.values())
        # A database or a topic changes without a file to `stat`: always planned in full.
        or any(asset.external is not None for asset in graph.assets.values())
    ):
        return None
    followed, valid_until = _next_window(graph, loading.started)
    if not followed:
        return None
    tables: list[tuple[str, int | None, int, int]] = []
    for name, asset in graph.assets.items():
        state = result.states.get(name)
        if asset.is_folder:
            if asset.path not in loading.trees:
                return None
            continue
        if state is None:
            tables.append((asset.path, None, 0, 0))
            continue
        stat = _stat(commit_file(asset.path, state.version))
        if stat is None:
            return None
        tables.append((asset.path, state.version, *stat))
    return Shortcut(
        how=loading.how,
        valid_until=valid_until,
        files=_files(loading),
        folders=tuple((p, _mtime(p)) for p in sorted(loading.listed | _path_folders())),
        tables=tuple(tables),
        trees=tuple(sorted(loading.trees.items())),
        assets=tuple(sorted(graph.assets)),
        stale=tuple(sorted({item.asset for item in memo.plan.items})),
        warning=missing_checks_warning(graph),
        # Every source's, from the whole graph's states: a later answer may select others.
        absent=tuple(
            (f"Warning: {a.message}", (a.asset, *a.waiting))
            for a in absent_sources(graph, result.states)
        ),
        retention=_retention(graph, result),
        retired_writes=memo.plan.retired_writes,
    )


def _retention(graph: LakeGraph, result: PlanResult) -> tuple[tuple[str, str, str], ...]:
    """(asset, line, JSON object) of each asset with a retention rule (`planning.retained`)."""
    if not any(spec.retention is not None for spec in graph.specs.values()):
        return ()
    import json

    from dagster_partlake.planning.retained import retention_report

    return tuple(
        (r.asset, r.line(), json.dumps(r.to_json()) if r.with_data else "")
        for r in retention_report(graph, result.inputs)
    )


def _files(loading: Loading) -> tuple[tuple[str, int, int], ...]:
    """Every module file of this process and every other regular file the import read."""
    paths = set()
    for module in list(sys.modules.values()):
        found = getattr(module, "__file__", None)
        if isinstance(found, str):
            paths.add(os.path.abspath(found))
    for path in loading.opened:
        # A module's compiled copy follows its source (its own stat is of the source).
        if "__pycache__" not in path and not path.startswith(_NOT_CODE):
            paths.add(path)
    files = []
    for path in sorted(paths):
        stat = _stat(path)
        if stat is not None:
            files.append((path, *stat))
    return tuple(files)


def _tree(root: str) -> str:
    """A digest of the folders and files under `root`: names, sizes, modification times."""
    entries: list[tuple[str, int, int]] = []
    for folder, folders, files in os.walk(root):
        folders.sort()
        entries.append((folder, -1, _mtime(folder)))
        for name in sorted(files):
            path = os.path.join(folder, name)
            stat = _stat(path)
            entries.append((path, *(stat or (-1, -1))))
    return hashlib.sha1(repr(entries).encode()).hexdigest()


def _path_folders() -> set[str]:
    return {os.path.abspath(p or ".") for p in sys.path if os.path.isdir(p or ".")}


def _next_window(graph: LakeGraph, started: float) -> tuple[bool, float | None]:
    """Whether the shortcut can follow the graph's time partitions, and when the first time
    window after `started` begins, of any of them (None: there are none)."""
    import datetime as dt

    from dagster import MultiPartitionsDefinition, TimeWindowPartitionsDefinition

    when: float | None = None
    now = dt.datetime.fromtimestamp(started, tz=dt.UTC)
    seen: set[int] = set()  # assets share partitions definitions
    for asset in graph.assets.values():
        definition = asset.partitions_def
        dims = (
            [d.partitions_def for d in definition.partitions_defs]
            if isinstance(definition, MultiPartitionsDefinition)
            else [definition]
        )
        for dim in dims:
            if not isinstance(dim, TimeWindowPartitionsDefinition) or id(dim) in seen:
                continue
            seen.add(id(dim))
            if dim.exclusions:
                return False, None  # excluded windows: the next change is not the next window
            window = dim.get_next_partition_window(now, respect_bounds=False)
            if window is None:
                return False, None
            begins = window.start.timestamp()
            when = begins if when is None else min(when, begins)
    return True, when


def absent_warnings(plan: Plan) -> tuple[str, ...]:
    """What `partlake plan` and `partlake run` print of each source with no table."""
    return tuple(f"Warning: {absent.message}" for absent in plan.absent_sources)


def missing_checks_warning(graph: LakeGraph) -> str | None:
    """`partlake plan`'s warning when the code location registers no `partlake_fresh` check."""
    from dagster_partlake.freshness.check import MISSING_CHECKS, checked_assets

    checked = checked_assets(graph.asset_graph.asset_check_keys)
    if not checked and any(
        a.partitions_def is not None and not a.is_source for a in graph.assets.values()
    ):
        return f"Warning: {MISSING_CHECKS}"
    return None


def _off() -> bool:
    return os.environ.get(SHORTCUT_ENV, "1") == "0"


def registered_runs() -> bool:
    """Whether a `partlake run` process is registered in the Dagster instance (running, or
    dead with runs to mark failed): one `listdir`."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return False
    try:
        return bool(os.listdir(os.path.join(home, RUN_REGISTRY_DIR)))
    except OSError:
        return False


def _file(module: str) -> str:
    where = repr((os.getcwd(), module, sys.executable))
    digest = hashlib.sha1(where.encode()).hexdigest()
    return os.path.join(default_persist_dir(), f"shortcut-{digest}.marshal")


def _stat(path: str) -> Stat | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1
