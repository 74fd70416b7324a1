"""Every metadata key partlake reads, with where it goes, its type and how it is checked.

One row per setting (`SETTINGS`), the source of the reference page
(docs/reference/settings.md, which a test keeps equal to it). A `partlake/*` key that no row
names, or a key put where it does not belong (an input's `partlake/version` in an asset's
metadata), is refused with a "did you mean" (`check_keys`). Pure: no Dagster.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.gates.spec import AUDITS_KEY, CONSTRAINTS_KEY
from dagster_partlake.incremental.guards import CONDITIONS_KEY, FAIL_IF_NO_INPUT_KEY
from dagster_partlake.incremental.landing import AFTER_COMMIT_KEY
from dagster_partlake.incremental.spec import INCREMENTAL_KEY
from dagster_partlake.kinds.spec import KIND_KEY, PARTITION_BY_KEY, UNIQUE_KEY_KEY
from dagster_partlake.metadata import (
    FORMAT_KEY,
    KAFKA_KEY,
    PARTITION_EXPR_KEY,
    PATH_KEY,
    POSTGRES_KEY,
    ROOT_KEY,
    SCHEMA_MODE_KEY,
    SQL_PATH_KEY,
    STREAM_KEY,
    TIMESTAMP_KEY,
    VERSION_KEY,
    WRITER_KEY,
)

PREFIX = "partlake/"
On = Literal["asset", "input"]


@dataclass(frozen=True)
class Setting:
    """One metadata key: where it goes, what it holds, what is checked when the code loads."""

    key: str
    on: tuple[On, ...]  # an asset's definition metadata, an input's (`AssetIn(metadata=...)`)
    applies_to: str  # which assets read it
    type: str
    checked: str  # what loading the code location checks


SETTINGS: tuple[Setting, ...] = (
    Setting(
        PARTITION_EXPR_KEY,
        ("asset",),
        "partitioned assets and sources",
        "str (one dimension) or dict dimension -> column",
        "names only dimensions (or parts of a combined one) of the partitions definition, one "
        "column each; a str only for one dimension, a dict only for several; refused on an "
        "unpartitioned asset",
    ),
    Setting(
        SCHEMA_MODE_KEY,
        ("asset",),
        "managed assets",
        '"add_columns"',
        '"add_columns" or absent (a write may then add new columns)',
    ),
    Setting(
        KIND_KEY,
        ("asset",),
        "managed assets",
        "partition, table, tracked, append, merge or scd2",
        "one of the kinds; partition and tracked need partitions, table none; a streaming "
        "asset is append",
    ),
    Setting(
        UNIQUE_KEY_KEY,
        ("asset",),
        "merge and scd2 models",
        "list of column names",
        "required by merge and scd2; non-empty names",
    ),
    Setting(
        PARTITION_BY_KEY,
        ("asset",),
        "append, merge and scd2 models",
        "list of column names (may be empty)",
        "only on append, merge and scd2; non-empty names",
    ),
    Setting(
        CONSTRAINTS_KEY,
        ("asset",),
        "managed assets",
        "list of {not_null | unique | accepted_values | expression | row_count, severity?, name?}",
        "each entry names exactly one constraint with a well-formed value; severity error or "
        "warn; gate names unique; a streaming asset has none",
    ),
    Setting(
        AUDITS_KEY,
        ("asset",),
        "partition, table and tracked models",
        "list of {row_count_change | no_partition_emptied | column_sum | column_mean, severity?, "
        "name?}",
        "as constraints; refused on append, merge and scd2 (they replace no partitions)",
    ),
    Setting(
        INCREMENTAL_KEY,
        ("asset", "input"),
        "inputs of managed assets (on the asset: the default of every input)",
        '"log", {"column": c} or {"mode": "log", "allow_full_reread": bool}',
        "one of the three forms (or None / false: read everything)",
    ),
    Setting(
        FAIL_IF_NO_INPUT_KEY,
        ("asset",),
        "managed assets",
        "bool",
        "true or false",
    ),
    Setting(
        CONDITIONS_KEY,
        ("asset",),
        "managed assets",
        'list of {expression, description?, action?: "skip" | "fail"}',
        "each entry has a non-empty expression and a known action (whether the expression is "
        "a boolean over the run's facts, Spark says at the run)",
    ),
    Setting(
        STREAM_KEY,
        ("asset",),
        "streaming assets",
        "dict (mode, trigger_interval, format, schema, options, query) or true",
        "known keys and values; the asset is of kind append without gates; its input is a "
        "folder exactly when a format is given",
    ),
    Setting(
        WRITER_KEY,
        ("asset",),
        "managed assets",
        '"partlake" or "delta-spark" (default: the IO manager\'s writer)',
        'one of the two; "delta-spark" only for the kinds partition and table',
    ),
    Setting(
        FORMAT_KEY,
        ("asset",),
        "sources",
        '"delta" (default), "folder", "postgres" or "kafka"',
        'one of the four, only on a source (a managed asset is a Delta table); "postgres" '
        'and "kafka" are set by partlake_source(..., postgres=...) / (..., kafka=...)',
    ),
    Setting(
        PATH_KEY,
        ("asset",),
        "sources",
        "str, relative to the lake root (or absolute)",
        "a non-empty string, only on a source (a managed asset's table is at its key's path)",
    ),
    Setting(
        ROOT_KEY,
        ("asset",),
        "sources",
        "str: a lake root, a path or a URI (default: the IO manager's root)",
        "a non-empty string, only on a source (set by partlake_source(..., root=...))",
    ),
    Setting(
        POSTGRES_KEY,
        ("asset",),
        "PostgreSQL sources",
        "dict: a PostgresTable's settings (table or query, host, port, database, user, "
        "password_env, split_column, split_rows, fetch_size)",
        'known keys, exactly one of table and query, with partlake/format "postgres" (set by '
        "partlake_source(..., postgres=PostgresTable(...)))",
    ),
    Setting(
        KAFKA_KEY,
        ("asset",),
        "Kafka sources",
        "dict: a KafkaTopic's settings (topic, bootstrap_servers, options, options_env, "
        "starting_offsets)",
        'known keys, a topic, with partlake/format "kafka" (set by partlake_source(..., '
        "kafka=KafkaTopic(...))); what reads it is a streaming asset",
    ),
    Setting(
        AFTER_COMMIT_KEY,
        ("asset",),
        "folder sources",
        '"archive" or "delete"',
        'one of the two, only with partlake/format "folder"',
    ),
    Setting(
        VERSION_KEY,
        ("input",),
        "inputs (AssetIn)",
        "int >= 0 (a Delta table version)",
        "an integer >= 0, not together with partlake/timestamp",
    ),
    Setting(
        TIMESTAMP_KEY,
        ("input",),
        "inputs (AssetIn)",
        "ISO 8601 str or datetime",
        "parses as ISO 8601, not together with partlake/version",
    ),
    Setting(
        SQL_PATH_KEY,
        ("asset",),
        "SQL models (set by sql_assets)",
        "str (the model file)",
        "set by sql_assets, not by hand",
    ),
)

_BY_KEY = {s.key: s for s in SETTINGS}


def check_keys(metadata: Mapping[str, Any] | None, *, on: On, owner: str) -> None:
    """Refuse the `partlake/*` keys of `metadata` that partlake does not read there.

    Args:
        metadata: an asset's definition metadata (`on="asset"`) or an input's (`on="input"`).
        owner: what holds the metadata, for the message ("asset clean_events", "input events
            of asset clean_events").

    Raises:
        PartlakeConfigError: naming the key, the owner and, where close, the key meant.
    """
    for key in metadata or {}:
        if not isinstance(key, str) or not key.startswith(PREFIX):
            continue
        setting = _BY_KEY.get(key)
        if setting is not None and on in setting.on:
            continue
        if setting is not None:
            where = (
                "an input's metadata, AssetIn(metadata={...})"
                if setting.on == ("input",)
                else "the asset's definition metadata, @asset(metadata={...})"
            )
            raise PartlakeConfigError(
                f"{owner} sets '{key}', which partlake reads only in {where}; move it there."
            )
        here = sorted(s.key for s in SETTINGS if on in s.on and s.key.startswith(PREFIX))
        close = difflib.get_close_matches(key, here, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise PartlakeConfigError(
            f"{owner} sets '{key}', which is not a partlake setting{hint}; the {on} settings "
            f"are {', '.join(here)}."
        )
