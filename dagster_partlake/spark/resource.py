"""SparkResource: a Spark session for assets and the IO manager; local, cluster or Spark Connect.

Builds on dagster-pyspark's `LazyPySparkResource` (lazy creation, `spark_session` property) and
adds what it lacks: defaults that suit partition-sized jobs on one machine, a cluster `master`,
a Spark Connect `remote`, stopping the session it created at teardown, and the lake's storage:
the JARs `make install` fetched (hadoop-aws and Delta, `spark.jars`), Delta's SQL extension and
catalog, and the `s3a` settings from `storage_options` or the AWS environment variables
(`spark.storage`). A Spark Connect server gets those when it starts (`partlake spark start`,
`spark.server`), not from its clients.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dagster import InitResourceContext
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr, model_validator

from dagster_partlake.errors import PartlakeConfigError, SparkUnavailableError
from dagster_partlake.spark.cds import java_options
from dagster_partlake.spark.conf import DEFAULT_CONF
from dagster_partlake.spark.jars import DELTA_CATALOG, local_jars
from dagster_partlake.spark.storage import (
    S3aSettings,
    apply_hadoop,
    check_options,
    delta_conf,
    jars_conf,
    redact,
    s3a_settings,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import RetryPolicy

_log = logging.getLogger(__name__)
# Set to 0: local sessions start a JVM in each process, whatever SparkResource(warm=) says.
WARM_ENV = "PARTLAKE_SPARK_WARM"
# The job group of a run's Spark jobs on the warm Spark: this, then the run id.
JOB_GROUP_PREFIX = "dagster-run:"
# Spark Connect servers whose wait was reported, once per session of this process: one line
# says what a command waits for, not one per retried call.
_warned: set[str] = set()
# Spark Connect servers that stopped answering in this process: their sessions were closed.
_lost: set[str] = set()
# Seconds each session this process started took to start (a JVM for local Spark), until taken.
_session_starts: list[float] = []


def take_session_starts() -> float:
    """Seconds this process spent starting Spark sessions since the last call (0.0: none
    started): a run's materialization metadata shows it as the start-up it paid."""
    spent = sum(_session_starts)
    _session_starts.clear()
    return spent


