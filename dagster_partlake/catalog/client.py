"""The Hive metastore's Thrift API, as partlake uses it: read, create and update table entries.

The only module that talks to a metastore. Entries are written the way Spark writes a Delta
table it registers (a data source table: provider `delta`, the table's URI in the serde's
`path`, a placeholder in the storage descriptor so that the metastore never touches the table's
own folder), plus the table's schema, which Spark keeps in the entry's properties and which
JDBC clients list through the SQL endpoint. Spark and delta-spark then read the table by name
from its Delta log, as they would one they registered themselves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from dagster_partlake.errors import CatalogError
from dagster_partlake.storage import TableLocation

if TYPE_CHECKING:
    from hmsclient.genthrift.hive_metastore import ThriftHiveMetastore

_PROVIDER = "spark.sql.sources.provider"
_SCHEMA = "spark.sql.sources.schema"
_SCHEMA_PARTS = "spark.sql.sources.schema.numParts"
# Spark splits a schema longer than this (spark.sql.sources.schemaStringLengthThreshold) into
# numbered parts; so does partlake, so that Spark reads back what partlake wrote.
_PART_LENGTH = 4000
_SPARK_VERSION = "4.2"
_REGISTERED = "partlake.registered"


@dataclass(frozen=True)
class CatalogEntry:
    """A table's entry in the metastore: `schema.table`, format, location and schema (Spark's
    JSON, as a Delta log's `schemaString` spells it; "" when the entry keeps none)."""

    name: str
    provider: str
    location: str
    schema_json: str = ""
    by_partlake: bool = False  # registered by partlake (its `partlake.registered` property)

    @property
    def is_delta(self) -> bool:
        return self.provider.lower() == "delta"

    def same_location(self, uri: str) -> bool:
        return same_location(self.location, uri)

    def same_schema(self, schema_json: str) -> bool:
        if not self.schema_json:
            return False
        return _fields(self.schema_json) == _fields(schema_json)


def same_location(a: str, b: str) -> bool:
    """Whether two spellings of a table URI name the same place (`file:/x`, `file:///x/` and
    `/x` do; so do `s3://b/t` and `s3a://b/t`)."""
    return TableLocation.parse(a).uri == TableLocation.parse(b).uri


def _fields(schema_json: str) -> Any:
    return json.loads(schema_json).get("fields", [])


def split_name(name: str) -> tuple[str, str]:
    """`schema.table` as its two parts, lower case as the metastore keeps them.

    Raises:
        CatalogError: not `schema.table`.
    """
    schema, dot, table = name.strip().lower().partition(".")
    if not dot or not schema or not table or "." in table:
        raise CatalogError(
            f"table name {name!r} is not `schema.table` (for example shop.orders); name the "
            "schema and the table, separated by one dot."
        )
    return schema, table


class Metastore:
    """One connection to a Hive metastore at `uri` (`thrift://host:port`); each call fails
    within `timeout` seconds with a `CatalogError` naming the metastore."""

    def __init__(self, uri: str, timeout: float = 10.0) -> None:
        parsed = urlparse(uri)
        if parsed.scheme != "thrift" or not parsed.hostname or not parsed.port:
            raise CatalogError(
                f"metastore URI {uri!r} is not thrift://host:port (for example "
                "thrift://127.0.0.1:9083)."
            )
        self.uri = uri
        self._host, self._port = parsed.hostname, parsed.port
        self._timeout = timeout
        self._client: ThriftHiveMetastore.Client | None = None
        self._transport: Any = None

    def __enter__(self) -> Metastore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._client = self._transport = None

    @contextmanager
    def _calling(self, what: str) -> Iterator[ThriftHiveMetastore.Client]:
        from thrift.Thrift import TException

        try:
            yield self._connected()
        except CatalogError:
            raise
        except (TException, OSError) as error:
            self.close()
            raise CatalogError(
                f"the Hive metastore at {self.uri} did not answer ({what}): "
                f"{type(error).__name__}: {_message(error)}"
            ) from error

    def _connected(self) -> ThriftHiveMetastore.Client:
        if self._client is None:
            from hmsclient.genthrift.hive_metastore import ThriftHiveMetastore
            from thrift.protocol import TBinaryProtocol
            from thrift.transport import TSocket, TTransport

            socket = TSocket.TSocket(self._host, self._port)
            socket.setTimeout(int(self._timeout * 1000))
            transport = TTransport.TBufferedTransport(socket)
            transport.open()
            self._transport = transport
            self._client = ThriftHiveMetastore.Client(TBinaryProtocol.TBinaryProtocol(transport))
        return self._client

    def entry(self, name: str) -> CatalogEntry | None:
        """The entry of `schema.table`, or None when the metastore has none."""
        from hmsclient.genthrift.hive_metastore.ttypes import NoSuchObjectException

        schema, table = split_name(name)
        with self._calling(f"reading {schema}.{table}") as client:
            try:
                found = client.get_table(schema, table)
            except NoSuchObjectException:
                return None
        return _entry_of(found)

    def entries(self, schemas: Sequence[str] | None = None) -> list[CatalogEntry]:
        """Every table entry of `schemas` (default: all), sorted by name."""
        from hmsclient.genthrift.hive_metastore.ttypes import NoSuchObjectException

        found: list[CatalogEntry] = []
        with self._calling("listing tables") as client:
            names = list(schemas) if schemas is not None else client.get_all_databases()
            for schema in names:
                try:
                    tables = client.get_all_tables(schema)
                except NoSuchObjectException:
                    continue
                if tables:
                    found += [
                        _entry_of(t) for t in client.get_table_objects_by_name(schema, tables)
                    ]
        return sorted(found, key=lambda e: e.name)

    def create(self, entry: CatalogEntry) -> None:
        """Create the Delta table entry `entry` (its schema first, when missing).

        Raises:
            CatalogError: the name was taken meanwhile (AlreadyExistsException), or the
                metastore refused.
        """
        from hmsclient.genthrift.hive_metastore import ttypes

        schema, table = split_name(entry.name)
        with self._calling(f"registering {entry.name}") as client:
            try:
                client.get_database(schema)
            except ttypes.NoSuchObjectException:
                try:
                    client.create_database(
                        ttypes.Database(name=schema, description="", parameters={})
                    )
                except ttypes.AlreadyExistsException:
                    pass  # another writer created it meanwhile
            location = client.get_database(schema).locationUri
            try:
                client.create_table(_table(schema, table, entry, location))
            except ttypes.AlreadyExistsException as error:
                raise CatalogError(
                    f"{entry.name} was registered by another process while partlake registered "
                    f"{entry.location}; `partlake catalog list` shows both."
                ) from error

    def update_schema(
        self, entry: CatalogEntry, schema_json: str, location: str | None = None
    ) -> None:
        """Replace the schema kept in `entry`'s metastore entry, and with `location` the table
        URI it points at (a lake that moved); nothing else changes."""
        schema, table = split_name(entry.name)
        with self._calling(f"updating {entry.name}") as client:
            current = client.get_table(schema, table)
            params = {k: v for k, v in current.parameters.items() if not k.startswith(_SCHEMA)}
            params.update(_schema_params(schema_json))
            current.parameters = params
            if location is not None:
                current.sd.serdeInfo.parameters["path"] = location
            client.alter_table(schema, table, current)


