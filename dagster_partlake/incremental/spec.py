"""Incremental inputs (SmartDataLakeBuilder's execution modes), as declared.

Partition invalidation decides which partitions run; these decide which upstream rows a run
reads and whether it runs at all. Declared per input (`AssetIn(metadata=...)`) or per asset
(definition metadata, applying to every input that does not say otherwise):

- `partlake/incremental: {"column": "updated_at"}` (watermark): the input holds only the rows
  whose column is greater than the high watermark this asset's last commit recorded; the commit
  records the new one (the maximum read). The first run reads everything; a failed run records
  nothing, so the next run reads the same rows again.
- `partlake/incremental: "log"`: the input holds only the rows of the files added to the
  upstream Delta table since the version this asset last consumed, found in the log without
  opening old files. If the upstream removed or rewrote files in between, the run fails, unless
  `{"mode": "log", "allow_full_reread": true}`, which then reads the whole upstream.
- `partlake/fail_if_no_input: true`: a run whose inputs are all empty fails instead of writing
  nothing.
- `partlake/conditions: [{"expression": "...", "description": "...", "action": "skip"|"fail"}]`:
  Spark SQL over the run's facts (`partition_key`, `partition_keys`, `input_rows`,
  `<input>_rows`, `<input>_watermark`, `run_tags`); `skip` succeeds and writes nothing (the
  partitions are recorded as consumed, so they are not planned again until an input changes),
  `fail` fails the run with the condition's description.

This module is pure: parsing and the facts' shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.metadata import plain

INCREMENTAL_KEY = "partlake/incremental"

Mode = Literal["watermark", "log"]


@dataclass(frozen=True)
class Incremental:
    """How one input is read incrementally."""

    mode: Mode
    column: str | None = None  # watermark: the compare column
    allow_full_reread: bool = False  # log: read everything when the upstream was rewritten


def incremental_of(
    input_metadata: Mapping[str, Any] | None,
    asset_metadata: Mapping[str, Any] | None,
    *,
    input_name: str,
    asset_name: str,
) -> Incremental | None:
    """The input's incremental mode (its own metadata first, then the asset's), or None.

    Raises:
        PartlakeConfigError: the declaration is malformed.
    """
    for metadata in (input_metadata or {}, asset_metadata or {}):
        if INCREMENTAL_KEY in metadata:
            return _parse(plain(metadata[INCREMENTAL_KEY]), input_name, asset_name)
    return None


def _parse(value: object, input_name: str, asset_name: str) -> Incremental | None:
    where = f"{INCREMENTAL_KEY} of input {input_name} of asset {asset_name}"
    if value is None or value is False:
        return None
    if value == "log":
        return Incremental("log")
    if isinstance(value, Mapping):
        if set(value) == {"column"} and isinstance(value["column"], str) and value["column"]:
            return Incremental("watermark", column=value["column"])
        if value.get("mode") == "log" and set(value) <= {"mode", "allow_full_reread"}:
            full = value.get("allow_full_reread", False)
            if isinstance(full, bool):
                return Incremental("log", allow_full_reread=full)
    raise PartlakeConfigError(
        f'{where} is {value!r}; use {{"column": "updated_at"}} (a watermark), "log" (the '
        'files added since the last run), or {"mode": "log", "allow_full_reread": true}.'
    )