class SparkResource(LazyPySparkResource):
    """A Spark session, created on first use and stopped at teardown if this resource created it.

    Local by default (`local[*]`, no UI, few shuffle partitions, bounded driver memory); set
    `master` for a standalone cluster or `remote` for a Spark Connect server. With the JARs
    fetched (`make install`), local Spark and a standalone cluster's app read and write
    `s3a://` and `format("delta")`.

    Spark settings go in `spark_conf`. `spark_config` (dagster-pyspark's name for the same
    thing) is accepted too, so a dagster-pyspark configuration moves over unchanged; both apply,
    and `spark_conf` wins where they set the same key.

    Example:
        .. code-block:: python

            from dagster import Definitions
            from dagster_partlake import DeltaPartitionIOManager, SparkResource

            spark = SparkResource(
                spark_conf={"spark.sql.shuffle.partitions": "4"},
                # or AWS_ENDPOINT_URL, AWS_REGION, ... in the environment; secrets best there
                storage_options={"AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                                 "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"},
            )
            defs = Definitions(
                assets=[...],
                resources={"spark": spark, "io_manager": DeltaPartitionIOManager(spark=spark)},
            )
    """

    spark_config: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Spark settings under dagster-pyspark's name, accepted so its configurations work "
            "unchanged; use spark_conf. Both apply; spark_conf wins where they set the same key."
        ),
    )
    master: str = Field(
        default="local[*]",
        description="Spark master URL: 'local[*]' (default), 'local[N]' or 'spark://host:7077'.",
    )
    remote: str | None = Field(
        default=None,
        description="Spark Connect URL such as 'sc://127.0.0.1:15002'; when set, master is unused.",
    )
    app_name: str = Field(default="dagster-partlake", description="Spark application name.")
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Spark settings (the field to use), applied after (and overriding) partlake's "
            "defaults and spark_config, dagster-pyspark's name, which is also accepted."
        ),
    )
    connect_wait_seconds: int = Field(
        default=60,
        ge=1,
        description=(
            "With remote: how long a call retries a Spark Connect server that does not answer "
            "(saying so in the log) before the step fails with an error naming the server. "
            "pyspark's own default retries for 10 minutes without a word."
        ),
    )
    class_data_sharing: bool = Field(
        default=True,
        description=(
            "Local Spark only: start the JVM from a class-data-sharing archive of Spark's "
            "classes (built once in the background, in $PARTLAKE_SPARK_CDS_DIR or the user's "
            "cache folder), about 2 s faster per session and faster first queries."
        ),
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Object store settings for Spark's s3a, with delta-rs' names: AWS_ENDPOINT_URL, "
            "AWS_REGION, AWS_ALLOW_HTTP, AWS_VIRTUAL_HOSTED_STYLE_REQUEST, AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (or any 'fs.s3a.' Hadoop key). Each one "
            "not given is read from the environment variable of that name. Secrets are never "
            "put in Spark's conf, printed or logged; prefer the environment for them."
        ),
    )
    jars_dir: str | None = Field(
        default=None,
        description=(
            "Folder of the JARs `make install` fetched (hadoop-aws, the AWS SDK, Delta); "
            "default $PARTLAKE_JARS_DIR, else the checkout's .partlake/jars. Without them Spark "
            "runs as before, without s3a and Delta."
        ),
    )
    add_jars: bool = Field(
        default=True,
        description=(
            "Local Spark and a standalone cluster: add the fetched JARs (to the JVMs' "
            "classpaths for local Spark and a cluster on 127.0.0.1, spark.jars for another "
            "cluster) and Delta's SQL extension and catalog. Set False on a cluster whose "
            "Spark already has hadoop-aws and Delta: the resource then adds neither (the s3a "
            "settings still apply). Unused with remote: a Spark Connect server gets them when "
            "it starts."
        ),
    )
    warm: bool = Field(
        default=True,
        description=(
            "Local Spark only: every run of the machine attaches to one warm Spark kept up "
            "between runs (started by the first run that needs it, stopped after "
            "warm_idle_seconds without a run; `partlake spark status|stop`), each run with a "
            "session of its own. False, or $PARTLAKE_SPARK_WARM=0: each run's process starts "
            "its own JVM, as before."
        ),
    )
    warm_idle_seconds: int = Field(
        default=600,
        ge=5,
        description="With warm: how long the warm Spark stays up without a run attached.",
    )
    _owns_session: bool = PrivateAttr(default=False)
    _attached: bool = PrivateAttr(default=False)

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    @model_validator(mode="after")
    def _check_urls(self) -> SparkResource:
        if self.remote is not None and not self.remote.startswith("sc://"):
            raise PartlakeConfigError(
                f"SparkResource.remote is {self.remote!r}; a Spark Connect URL starts with "
                "'sc://', e.g. 'sc://127.0.0.1:15002'."
            )
        if not (self.master.startswith(("local", "spark://", "yarn", "k8s://"))):
            raise PartlakeConfigError(
                f"SparkResource.master is {self.master!r}; use 'local[*]', 'local[N]' or a "
                "cluster URL such as 'spark://127.0.0.1:7077'."
            )
        check_options(self.storage_options)
        return self

    def __repr_args__(self) -> Any:
        # Secrets never reach a repr, and so no log line or error message that shows one.
        for name, value in super().__repr_args__():
            yield name, (redact(value) if name == "storage_options" else value)

    def s3a(self) -> S3aSettings:
        """The s3a settings: `storage_options`, then the AWS environment variables."""
        return s3a_settings(self.storage_options)

    def lake_conf(self) -> dict[str, str]:
        """What a local session or a standalone cluster's app gets for the lake's storage:
        the fetched JARs (`jars_conf`: on the classpath for local Spark and a cluster on this
        machine, `spark.jars` for another) and Delta's settings, unless `add_jars` is off or
        none were fetched, and the public s3a settings. Secrets are not in it."""
        conf = self.s3a().spark_conf()
        jars = local_jars(self.jars_dir) if self.add_jars else []
        if jars:
            user = self._user_conf()
            conf.update(jars_conf(jars, self.master, user))
            conf.update(delta_conf(user))
        return conf

    def _user_conf(self) -> dict[str, str]:
        return {k: str(v) for k, v in {**self.spark_config, **self.spark_conf}.items()}

    def effective_conf(self) -> dict[str, str]:
        """The settings a local session or a cluster app is built with: defaults, the lake's
        storage (`lake_conf`), then spark_config, then spark_conf (which win; their JARs and
        SQL extensions are kept beside the lake's)."""
        lake = self.lake_conf()
        conf = {**DEFAULT_CONF, **lake, **self._user_conf()}
        merged = (
            "spark.jars", "spark.driver.extraClassPath", "spark.executor.extraClassPath",
            "spark.sql.extensions",
        )  # fmt: skip
        for key in merged:  # lake_conf kept the user's beside its own
            if key in lake:
                conf[key] = lake[key]
        return conf

    def _init_session(self) -> None:
        if self._spark_session is not None:
            return
        from pyspark.sql import SparkSession

        if self.remote is not None:
            self._spark_session = self._connect()
            return
        else:
            _check_java()
            # Python workers (a streaming source reading a Delta table's new commits,
            # `dagster_partlake.delta.stream_source`) run this interpreter, with its packages,
            # not the first `python3` on the PATH; the JVM reads it from its environment.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            conf = self.effective_conf()
            if self._warm_applies():
                self._spark_session = self._attach(conf)
                return
            builder = SparkSession.builder.master(self.master)
            jars = [j for j in conf.get("spark.driver.extraClassPath", "").split(os.pathsep) if j]
            use_cds = self.class_data_sharing and self._new_jvm()
            options = java_options(extra_jars=jars) if use_cds else None
            if options:
                extra = conf.get("spark.driver.extraJavaOptions", "")
                conf["spark.driver.extraJavaOptions"] = f"{extra} {options}".strip()
        builder = builder.appName(self.app_name)
        # getOrCreate reuses a session already running in this process (one JVM per process);
        # we only stop what we started.
        self._owns_session = running_session() is None
        if not self._owns_session:
            conf = _fit_running_jvm(conf)
        for key, value in conf.items():
            builder = builder.config(key, value)
        started = time.perf_counter()
        self._spark_session = builder.getOrCreate()
        if self._owns_session:
            _session_starts.append(time.perf_counter() - started)
        # After the start: pyspark hands its conf to the JVM on a command line anyone can read.
        apply_hadoop(self._spark_session, self.s3a().secret)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # An asset that builds its own session (`SparkSession.builder.getOrCreate()`) before
        # this resource's gets this resource's: attached to the warm Spark now, or, without
        # it, a JVM launched with what this resource's would have had (the lake's JARs, Delta,
        # partlake's defaults). A JVM starts only from a step, after its resources are set up;
        # the previous launch arguments are back at teardown.
        if self.remote is None and self.master.startswith("local") and not self._jvm_running():
            if self._warm_applies():
                self._init_session()
            else:
                _launch_args.offer(self.effective_conf())
        if self._attached and self._spark_session is not None and context.run_id:
            # The run's Spark jobs, told apart from other runs' in the one JVM (its status
            # tracker, Ctrl-C) by a job group, set on the thread that runs its steps.
            self._spark_session.sparkContext.setJobGroup(
                f"{JOB_GROUP_PREFIX}{context.run_id}", f"Dagster run {context.run_id}"
            )

    def _warm_applies(self) -> bool:
        """Whether this process's session comes from the warm Spark: local, asked for, and no
        JVM in this process yet (one started by the user's code is kept)."""
        return (
            self.warm
            and self.master.startswith("local")
            and os.environ.get(WARM_ENV, "1") != "0"
            and not self._jvm_running()
        )

    def _attach(self, conf: dict[str, str]) -> SparkSession:
        from dagster_partlake.spark import warm

        spec = warm.WarmSpec.of(
            self.master,
            self.app_name,
            conf,
            self.s3a().secret,
            self.warm_idle_seconds,
            self.class_data_sharing,
        )
        started = time.perf_counter()
        made = warm.session(spec, _log)
        _session_starts.append(time.perf_counter() - started)
        self._owns_session = True
        self._attached = True
        return made

    def _jvm_running(self) -> bool:
        from pyspark import SparkContext

        return SparkContext._gateway is not None

    def _connect(self) -> SparkSession:
        """A Spark Connect session whose every call, the first included, retries an
        unanswering server for about `connect_wait_seconds`, saying so in the log.

        The builder's settings are sent with the session's first call, under pyspark's own
        retry policy (10 minutes, without a word), so the session is made bare, its policy
        set, and only then are the settings sent.
        """
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        assert self.remote is not None
        self._owns_session = running_session() is None
        # As pyspark's own builder does for a remote session: `pyspark.sql.functions` and
        # `Column` then build Spark Connect expressions (F.sum("x") on a classic path asks for
        # a SparkContext: "SparkContext or SparkSession should be created first").
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        session = ConnectSession.builder.remote(self.remote).getOrCreate()
        _warned.discard(self.remote)  # a new session says again what it waits for
        session.client.set_retry_policies(
            [_reporting_policy(self.remote, self.connect_wait_seconds)]
        )
        # Static JVM settings belong to the server; only SQL settings apply per session.
        base = {**DEFAULT_CONF, **self._user_conf()}
        conf: dict[str, str | int | bool] = {
            k: v for k, v in base.items() if k.startswith("spark.sql.")
        }
        conf["spark.app.name"] = self.app_name
        try:
            with self.server_errors():
                # As the builder would send them: a static setting the server refuses is ignored.
                session.conf._set_all(configs=conf, silent=True)
        except BaseException:  # the server is gone, or Ctrl-C while it was waited for
            _close_without_calls(session)
            raise
        return session  # type: ignore[return-value]

    def _new_jvm(self) -> bool:
        """Whether a local session started now starts a JVM (none runs in this process yet)."""
        from pyspark import SparkContext

        return self.master.startswith("local") and SparkContext._gateway is None

    @contextmanager
    def server_errors(self) -> Iterator[None]:
        """Spark calls under this that find the Spark Connect server gone raise a
        `SparkUnavailableError` naming the server and what to do."""
        try:
            yield
        except Exception as error:
            unavailable = self._unavailable(error)
            if unavailable is None:
                raise
            raise unavailable from error

    def _unavailable(self, error: Exception) -> SparkUnavailableError | None:
        if self.remote is None:
            return None
        if self.remote in _lost and "closed channel" in str(error):
            detail = "its session was closed when the server stopped answering"
        elif "UNAVAILABLE" not in str(error) or type(error).__name__ not in (
            "SparkConnectGrpcException",
            "RetriesExceeded",
        ):
            return None
        else:
            found = re.search(r'details = "([^"]+)"', str(error))
            detail = found.group(1) if found else "UNAVAILABLE"
            self._forget_session()
        return SparkUnavailableError(
            f"the Spark Connect server {self.remote} did not answer (each call retried for "
            f"{self.connect_wait_seconds} s: {detail}). Nothing was committed: the partitions "
            "stay as they were. Start the server again (partlake spark start) or point "
            "SparkResource(remote=...) at a running one; the sensor "
            "retries the run after its back-off."
        )

    def _forget_session(self) -> None:
        """Close the session of a server that stopped answering without asking the server
        anything: pyspark would release it on the server, at `stop()` and again when the
        process exits, each call retried for `connect_wait_seconds`. The next use makes a new
        session."""
        assert self.remote is not None
        _lost.add(self.remote)
        session = self._spark_session if self._spark_session is not None else running_session()
        if session is not None:
            _close_without_calls(session)
        self._spark_session = None
        self._owns_session = False

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        _launch_args.withdraw()
        if self._spark_session is not None and self._attached:
            # The warm Spark stays up for the next run; this run's cache goes.
            from dagster_partlake.spark import warm

            warm.release(self._spark_session)
        elif self._spark_session is not None and self._owns_session:
            if self.remote is not None:
                # Releasing the session on the server is one call, tried once: a run ending
                # because the server stopped answering (or Ctrl-C while it waited) must not
                # wait for it again.
                from pyspark.sql.connect.client.retries import DefaultPolicy

                self._spark_session.client.set_retry_policies([DefaultPolicy(max_retries=0)])
            self._spark_session.stop()
        self._spark_session = None
        self._owns_session = False
        self._attached = False


