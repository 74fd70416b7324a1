"""Reading a Delta table's log: existence, schema, partition columns, live files, records.

Only the log is read here (checkpoint + JSON commits), never a data file; every read goes through
the table's location (`dagster_partlake.storage`), so a table on an object store reads the same.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeVar
from urllib.parse import unquote

from dagster_partlake.delta.payload import CommitPayload, compact_pairs
from dagster_partlake.delta.selection import PartitionSelection, format_partition_value
from dagster_partlake.errors import TableUnreadableError, UnreadableTableFeatureError
from dagster_partlake.layout import LAST_CHECKPOINT, LOG_DIR, commit_name, commit_version
from dagster_partlake.storage.location import TableLocation, as_location

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable


@dataclass(frozen=True)
class LiveFile:
    """One file of the current table version."""

    path: str  # as stored in the log: relative to the table root, URL-encoded
    size: int
    partition_values: dict[str, str | None]
    num_records: int | None
    modification_time: int
    # Delta statistics of the columns asked for (absent: unknown, the file may hold anything).
    min_values: dict[str, Any] = field(default_factory=dict)
    max_values: dict[str, Any] = field(default_factory=dict)
    null_count: dict[str, int] = field(default_factory=dict)

    @property
    def relative_path(self) -> str:
        """The path relative to the table root, decoded (as a location joins it)."""
        return unquote(self.path)

    def absolute_path(self, root: str | TableLocation) -> str:
        """The file's path or URI (for a local table, its filesystem path)."""
        location = as_location(root)
        return location.join(self.relative_path).uri

    def spark_uri(self, root: str | TableLocation) -> str:
        """The URI Spark reads the file with."""
        return as_location(root).spark_uri(self.relative_path)


Where = str | TableLocation

# Reads of tables' logs in this process, by (kind, table URI): "load" (a whole log: checkpoint
# and commits, by delta-rs), "follow" (only the commits after a loaded version), "list" (a
# listing of the log folder), "commit" (one JSON commit read). How a test and a benchmark count
# what a write reads.
LOG_READS: Counter[tuple[str, str]] = Counter()


def note_read(kind: str, where: Where) -> None:
    """Count one read of a table's log (`LOG_READS`)."""
    LOG_READS[(kind, as_location(where).uri)] += 1


def _log(name: str) -> str:
    return f"{LOG_DIR}/{name}"


def table_exists(where: Where) -> bool:
    """Whether a Delta table lives at `where` (a local path or a location).

    Raises:
        StorageError: the object store refused or did not answer.
    """
    location = as_location(where)
    if location.is_local:
        if not os.path.isdir(os.path.join(location.uri, LOG_DIR)):
            return False
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(location.uri))
    from deltalake import DeltaTable

    try:
        return bool(DeltaTable.is_deltatable(location.delta_uri, location.delta_options))
    except OSError as error:  # an object store that refused or did not answer
        from dagster_partlake.storage.errors import storage_error

        raise storage_error(location, "", error) from error


def is_delta_error(error: BaseException) -> bool:
    """Whether delta-rs raised `error`. Looked up without importing deltalake: a process that
    never imported it (a no-op `partlake run` reads its states from the on-disk cache) cannot
    have raised one of its errors."""
    exceptions = sys.modules.get("deltalake.exceptions")
    return exceptions is not None and isinstance(error, exceptions.DeltaError)


def load_table(
    where: Where, *, table_name: str | None = None, version: int | None = None
) -> DeltaTable:
    """The delta-rs handle of the table at `where`: its latest version, or `version`.

    Raises:
        TableUnreadableError: the log cannot be read (a damaged or missing commit file).
        StorageError: the object store refused or did not answer.
    """
    return delta_table(as_location(where), table_name=table_name, version=version)


