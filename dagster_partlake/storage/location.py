"""Where a table (or a lake, or a source folder) lives: a URI and its storage options.

`TableLocation` is the one place that turns a table into what each engine needs: a path or URI
for Spark (`file:///...`, `s3a://...`), a URI and `storage_options` for delta-rs, a pyarrow
filesystem, and partlake's own `Store` for its reads of the log. No other module builds a path or
URI string for a table; they join relative names onto a location.

A local path and `file://` give the same location (an absolute path); `s3://bucket/prefix`,
`abfss://container@account.dfs.core.windows.net/prefix` and `gs://bucket/prefix` are object
stores. The storage options (credentials) are held apart from the URI, never part of `str()`,
`repr()`, an error message or a record.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from dagster_partlake.storage import options as opts

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from dagster_partlake.storage.store import Store

FILE_SCHEME = "file://"
# The scheme Spark's Hadoop filesystem reads a location's URI with.
_SPARK_SCHEMES = {"s3": "s3a"}
_FROM_SPARK = {spark: ours for ours, spark in _SPARK_SCHEMES.items()}


@dataclass(frozen=True)
class TableLocation:
    """A table's (or folder's) place: `uri` and the explicit `storage_options` it is read with.

    Args:
        uri: an absolute local path, or `scheme://...` for an object store (see `parse`).
        storage_options: explicit options (delta-rs names, any case); the environment supplies
            the rest (`dagster_partlake.storage.options`).
    """

    uri: str
    storage_options: Mapping[str, str] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    @classmethod
    def parse(
        cls,
        where: str | os.PathLike[str] | TableLocation,
        storage_options: Mapping[str, str] | None = None,
    ) -> TableLocation:
        """The location of `where`: a path (made absolute), a `file://` URI, or an object store
        URI, also as Spark spells them (`file:/x`, `s3a://`, what a metastore entry holds); a
        `TableLocation` keeps its options unless `storage_options` are given."""
        if isinstance(where, TableLocation):
            if storage_options is None:
                return where
            return cls(where.uri, dict(storage_options))
        text = os.fspath(where)
        if text.startswith(FILE_SCHEME):
            text = text[len(FILE_SCHEME) :]
        elif text.startswith("file:/"):  # Spark's spelling of a local URI (`file:/x`)
            text = text[len("file:") :]
        scheme, sep, rest = text.partition("://")
        if sep and scheme in _FROM_SPARK:  # Spark's scheme for the store (`s3a://`)
            scheme, text = _FROM_SPARK[scheme], f"{_FROM_SPARK[scheme]}://{rest}"
        if sep:
            opts.require_scheme(scheme, text)
            uri = text.rstrip("/")
        else:
            uri = os.path.abspath(text)
        return cls(uri, dict(storage_options or {}))

    @property
    def scheme(self) -> str:
        """`file` for a local path, else the URI's scheme (`s3`, `abfss`, `gs`)."""
        scheme, sep, _ = self.uri.partition("://")
        return scheme if sep else "file"

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def path(self) -> str:
        """The local filesystem path.

        Raises:
            PartlakeConfigError: the location is on an object store.
        """
        if not self.is_local:
            from dagster_partlake.errors import PartlakeConfigError

            raise PartlakeConfigError(
                f"{self.uri} is on an object store; this operation needs a local path."
            )
        return self.uri

    @property
    def name(self) -> str:
        """The last segment of the location (a table's folder name)."""
        return posixpath.basename(self.uri) if not self.is_local else os.path.basename(self.uri)

    def join(self, *parts: str) -> TableLocation:
        """The location `parts` below this one (keeping the storage options)."""
        if self.is_local:
            return TableLocation(os.path.join(self.uri, *parts), self.storage_options)
        return TableLocation(posixpath.join(self.uri, *parts), self.storage_options)

    def relative(self, other: TableLocation) -> str | None:
        """`other`'s path below this location ('/'-separated), None when it is not below."""
        base = self.uri.rstrip("/\\") + ("/" if not self.is_local else os.sep)
        if not other.uri.startswith(base):
            return None
        return other.uri[len(base) :].replace(os.sep, "/")

    def __str__(self) -> str:
        return self.uri

    @cached_property
    def cache_key(self) -> str:
        """What tells this table apart from every other in a cache: its URI, and for an object
        store which store it is on (`options.store_identity`: the endpoint or account), so two
        servers holding the same bucket and path never share a cached state."""
        if self.is_local:
            return self.uri
        return f"{self.uri} @ {opts.store_identity(self.scheme, self.options)}"

    # What each engine needs.

    @cached_property
    def options(self) -> dict[str, str]:
        """The storage options in effect: the environment's, overridden by the explicit ones."""
        return opts.effective(self.scheme, self.storage_options)

    def spark_uri(self, relative: str = "") -> str:
        """The URI Spark reads and writes this location (or `relative` below it) with."""
        if self.is_local:
            target = os.path.join(self.uri, relative) if relative else self.uri
            return FILE_SCHEME + target
        scheme, _, rest = self.uri.partition("://")
        base = f"{_SPARK_SCHEMES.get(scheme, scheme)}://{rest}"
        return posixpath.join(base, relative) if relative else base

    def spark_uris(self, relatives: Sequence[str]) -> list[str]:
        return [self.spark_uri(r) for r in relatives]

    @property
    def delta_uri(self) -> str:
        """The table URI delta-rs opens."""
        return self.uri

    @property
    def delta_options(self) -> dict[str, str] | None:
        """delta-rs' `storage_options` (None for a local table)."""
        return None if self.is_local else opts.delta_options(self.scheme, self.options)

    def arrow_spec(self) -> tuple[str, dict[str, Any], str]:
        """(kind, keyword arguments, path) of the pyarrow filesystem of this location: what a
        Spark worker builds its own filesystem from (`delta.file_writer.make_filesystem`)."""
        if self.is_local:
            return "local", {}, self.uri
        scheme, _, rest = self.uri.partition("://")
        if scheme == "s3":
            return "s3", opts.arrow_s3_arguments(self.options), rest
        if scheme == "gs":
            return "gs", {}, rest
        container, _, account_path = rest.partition("@")
        account, _, path = account_path.partition("/")
        arguments: dict[str, Any] = {"account_name": account.split(".")[0]}
        if "AZURE_STORAGE_ACCOUNT_KEY" in self.options:
            arguments["account_key"] = self.options["AZURE_STORAGE_ACCOUNT_KEY"]
        return "abfss", arguments, posixpath.join(container, path)

    def arrow(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and this location's path in it."""
        import pyarrow.fs as pafs

        kind, arguments, path = self.arrow_spec()
        builders = {
            "local": pafs.LocalFileSystem,
            "s3": pafs.S3FileSystem,
            "gs": pafs.GcsFileSystem,
            "abfss": pafs.AzureFileSystem,
        }
        return builders[kind](**arguments), path

    @cached_property
    def store(self) -> Store:
        """partlake's own reads and deletes at this location (the log, folder sources)."""
        from dagster_partlake.storage.store import store_for

        return store_for(self)

    def describe_options(self) -> dict[str, str]:
        """The options in effect with secrets redacted, fit for a message."""
        return opts.redacted(self.options)


def as_location(
    where: str | os.PathLike[str] | TableLocation, storage_options: Mapping[str, str] | None = None
) -> TableLocation:
    """`TableLocation.parse`, for call sites that take either a path or a location."""
    return TableLocation.parse(where, storage_options)


def lake_location(
    root: str | os.PathLike[str] | TableLocation | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> TableLocation:
    """The lake root: `root` (a path, `file://` or an object store URI), else `$PARTLAKE_HOME`,
    else `.partlake` in the working directory."""
    from dagster_partlake.layout import default_root

    return TableLocation.parse(root if root is not None else default_root(), storage_options)


def table_location(
    lake: str | os.PathLike[str] | TableLocation | None,
    asset_key: object,
    path: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> TableLocation:
    """Where the table of an asset lives: `<lake>/warehouse/<asset key path>`, or `<lake>/<path>`
    for a source whose metadata `partlake/path` says so (an absolute path or a URI is used as
    is).

    Args:
        lake: the lake root (None: `lake_location()`'s default).
        asset_key: a Dagster `AssetKey`, its path components, or its name as Dagster spells
            it ('raw/orders').
        path: the asset's `partlake/path` metadata, if any.
        storage_options: explicit options (default: the lake's).
    """
    from dagster_partlake.layout import WAREHOUSE_DIR

    base = lake_location(lake, storage_options)
    if path:
        text = str(path)
        if "://" in text or os.path.isabs(text):
            return TableLocation.parse(text, base.storage_options)
        return base.join(*text.split("/"))
    if isinstance(asset_key, str):
        parts: Sequence[str] = asset_key.split("/")  # a key as Dagster spells it: 'a/b'
    else:
        parts = getattr(asset_key, "path", asset_key)  # type: ignore[arg-type]
    return base.join(WAREHOUSE_DIR, *parts)


def table_path(
    root: str | os.PathLike[str] | TableLocation | None, asset_key: object, path: str | None = None
) -> str:
    """Where the table of an asset lives, as a path (a local lake) or a URI (`table_location`).

    Args:
        root: lake root (None: `$PARTLAKE_HOME`, else `.partlake`).
        asset_key: a Dagster `AssetKey`, its path components, or its name as Dagster spells
            it ('raw/orders').
        path: the asset's `partlake/path` metadata, if any.
    """
    return table_location(root, asset_key, path).uri
