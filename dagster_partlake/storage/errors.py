"""An object store's failures as one clear line: the location, the endpoint, what to check.

A wrong key, a missing bucket or an endpoint that does not answer shows up as a Java, Rust or
C++ error deep in Spark, delta-rs or Arrow; partlake names the table and the likely cause instead
(never a credential: `dagster_partlake.storage.options.redacted`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.errors import StorageError
from dagster_partlake.storage.options import endpoint

if TYPE_CHECKING:
    from dagster_partlake.storage.location import TableLocation

# Words in an engine's error -> what the user should check.
_CAUSES = (
    (
        (
            "invalidaccesskeyid",
            "signaturedoesnotmatch",
            "accessdenied",
            "access denied",
            "403",
            "forbidden",
            "credentials",
            "authorization",
        ),
        "the credentials were refused: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the "
        "storage_options of the IO manager and the Spark resource)",
    ),
    (
        ("nosuchbucket", "bucket does not exist", "bucket not found", "the specified bucket"),
        "the bucket does not exist: create it, or fix the bucket in the lake root",
    ),
    (
        (
            "connection refused",
            "couldn't connect",
            "could not connect",
            "connect error",
            "timed out",
            "timeout",
            "unreachable",
            "name or service not known",
            "dns",
            "error sending request",
            "tcp connect",
        ),
        "the endpoint does not answer: check AWS_ENDPOINT_URL and that the server is running",
    ),
)


def cause_of(error: BaseException) -> str | None:
    """What to check for an object store error, None when it names no known cause (Arrow
    spells causes like SIGNATURE_DOES_NOT_MATCH, the servers like SignatureDoesNotMatch)."""
    text = str(error).lower()
    squeezed = text.replace("_", "")
    for words, advice in _CAUSES:
        if any(word in text or word in squeezed for word in words):
            return advice
    return None


def storage_error(location: TableLocation, name: str, error: BaseException) -> StorageError:
    """The error to raise when `location`'s store failed on `name`."""
    where = location.uri + (f"/{name}" if name and name != "." else "")
    url = endpoint(location.options) if location.scheme == "s3" else None
    at = f" (endpoint {url})" if url else ""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    advice = cause_of(error) or "check the storage options and that the store is reachable"
    return StorageError(f"cannot access {where}{at}: {advice}. The store said: {first}")


def spark_read_error(
    location: TableLocation, table: str, error: BaseException
) -> StorageError | None:
    """The error to raise when Spark could not read `location` on an object store for a
    known cause (None: another error, to raise as it is).

    Spark reaches the store with the Spark resource's settings, not the IO manager's: a lake
    whose options were given to the IO manager only is planned and committed fine, and only
    Spark's reads fail (with a Java exception on a `Py4JJavaError` whose first line names a
    JVM object), so the message says which settings Spark used.
    """
    if location.is_local:
        return None
    # The messages of the exception and its causes, without the stack frames (whose class
    # names, e.g. the SDK's `auth.credentials` providers, would read as causes).
    lines = [line.strip().strip(":").strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line and not line.startswith(("at ", "... "))]
    advice = cause_of(RuntimeError("\n".join(lines)))
    if advice is None:
        return None
    said = next((line for line in lines if "Exception" in line), lines[0] if lines else "")
    return StorageError(
        f"table {table}: Spark cannot read {location.uri}: {advice}. Spark reaches the store "
        "with the Spark resource's storage options (SparkResource(storage_options=...), else "
        f"the environment variables), not the IO manager's. The store said: {said[:300]}"
    )