def _reporting_policy(remote: str, wait_seconds: int) -> RetryPolicy:
    """pyspark's retry policy, bounded to about `wait_seconds` per call (its backoff grows to at
    most a second, without jitter, so the last wait overshoots by less than that), that says
    in the log what it waits for."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    initial_ms, multiplier, cap_ms = 100, 2.0, 1_000
    retries, waited_ms, backoff = 0, 0.0, float(initial_ms)
    while waited_ms + min(backoff, cap_ms) <= wait_seconds * 1000:
        waited_ms += min(backoff, cap_ms)
        backoff *= multiplier
        retries += 1

    class Reporting(DefaultPolicy):
        def can_retry(self, error: BaseException) -> bool:
            retry = bool(super().can_retry(error))
            if retry and remote not in _warned:
                _warned.add(remote)
                _log.warning(
                    f"waiting for the Spark Connect server {remote}, which does not answer; "
                    f"each call is retried for up to {wait_seconds} s"
                )
            return retry

    return Reporting(
        max_retries=max(retries, 1),
        initial_backoff=initial_ms,
        backoff_multiplier=multiplier,
        max_backoff=cap_ms,
        jitter=0,
        # A server asking to wait longer than the bound is not waited for.
        max_server_retry_delay=cap_ms,
    )


def _close_without_calls(session: Any) -> None:
    """Close a Spark Connect session's channel without a call to its server (which would be
    retried): the process then exits without pyspark's clean-up calls either."""
    if hasattr(session, "release_session_on_close"):
        session.release_session_on_close = False
        session.stop()