def delta_table(
    location: TableLocation, *, table_name: str | None = None, version: int | None = None
) -> DeltaTable:
    """delta-rs' handle on `location` (every delta-rs table partlake opens is opened here)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    note_read("load", location)
    try:
        return DeltaTable(
            location.delta_uri, version=version, storage_options=location.delta_options
        )
    except DeltaError as error:
        raise unreadable(location, error, table_name=table_name) from error
    except OSError as error:  # an object store that refused or did not answer
        from dagster_partlake.storage.errors import storage_error

        raise storage_error(location, "", error) from error


def unreadable(
    where: Where, error: BaseException, *, table_name: str | None = None
) -> TableUnreadableError:
    """The error to raise for a table whose log cannot be read: names the table, its location,
    and what is wrong. Only a broken log (a damaged or missing commit file, or one delta-rs cannot
    read either) is told to restore a file from a backup; a valid table that needs a feature
    partlake lacks is told which (`UnreadableTableFeatureError`)."""
    if isinstance(error, UnreadableTableFeatureError):
        return error
    if isinstance(error, TableUnreadableError):
        if error.__cause__ is None:
            return error  # already says what is wrong
        error = error.__cause__  # said again below, with this table name
    location = as_location(where)
    name = table_name or location.name
    where = f"the Delta log of {name} at {location} cannot be read"
    damage = log_damage(location)
    if damage is None:
        feature = _feature_error(location, name)
        if feature is not None:
            return feature
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        refused = _delta_rs_refusal(location)
        if refused is None:
            return TableUnreadableError(
                f"{where} by partlake's log reader ({first_line}), although delta-rs reads it: "
                f"partlake plans and writes nothing that depends on {name}; please report this "
                "with the table's _delta_log folder."
            )
        damage = f"delta-rs says: {refused}"
    return TableUnreadableError(
        f"{where}: {damage}. Restore the file from a backup (if it is the newest commit and its "
        f"writer was interrupted, moving it out of {LOG_DIR} discards that commit); until the "
        f"log is readable, partlake plans and writes nothing that depends on {name}."
    )


def _feature_error(location: TableLocation, name: str) -> UnreadableTableFeatureError | None:
    """The protocol gate's error for the newest protocol action of the log, if it refuses it."""
    from dagster_partlake.delta.protocol import Protocol, check_readable

    protocol = None
    for version in reversed(log_versions(location)):
        try:
            for line in read_commit_lines(location, version):
                if line.startswith('{"protocol"'):
                    protocol = json.loads(line)["protocol"]
        except (OSError, ValueError, KeyError):
            return None
        if protocol is not None:
            break
    if protocol is None:
        return None
    try:
        check_readable(Protocol.from_action(protocol), table_name=name, root=location.uri)
    except UnreadableTableFeatureError as refused:
        return refused
    except (TypeError, ValueError):
        return None
    return None


def _delta_rs_refusal(location: TableLocation) -> str | None:
    """What delta-rs says when it loads the table (None: it loads it)."""
    from deltalake import DeltaTable

    try:
        DeltaTable(location.delta_uri, storage_options=location.delta_options)
    except Exception as error:  # noqa: BLE001 - its message is what is shown
        return (str(error).strip().splitlines() or [type(error).__name__])[0]
    return None


