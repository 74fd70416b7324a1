"""Where things live in a lake: the root, each asset's table, and the files of a Delta log.

Pure (no Dagster, no storage access): the names every module agrees on, so the IO manager, the
state reader, the sensor, the CLI and the example agree on one layout (a table's location, local
or on an object store, is `dagster_partlake.storage.location`'s; `table_location` puts a managed
asset's table under the lake root):

    <root>/warehouse/<asset key path>/          a managed asset's Delta table
    <root>/<partlake/path metadata>/            a source that says where it lives
    <table>/_delta_log/<version:020d>.json      one commit
    <table>/_delta_log/_last_checkpoint         the newest checkpoint's version
    <table>/_partlake_staging/<uuid>/           files written by a run, not committed yet
    <table>/_partlake_stream/<query>/           a streaming query's checkpoint (offsets, commits)
    $DAGSTER_HOME/partlake_run_processes/       one file per running `partlake run` process

Every folder partlake keeps inside a table starts with `_`: delta-rs' readers and vacuum skip
such folders, and so does `partlake maintain vacuum` (it removes only old staging folders).
"""

from __future__ import annotations

import os

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
STAGING_DIR = "_partlake_staging"
STREAM_DIR = "_partlake_stream"
WAREHOUSE_DIR = "warehouse"
# In the Dagster instance's directory ($DAGSTER_HOME): one file per running `partlake run`
# process (`orchestration.workers`); a file left there is a process that died.
RUN_REGISTRY_DIR = "partlake_run_processes"


def default_root() -> str:
    """`$PARTLAKE_HOME`, else `.partlake` in the working directory."""
    return os.environ.get("PARTLAKE_HOME") or ".partlake"


def resolve_root(root: str | None) -> str:
    """The absolute local folder `root`, else `default_root()`: where partlake keeps its own
    files on this machine (logs, state caches, servers), which is the lake root too unless the
    IO manager names another (`dagster_partlake.storage.location.lake_location`)."""
    return os.path.abspath(root or default_root())


def default_persist_dir() -> str:
    """Where command-line processes keep table states and their last plan:
    `$PARTLAKE_CACHE_DIR`, else the user's cache folder."""
    explicit = os.environ.get("PARTLAKE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dagster_partlake", "state")


def log_dir(table: str) -> str:
    return os.path.join(table, LOG_DIR)


def commit_name(version: int) -> str:
    """`00000000000000000007.json` for version 7."""
    return f"{version:020d}.json"


def commit_file(table: str, version: int) -> str:
    return os.path.join(table, LOG_DIR, commit_name(version))


def commit_version(name: str) -> int | None:
    """The version of a JSON commit file name, None for any other file of the log."""
    if len(name) == 25 and name.endswith(".json") and name[:20].isdigit():
        return int(name[:20])
    return None


def last_checkpoint_file(table: str) -> str:
    return os.path.join(table, LOG_DIR, LAST_CHECKPOINT)


def staging_dir(table: str) -> str:
    return os.path.join(table, STAGING_DIR)


def stream_checkpoint(table: str, query: str) -> str:
    """Where the streaming query `query` writing `table` keeps its checkpoint."""
    return os.path.join(table, STREAM_DIR, query)