def _message(error: BaseException) -> str:
    return str(getattr(error, "message", None) or error) or "no answer"


def _schema_params(schema_json: str) -> dict[str, str]:
    if len(schema_json) <= _PART_LENGTH:
        return {_SCHEMA: schema_json}
    parts = [schema_json[i : i + _PART_LENGTH] for i in range(0, len(schema_json), _PART_LENGTH)]
    return {
        _SCHEMA_PARTS: str(len(parts)),
        **{f"{_SCHEMA}.part.{i}": part for i, part in enumerate(parts)},
    }


def _schema_of(params: dict[str, str]) -> str:
    if _SCHEMA in params:
        return params[_SCHEMA]
    count = int(params.get(_SCHEMA_PARTS, "0"))
    return "".join(params.get(f"{_SCHEMA}.part.{i}", "") for i in range(count))


def _entry_of(table: Any) -> CatalogEntry:
    params = dict(table.parameters or {})
    serde = dict((table.sd.serdeInfo.parameters if table.sd and table.sd.serdeInfo else {}) or {})
    provider = params.get(_PROVIDER) or _hive_format(table)
    location = serde.get("path") or (table.sd.location if table.sd else "") or ""
    schema_json = _schema_of(params)
    if schema_json and not _fields(schema_json):
        schema_json = ""  # what Spark writes for a Delta table: "struct<>"
    return CatalogEntry(
        f"{table.dbName}.{table.tableName}",
        provider,
        location,
        schema_json,
        by_partlake=params.get(_REGISTERED) == "true",
    )


def _hive_format(table: Any) -> str:
    """A Hive (not Spark data source) table's format, from its input format's class."""
    input_format = (table.sd.inputFormat or "") if table.sd else ""
    for name in ("parquet", "orc", "avro", "text", "sequence"):
        if name in input_format.lower():
            return f"hive ({name})"
    return f"hive ({input_format or table.tableType})"


def _table(schema: str, table: str, entry: CatalogEntry, database_location: str) -> Any:
    from hmsclient.genthrift.hive_metastore import ttypes

    # As Spark does for a table the metastore cannot read itself: the real location in the
    # serde's `path`, a placeholder below the database's folder in the descriptor.
    placeholder = f"{database_location.rstrip('/')}/{table}-__PLACEHOLDER__"
    descriptor = ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema("col", "array<string>", "from deserializer")],
        location=placeholder,
        inputFormat="org.apache.hadoop.mapred.SequenceFileInputFormat",
        outputFormat="org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
        compressed=False,
        numBuckets=-1,
        serdeInfo=ttypes.SerDeInfo(
            serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
            parameters={"serialization.format": "1", "path": entry.location},
        ),
        bucketCols=[],
        sortCols=[],
        parameters={},
        skewedInfo=ttypes.SkewedInfo([], [], {}),
        storedAsSubDirectories=False,
    )
    return ttypes.Table(
        tableName=table,
        dbName=schema,
        owner="partlake",
        createTime=int(time.time()),
        lastAccessTime=0,
        retention=0,
        sd=descriptor,
        partitionKeys=[],
        parameters={
            "EXTERNAL": "TRUE",
            _PROVIDER: "delta",
            "spark.sql.partitionProvider": "catalog",
            "spark.sql.create.version": _SPARK_VERSION,
            _REGISTERED: "true",
            **_schema_params(entry.schema_json),
        },
        tableType="EXTERNAL_TABLE",
    )