def log_damage(where: Where) -> str | None:
    """What is wrong with the log's JSON commits after the last checkpoint, or None if they all
    parse and follow each other without a gap (the ones a reader has to read)."""
    location = as_location(where)
    first = _last_checkpoint(location) + 1
    versions = [v for v in log_versions(location) if v >= first]
    for previous, version in zip(versions, versions[1:], strict=False):
        if version != previous + 1:
            return (
                f"commit {previous + 1} is missing (the log jumps from {commit_name(previous)} "
                f"to {commit_name(version)})"
            )
    for version in versions:
        shown = _log(commit_name(version))
        try:
            lines = location.store.read(shown).decode("utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            return f"commit file {shown} cannot be read ({error})"
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError as error:
                return f"commit file {shown} is damaged (line {number}: {error})"
    return None


def _last_checkpoint(location: TableLocation) -> int:
    try:
        return int(json.loads(location.store.read(_log(LAST_CHECKPOINT)))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1


def arrow_schema(table: DeltaTable) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())


def live_files(
    table: DeltaTable, selection: PartitionSelection, stats_columns: Sequence[str] = ()
) -> list[LiveFile]:
    """The files of the loaded version whose partition values lie in `selection`, with the
    min/max statistics of `stats_columns` where the log has them."""
    files = all_live_files(table, stats_columns)
    return [f for f in files if selection.contains(f.partition_values)]


def all_live_files(table: DeltaTable, stats_columns: Sequence[str] = ()) -> list[LiveFile]:
    """Every live file of the loaded version (one pass over delta-rs' add actions)."""
    import pyarrow as pa

    partition_by = table.metadata().partition_columns
    actions = pa.table(table.get_add_actions(flatten=True))
    columns = {name: actions.column(name).to_pylist() for name in actions.column_names}
    return [
        LiveFile(
            path=path,
            size=columns["size_bytes"][i],
            partition_values={
                c: format_partition_value(columns[f"partition.{c}"][i]) for c in partition_by
            },
            num_records=columns["num_records"][i],
            modification_time=columns["modification_time"][i],
            min_values=_stats(columns, "min", stats_columns, i),
            max_values=_stats(columns, "max", stats_columns, i),
            null_count=_stats(columns, "null_count", stats_columns, i),
        )
        for i, path in enumerate(columns["path"])
    ]


def _stats(
    columns: dict[str, list[Any]], prefix: str, wanted: Sequence[str], row: int
) -> dict[str, Any]:
    found = {}
    for column in wanted:
        values = columns.get(f"{prefix}.{column}")
        if values is not None and values[row] is not None:
            found[column] = values[row]
    return found


def log_versions(where: Where) -> list[int]:
    """Versions that have a JSON commit file in the log, ascending (one listing)."""
    note_read("list", where)
    entries = as_location(where).store.list_folder(LOG_DIR)
    return sorted(v for v in (commit_version(e.name) for e in entries) if v is not None)


def read_commit_lines(where: Where, version: int) -> list[str]:
    """The lines of one JSON commit. Raises FileNotFoundError when the log has no such commit."""
    note_read("commit", where)
    data = as_location(where).store.read(_log(commit_name(version)))
    return data.decode("utf-8").splitlines()


def commit_info(
    root: Where, version: int, *, pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None
) -> dict[str, Any]:
    """The commitInfo action of one commit, read from its JSON file ({} if it has none);
    `pairs_hook` builds the objects of a large one (`json.loads`' `object_pairs_hook`, which
    slows the parsing of small ones).

    Raises:
        TableUnreadableError: the commit file is damaged.
    """
    try:
        for line in read_commit_lines(root, version):
            if line.startswith('{"commitInfo"'):
                hook = pairs_hook if len(line) > _LARGE_LINE else None
                return dict(json.loads(line, object_pairs_hook=hook)["commitInfo"])
    except ValueError as error:  # a damaged commit file
        raise unreadable(root, error) from error
    except FileNotFoundError:
        # `checkpoint_table` deleted it after the log was listed: it held no needed record.
        return {}
    return {}


_LARGE_LINE = 1 << 20


def commit_actions(
    root: Where, version: int
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(commitInfo, add actions, remove actions) of one JSON commit.

    Raises:
        FileNotFoundError: the log no longer holds that commit.
        TableUnreadableError: the commit file is damaged.
    """
    info: dict[str, Any] = {}
    adds: list[dict[str, Any]] = []
    removes: list[dict[str, Any]] = []
    try:
        for line in read_commit_lines(root, version):
            if not line.strip():
                continue
            action = json.loads(line)
            if "commitInfo" in action:
                info = dict(action["commitInfo"])
            elif "add" in action:
                adds.append(action["add"])
            elif "remove" in action:
                removes.append(action["remove"])
    except ValueError as error:  # a damaged commit file
        raise unreadable(root, error) from error
    return info, adds, removes


def read_payload(
    root: Where, version: int, *, compact: bool = False, missing_ok: bool = True
) -> CommitPayload | None:
    """The partlake payload of one commit (None if partlake did not write it, or, with
    `missing_ok`, the log no longer has the commit; `compact`: see
    `CommitPayload.from_commit_info`).

    Raises:
        FileNotFoundError: the log has no such commit (without `missing_ok`).
    """
    if not missing_ok:
        info = {}
        try:
            for line in read_commit_lines(root, version):
                if line.startswith('{"commitInfo"'):
                    info = dict(json.loads(line)["commitInfo"])
                    break
        except ValueError as error:  # a damaged commit file
            raise unreadable(root, error) from error
        return CommitPayload.from_commit_info(info, table_version=version)
    info = _compact_commit_info(root, version) if compact else commit_info(root, version)
    return CommitPayload.from_commit_info(info, table_version=version, compact=compact)


def _compact_commit_info(root: Where, version: int) -> dict[str, Any]:
    """`commit_info` for a compact record: a large line is read in bulk
    (`dagster_partlake.delta.commit_scan`), a small one with `compact_pairs`."""
    note_read("commit", root)
    try:
        with as_location(root).store.open(_log(commit_name(version))) as log_file:
            return compact_commit_info(log_file)
    except ValueError as error:  # a damaged commit file
        raise unreadable(root, error) from error
    except FileNotFoundError:
        return {}  # as `commit_info`


def compact_commit_info(log_file: BinaryIO) -> dict[str, Any]:
    """The commitInfo action of an open JSON commit for a compact record ({} if it has none).

    Raises:
        ValueError: the line is not JSON (a damaged commit file).
    """
    from dagster_partlake.delta.commit_scan import scan_commit_info

    span = _line_span(log_file, b'{"commitInfo"')
    if span is None:
        return {}
    log_file.seek(span[0])
    line = log_file.read(span[1] - span[0])  # one copy: `readline` makes several
    if len(line) > _LARGE_LINE:
        return scan_commit_info(line)
    return dict(json.loads(line, object_pairs_hook=compact_pairs)["commitInfo"])


def _line_span(log_file: BinaryIO, prefix: bytes) -> tuple[int, int] | None:
    """(start, end) of the first line starting with `prefix`, found a block at a time."""
    position, carry = 0, b""
    found = None
    while block := log_file.read(1 << 22):
        data = carry + block
        base = position - len(carry)
        cut = 0
        while (newline := data.find(b"\n", cut)) >= 0:
            if found is None and data.startswith(prefix, cut):
                found = base + cut
            if found is not None:
                return found, base + newline
            cut = newline + 1
        if found is None and data.startswith(prefix, cut):
            found = base + cut
        carry = data[cut:] if found is None else b""
        position += len(block)
    return (found, position) if found is not None else None


def changes_data(root: Where, version: int) -> bool:
    """Whether the commit `version` of `root` adds or removes data (dataChange true)."""
    try:
        for line in read_commit_lines(root, version):
            action = json.loads(line) if line.strip() else {}
            for kind in ("add", "remove"):
                if kind in action and action[kind].get("dataChange", True):
                    return True
    except OSError:
        return True  # cleaned up or unreadable: not known to be maintenance
    return False


class _Written(Protocol):
    """What `newest_per_id` asks of a commit: a payload or a record."""

    @property
    def partition_ids(self) -> Sequence[str]: ...
    @property
    def commit_time_ms(self) -> int | None: ...


_W = TypeVar("_W", bound=_Written)


def newest_per_id(
    records: Iterable[_W | None],
    partition_ids: Iterable[str],
    *,
    floor_ms: int | None = None,
) -> dict[str, _W]:
    """The first of `records` (newest first; None: not a partlake commit) that wrote each of
    `partition_ids`, reading no further than needed (nor past a record older than
    `floor_ms`)."""
    wanted = set(partition_ids)
    found: dict[str, _W] = {}
    for record in records:
        if not wanted:
            break
        if record is None:
            continue
        if floor_ms is not None and (record.commit_time_ms or floor_ms) < floor_ms:
            break
        for pid in wanted.intersection(record.partition_ids):
            found[pid] = record
        wanted.difference_update(found)
    return found
