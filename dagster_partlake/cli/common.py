"""What every `partlake` command shares: the one error boundary, the Dagster instance, and
loading and planning a code location.

The error boundary: a PartlakeError prints `Error: ...` and exits 1 (`--debug` for a traceback).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from dagster_partlake.cli.output import captured, echo, terminal
from dagster_partlake.errors import PartlakeError

if TYPE_CHECKING:
    from dagster import DagsterInstance
    from pyspark.sql import SparkSession

    from dagster_partlake.delta.selection import PartitionSelection
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.planner import Plan
    from dagster_partlake.planning.runs import RunPlan
    from dagster_partlake.planning.session import PlanningSession, PlanResult
    from dagster_partlake.storage.location import TableLocation


def boundary(command: Callable[..., Any]) -> Callable[..., Any]:
    """The command with `-v/--verbose` and `--debug` and the one error boundary.

    The command runs with the engines' output in a log file (`dagster_partlake.cli.output`;
    `--verbose` keeps it on the terminal). A PartlakeError prints `Error: ...` once, and where
    the full output is, and exits 1 (with `--debug`, after its traceback); Ctrl-C ends the
    process at once with exit code 130.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, debug: bool = False, verbose: bool = False, **kwargs: Any) -> Any:
        name = _command_name(click.get_current_context())
        try:
            with captured(name, verbose=verbose or debug):
                return command(*args, **kwargs)
        except PartlakeError as error:
            if debug:
                traceback.print_exc()
            click.echo(f"Error: {error}", err=True)
            log = terminal().log_path
            if log is not None and os.path.exists(log):
                click.echo(f"Full output (Dagster, Spark): {log}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("Interrupted (Ctrl-C): nothing uncommitted is visible.", err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            # At once: a normal exit would wait for threads still inside a Spark call (a
            # server that does not answer) and for pyspark's own clean-up calls at exit.
            os._exit(130)

    wrapper = click.option("--debug", is_flag=True, help="Print the full traceback on errors.")(
        wrapper
    )
    return click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help="Show Dagster's event lines and Spark's output on the terminal, not in a log file.",
    )(wrapper)


def _command_name(context: click.Context) -> str:
    """`run`, `maintain-compact`, ...: the command's path below `partlake`."""
    names = []
    while context.parent is not None:
        names.append(context.info_name or "")
        context = context.parent
    return "-".join(reversed(names)) or "partlake"


def selection(select: str | None) -> list[str] | None:
    return [s.strip() for s in select.split(",") if s.strip()] if select else None


def plan_code_location(
    module: str, select: str | None, *, need_instance: bool
) -> tuple[PlanningSession, PlanResult, RunPlan]:
    """Load the code location, plan it, and turn the plan into runs (no runs blocked): the
    session, the plan and the runs. The plan is kept for the next process's shortcut
    (`dagster_partlake.cli.shortcut`)."""
    from dagster_partlake.cli import shortcut
    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.layout import default_persist_dir
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import PlanningSession

    with shortcut.recording(module) as loading:
        graph = LakeGraph(load_definitions(module))
    loading.walk_folders(graph)
    session = PlanningSession(graph, StateCache(default_persist_dir()))
    # Opening the instance costs about a second of imports: without dynamic partitions a plan
    # (and a no-op `partlake run`) does without it.
    store = dagster_instance(need_instance) if session.graph.has_dynamic_partitions else None
    result = session.plan(select=selection(select), dynamic_partitions_store=store)
    shortcut.keep(loading, session, result)
    for line in shortcut.absent_warnings(result.plan):
        echo(line, err=True)
    return session, result, session.runs(result)


@dataclass(frozen=True)
class HistoryTarget:
    name: str
    path: TableLocation  # the table (its URI and storage options)
    selection: PartitionSelection | None  # None: the whole table
    partition_id: Callable[[Mapping[str, str | None]], str] | None  # values -> partition key


def history_target(module: str, asset: str, partition: str | None) -> HistoryTarget:
    """The table of `asset` and the table partitions of `partition` (all: None)."""
    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.planning.graph import LakeGraph

    return table_target(LakeGraph(load_definitions(module)), asset, partition)


