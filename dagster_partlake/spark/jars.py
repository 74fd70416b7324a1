"""The JARs Spark needs for `s3a://` and Delta, in one list: `make install` fetches them from
Maven Central into the project, and `SparkResource` and the Spark servers read them from there.

pyspark's pip package bundles the Hadoop client but not `hadoop-aws`, and no Delta. This module
names the exact Maven coordinates for the installed pyspark:

- `s3a`: `org.apache.hadoop:hadoop-aws` of the Hadoop version pyspark bundles (read from its
  `hadoop-client-api-<version>.jar`), the AWS SDK v2 `software.amazon.awssdk:bundle` and the
  `analyticsaccelerator-s3` that hadoop-aws's POM names as compile dependencies (the fetch checks
  the bundle version against that POM);
- `delta`: `io.delta:delta-spark_<spark minor>_2.13` and `io.delta:delta-storage` of the first
  Delta release for that Spark.

Only those: every other compile dependency of delta-spark's POM (jackson, parquet, slf4j, the
Hadoop client, ...) is already in pyspark's jars, except `delta-kernel-*` and `unitycatalog-*`,
which serve delta-spark's opt-in kernel-based connector and Unity Catalog managed tables. Delta
Connect's server plugin (`io.delta:delta-connect-server_<spark minor>_2.13`) is not on Maven
Central for any Spark 4.x Delta release (checked 2026-11-26), so a Spark Connect server reads and
writes Delta through `format("delta")` and SQL, not through the `DeltaTable` client API.

`python -m dagster_partlake.spark.jars fetch [--dest DIR]` copies what is missing with
`mvn dependency:copy` (Maven's local repository caches the downloads); `list` prints the
coordinates; `dir` prints the folder the resource reads. Nothing here touches the network at run
time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dagster_partlake.errors import PartlakeConfigError

Role = Literal["s3a", "delta", "kafka", "jdbc"]
ROLES: tuple[Role, ...] = ("s3a", "delta", "kafka", "jdbc")
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
JARS_DIR_ENV = "PARTLAKE_JARS_DIR"

# Hadoop version pyspark bundles -> (AWS SDK v2 bundle, analyticsaccelerator-s3) that
# hadoop-aws of that version names in its POM (via its parent hadoop-project).
HADOOP_AWS_DEPENDENCIES: dict[str, tuple[str, str]] = {"3.5.0": ("2.35.4", "1.3.1")}
# Spark minor version -> the Delta release built for it (Maven Central: delta-spark_4.2_2.13
# exists at 4.4.0 only; the pip package delta-spark 4.4.1 has no matching JAR).
DELTA_FOR_SPARK: dict[str, str] = {"4.2": "4.4.0"}
# Spark minor version -> its Kafka source (spark-sql-kafka-0-10: Maven Central has 4.2.0, not
# 4.2.1; the same minor runs on pyspark 4.2.1) and the kafka-clients and commons-pool2 versions
# its POM names (checked by `check_kafka_versions` when they are fetched).
KAFKA_FOR_SPARK: dict[str, tuple[str, str, str]] = {"4.2": ("4.2.0", "3.9.2", "2.13.1")}
# PostgreSQL's JDBC driver, for sources read through Spark's JDBC data source.
POSTGRES_JDBC = "42.7.14"
SCALA = "2.13"

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


@dataclass(frozen=True)
class MavenJar:
    """One JAR on Maven Central, and what it is for."""

    group: str
    artifact: str
    version: str
    role: Role
    classifier: str = ""

    @property
    def coordinate(self) -> str:
        """`group:artifact:version[:jar:classifier]`, as `mvn dependency:copy -Dartifact` takes."""
        base = f"{self.group}:{self.artifact}:{self.version}"
        return f"{base}:jar:{self.classifier}" if self.classifier else base

    @property
    def file_name(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.jar"


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def bundled_hadoop_version(jars_dir: Path | None = None) -> str:
    """The Hadoop client version in pyspark's jars (`hadoop-client-api-<version>.jar`)."""
    folder = jars_dir or pyspark_jars_dir()
    for name in sorted(os.listdir(folder)):
        found = re.fullmatch(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar", name)
        if found:
            return found.group(1)
    raise PartlakeConfigError(
        f"no hadoop-client-api-<version>.jar in {folder}: is pyspark installed whole?"
    )


def spark_minor() -> str:
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


def required_jars(roles: Sequence[Role] = ROLES) -> list[MavenJar]:
    """The JARs for `roles` that match the installed pyspark, in classpath order."""
    jars: list[MavenJar] = []
    if "s3a" in roles:
        hadoop = bundled_hadoop_version()
        if hadoop not in HADOOP_AWS_DEPENDENCIES:
            raise PartlakeConfigError(
                f"pyspark bundles Hadoop {hadoop}, and dagster_partlake/spark/jars.py knows the "
                f"hadoop-aws dependencies of Hadoop {', '.join(HADOOP_AWS_DEPENDENCIES)} only: add "
                f"{hadoop} to HADOOP_AWS_DEPENDENCIES with the AWS SDK bundle and "
                "analyticsaccelerator-s3 versions hadoop-aws's POM names."
            )
        sdk, accelerator = HADOOP_AWS_DEPENDENCIES[hadoop]
        jars += [
            MavenJar("org.apache.hadoop", "hadoop-aws", hadoop, "s3a"),
            MavenJar("software.amazon.awssdk", "bundle", sdk, "s3a"),
            MavenJar(
                "software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", accelerator,
                "s3a",
            ),
        ]  # fmt: skip
    if "delta" in roles:
        minor = spark_minor()
        if minor not in DELTA_FOR_SPARK:
            raise PartlakeConfigError(
                f"pyspark {minor} has no Delta release listed in dagster_partlake/spark/jars.py "
                f"(DELTA_FOR_SPARK knows Spark {', '.join(DELTA_FOR_SPARK)}): add the Delta "
                f"version whose io.delta:delta-spark_{minor}_{SCALA} is on Maven Central."
            )
        delta = DELTA_FOR_SPARK[minor]
        jars += [
            MavenJar("io.delta", f"delta-spark_{minor}_{SCALA}", delta, "delta"),
            MavenJar("io.delta", "delta-storage", delta, "delta"),
        ]
    if "kafka" in roles:
        minor = spark_minor()
        if minor not in KAFKA_FOR_SPARK:
            raise PartlakeConfigError(
                f"pyspark {minor} has no Kafka source listed in dagster_partlake/spark/jars.py "
                f"(KAFKA_FOR_SPARK knows Spark {', '.join(KAFKA_FOR_SPARK)}): add the version of "
                f"org.apache.spark:spark-sql-kafka-0-10_{SCALA} on Maven Central for {minor}."
            )
        spark, clients, pool = KAFKA_FOR_SPARK[minor]
        jars += [
            MavenJar("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA}", spark, "kafka"),
            MavenJar(
                "org.apache.spark", f"spark-token-provider-kafka-0-10_{SCALA}", spark, "kafka"
            ),
            MavenJar("org.apache.kafka", "kafka-clients", clients, "kafka"),
            MavenJar("org.apache.commons", "commons-pool2", pool, "kafka"),
        ]
    if "jdbc" in roles:
        jars.append(MavenJar("org.postgresql", "postgresql", POSTGRES_JDBC, "jdbc"))
    return jars


def checkout_root() -> Path | None:
    """The source checkout this package runs from (an editable install), or None."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def default_jars_dir() -> Path | None:
    """`$PARTLAKE_JARS_DIR`, else `.partlake/jars` of the checkout, else None (an installed
    package outside a checkout: set the variable or `SparkResource(jars_dir=...)`)."""
    explicit = os.environ.get(JARS_DIR_ENV)
    if explicit:
        return Path(explicit)
    root = checkout_root()
    return root / ".partlake" / "jars" if root else None


def local_jars(jars_dir: str | Path | None = None, roles: Sequence[Role] = ROLES) -> list[Path]:
    """The fetched JAR files for `roles` in `jars_dir` (default: `default_jars_dir()`).

    Returns an empty list when none of them is there (not fetched: Spark runs without s3a and
    Delta, as before).

    Raises:
        PartlakeConfigError: some are there and some are missing (an interrupted fetch, or a
            pyspark upgrade that needs other versions).
    """
    folder = Path(jars_dir) if jars_dir is not None else default_jars_dir()
    if folder is None or not folder.is_dir():
        return []
    wanted = required_jars(roles)
    present = [folder / jar.file_name for jar in wanted if (folder / jar.file_name).is_file()]
    if present and len(present) < len(wanted):
        missing = [jar.file_name for jar in wanted if not (folder / jar.file_name).is_file()]
        raise PartlakeConfigError(
            f"the JAR folder {folder} lacks {', '.join(missing)} for this pyspark; run "
            "`make install` (or `python -m dagster_partlake.spark.jars fetch --dest "
            f"{folder}`) to fetch them, or point SparkResource(jars_dir=...) elsewhere."
        )
    return present


def fetch(dest: Path, *, mvn: str = "mvn", roles: Sequence[Role] = ROLES) -> list[MavenJar]:
    """Copy the JARs for `roles` that `dest` lacks from Maven Central (through Maven's local
    repository) into `dest`; the ones already there are skipped. Returns those fetched.

    Each JAR lands in a scratch folder first and is moved into place whole, so an interrupted
    fetch leaves no truncated JAR under its final name.
    """
    if shutil.which(mvn) is None:
        raise PartlakeConfigError(
            f"`{mvn}` (Apache Maven) is not on the PATH: it fetches Spark's JARs from Maven "
            "Central. Install it (Debian: apt-get install maven) and run `make install` again."
        )
    dest.mkdir(parents=True, exist_ok=True)
    missing = [jar for jar in required_jars(roles) if not (dest / jar.file_name).is_file()]
    if any(jar.artifact == "bundle" for jar in missing):
        check_sdk_version(mvn)
    if any(jar.role == "kafka" for jar in missing):
        check_kafka_versions(mvn)
    for jar in missing:
        print(f"fetching {jar.coordinate} ({jar.role}) into {dest}", flush=True)
        with tempfile.TemporaryDirectory(dir=dest, prefix=".fetch-") as scratch:
            _maven_copy(mvn, jar.coordinate, Path(scratch))
            os.replace(Path(scratch) / jar.file_name, dest / jar.file_name)
    return missing


def check_sdk_version(mvn: str = "mvn") -> None:
    """Raise unless the AWS SDK bundle version listed for the bundled Hadoop is the one
    hadoop-aws's POM names (its parent `hadoop-project` holds the version property)."""
    hadoop = bundled_hadoop_version()
    listed = HADOOP_AWS_DEPENDENCIES[hadoop][0]
    with tempfile.TemporaryDirectory(prefix="partlake-pom-") as scratch:
        _maven_copy(mvn, f"org.apache.hadoop:hadoop-project:{hadoop}:pom", Path(scratch))
        pom = ET.parse(Path(scratch) / f"hadoop-project-{hadoop}.pom").getroot()
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    found = pom.find("m:properties/m:aws-java-sdk-v2.version", namespace)
    named = found.text.strip() if found is not None and found.text else None
    if named != listed:
        raise PartlakeConfigError(
            f"hadoop-aws {hadoop}'s POM names AWS SDK bundle {named}, but "
            f"dagster_partlake/spark/jars.py lists {listed}: update HADOOP_AWS_DEPENDENCIES."
        )


def check_kafka_versions(mvn: str = "mvn") -> None:
    """Raise unless the kafka-clients and commons-pool2 versions listed for this Spark are the
    ones its Kafka source's POM names."""
    spark, clients, pool = KAFKA_FOR_SPARK[spark_minor()]
    artifact = f"spark-sql-kafka-0-10_{SCALA}"
    with tempfile.TemporaryDirectory(prefix="partlake-pom-") as scratch:
        _maven_copy(mvn, f"org.apache.spark:{artifact}:{spark}:pom", Path(scratch))
        pom = ET.parse(Path(scratch) / f"{artifact}-{spark}.pom").getroot()
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    named = {
        (d.findtext("m:artifactId", namespaces=namespace) or ""): d.findtext(
            "m:version", namespaces=namespace
        )
        for d in pom.iterfind("m:dependencies/m:dependency", namespace)
        if d.findtext("m:scope", namespaces=namespace) in (None, "compile")
    }
    if (named.get("kafka-clients"), named.get("commons-pool2")) != (clients, pool):
        raise PartlakeConfigError(
            f"{artifact} {spark}'s POM names kafka-clients {named.get('kafka-clients')} and "
            f"commons-pool2 {named.get('commons-pool2')}, but dagster_partlake/spark/jars.py "
            f"lists {clients} and {pool}: update KAFKA_FOR_SPARK."
        )


def _maven_copy(mvn: str, coordinate: str, dest: Path) -> None:
    command = [
        mvn, "-q", "-B", f"{MAVEN_DEPENDENCY_PLUGIN}:copy", f"-Dartifact={coordinate}",
        f"-DoutputDirectory={dest}",
    ]  # fmt: skip
    # Outside any Maven project, so that a pom.xml in the working directory plays no part.
    done = subprocess.run(command, cwd=dest, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        detail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise PartlakeConfigError(
            f"`mvn dependency:copy` could not fetch {coordinate} from Maven Central (exit "
            f"{done.returncode}): {' | '.join(detail)}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dagster_partlake.spark.jars")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = sub.add_parser("fetch", help="copy the missing JARs from Maven Central")
    fetch_cmd.add_argument("--dest", help="folder (default: $PARTLAKE_JARS_DIR or .partlake/jars)")
    sub.add_parser("list", help="print the Maven coordinates for this pyspark")
    sub.add_parser("dir", help="print the folder SparkResource reads the JARs from")
    args = parser.parse_args(argv)
    if args.command == "list":
        for jar in required_jars():
            print(f"{jar.role}\t{jar.coordinate}")
        return 0
    folder = Path(args.dest) if getattr(args, "dest", None) else default_jars_dir()
    if folder is None:
        print(f"Error: not in a checkout: pass --dest or set {JARS_DIR_ENV}.", file=sys.stderr)
        return 1
    if args.command == "dir":
        print(folder)
        return 0
    try:
        fetched = fetch(folder)
    except PartlakeConfigError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    total = len(required_jars())
    print(f"Spark JARs in {folder}: {total} ({len(fetched)} fetched, {total - len(fetched)} kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
