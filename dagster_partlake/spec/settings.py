"""Every metadata key partlake reads, with where it goes, its type and how it is checked.

One row per setting (`SETTINGS`): what the key is for, one example value, where it goes, its
type and what loading the code location checks. The rows are the source of two reference pages:
docs/reference/settings.md (a table a test keeps in step with them) and
docs/reference/metadata.md (written from them by `scripts/metadata_page.py`; a test keeps it
equal to that output and loads a code location carrying every example, so each example passes
the checks). A `partlake/*` key that no row names, or a key put where it does not belong (an
input's `partlake/version` in an asset's metadata), is refused with a "did you mean"
(`check_keys`): a new key needs a row, and a row needs a description and an example. Pure: no
Dagster.
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
    RETENTION_KEY,
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
    description: str  # what the key does, for the reference page
    example: Any  # one value the checks accept (tests/test_metadata_page.py loads each)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        PARTITION_EXPR_KEY,
        ("asset",),
        "partitioned assets and sources",
        "str (one dimension) or dict dimension -> column",
        "names only dimensions (or parts of a combined one) of the partitions definition, one "
        "column each; a str only for one dimension, a dict only for several; refused on an "
        "unpartitioned asset",
        description=(
            "The table columns that hold the asset's partition dimensions: one column name "
            "for a one-dimension partitions definition, a dict dimension -> column for "
            "several. Without it each dimension of several is stored in a column of its "
            "name, and a single one in `date` (time windows), the dynamic definition's name "
            "or `partition`."
        ),
        example={"date": "order_date", "region": "region"},
    ),
    Setting(
        SCHEMA_MODE_KEY,
        ("asset",),
        "managed assets",
        '"add_columns"',
        '"add_columns" or absent (a write may then add new columns)',
        description=(
            "Lets a write add columns the table does not have yet (a metadata-only commit "
            "before the data); without it a DataFrame with new columns is refused, naming "
            "them."
        ),
        example="add_columns",
    ),
    Setting(
        KIND_KEY,
        ("asset",),
        "managed assets",
        "partition, table, tracked, append, merge or scd2",
        "one of the kinds; partition and tracked need partitions, table none; a streaming "
        "asset is append",
        description=(
            "What a run does to the asset's table: replace its partitions (`partition`), "
            "replace the whole table (`table`), replace only partitions whose rows changed "
            "(`tracked`), add the rows (`append`), upsert them on `partlake/unique_key` "
            "(`merge`) or keep their history (`scd2`)."
        ),
        example="merge",
    ),
    Setting(
        UNIQUE_KEY_KEY,
        ("asset",),
        "merge and scd2 models",
        "list of column names",
        "required by merge and scd2; non-empty names",
        description=(
            "The columns that identify a row for merge and scd2: a returned row replaces the "
            "stored row with the same key."
        ),
        example=["order_id"],
    ),
    Setting(
        PARTITION_BY_KEY,
        ("asset",),
        "append, merge and scd2 models",
        "list of column names (may be empty)",
        "only on append, merge and scd2; non-empty names",
        description=(
            "How the table of an append, merge or scd2 model is partitioned (empty: "
            "unpartitioned); without it, by the dimension columns (scd2: unpartitioned)."
        ),
        example=["region"],
    ),
    Setting(
        CONSTRAINTS_KEY,
        ("asset",),
        "managed assets",
        "list of {not_null | unique | accepted_values | expression | row_count, severity?, name?}",
        "each entry names exactly one constraint with a well-formed value; severity error or "
        "warn; gate names unique; a streaming asset has none",
        description=(
            "Quality gates on the rows a run writes, judged before its commit: a failed gate "
            "of severity error commits nothing and fails the run; warn commits and records "
            "the failure. Each gate is also an asset check."
        ),
        example=[
            {"not_null": ["order_id"]},
            {"expression": "amount >= 0", "name": "non_negative", "severity": "warn"},
        ],
    ),
    Setting(
        AUDITS_KEY,
        ("asset",),
        "partition, table and tracked models",
        "list of {row_count_change | no_partition_emptied | column_sum | column_mean, severity?, "
        "name?}",
        "as constraints; refused on append, merge and scd2 (they replace no partitions)",
        description=(
            "Quality gates that compare the partitions a run writes with those they replace "
            "(row count, sums and means, no partition emptied), judged before the commit like "
            "constraints."
        ),
        example=[{"row_count_change": {"max_change": 0.5}, "severity": "warn"}],
    ),
    Setting(
        INCREMENTAL_KEY,
        ("asset", "input"),
        "inputs of managed assets (on the asset: the default of every input)",
        '"log", {"column": c} or {"mode": "log", "allow_full_reread": bool}',
        "one of the three forms (or None / false: read everything)",
        description=(
            "Which upstream rows an input holds: only those of the files added to the "
            "upstream table since the asset last read it (`'log'`), or only the rows whose "
            "column is past the watermark of the asset's last commit (`{'column': c}`); "
            "without it, all of the mapped partitions."
        ),
        example={"column": "updated_at"},
    ),
    Setting(
        FAIL_IF_NO_INPUT_KEY,
        ("asset",),
        "managed assets",
        "bool",
        "true or false",
        description="Fails a run whose inputs are all empty instead of letting it write nothing.",
        example=True,
    ),
    Setting(
        CONDITIONS_KEY,
        ("asset",),
        "managed assets",
        'list of {expression, description?, action?: "skip" | "fail"}',
        "each entry has a non-empty expression and a known action (whether the expression is "
        "a boolean over the run's facts, Spark says at the run)",
        description=(
            "Run guards: Spark SQL booleans over the run's facts (`partition_key`, "
            "`input_rows`, `<input>_rows`, ...) that must hold for the run to write; `'fail'` "
            "fails the run, `'skip'` writes nothing and records its inputs as consumed."
        ),
        example=[{"expression": "orders_rows >= 3", "description": "a full day", "action": "skip"}],
    ),
    Setting(
        STREAM_KEY,
        ("asset",),
        "streaming assets",
        "dict (mode, trigger_interval, format, schema, options, query) or true",
        "known keys and values; the asset is of kind append without gates; its input is a "
        "folder exactly when a format is given",
        description=(
            "Makes the asset a streaming asset: its input (a landing folder, another partlake "
            "table's new commits or a Kafka topic) is read with Spark Structured Streaming "
            "and each micro-batch is committed once."
        ),
        example={"mode": "available_now"},
    ),
    Setting(
        WRITER_KEY,
        ("asset",),
        "managed assets",
        '"partlake" or "delta-spark" (default: the IO manager\'s writer)',
        'one of the two; "delta-spark" only for the kinds partition and table',
        description=(
            "Who writes and commits this asset's table, overriding the IO manager's writer: "
            "partlake's own writer (`'partlake'`) or Spark's Delta (`'delta-spark'`)."
        ),
        example="delta-spark",
    ),
    Setting(
        FORMAT_KEY,
        ("asset",),
        "sources",
        '"delta" (default), "folder", "postgres" or "kafka"',
        'one of the four, only on a source (a managed asset is a Delta table); "postgres" '
        'and "kafka" are set by partlake_source(..., postgres=...) / (..., kafka=...)',
        description=(
            "What a source is: a Delta table, a folder of Parquet files in `col=value/` "
            "folders, a PostgreSQL table or a Kafka topic."
        ),
        example="folder",
    ),
    Setting(
        PATH_KEY,
        ("asset",),
        "sources",
        "str, relative to the lake root (or absolute)",
        "a non-empty string, only on a source (a managed asset's table is at its key's path)",
        description=(
            "Where a source's table or folder is, when not at `<root>/warehouse/<key path>`."
        ),
        example="landing/orders",
    ),
    Setting(
        ROOT_KEY,
        ("asset",),
        "sources",
        "str: a lake root, a path or a URI (default: the IO manager's root)",
        "a non-empty string, only on a source (set by partlake_source(..., root=...))",
        description=(
            "A source's own lake root, when it lives outside the IO manager's lake: its table "
            "is then `<root>/warehouse/<key path>` (or `<root>/<path>`)."
        ),
        example="s3://landing/prod",
    ),
    Setting(
        POSTGRES_KEY,
        ("asset",),
        "PostgreSQL sources",
        "dict: a PostgresTable's settings (table or query, host, port, database, user, "
        "password_env, split_column, split_rows, fetch_size, read_by)",
        'known keys, exactly one of table and query, with partlake/format "postgres" (set by '
        "partlake_source(..., postgres=PostgresTable(...)))",
        description=(
            "A PostgreSQL source's table or query and server (never the password: it is read "
            "from the variable `password_env` names)."
        ),
        example={
            "table": "public.orders",
            "host": "127.0.0.1",
            "port": 5433,
            "database": "shop",
            "user": "partlake",
            "password_env": "SHOP_DB_PASSWORD",
        },
    ),
    Setting(
        KAFKA_KEY,
        ("asset",),
        "Kafka sources",
        "dict: a KafkaTopic's settings (topic, bootstrap_servers, options, options_env, "
        "starting_offsets)",
        'known keys, a topic, with partlake/format "kafka" (set by partlake_source(..., '
        "kafka=KafkaTopic(...))); what reads it is a streaming asset",
        description=(
            "A Kafka source's topic, broker and client settings (secrets through `options_env`)."
        ),
        example={
            "topic": "clicks",
            "bootstrap_servers": "127.0.0.1:9092",
            "starting_offsets": "earliest",
        },
    ),
    Setting(
        AFTER_COMMIT_KEY,
        ("asset",),
        "folder sources",
        '"archive" or "delete"',
        'one of the two, only with partlake/format "folder"',
        description=(
            "Makes a folder source a landing folder whose files are read once: after the "
            "commit of the run that read them they move to `<folder>/_archive/` "
            "(`'archive'`) or are deleted (`'delete'`)."
        ),
        example="archive",
    ),
    Setting(
        RETENTION_KEY,
        ("asset",),
        "partitioned assets (sources: keep_last or condition only)",
        "dict: keep_last (int) [dimension] | condition (SQL over the dimension values), "
        "cascade (bool), archive (str), compact_after (int)",
        "known keys; one of keep_last and condition; a dimension the asset has (a time one "
        "for keep_last); keep_last >= 1 and a condition not true for every partition (a "
        "window that retires every partition is refused); no cascade, archive or "
        "compact_after on a source; a partitioned asset",
        description=(
            "Partition retention: the partitions older than the newest `keep_last` windows of "
            "the time dimension (counted from the newest partition present), or those a SQL "
            "`condition` over the partition values selects, are retired: never `missing` or "
            "stale, never rebuilt, and removed by `partlake maintain --retention` (after a "
            "copy to `archive`, if set). `cascade` retires the partitions that read a retired "
            "upstream partition; `compact_after` rewrites partitions older than the newest N "
            "into one file each. See the guide Partition retention."
        ),
        example={"keep_last": 90, "archive": "archive/orders", "compact_after": 30},
    ),
    Setting(
        VERSION_KEY,
        ("input",),
        "inputs (AssetIn)",
        "int >= 0 (a Delta table version)",
        "an integer >= 0, not together with partlake/timestamp",
        description=(
            "Pins an input to a version of its upstream table (time travel); a pinned input "
            "is not a planning edge: its asset does not go stale when the upstream moves on."
        ),
        example=3,
    ),
    Setting(
        TIMESTAMP_KEY,
        ("input",),
        "inputs (AssetIn)",
        "ISO 8601 str or datetime",
        "parses as ISO 8601, not together with partlake/version",
        description=(
            "Pins an input to its upstream table as it was at a time; like `partlake/version`, "
            "not a planning edge."
        ),
        example="2024-01-05T00:00:00Z",
    ),
    Setting(
        SQL_PATH_KEY,
        ("asset",),
        "SQL models (set by sql_assets)",
        "str (the model file)",
        "set by sql_assets, not by hand",
        description=(
            "The model file of a SQL model, which `partlake sql render` reads; `sql_assets` "
            "sets it."
        ),
        example="/srv/shop/models/staging/orders.sql",
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