def table_target(graph: LakeGraph, asset: str, partition: str | None) -> HistoryTarget:
    """The table of `asset` in `graph` and the table partitions of `partition` (all: None).

    Raises:
        PartlakeError: the asset is unknown, a folder of files, or decoupled with a partition.
        PartitionMismatchError: `partition` is not one of the asset's partition keys.
    """
    from dagster_partlake.delta.payload import WHOLE_TABLE_ID
    from dagster_partlake.delta.reader import open_table
    from dagster_partlake.partitions.keys import KeyCodec, selection_for_keys, validate_keys

    found = graph.assets.get(asset)
    if found is None:
        raise PartlakeError(
            f"unknown asset {asset}; the code location has {', '.join(sorted(graph.assets))}."
        )
    if found.is_folder:
        raise PartlakeError(
            f"asset {asset} is a folder of files without a Delta log, so it has no history and "
            "no commits; change its files directly."
        )
    if partition is not None:
        store = dagster_instance(False) if graph.has_dynamic_partitions else None
        validate_keys(
            found.partitions_def, [partition], asset_name=asset, dynamic_partitions_store=store
        )
        if found.decoupled:
            raise PartlakeError(
                f"the table of asset {asset} (kind {found.kind}) is not partitioned by its Dagster "
                "partitions, so its partitions have no commits of their own; run without "
                "--partition."
            )
    snapshot = open_table(found.location, table_name=asset)
    if not found.columns or found.decoupled:
        return HistoryTarget(asset, found.location, None, lambda _values: WHOLE_TABLE_ID)
    codec = KeyCodec(found.columns, snapshot.column_types)
    columns = [c.column for c in found.columns]

    def partition_id(values: Mapping[str, str | None]) -> str:
        key = codec.key([values.get(c) for c in columns])
        return key or "/".join(f"{c}={values.get(c)}" for c in columns)

    selection = (
        selection_for_keys(found.columns, [partition], snapshot.column_types, asset_name=asset)
        if partition is not None
        else None
    )
    return HistoryTarget(asset, found.location, selection, partition_id)


def code_location_spark(
    graph: LakeGraph,
) -> tuple[Callable[[], SparkSession], Callable[[], None]]:
    """A lazily started session from the code location's SparkResource (default: local), and
    a function stopping it if this command started it."""
    from dagster_partlake.spark.resource import SparkResource, running_session

    resources = (graph.defs.resources if graph.defs else None) or {}
    resource = next((r for r in resources.values() if isinstance(r, SparkResource)), None)
    resource = resource or SparkResource()
    started: list[tuple[SparkSession, bool]] = []

    def session() -> SparkSession:
        if not started:
            owned = running_session() is None
            started.append((resource.spark_session, owned))
        return started[0][0]

    def stop() -> None:
        if started and started[0][1]:
            started[0][0].stop()

    return session, stop


def fail_on_unreadable(plan: Plan) -> None:
    """Print every unreadable table's error (the rest of the plan was shown or run) and exit 1."""
    if not plan.unreadable:
        return
    for table in plan.unreadable:
        echo(f"Error: {table.message}", err=True)
    sys.exit(1)


def skip_final_collection() -> None:
    """At exit, keep the interpreter's last garbage collection away from the objects made so far.

    Walking the object graph of Dagster and the code location at shutdown took about 0.25 s of a
    0.9 s no-op `partlake run`. A process that started no Spark session and no run (its state
    cache files are already in place) has nothing whose release needs a collection; the OS
    reclaims the memory. Registered with atexit, so a caller that runs `main` inside its own
    process is affected only when that process exits.
    """
    import atexit
    import gc

    atexit.register(gc.freeze)


def require_dagster_home() -> None:
    if not os.environ.get("DAGSTER_HOME"):
        raise PartlakeError(
            "DAGSTER_HOME is not set, so runs would not be recorded anywhere; set it to the "
            "Dagster instance directory (make demo uses .partlake/dagster)."
        )


def dagster_instance(required: bool) -> DagsterInstance | None:
    from dagster import DagsterInstance

    home = os.environ.get("DAGSTER_HOME")
    if home:
        if not os.path.isdir(home):
            return DagsterInstance.get()  # Dagster's own error names the missing directory
        return _open_instance(home)
    if required:
        require_dagster_home()
    return None


def _open_instance(home: str) -> DagsterInstance:
    """The instance in `home`, its storages created by one process at a time.

    Dagster's SQLite storages create their tables on first open without IF NOT EXISTS, so of two
    `partlake` processes opening a new instance together one failed with "table
    secondary_indexes already exists". A lock file in `home` serializes the opening.
    """
    import fcntl

    from dagster import DagsterInstance

    with open(os.path.join(home, ".partlake-instance.lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            echo(
                f"[WAITING] for another partlake process to finish opening the Dagster instance "
                f"in {home} (lock {lock.name})",
                err=True,
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        # Creates the run, event log and schedule storages (and their tables) at once.
        return DagsterInstance.get()
