"""What Spark needs to reach the lake's storage: the fetched JARs, Delta's settings, and the
`s3a` settings from storage options or the standard AWS environment variables.

Storage options use the names delta-rs takes (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ALLOW_HTTP`,
`AWS_VIRTUAL_HOSTED_STYLE_REQUEST`), so one dict serves Spark and delta-rs alike; a key
starting with `fs.s3a.` goes to Hadoop as it is. Options win over the environment, key by key.

Secrets (keys, session token) never enter Spark's conf: pyspark passes its conf to the JVM on
the `spark-submit` command line, which every user of the machine can read. They are set on the
running session's Hadoop configuration instead (`apply_hadoop`), which Spark ships to its
executors with each job; a Spark server started by partlake gets them in its environment, where
s3a's default credential chain reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.spark.jars import DELTA_CATALOG, DELTA_EXTENSION
from dagster_partlake.storage.options import REDACTED, redacted

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENDPOINT_KEYS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
REGION_KEYS = ("AWS_REGION", "AWS_DEFAULT_REGION")
SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
FLAG_KEYS = ("AWS_ALLOW_HTTP", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST")
OPTION_KEYS = (*ENDPOINT_KEYS, *REGION_KEYS, *SECRET_KEYS, *FLAG_KEYS)
# Hadoop keys whose values are secrets (also what Spark's redaction regex catches).
SECRET_HADOOP_KEYS = ("fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token")


@dataclass(frozen=True)
class S3aSettings:
    """Hadoop settings for `s3a://`: `public` may go in Spark's conf, `secret` may not."""

    public: dict[str, str] = field(default_factory=dict)
    secret: dict[str, str] = field(default_factory=dict)

    def spark_conf(self) -> dict[str, str]:
        """The public settings as Spark conf keys (`spark.hadoop.` prefix)."""
        return {f"spark.hadoop.{key}": value for key, value in self.public.items()}

    def secret_env(self) -> dict[str, str]:
        """The secrets as the AWS environment variables s3a's default credential chain reads."""
        names = {
            "fs.s3a.access.key": "AWS_ACCESS_KEY_ID",
            "fs.s3a.secret.key": "AWS_SECRET_ACCESS_KEY",
            "fs.s3a.session.token": "AWS_SESSION_TOKEN",
        }
        return {names[key]: value for key, value in self.secret.items() if key in names}

    def __repr__(self) -> str:
        hidden = dict.fromkeys(self.secret, REDACTED)
        return f"S3aSettings(public={self.public!r}, secret={hidden!r})"


def redact(options: Mapping[str, str]) -> dict[str, str]:
    """`options` with the value of every secret key replaced, for reprs and messages."""
    return redacted(options)


def _norm(key: str) -> str:
    return key if key.startswith("fs.s3a.") else key.upper()


def check_options(options: Mapping[str, str]) -> None:
    """Raise a `PartlakeConfigError` naming any key that is neither a known AWS option nor an
    `fs.s3a.` Hadoop key (a typo would otherwise be ignored)."""
    unknown = sorted(
        k for k in options if _norm(k) not in OPTION_KEYS and not k.startswith("fs.s3a.")
    )
    if unknown:
        raise PartlakeConfigError(
            f"unknown storage option(s) {', '.join(unknown)}; Spark takes "
            f"{', '.join(OPTION_KEYS)} (delta-rs' names, any case) and Hadoop keys starting "
            "with 'fs.s3a.'."
        )


def s3a_settings(
    options: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> S3aSettings:
    """The `s3a` settings from `options`, falling back key by key to `environ` (default: the
    process environment). Nothing set in either gives no settings: s3a's own defaults (AWS,
    its credential chain) apply."""
    given = {_norm(k): v for k, v in (options or {}).items()}
    env = os.environ if environ is None else environ

    def pick(*keys: str) -> str | None:
        for source in (given, env):
            for key in keys:
                if source.get(key):
                    return source[key]
        return None

    public: dict[str, str] = {}
    endpoint = pick(*ENDPOINT_KEYS)
    if endpoint:
        public["fs.s3a.endpoint"] = endpoint
        # Like delta-rs: a custom endpoint is addressed by path unless virtual hosts are asked for.
        virtual = _flag(pick("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"))
        public["fs.s3a.path.style.access"] = "false" if virtual else "true"
        if endpoint.startswith("http://"):
            if not _flag(pick("AWS_ALLOW_HTTP")):
                raise PartlakeConfigError(
                    f"the S3 endpoint {endpoint} is plain http but AWS_ALLOW_HTTP is not true; "
                    "set AWS_ALLOW_HTTP=true (a local test server) or use https."
                )
            public["fs.s3a.connection.ssl.enabled"] = "false"
    region = pick(*REGION_KEYS)
    if region:
        public["fs.s3a.endpoint.region"] = region
    secret: dict[str, str] = {}
    for option, hadoop in zip(SECRET_KEYS, SECRET_HADOOP_KEYS, strict=True):
        value = pick(option)
        if value:
            secret[hadoop] = value
    if "fs.s3a.session.token" in secret:
        public["fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        )
    for key, value in (options or {}).items():
        if key.startswith("fs.s3a."):
            (secret if key in SECRET_HADOOP_KEYS else public)[key] = value
    return S3aSettings(public, secret)


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def delta_conf(existing: Mapping[str, str]) -> dict[str, str]:
    """Delta's SQL extension (added to any already in `existing`) and its catalog, unless
    `existing` names another catalog for `spark_catalog`."""
    extensions = [e.strip() for e in existing.get("spark.sql.extensions", "").split(",") if e]
    if DELTA_EXTENSION not in extensions:
        extensions.append(DELTA_EXTENSION)
    return {
        "spark.sql.extensions": ",".join(extensions),
        "spark.sql.catalog.spark_catalog": existing.get(
            "spark.sql.catalog.spark_catalog", DELTA_CATALOG
        ),
    }


def jars_conf(
    jars: Sequence[str | Path], master: str, existing: Mapping[str, str]
) -> dict[str, str]:
    """Spark conf that puts `jars` on the session's classpath, kept beside `existing` ones.

    Local Spark, and a standalone cluster on this machine (`spark://127.0.0.1` or `localhost`,
    as `partlake`'s own), get them on the JVMs' classpaths (`spark.driver.extraClassPath`, and
    `spark.executor.extraClassPath` for the cluster's executors, which share this disk): nothing
    is copied, and the class-data-sharing archive can hold their classes. `spark.jars` instead
    copies every JAR (the AWS SDK bundle alone is 654 MiB) into a folder per local session and
    per executor of each application. Any other cluster gets `spark.jars`, which Spark ships to
    its executors.
    """
    paths = [str(j) for j in jars]
    host = master.removeprefix("spark://").split(":")[0]
    if master.startswith("local") or host in ("127.0.0.1", "localhost"):
        keys = ["spark.driver.extraClassPath"]
        if not master.startswith("local"):
            keys.append("spark.executor.extraClassPath")
        separator = os.pathsep
    else:
        keys, separator = ["spark.jars"], ","
    conf = {}
    for key in keys:
        kept = [j for j in existing.get(key, "").split(separator) if j]
        conf[key] = separator.join([*paths, *kept])
    return conf


def apply_hadoop(session: SparkSession, settings: Mapping[str, str]) -> None:
    """Set Hadoop `settings` on a running classic session's Hadoop configuration (the driver's,
    which Spark sends to its executors with each job)."""
    if not settings:
        return
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in settings.items():
        hadoop.set(key, value)
