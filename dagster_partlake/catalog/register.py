"""Registering a Delta table under its name: create the entry, or bring its schema up to date.

Used after a commit (the IO manager, the maintenance job) and by `partlake catalog sync`. Never
drops, renames or repoints an entry: a name taken by another format or another location is a
`CatalogError` naming both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dagster_partlake.catalog.client import CatalogEntry, Metastore
from dagster_partlake.errors import CatalogError
from dagster_partlake.storage import TableLocation

if TYPE_CHECKING:
    from dagster_partlake.catalog.config import LakeCatalog

Outcome = Literal["registered", "schema updated", "unchanged", "moved"]


@dataclass(frozen=True)
class Registration:
    """What registering one table did, and how long the metastore took."""

    name: str
    location: str
    outcome: Outcome
    seconds: float

    def describe(self) -> str:
        return f"{self.name}: {self.outcome} ({self.location})"


def table_schema_json(location: TableLocation) -> str:
    """The table's schema as its Delta log spells it (Spark's StructType JSON); the table's
    metadata only is read, not its files."""
    from deltalake import DeltaTable

    table = DeltaTable(
        location.delta_uri, storage_options=location.delta_options, without_files=True
    )
    return table.schema().to_json()


def register(
    metastore: Metastore, name: str, location: TableLocation, schema_json: str | None = None
) -> Registration:
    """Register the Delta table at `location` as `name` (`schema.table`), or update the schema
    its entry keeps; `schema_json` defaults to the table's own.

    Raises:
        CatalogError: the metastore did not answer, or `name` is taken by a table that is not
            Delta or lives elsewhere (nothing is changed in the metastore then).
    """
    started = time.perf_counter()
    uri = location.spark_uri()
    entry = metastore.entry(name)
    moved = entry is not None and _moved(entry, uri, location)
    if entry is not None and not moved:
        _check_same_table(entry, name, uri)
    schema = schema_json if schema_json is not None else table_schema_json(location)
    if entry is None:
        metastore.create(CatalogEntry(name, "delta", uri, schema))
        outcome: Outcome = "registered"
    elif moved:
        metastore.update_schema(entry, schema, location=uri)
        outcome = "moved"
    elif entry.same_schema(schema):
        outcome = "unchanged"
    else:
        metastore.update_schema(entry, schema)
        outcome = "schema updated"
    return Registration(name, uri, outcome, time.perf_counter() - started)


def _moved(entry: CatalogEntry, uri: str, location: TableLocation) -> bool:
    """Whether `entry` is partlake's own registration of a Delta table that is no longer at the
    location it names (the lake moved): then repointing it loses nothing."""
    if not (entry.by_partlake and entry.is_delta) or entry.same_location(uri):
        return False
    from dagster_partlake.delta.table import table_exists

    try:
        return not table_exists(TableLocation.parse(entry.location, location.storage_options))
    except Exception:
        return False  # cannot tell: keep the entry as it is


def _check_same_table(entry: CatalogEntry, name: str, uri: str) -> None:
    if not entry.is_delta:
        raise CatalogError(
            f"{name} is already in the metastore as a {entry.provider} table at "
            f"{entry.location}, not the Delta table at {uri}; partlake never replaces an entry. "
            "Give the asset another name (its `dagster/table_name` metadata, or "
            "LakeCatalog(default_schema=...)), or drop that table yourself if it is obsolete."
        )
    if not entry.same_location(uri):
        raise CatalogError(
            f"{name} is already in the metastore for the Delta table at {entry.location}, not "
            f"the one at {uri}; partlake never repoints an entry while a table is still where "
            "it points. If the lake moved, `partlake catalog sync` repoints partlake's own entry "
            "once nothing is left at the old location; otherwise give the asset another name "
            "(its `dagster/table_name` metadata)."
        )


# Metastores that did not answer, until when this process leaves them alone: a metastore that
# is down costs one warning per table per minute, not a timeout per commit.
_DOWN: dict[str, float] = {}
_DOWN_SECONDS = 60.0


def after_commit(
    catalog: LakeCatalog,
    name: str,
    location: TableLocation,
    warn: Callable[[str], object],
    say: Callable[[str], object] | None = None,
) -> Registration | None:
    """Register a table once its commit landed (partlake's own metastore started first when it
    is not running). Never raises: a metastore that does not answer, or a name taken by
    another table, is one warning naming it, and the next commit or `partlake catalog sync`
    registers the table. None when nothing was registered."""
    uri = catalog.uri
    if _DOWN.get(uri, 0.0) > time.monotonic():
        warn(
            f"{name} is not registered: the metastore at {uri} did not answer in the last "
            f"{_DOWN_SECONDS:.0f} s. The next commit or `partlake catalog sync` registers it."
        )
        return None
    try:
        with catalog.connect(start=True, say=say) as metastore:
            return register(metastore, name, location)
    except CatalogError as error:
        if "did not answer" in str(error) or "did not start" in str(error):
            _DOWN[uri] = time.monotonic() + _DOWN_SECONDS
            warn(
                f"{name} is not registered ({error}). The commit stands; the next commit or "
                "`partlake catalog sync` registers it."
            )
        else:
            warn(f"{name} is not registered: {error}")
        return None
