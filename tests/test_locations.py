"""Table locations: a local path, `file://`, `s3://`, `abfss://` and `gs://` parse into one
`TableLocation`, each giving Spark, delta-rs and pyarrow the URI and filesystem they read it with
(the object stores other than S3 are not run against a server: docs/guides/object-stores.md)."""

from __future__ import annotations

import pytest

from dagster_partlake.storage.location import TableLocation, table_location


@pytest.mark.parametrize(
    ("uri", "scheme", "spark", "arrow"),
    [
        ("/tmp/lake/t", "file", "file:///tmp/lake/t", ("local", {}, "/tmp/lake/t")),
        ("file:///tmp/lake/t", "file", "file:///tmp/lake/t", ("local", {}, "/tmp/lake/t")),
        ("s3://lake/p/t", "s3", "s3a://lake/p/t", ("s3", {}, "lake/p/t")),
        (
            "abfss://c@acct.dfs.core.windows.net/p/t",
            "abfss",
            "abfss://c@acct.dfs.core.windows.net/p/t",
            ("abfss", {"account_name": "acct"}, "c/p/t"),
        ),
        ("gs://b/p/t", "gs", "gs://b/p/t", ("gs", {}, "b/p/t")),
    ],
)
def test_a_location_gives_each_reader_its_uri(
    uri: str, scheme: str, spark: str, arrow: tuple[str, dict[str, str], str]
) -> None:
    location = TableLocation.parse(uri, {})
    assert location.scheme == scheme
    assert location.is_local == (scheme == "file")
    assert location.spark_uri() == spark
    assert location.arrow_spec() == arrow
    # A local table is the same path byte for byte, however it was named.
    assert location.delta_uri == ("/tmp/lake/t" if scheme == "file" else uri)


def test_a_tables_location_under_an_object_store_lake() -> None:
    assert table_location("s3://lake/root", ["a", "b"]).uri == "s3://lake/root/warehouse/a/b"
    assert table_location("gs://b/r", ["a"]).spark_uri("x") == "gs://b/r/warehouse/a/x"


def test_an_asset_key_may_be_given_as_dagster_spells_it() -> None:
    from dagster import AssetKey

    from dagster_partlake import table_path

    expected = "/lake/warehouse/raw/orders"
    assert table_path("/lake", "raw/orders") == expected  # was /lake/warehouse/r/a/w/...
    assert table_path("/lake", ["raw", "orders"]) == expected
    assert table_path("/lake", AssetKey(["raw", "orders"])) == expected
    assert table_path("/lake", "orders") == "/lake/warehouse/orders"


# What Spark raised reading a source on the S3 server when only the IO manager had the endpoint
# (s3a then asked AWS), shortened.
SPARK_ASKED_AWS = """An error occurred while calling o68.parquet.
: java.net.UnknownHostException: getFileStatus on s3a://lake/p/orders/date=2024-01-02/part-0.parquet: software.amazon.awssdk.core.exception.SdkClientException: Received an UnknownHostException when attempting to interact with a service.
\tat software.amazon.awssdk.auth.credentials.internal.ProfileCredentialsUtils.resolve(ProfileCredentialsUtils.java:1)
\tat org.apache.hadoop.fs.s3a.S3AFileSystem.getFileStatus(S3AFileSystem.java:1)
Caused by: java.net.UnknownHostException: lake.s3.us-east-2.amazonaws.com: Name or service not known
\t... 42 more
"""  # noqa: E501


def test_a_spark_read_the_store_refused_names_the_table_and_the_spark_settings() -> None:
    from dagster_partlake.storage.errors import spark_read_error

    location = table_location("s3://lake/p", ["orders"], "s3://lake/p/orders")
    error = spark_read_error(location, "orders", RuntimeError(SPARK_ASKED_AWS))
    assert error is not None
    text = str(error)
    assert text.startswith(
        "table orders: Spark cannot read s3://lake/p/orders: the endpoint does not answer"
    ), text
    assert "SparkResource(storage_options=...)" in text
    assert "The store said: java.net.UnknownHostException: getFileStatus on s3a://" in text
    # Not an object store's cause, or a local table: the engine's error stands.
    assert spark_read_error(location, "orders", RuntimeError("AnalysisException: x")) is None
    local = table_location("/lake", ["orders"])
    assert spark_read_error(local, "orders", RuntimeError(SPARK_ASKED_AWS)) is None


def test_a_location_parses_spark_spellings_of_its_uri() -> None:
    """What a metastore entry holds (Spark's `file:/x`, `s3a://`) names the same location."""
    assert TableLocation.parse("file:/tmp/lake/t").uri == TableLocation.parse("/tmp/lake/t").uri
    assert TableLocation.parse("s3a://lake/demo/t").uri == "s3://lake/demo/t"
    local = TableLocation.parse("/tmp/lake/t")
    assert TableLocation.parse(local.spark_uri()).uri == local.uri
