"""`LakeCatalog`: the one setting that gives a lake's tables names in a Hive metastore."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from dagster import Config
from pydantic import Field

from dagster_partlake.catalog.client import Metastore
from dagster_partlake.catalog.metastore import (
    hive_settings,
    metastore_status,
    start_metastore,
)
from dagster_partlake.catalog.naming import TABLE_NAME_KEY, table_name
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.layout import resolve_root

DEFAULT_PORT = 9083
DEFAULT_SCHEMA = "lake"
CALL_TIMEOUT_SECONDS = 10.0  # one metastore call, before it is given up
START_TIMEOUT_SECONDS = 180.0  # partlake's own metastore starting (a first start creates Derby)


class LakeCatalog(Config):
    """Where partlake registers its tables by name: a Hive metastore.

    Set it once, on the IO manager; every table the IO manager writes is then registered as
    `<schema>.<table>` on its first commit (and its schema kept up to date), and
    `partlake catalog sync|list` and the SQL endpoint use the same metastore:

    ```python
    from dagster import Definitions
    from dagster_partlake import DeltaPartitionIOManager, LakeCatalog, SparkResource

    spark = SparkResource()
    defs = Definitions(
        assets=[...],
        resources={
            "spark": spark,
            "io_manager": DeltaPartitionIOManager(spark=spark, catalog=LakeCatalog()),
        },
    )
    ```

    With no `metastore_uri`, partlake runs its own metastore for the lake home
    (`$PARTLAKE_HOME`): started on demand on 127.0.0.1:`port`, backed by embedded Derby under
    `$PARTLAKE_HOME/catalog` (or by `database_url`), stopped with `partlake catalog stop`.
    """

    metastore_uri: str | None = Field(
        default=None,
        description=(
            "thrift://host:port of a running Hive metastore (a shared one, or another team's). "
            "Unset: partlake's own metastore for $PARTLAKE_HOME on 127.0.0.1:`port`, started "
            "on demand."
        ),
    )
    port: int = Field(
        default=DEFAULT_PORT,
        description="Port of partlake's own metastore on 127.0.0.1 (unused with metastore_uri).",
    )
    database_url: str | None = Field(
        default=None,
        description=(
            "JDBC URL of the database behind partlake's own metastore: unset, embedded Derby "
            "under $PARTLAKE_HOME/catalog; jdbc:postgresql://host:port/db shares one catalog "
            "between machines."
        ),
    )
    database_user: str | None = Field(
        default=None, description="The user of `database_url`'s database."
    )
    database_password: str | None = Field(
        default=None,
        description=(
            "The password of `database_url`'s database (use dagster.EnvVar). Kept in a 0600 file "
            "the metastore reads; never in a log, the UI or a command line."
        ),
    )
    default_schema: str = Field(
        default=DEFAULT_SCHEMA,
        description=(
            "The schema of tables whose asset key has one part (`daily_region_stats` -> "
            "lake.daily_region_stats); a key's first part is its schema otherwise "
            "(`marts/user_activity` -> marts.user_activity). An asset's own `dagster/table_name` "
            "metadata wins over both."
        ),
    )

    def __repr_args__(self) -> Any:
        # The password never reaches a log or a message through this object's repr.
        return [
            (k, "***" if k == "database_password" and v else v) for k, v in super().__repr_args__()
        ]

    @property
    def own(self) -> bool:
        """Whether partlake runs this metastore (no `metastore_uri`)."""
        return not self.metastore_uri

    @property
    def lake_home(self) -> str:
        """Where partlake's own metastore keeps its files: `$PARTLAKE_HOME` (`<it>/catalog`)."""
        return resolve_root(None)

    @property
    def uri(self) -> str:
        """The metastore's `thrift://host:port`."""
        return self.metastore_uri or f"thrift://127.0.0.1:{self.port}"

    def table_name(self, key_path: Sequence[str], explicit: str | None = None) -> str:
        """The `schema.table` of the asset with key `key_path` (`explicit`: its own
        `dagster/table_name`)."""
        return table_name(key_path, self.default_schema, explicit)

    def named(self, assets: Sequence[Any]) -> list[Any]:
        """`assets` with each asset's catalog name as its `dagster/table_name` (Dagster's
        `TableMetadataSet.table_name`), so each asset's overview in the UI shows it (Definition
        -> Storage); an asset's own `dagster/table_name` stays. Anything that is not an
        `AssetsDefinition` (a source asset, a check) passes unchanged."""
        from dagster import AssetsDefinition

        def with_name(spec: Any) -> Any:
            if TABLE_NAME_KEY in spec.metadata:
                return spec
            return spec.merge_attributes(metadata={TABLE_NAME_KEY: self.table_name(spec.key.path)})

        return [
            a.map_asset_specs(with_name) if isinstance(a, AssetsDefinition) else a for a in assets
        ]

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings of a session that reads the lake's tables by name (Delta's
        settings come from `SparkResource`): the Hive catalog at this metastore."""
        return {
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": self.uri,
        }

    def settings(self) -> dict[str, str]:
        """hive-site.xml of partlake's own metastore (holds the password: never log it)."""
        return hive_settings(
            self.lake_home,
            database_url=_resolved(self.database_url),
            database_user=_resolved(self.database_user),
            database_password=_resolved(self.database_password),
        )

    def running(self) -> bool:
        """Whether the metastore answers now (partlake's own: its process runs)."""
        if self.own and not metastore_status(self.lake_home, self.port).running:
            return False
        try:
            with self.connect() as metastore:
                metastore.entries(["__partlake_probe__"])
            return True
        except Exception:
            return False

    def connect(
        self, *, start: bool = False, say: Callable[[str], object] | None = None
    ) -> Metastore:
        """A connection to the metastore; with `start`, partlake's own is started first when it
        is not running (waiting for another process that starts it, and saying so)."""
        info = metastore_status(self.lake_home, self.port) if start and self.own else None
        # Running on this catalog's port, or (re)started there: a metastore of this home left
        # on another port is not the one this catalog names.
        if info is not None and not (info.running and info.url.endswith(f":{self.port}")):
            start_metastore(
                self.lake_home,
                port=self.port,
                settings=self.settings(),
                timeout=START_TIMEOUT_SECONDS,
                say=say,
            )
        return Metastore(self.uri, timeout=CALL_TIMEOUT_SECONDS)


def _resolved(value: str | None) -> str | None:
    """`value`, or the environment variable's value where it is a `dagster.EnvVar` (Dagster
    resolves those only for a resource it initializes; `partlake catalog` reads the setting
    from the code location as written)."""
    from dagster import EnvVar

    return value.get_value() if isinstance(value, EnvVar) else value


def catalog_from_env() -> LakeCatalog | None:
    """The catalog `$PARTLAKE_CATALOG` names (the example code location's setting): `own`
    partlake's own metastore for `$PARTLAKE_HOME`, a `thrift://host:port` URI that metastore,
    unset or `off` none."""
    value = os.environ.get("PARTLAKE_CATALOG", "").strip()
    if value in ("", "off"):
        return None
    if value == "own":
        return LakeCatalog()
    if value.startswith("thrift://"):
        return LakeCatalog(metastore_uri=value)
    raise PartlakeConfigError(
        f"PARTLAKE_CATALOG={value!r} is not `own`, `off` or a thrift://host:port URI."
    )
