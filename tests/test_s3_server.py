"""The S3 server the tests, CI and the demo use (s3proxy, `scripts/s3_server.py`) is real enough
for Delta on S3: objects land on disk, signatures are checked, and a create-only PUT
(`If-None-Match: *`) of an existing key is refused with 412, also under a race; delta-rs
commits to it with its storage options and no commit of concurrent writers is lost."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
from botocore.exceptions import ClientError
from deltalake import DeltaTable, write_deltalake

from tests.servers import S3Server, s3_script

pytestmark = pytest.mark.s3


def _status(error: ClientError) -> tuple[int, str]:
    return error.response["ResponseMetadata"]["HTTPStatusCode"], error.response["Error"]["Code"]


def test_a_second_create_only_put_of_a_key_is_refused_with_412(s3: S3Server) -> None:
    client = s3.client()
    key = "conditional/00000000000000000001.json"
    client.put_object(Bucket=s3.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=s3.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert _status(refused.value) == (412, "PreconditionFailed")
    assert client.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"first"
    assert (s3.data / s3.bucket / key).read_bytes() == b"first"  # stored on disk, as a file


def test_of_racing_create_only_puts_exactly_one_lands(s3: S3Server) -> None:
    clients = [s3.client() for _ in range(6)]
    for round_ in range(3):
        key = f"race/{round_}.json"
        start = threading.Barrier(len(clients))

        def put(i: int, key: str = key, start: threading.Barrier = start) -> int | None:
            start.wait()
            body = str(i).encode() * 50_000
            try:
                clients[i].put_object(Bucket=s3.bucket, Key=key, Body=body, IfNoneMatch="*")
            except ClientError as error:
                assert _status(error)[0] == 412
                return None
            return i

        with ThreadPoolExecutor(len(clients)) as pool:
            winners = [w for w in pool.map(put, range(len(clients))) if w is not None]
        assert len(winners) == 1
        stored = clients[0].get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        assert stored == str(winners[0]).encode() * 50_000


def test_a_wrong_secret_is_refused(s3: S3Server) -> None:
    import boto3

    wrong = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key="not-the-secret",
        region_name=s3.region,
    )
    with pytest.raises(ClientError) as refused:
        wrong.list_objects_v2(Bucket=s3.bucket)
    assert _status(refused.value) == (403, "SignatureDoesNotMatch")


def test_delta_rs_commits_of_concurrent_writers_all_land(s3: S3Server) -> None:
    """Four delta-rs writers append to one table on the server at once, each from a handle
    loaded at version 0: with create-only commits honoured, each lands as its own version."""
    uri = s3.uri("delta-rs/concurrent")
    options = s3.storage_options()
    write_deltalake(uri, pa.table({"writer": [-1], "region": ["eu"]}), storage_options=options)
    handles = [DeltaTable(uri, storage_options=options) for _ in range(4)]
    start = threading.Barrier(len(handles))

    def append(i: int) -> None:
        start.wait()
        rows = pa.table({"writer": [i], "region": ["eu"]})
        write_deltalake(handles[i], rows, mode="append")

    with ThreadPoolExecutor(len(handles)) as pool:
        list(pool.map(append, range(len(handles))))
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 4
    assert sorted(table.to_pyarrow_table()["writer"].to_pylist()) == [-1, 0, 1, 2, 3]
    log = sorted(p.name for p in (s3.data / s3.bucket / "delta-rs/concurrent/_delta_log").iterdir())
    assert [name for name in log if name.endswith(".json")] == [f"{v:020d}.json" for v in range(5)]


def test_the_script_reports_the_running_server_and_its_settings(s3: S3Server) -> None:
    status = s3_script(s3.state, "status")
    assert status.returncode == 0
    assert status.stdout.strip() == f"running: pid {s3.pid}, {s3.endpoint}"
    exported = s3_script(s3.state, "env").stdout.splitlines()
    assert exported == [f"export {key}={value}" for key, value in s3.storage_options().items()]
    # A second server from the same state is refused, naming the running one.
    again = s3_script(s3.state, "start", "--port", "1")
    assert again.returncode == 1
    assert f"already runs from {s3.state} (pid {s3.pid})" in again.stderr
