"""`partlake catalog start|stop|status|sync|list`: the lake's tables by name in a Hive metastore
(the code location's `DeltaPartitionIOManager(catalog=LakeCatalog(...))`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from dagster_partlake.cli.common import boundary
from dagster_partlake.cli.main import main
from dagster_partlake.cli.output import echo
from dagster_partlake.errors import CatalogError, PartlakeConfigError

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from dagster_partlake.catalog.config import LakeCatalog
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.storage import TableLocation


@dataclass(frozen=True)
class LocationCatalog:
    """A code location's catalog and the tables it names: (asset, `schema.table`, location)."""

    catalog: LakeCatalog
    graph: LakeGraph
    tables: list[tuple[str, str, TableLocation]]


def location_catalog(module: str) -> LocationCatalog:
    """The catalog of the code location `module` (its IO manager's `catalog`) and the catalog
    name of each managed table.

    Raises:
        PartlakeConfigError: no IO manager of the code location names a catalog.
    """
    from dagster_partlake.catalog.config import LakeCatalog
    from dagster_partlake.cli.location import load_definitions
    from dagster_partlake.maintenance.operations import catalog_tables
    from dagster_partlake.planning.graph import LakeGraph

    defs = load_definitions(module)
    catalogs = [
        c for r in (defs.resources or {}).values()
        if isinstance(c := getattr(r, "catalog", None), LakeCatalog)
    ]  # fmt: skip
    if not catalogs:
        raise PartlakeConfigError(
            f"no resource of {module} names a catalog; give its IO manager one: "
            "DeltaPartitionIOManager(..., catalog=LakeCatalog()) (docs: Tables by name)."
        )
    catalog = catalogs[0]
    graph = LakeGraph(defs)
    tables = [t for t in catalog_tables(graph, catalog) if not graph.assets[t[0]].is_folder]
    return LocationCatalog(catalog, graph, tables)


@main.group("catalog")
def catalog_group() -> None:
    """The lake's tables by name: partlake's own Hive metastore, and the tables a code location
    registers there."""


def _module_option(required: bool) -> Callable[[F], F]:
    return click.option(
        "-m",
        "--module",
        "module",
        required=required,
        help="Python module with the Definitions (its IO manager's catalog).",
    )


def _catalog(module: str | None, port: int | None) -> LakeCatalog:
    from dagster_partlake.catalog.config import LakeCatalog

    catalog = location_catalog(module).catalog if module else LakeCatalog()
    return catalog.model_copy(update={"port": port}) if port else catalog


@catalog_group.command("start")
@_module_option(required=False)
@click.option("--port", type=int, help="Port on 127.0.0.1 (default: the catalog's, 9083).")
@boundary
def catalog_start(module: str | None, port: int | None) -> None:
    """Start partlake's own metastore for $PARTLAKE_HOME (a run starts it too when it needs it)."""
    from dagster_partlake.catalog.metastore import metastore_status

    catalog = _catalog(module, port)
    if not catalog.own:
        raise PartlakeConfigError(
            f"the catalog names the metastore {catalog.uri}, which partlake does not run; "
            "start it where it lives."
        )
    catalog.connect(start=True, say=echo).close()
    info = metastore_status(catalog.lake_home, catalog.port)
    echo(f"metastore running: pid {info.pid}, {info.url} (log {info.log})")


@catalog_group.command("stop")
@_module_option(required=False)
@boundary
def catalog_stop(module: str | None) -> None:
    """Stop partlake's own metastore for $PARTLAKE_HOME, by its PID."""
    from dagster_partlake.catalog.metastore import stop_metastore

    catalog = _catalog(module, None)
    stopped = stop_metastore(catalog.lake_home)
    echo("metastore stopped." if stopped else "No metastore was running.")


@catalog_group.command("status")
@_module_option(required=False)
@boundary
def catalog_status(module: str | None) -> None:
    """Say whether the metastore answers, and where. Exits 3 when it does not."""
    catalog = _catalog(module, None)
    if catalog.running():
        echo(
            f"metastore: running, {catalog.uri}"
            + (f" ({catalog.lake_home})" if catalog.own else "")
        )
        return
    echo(
        f"metastore: not running ({catalog.uri}); `partlake catalog start` starts it"
        if catalog.own
        else f"metastore: {catalog.uri} does not answer"
    )
    sys.exit(3)


@catalog_group.command("sync")
@_module_option(required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per table instead.")
@boundary
def catalog_sync(module: str, as_json: bool) -> None:
    """Register every table of the code location that has been written, update the schemas the
    metastore keeps, and repoint partlake's own entries of a lake that moved. A name taken by
    another table is reported and left as it is (exit 1)."""
    from dagster_partlake.catalog.register import register
    from dagster_partlake.delta.table import table_exists

    found = location_catalog(module)
    failed = 0
    with found.catalog.connect(start=True, say=echo) as metastore:
        for asset, name, location in found.tables:
            row: dict[str, object] = {
                "asset": asset,
                "table": name,
                "location": location.spark_uri(),
            }
            if not table_exists(location):
                row["outcome"] = "not written yet"
            else:
                try:
                    row["outcome"] = register(metastore, name, location).outcome
                except CatalogError as error:
                    if "did not answer" in str(error):
                        raise
                    failed += 1
                    row["outcome"], row["error"] = "conflict", str(error)
            if as_json:
                echo(json.dumps(row))
            else:
                echo(f"{name:<40} {row['outcome']:<16} {row['location']}")
                if "error" in row:
                    echo(f"  Error: {row['error']}")
    if failed:
        raise CatalogError(f"{failed} table(s) could not be registered; see above.")


@catalog_group.command("list")
@_module_option(required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per table instead.")
@boundary
def catalog_list(module: str, as_json: bool) -> None:
    """Each table of the code location: its name, its location, what the metastore has under
    that name and whether they agree (ok, not registered, schema differs, elsewhere, not delta,
    not written yet)."""
    from dagster_partlake.catalog.register import table_schema_json
    from dagster_partlake.delta.table import table_exists

    found = location_catalog(module)
    with found.catalog.connect() as metastore:
        for asset, name, location in found.tables:
            entry = metastore.entry(name)
            written = table_exists(location)
            uri = location.spark_uri()
            if entry is None:
                state = "not registered" if written else "not written yet"
            elif not entry.is_delta:
                state = "not delta"
            elif not entry.same_location(uri):
                state = "elsewhere"
            elif not written:
                state = "not written yet"
            elif not entry.same_schema(table_schema_json(location)):
                state = "schema differs"
            else:
                state = "ok"
            row = {
                "asset": asset,
                "table": name,
                "location": uri,
                "registered_location": entry.location if entry else None,
                "state": state,
            }
            if as_json:
                echo(json.dumps(row))
            else:
                echo(f"{name:<40} {state:<16} {uri}")
                if entry is not None and state in ("elsewhere", "not delta"):
                    echo(f"  the metastore has: {entry.provider} at {entry.location}")
