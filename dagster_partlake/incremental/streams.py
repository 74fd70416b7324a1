"""Streaming assets (SmartDataLakeBuilder's `SparkStreamingMode`, Flare's stream jobs), as declared.

An asset with definition metadata `partlake/stream` reads its one input as a Spark Structured
Streaming source and writes each micro-batch through partlake's writer (`foreachBatch`):

    @asset(partitions_def=daily, metadata={"partlake/stream": {"format": "json",
                                                              "schema": "id long, ts timestamp"}})
    def events(landing: DataFrame) -> DataFrame:  # a streaming DataFrame
        return landing.withColumn("date", F.to_date("ts"))

- The input is a folder source (`partlake_source(..., folder=True)`) read with Spark's own file
  source (`format`: `json`, `csv` or `parquet`; `schema` in Spark DDL, needed for JSON and CSV;
  `options` for the reader, e.g. `{"header": "true"}` or `{"maxFilesPerTrigger": "10"}`), or
  another partlake Delta table, whose new commits are read from its log
  (`dagster_partlake.delta.stream_source`; no `format`).
- `mode: "available_now"` (default): a run processes everything new in one or more micro-batches
  and stops, like any asset run (the sensor, `partlake run` and the UI request it when its input
  changed). `mode: "continuous"` with `trigger_interval` (Spark's processing time, e.g.
  `"10 seconds"`): a run that keeps processing until it is cancelled; it stops after the current
  micro-batch's commit. A continuous asset is never requested by the planner: its table is planned
  as a source of what reads it.
- Each micro-batch is one `append` commit carrying the Delta transaction (`txn`) of the query
  with the batch id as version: a batch Spark replays after a crash commits nothing twice.

This module is pure: the declaration and its checks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.metadata import STREAM_KEY, plain

Mode = Literal["available_now", "continuous"]
Format = Literal["json", "csv", "parquet"]
MODES: tuple[Mode, ...] = get_args(Mode)
FORMATS: tuple[Format, ...] = get_args(Format)
_KEYS = {"mode", "trigger_interval", "format", "schema", "options", "query"}
_INTERVAL = re.compile(r"^\d+(\.\d+)?\s+(milliseconds?|seconds?|minutes?|hours?)$")
DEFAULT_INTERVAL = "10 seconds"


@dataclass(frozen=True)
class StreamSpec:
    """How a streaming asset reads its input and when its query stops."""

    mode: Mode = "available_now"
    trigger_interval: str = DEFAULT_INTERVAL  # continuous: Spark's processingTime trigger
    format: Format | None = None  # a folder's files; None: a Delta table's new commits
    schema: str | None = None  # Spark DDL of the files (JSON and CSV need one)
    options: Mapping[str, str] = field(default_factory=dict)  # the Spark reader's options
    query: str | None = None  # the query's name (default: the asset's): its checkpoint folder

    @property
    def continuous(self) -> bool:
        return self.mode == "continuous"


def stream_of(metadata: Mapping[str, Any] | None, *, asset_name: str) -> StreamSpec | None:
    """The asset's `partlake/stream` declaration, or None for an asset that does not stream.

    Raises:
        PartlakeConfigError: the declaration is malformed (the message names the fix).
    """
    raw = plain((metadata or {}).get(STREAM_KEY))
    if raw is None:
        return None
    where = f"{STREAM_KEY} of asset {asset_name}"
    if raw is True:
        raw = {}
    if not isinstance(raw, Mapping):
        raise PartlakeConfigError(
            f"{where} is {raw!r}; give a dict such as {{'mode': 'available_now'}} or "
            "{'mode': 'continuous', 'trigger_interval': '10 seconds', 'format': 'json', "
            "'schema': 'id long, ts timestamp'}."
        )
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise PartlakeConfigError(
            f"{where} has unknown key(s) {', '.join(unknown)}; the keys are "
            f"{', '.join(sorted(_KEYS))}."
        )
    mode = raw.get("mode", "available_now")
    if mode not in MODES:
        raise PartlakeConfigError(
            f"{where} has mode {mode!r}; use 'available_now' (a run processes what is new and "
            "stops) or 'continuous' (a run processes micro-batches until it is cancelled)."
        )
    interval = str(raw.get("trigger_interval", DEFAULT_INTERVAL)).strip()
    if not _INTERVAL.match(interval):
        raise PartlakeConfigError(
            f"{where} has trigger_interval {interval!r}; write it like '10 seconds', "
            "'500 milliseconds' or '1 minute'."
        )
    if "trigger_interval" in raw and mode != "continuous":
        raise PartlakeConfigError(
            f"{where} sets trigger_interval, but mode {mode!r} runs until nothing is new; set "
            "mode 'continuous' for a query that keeps running, or drop trigger_interval."
        )
    return StreamSpec(
        mode=mode,
        trigger_interval=interval,
        format=_format(raw, where),
        schema=_schema(raw, where),
        options=_options(raw, where),
        query=_query(raw, where),
    )


def _format(raw: Mapping[str, Any], where: str) -> Format | None:
    value = raw.get("format")
    if value is not None and value not in FORMATS:
        raise PartlakeConfigError(
            f"{where} has format {value!r}; a folder of files is read as one of "
            f"{', '.join(FORMATS)} (leave it out to stream another Delta table's commits)."
        )
    if value in ("json", "csv") and not raw.get("schema"):
        raise PartlakeConfigError(
            f"{where} reads {value} files without a schema; Spark streams files only with a "
            "known schema, so add 'schema' in Spark DDL, e.g. 'id long, ts timestamp'."
        )
    return value


def _schema(raw: Mapping[str, Any], where: str) -> str | None:
    value = raw.get("schema")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise PartlakeConfigError(
            f"{where} has schema {value!r}; give it in Spark DDL, e.g. 'id long, ts timestamp'."
        )
    if value is not None and raw.get("format") is None:
        raise PartlakeConfigError(
            f"{where} gives a schema but no format; a schema describes files (add 'format'), a "
            "Delta table's commits carry the table's own schema."
        )
    return value


def _options(raw: Mapping[str, Any], where: str) -> dict[str, str]:
    value = raw.get("options") or {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise PartlakeConfigError(
            f"{where} has options {value!r}; give a dict of Spark reader options, e.g. "
            "{'header': 'true'}."
        )
    return {k: str(v) for k, v in value.items()}


def _query(raw: Mapping[str, Any], where: str) -> str | None:
    value = raw.get("query")
    if value is not None and not (isinstance(value, str) and re.fullmatch(r"[\w.-]+", value)):
        raise PartlakeConfigError(
            f"{where} has query {value!r}; a query name is letters, digits, '_', '.' or '-' "
            "(it names the checkpoint folder)."
        )
    return value
