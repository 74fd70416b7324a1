"""Storage options: the settings and credentials of an object store, in the names delta-rs uses.

Users give options the way delta-rs and dagster-deltalake take them (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, ...; any case), explicitly on the IO manager or the Spark resource, or through
the standard environment variables; explicit ones win. This module turns them into what each
engine needs (delta-rs' `storage_options`, a pyarrow filesystem, Spark's `fs.s3a.*` settings) and
is the one place that knows delta-rs' names (Spark's `s3a` settings are made from the same
options by `dagster_partlake.spark.storage`). Values are secrets: `redacted` is what may be
shown.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse

from dagster_partlake.errors import PartlakeConfigError

# Per scheme, the option names read from the environment when not given explicitly.
ENV_OPTIONS: dict[str, tuple[str, ...]] = {
    "s3": (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT",
        "AWS_ALLOW_HTTP",
        "AWS_S3_ALLOW_UNSAFE_RENAME",
    ),
    "abfss": (
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_USE_EMULATOR",
        "AZURE_STORAGE_ENDPOINT",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_TENANT_ID",
    ),
    "gs": (
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
    ),
}
SECRET_WORDS = ("SECRET", "KEY", "TOKEN", "PASSWORD", "SAS", "CREDENTIAL")
REDACTED = "*****(redacted)"


def normalized(options: Mapping[str, str] | None) -> dict[str, str]:
    """Option names upper-cased (delta-rs accepts either case; we compare in one)."""
    return {str(k).upper(): str(v) for k, v in (options or {}).items()}


def effective(scheme: str, explicit: Mapping[str, str] | None) -> dict[str, str]:
    """The options a location of `scheme` uses: the environment's, overridden by `explicit`."""
    found = {name: os.environ[name] for name in ENV_OPTIONS.get(scheme, ()) if os.environ.get(name)}
    found.update(normalized(explicit))
    if scheme == "s3" and "AWS_REGION" not in found and "AWS_DEFAULT_REGION" in found:
        found["AWS_REGION"] = found["AWS_DEFAULT_REGION"]
    return found


def redacted(options: Mapping[str, str]) -> dict[str, str]:
    """`options` fit to show: every value of a secret-looking name replaced by `***`."""
    return {
        k: ("***" if any(w in k.upper() for w in SECRET_WORDS) else v) for k, v in options.items()
    }


def endpoint(options: Mapping[str, str]) -> str | None:
    """The S3 endpoint URL the options name, if any."""
    return (
        options.get("AWS_ENDPOINT_URL_S3")
        or options.get("AWS_ENDPOINT_URL")
        or options.get("AWS_ENDPOINT")
    )


def store_identity(scheme: str, options: Mapping[str, str]) -> str:
    """Which store of `scheme` the options reach, beyond the URI: the S3 endpoint (or AWS's own,
    per region), the Azure endpoint or account. Two lakes with the same URI on two servers are
    two tables; no secret is part of it."""
    if scheme == "s3":
        return endpoint(options) or f"aws:{options.get('AWS_REGION', '')}"
    if scheme == "abfss":
        if options.get("AZURE_STORAGE_USE_EMULATOR", "").lower() in ("1", "true"):
            return "emulator"
        return options.get("AZURE_STORAGE_ENDPOINT") or options.get(
            "AZURE_STORAGE_ACCOUNT_NAME", ""
        )
    return ""


def _allows_http(options: Mapping[str, str]) -> bool:
    url = endpoint(options) or ""
    return options.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true", "yes") or url.startswith(
        "http://"
    )


def delta_options(scheme: str, options: Mapping[str, str]) -> dict[str, str]:
    """delta-rs' `storage_options` for a location of `scheme`."""
    result = dict(options)
    if scheme == "s3":
        if _allows_http(options):
            result["AWS_ALLOW_HTTP"] = "true"
        # delta-rs >= 1.6.1 commits with a create-only PUT (If-None-Match): no lock needed.
        result.setdefault("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
        result.pop("AWS_DEFAULT_REGION", None)
    return result


def arrow_s3_arguments(options: Mapping[str, str]) -> dict[str, object]:
    """Keyword arguments of `pyarrow.fs.S3FileSystem` for these options."""
    arguments: dict[str, object] = {}
    if "AWS_ACCESS_KEY_ID" in options:
        arguments["access_key"] = options["AWS_ACCESS_KEY_ID"]
        arguments["secret_key"] = options.get("AWS_SECRET_ACCESS_KEY", "")
    if "AWS_SESSION_TOKEN" in options:
        arguments["session_token"] = options["AWS_SESSION_TOKEN"]
    if "AWS_REGION" in options:
        arguments["region"] = options["AWS_REGION"]
    url = endpoint(options)
    if url:
        parsed = urlparse(url if "://" in url else f"https://{url}")
        arguments["endpoint_override"] = parsed.netloc + parsed.path.rstrip("/")
        arguments["scheme"] = "http" if _allows_http(options) else (parsed.scheme or "https")
        # A local or S3-compatible endpoint names buckets in the path.
        arguments["force_virtual_addressing"] = False
    return arguments


def require_scheme(scheme: str, where: str) -> None:
    """Raise the clear error for a URI scheme partlake cannot store tables on."""
    if scheme not in ("file", *ENV_OPTIONS):
        raise PartlakeConfigError(
            f"{where!r} is on {scheme}://, which partlake does not store tables on; use a local "
            "path, file://, s3://, abfss:// or gs://."
        )