def running_session() -> SparkSession | None:
    """The Spark session already running in this process, from any thread, or None."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # The JVM's active session is per thread; the process-wide default is this class attribute.
    default = getattr(SparkSession, "_instantiatedSession", None)
    if default is not None and getattr(default, "_sc", None) is not None:
        if getattr(default._sc, "_jsc", None) is not None:
            return default
    # A Spark Connect client's active session is per thread too; its default is process-wide.
    connect = sys.modules.get("pyspark.sql.connect.session")
    if connect is not None:
        return connect.SparkSession._get_default_session()
    return None


def _check_java() -> None:
    if os.environ.get("JAVA_HOME") or _which("java"):
        return
    raise PartlakeConfigError(
        "no Java runtime found: local Spark needs Java 17 or newer. Install it (Debian/Ubuntu: "
        "'apt-get install openjdk-17-jre-headless') or set JAVA_HOME, or use "
        "SparkResource(remote='sc://host:15002') to run on a Spark Connect server."
    )


def _which(program: str) -> str | None:
    import shutil

    return shutil.which(program)


class _LaunchArgs:
    """`PYSPARK_SUBMIT_ARGS`, the options pyspark launches a process's JVM with, offered while a
    resource is set up: a session the user's code builds gets the lake's conf too. A value the
    user set is left alone."""

    def __init__(self) -> None:
        self._saved: list[str | None] = []

    def offer(self, conf: dict[str, str]) -> None:
        previous = os.environ.get(_SUBMIT_ARGS)
        self._saved.append(previous)
        if previous is not None and not previous.startswith(_OURS):
            return
        args = shlex.split(_OURS)
        for key, value in sorted(conf.items()):
            args += ["--conf", f"{key}={value}"]
        os.environ[_SUBMIT_ARGS] = shlex.join([*args, "pyspark-shell"])

    def withdraw(self) -> None:
        if not self._saved:
            return
        previous = self._saved.pop()
        if previous is None:
            os.environ.pop(_SUBMIT_ARGS, None)
        else:
            os.environ[_SUBMIT_ARGS] = previous


_SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"
# Marks partlake's own value (a setting nothing reads): a nested offer replaces it, the user's
# own value is kept.
_OURS = "--conf spark.partlake.launched=true"
_launch_args = _LaunchArgs()


def _fit_running_jvm(conf: dict[str, str]) -> dict[str, str]:
    """`conf` for a session already running in this process, started without partlake (by the
    user's code before this resource was set up): without Delta's catalog and extension when
    its JVM cannot load them (the session would fail at its next query with "Cannot find
    catalog plugin class"). partlake's writer and reads work without them; what needs them
    names the cause when reached."""
    if conf.get("spark.sql.catalog.spark_catalog") != DELTA_CATALOG:
        return conf
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    try:
        gateway.jvm.java.lang.Class.forName(DELTA_CATALOG)  # type: ignore[union-attr]
        return conf
    except Exception:
        pass
    if not _warned_jvm:
        _warned_jvm.append(True)
        _log.warning(
            "this process's Spark was started before partlake's SparkResource (by "
            "SparkSession.builder.getOrCreate() at import or in an asset), without the lake's "
            "JARs: partlake's writer and reads work, Spark's Delta (format('delta'), the "
            "delta-spark writer) and s3a:// do not. To have them, use the resource's session "
            "(a `spark: SparkResource` argument, `spark.spark_session`) or build yours inside "
            "an asset, after the resource is set up."
        )
    dropped = ("spark.sql.catalog.spark_catalog", "spark.sql.extensions")
    return {k: v for k, v in conf.items() if k not in dropped}


_warned_jvm: list[bool] = []
