"""Local Spark starts from a class-data-sharing archive of Spark's classes (`spark.cds`): built
for real by a JVM, then mapped by a new session's JVM. Its speed is measured by
`benchmarks/spark_start.py`, not here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dagster_partlake.spark import cds


@pytest.fixture
def archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PARTLAKE_SPARK_CDS_DIR", str(tmp_path / "cds"))
    return tmp_path / "cds"


@pytest.mark.extended  # CI: its build and locking below; make bench-spark-start times it
def test_a_built_archive_is_mapped_by_the_next_local_session(
    archive_dir: Path, tmp_path: Path
) -> None:
    """With the fetched JARs (hadoop-aws, Delta) on the session's classpath, as SparkResource
    puts them: the archive is keyed by them too, and holds Delta's classes."""
    from dagster_partlake.spark.jars import local_jars

    jars = [str(jar) for jar in local_jars()]
    path = cds.archive_path(jars)
    assert path is not None and path.startswith(str(archive_dir))
    assert path != cds.archive_path() or not jars  # another classpath, another archive
    assert cds.java_options(build=False, extra_jars=jars) is None  # nothing built, nor started
    assert not archive_dir.exists() or not list(archive_dir.iterdir())

    archive_dir.mkdir()
    Path(path + ".lock").write_text("")  # as the session that started the builder left it
    cds.build(path, jars)
    assert os.path.getsize(path) > 10_000_000
    assert not os.path.exists(path + ".lock")  # the next builder may run (when Spark changes)
    assert not [p for p in archive_dir.iterdir() if p.name.endswith(".partial")]
    options = cds.java_options(extra_jars=jars)
    assert options == f"-XX:SharedArchiveFile={path} {cds.QUIET}"

    # A new process's local session: its JVM got the archive and runs Spark (and Delta) as usual.
    loaded = tmp_path / "classes.log"
    script = (
        "import json, sys\n"
        "from dagster_partlake.spark.resource import SparkResource\n"
        "r = SparkResource(spark_conf={'spark.driver.extraJavaOptions':\n"
        "                              '-Xlog:class+load=info:file=' + sys.argv[1]})\n"
        "r._init_session()\n"
        "s = r._spark_session\n"
        "jvm = s.sparkContext._jvm\n"
        "args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()"
        ".getInputArguments())\n"
        "rows = s.range(100).selectExpr('id % 3 as k').groupBy('k').count().collect()\n"
        "print(json.dumps({'args': args, 'groups': len(rows)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(loaded)],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert f"-XX:SharedArchiveFile={path}" in seen["args"]
    assert seen["groups"] == 3
    if jars:  # Delta's session extension came from the archive, not from its JAR
        sources = re.findall(
            r"\] io\.delta\.sql\.DeltaSparkSessionExtension source: (.+)", loaded.read_text()
        )
        assert sources == ["shared objects file (top)"], sources


def test_a_failed_build_is_not_retried_by_every_session(
    archive_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = cds.archive_path()
    assert path is not None
    archive_dir.mkdir()
    monkeypatch.setenv("JDK_JAVA_OPTIONS", "-XX:+NoSuchOptionAnywhere")  # the JVM cannot start
    with pytest.raises(subprocess.CalledProcessError):
        cds.build(path)
    assert not os.path.exists(path)
    assert Path(path + ".failed").read_text() == f"see {path}.log\n"
    assert cds.java_options() is None
    assert not os.path.exists(path + ".lock")  # no builder was started


def test_one_builder_at_a_time_and_a_dead_ones_lock_is_taken_over(tmp_path: Path) -> None:
    lock = str(tmp_path / "a.jsa.lock")
    assert cds._take_lock(lock)
    assert not cds._take_lock(lock)  # a builder holds it
    old = time.time() - cds.STALE_LOCK_SECONDS - 1
    os.utime(lock, (old, old))
    assert cds._take_lock(lock)  # its builder died long ago
