"""partlake plans exactly over what delta-spark writes (issue 34, point 3), and reads it right.

delta-spark itself writes small partitioned tables, one per case, with the operations its users
run: appends, `replaceWhere` overwrites, MERGE, UPDATE and DELETE with deletion vectors off and
on, OPTIMIZE, ZORDER and REORG; column mapping (name mode) with renames of a partition and a
data column and a dropped column; checkpoints classic every 10 commits, multi-part and V2 with
sidecars; timestampNtz partition values; change data feed. After every operation:

- the partitions whose lastUpdated moved are exactly those the operation changed (none for
  OPTIMIZE, ZORDER, REORG and metadata-only changes), followed from the state before as read
  cold, and agreeing with delta-rs' live files;
- partlake's reader gives the rows Spark's Delta gives: after the operations a reader can get
  wrong (deletes through deletion vectors, renamed and dropped columns, timestampNtz values), at
  each table's last version, and by time travel at its first version (every Delta read of a
  version rebuilds its snapshot in Spark jobs, about 2 s here, so not after every operation);
- where the table is a source of a code location, `partlake plan` finds exactly the changed
  partitions downstream stale (`upstream_changed`), and a delta-spark change of a managed table
  makes its partition `out_of_band`;

and at the end, catching up from every earlier version equals a full read, through the
in-memory and the on-disk state cache. The whole matrix runs in CI (`make test`), and alone with
`make test-delta-matrix`. Also: partlake's reader on deletion-vector and column-mapped tables,
through Spark's Delta, and refused by a Spark without Delta (a subprocess).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetKey,
    DailyPartitionsDefinition,
    Definitions,
    PartitionsDefinition,
    StaticPartitionsDefinition,
    asset,
    in_process_executor,
)
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_source, table_path
from dagster_partlake.delta.reader import read_partitions
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.delta.state import StateCache, TableState
from dagster_partlake.orchestration.runner import refresh
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.planning.session import make_plan
from tests.conftest import lake_jars
from tests.delta.test_conformance import caught_up, comparable, delta_rs_reading

pytestmark = pytest.mark.spark

Values = tuple[str | None, ...]


@pytest.fixture(autouse=True)
def _delta_jars() -> None:
    if not lake_jars():
        pytest.fail("the Delta JARs are missing: run `make install` (it fetches them).")


@dataclass
class Watched:
    """A delta-spark table as partlake follows it, with what each operation must change."""

    spark: Any
    root: str
    tmp: Path
    cache: StateCache = field(default_factory=StateCache)
    state: TableState | None = None
    versions: list[int] = field(default_factory=list)
    # Where the table is a source: the code location, and what is stale since its last refresh.
    defs: Definitions | None = None
    instance: Any = None
    stale: set[tuple[str, str | None, str]] = field(default_factory=set)

    def sql(
        self,
        statement: str,
        expected: set[Values],
        *,
        stale: set[tuple] | None = None,
        rows: bool = False,
    ) -> None:
        """Run `statement` on the table (`{t}` names it) and check what it changed (and, with
        `rows`, that partlake's reader gives Spark's Delta's rows after it)."""
        self.spark.sql(statement.format(t=f"delta.`{self.root}`"))
        self.check(expected, stale=stale, rows=rows)

    def write(
        self, df: DataFrame, expected: set[Values], *, rows: bool = False, **options: str
    ) -> None:
        mode = options.pop("mode", "append")
        df.write.format("delta").mode(mode).options(**options).save(self.root)
        self.check(expected, rows=rows)

    def check(
        self, expected: set[Values], *, stale: set[tuple] | None = None, rows: bool = False
    ) -> None:
        before = self.state
        followed = self.cache.sync(self.root)
        cold = StateCache().sync(self.root)
        assert followed is not None and cold is not None
        assert comparable(followed) == comparable(cold)
        assert (cold.version, dict(cold.file_counts or {})) == delta_rs_reading(Path(self.root))
        old = dict(before.last_updated.items()) if before is not None else {}
        new = dict(cold.last_updated.items())
        moved = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
        assert moved == expected, f"version {cold.version}: moved {moved}, expected {expected}"
        if rows:
            self.rows_agree(cold.version)
        self.versions.append(cold.version)
        self.state = cold
        if self.defs is not None:
            self.stale |= (
                stale
                if stale is not None
                else {("down", _key(values), "upstream_changed") for values in expected}
            )
            found = {
                (i.asset, i.partition, i.reason)
                for i in make_plan(LakeGraph(self.defs), StateCache()).plan.items
            }
            assert found == self.stale

    def rows_agree(self, version: int) -> None:
        """partlake's reader and Spark's Delta give the same rows at `version`."""
        ours = read_partitions(
            self.spark, self.root, PartitionSelection.everything(), version=version
        )
        theirs = self.spark.read.format("delta").option("versionAsOf", version).load(self.root)
        assert ours.version == version
        assert sorted(ours.df.columns) == sorted(theirs.columns)
        columns = sorted(theirs.columns)
        assert _rows(ours.df, columns) == _rows(theirs, columns)

    def refreshed(self) -> None:
        """Run what is stale: the code location is fresh again."""
        assert self.defs is not None
        outcomes = refresh(LakeGraph(self.defs), self.instance)
        assert all(o.ok for o in outcomes), [o for o in outcomes if not o.ok]
        assert not make_plan(LakeGraph(self.defs), StateCache()).plan.items
        self.stale = set()

    def caught_up_from_every_version(self) -> None:
        """Following the log from each earlier version gives the full read, in memory and
        through the disk; the reader gives Delta's rows at the last and the first version."""
        full = comparable(StateCache().sync(self.root))  # type: ignore[arg-type]
        self.rows_agree(self.versions[-1])
        self.rows_agree(self.versions[0])  # time travel to the first version
        followed = 0
        for version in range(self.versions[-1]):
            for persist in (None, str(self.tmp / f"cache-{version}")):
                state = caught_up(self.root, version, persist)
                if state is None:
                    break
                assert comparable(state) == full, (version, persist)
                followed += 1
        assert followed


def _key(values: Values) -> str | None:
    return values[0] if len(values) == 1 else "|".join(str(v) for v in values)


def _rows(df: DataFrame, columns: list[str]) -> list[tuple]:
    return sorted(
        (tuple(row[c] for c in columns) for row in df.select(*columns).collect()),
        key=lambda r: tuple((v is None, str(v)) for v in r),
    )


def source_defs(lake: Path, partitions: PartitionsDefinition, column: str) -> Definitions:
    """`src` (the delta-spark table) -> `down` (a copy per partition, partlake's writer)."""
    src = partlake_source("src", partitions_def=partitions, metadata={"partition_expr": column})

    @asset(partitions_def=partitions, code_version="1", metadata={"partition_expr": column})
    def down(src: DataFrame) -> DataFrame:
        return src

    spark = SparkResource(master="local[2]")
    return Definitions(
        assets=[src, down],
        resources={
            "spark": spark,
            "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake)),
        },
        executor=in_process_executor,
    )


def _frame(spark: Any, rows: list[tuple], schema: str) -> DataFrame:
    return spark.createDataFrame(rows, schema)


@pytest.fixture
def watched(
    spark, lake: Path, tmp_path: Path, instance, monkeypatch
) -> Iterator[Callable[..., Watched]]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PARTLAKE_HOME", str(lake))
    settings: list[str] = []

    def make(name: str, **conf: str) -> Watched:
        for key, value in conf.items():
            spark.conf.set(key, value)
            settings.append(key)
        root = table_path(str(lake), AssetKey(name))
        return Watched(spark, root, tmp_path, instance=instance)

    yield make
    for key in settings:
        spark.conf.unset(key)


def test_deletion_vectors_v2_checkpoints_and_a_managed_table(watched, lake: Path) -> None:
    """Databricks' defaults as a source of a code location: deletion vectors on; V2
    checkpoints with sidecar files; `partlake plan` and runs after each change."""
    t = watched("src")
    regions = ["apac", "eu", "us"]
    schema = "id long, v string, region string"
    rows = [(i, "a", r) for i, r in enumerate(regions * 4)]
    t.spark.createDataFrame(rows, schema).write.format("delta").partitionBy("region").option(
        "delta.enableDeletionVectors", "true"
    ).option("delta.checkpointPolicy", "v2").option("delta.checkpointInterval", "10").save(t.root)
    t.check({(r,) for r in regions})
    t.defs = source_defs(lake, StaticPartitionsDefinition(regions), "region")
    t.refreshed()

    t.sql("DELETE FROM {t} WHERE region = 'eu' AND id = 1", {("eu",)}, rows=True)
    t.sql("UPDATE {t} SET v = 'b' WHERE region = 'us' AND id = 2", {("us",)}, rows=True)
    t.sql(
        "MERGE INTO {t} AS t USING (SELECT 0 AS id, 'c' AS v, 'apac' AS region UNION ALL "
        "SELECT 99, 'new', 'apac') AS s ON t.id = s.id AND t.region = s.region "
        "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
        {("apac",)},
    )
    t.sql("DELETE FROM {t} WHERE region = 'eu' AND id = 4", {("eu",)}, rows=True)  # 2nd vector
    t.refreshed()
    t.sql("OPTIMIZE {t}", set())
    t.sql("REORG TABLE {t} APPLY (PURGE)", set())
    for n in range(3):
        t.write(t.spark.createDataFrame([(100 + n, "d", "eu")], schema), {("eu",)})
    t.sql("DELETE FROM {t} WHERE region = 'us' AND id = 5", {("us",)})  # version 10
    t.write(t.spark.createDataFrame([(200, "e", "apac")], schema), {("apac",)})
    # A V2 checkpoint at version 10 (its top file JSON or Parquet), with its sidecars.
    log = Path(t.root, "_delta_log")
    assert list(log.glob("*10.checkpoint.*")) and list(log.glob("_sidecars/*.parquet"))
    t.refreshed()

    # A managed table changed by delta-spark: out of band there, nothing upstream moves.
    down = table_path(str(lake), AssetKey("down"))
    t.spark.sql(f"UPDATE delta.`{down}` SET v = 'z' WHERE region = 'apac' AND id = 0")
    found = {
        (i.asset, i.partition, i.reason)
        for i in make_plan(LakeGraph(t.defs), StateCache()).plan.items
    }
    assert found == {("down", "apac", "out_of_band")}
    t.refreshed()
    t.caught_up_from_every_version()


@pytest.mark.extended  # the matrix (make test-delta-matrix)
def test_dml_without_deletion_vectors_multi_part_checkpoints_and_change_data_feed(
    watched, lake: Path
) -> None:
    t = watched("src", **{"spark.databricks.delta.checkpoint.partSize": "2"})
    days = [dt.date(2024, 1, d) for d in range(1, 5)]
    schema = "id long, v long, day date"
    t.spark.createDataFrame([(i, i, days[i % 4]) for i in range(16)], schema).write.format(
        "delta"
    ).partitionBy("day").option("delta.enableChangeDataFeed", "true").option(
        "delta.enableDeletionVectors", "false"
    ).option("delta.checkpointInterval", "10").save(t.root)
    day = [(d.isoformat(),) for d in days]
    t.check(set(day))
    t.defs = source_defs(
        lake, DailyPartitionsDefinition("2024-01-01", end_date="2024-01-05"), "day"
    )
    t.refreshed()

    t.write(t.spark.createDataFrame([(20, 1, days[0])], schema), {day[0]})
    t.write(
        t.spark.createDataFrame([(21, 2, days[1])], schema),
        {day[1]},
        mode="overwrite",
        replaceWhere="day = '2024-01-02'",
    )
    t.sql(
        "MERGE INTO {t} AS t USING (SELECT 2 AS id, 50 AS v, DATE'2024-01-03' AS day UNION ALL "
        "SELECT 30, 1, DATE'2024-01-04') AS s ON t.id = s.id AND t.day = s.day "
        "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
        {day[2], day[3]},
    )
    t.sql("UPDATE {t} SET v = v + 1 WHERE day = DATE'2024-01-01' AND id = 0", {day[0]})
    t.sql("DELETE FROM {t} WHERE day = DATE'2024-01-02'", {day[1]})  # the partition goes
    t.refreshed()
    t.write(t.spark.createDataFrame([(40, 1, days[2])], schema), {day[2]})  # two files there
    t.sql("OPTIMIZE {t}", set())
    t.write(t.spark.createDataFrame([(41, 1, days[2])], schema), {day[2]})
    t.sql("OPTIMIZE {t} ZORDER BY (id)", set())
    t.sql("DELETE FROM {t} WHERE day = DATE'2024-01-04' AND id = 30", {day[3]})  # version 10
    t.write(t.spark.createDataFrame([(50, 1, days[0])], schema), {day[0]})
    log = Path(t.root, "_delta_log")
    assert len(list(log.glob("*10.checkpoint.*.*.parquet"))) > 1  # multi-part
    assert list(Path(t.root, "_change_data").rglob("*.parquet"))  # the change data feed's files
    t.refreshed()
    t.caught_up_from_every_version()


@pytest.mark.extended  # the matrix (make test-delta-matrix)
def test_column_mapping_renames_and_drops(watched) -> None:
    t = watched("mapped")
    schema = "id long, v string, extra string, part string"
    t.spark.createDataFrame([(1, "x", "e", "a"), (2, "y", "e", "b")], schema).write.format(
        "delta"
    ).partitionBy("part").option("delta.columnMapping.mode", "name").save(t.root)
    t.check({("a",), ("b",)})
    t.sql("ALTER TABLE {t} RENAME COLUMN part TO region", set(), rows=True)
    t.write(
        t.spark.createDataFrame(
            [(3, "z", "e", "a")], "id long, v string, extra string, region string"
        ),
        {("a",)},
    )
    t.sql("ALTER TABLE {t} RENAME COLUMN v TO w", set())
    t.sql("ALTER TABLE {t} DROP COLUMN extra", set(), rows=True)
    t.write(t.spark.createDataFrame([(4, "q", "b")], "id long, w string, region string"), {("b",)})
    t.sql("DELETE FROM {t} WHERE id = 1", {("a",)})
    assert t.state is not None and t.state.partition_by == ("region",)
    t.caught_up_from_every_version()


@pytest.mark.extended  # the matrix (make test-delta-matrix)
def test_timestamp_ntz_partitions_and_classic_checkpoints(watched) -> None:
    t = watched("ntz")
    schema = "id long, at timestamp_ntz"
    moments = [dt.datetime(2024, 1, 1, h, 30) for h in (1, 2)]
    t.spark.createDataFrame([(1, moments[0]), (2, moments[1])], schema).write.format(
        "delta"
    ).partitionBy("at").option("delta.checkpointInterval", "10").save(t.root)
    keys = {(m.strftime("%Y-%m-%d %H:%M:%S.%f"),) for m in moments}
    assert t.spark.sql(f"DESCRIBE DETAIL delta.`{t.root}`").first()["minReaderVersion"] == 3
    t.check(keys, rows=True)
    first = {(moments[0].strftime("%Y-%m-%d %H:%M:%S.%f"),)}
    for n in range(10):
        t.write(t.spark.createDataFrame([(10 + n, moments[0])], schema), first)
    assert list(Path(t.root, "_delta_log").glob("*.checkpoint.parquet"))
    t.write(
        t.spark.createDataFrame([(50, moments[0])], schema),
        first,
        mode="overwrite",
        replaceWhere="at = TIMESTAMP_NTZ'2024-01-01 01:30:00'",
    )
    t.caught_up_from_every_version()


_WITHOUT_DELTA = """
import sys
from pyspark.sql import SparkSession
from dagster_partlake.delta.reader import read_partitions
from dagster_partlake.delta.selection import PartitionSelection
from dagster_partlake.errors import TableFeatureError

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
for root in sys.argv[1:]:
    try:
        read_partitions(spark, root, PartitionSelection.everything())
        print("READ", root)
    except TableFeatureError as error:
        print("REFUSED", error)
spark.stop()
"""


def test_deletion_vector_and_column_mapped_tables_read_through_delta_or_refused(
    spark, tmp_path: Path
) -> None:
    """With Delta on the session, partlake's reader gives Spark's Delta's rows (not the deleted
    rows still in the files, not the physical column names); without it, a clear refusal."""
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    dv, mapped, plain = (str(tmp_path / name) for name in ("dv", "mapped", "plain"))
    rows = spark.createDataFrame([(i, f"r{i % 2}") for i in range(6)], "id long, region string")
    rows.write.format("delta").partitionBy("region").option(
        "delta.enableDeletionVectors", "true"
    ).save(dv)
    spark.sql(f"DELETE FROM delta.`{dv}` WHERE id = 2")
    rows.write.format("delta").partitionBy("region").option(
        "delta.columnMapping.mode", "name"
    ).save(mapped)
    spark.sql(f"ALTER TABLE delta.`{mapped}` RENAME COLUMN id TO key")
    rows.write.format("delta").partitionBy("region").save(plain)
    for root in (dv, mapped, plain):
        ours = read_partitions(spark, root, PartitionSelection.everything()).df
        theirs = spark.read.format("delta").load(root)
        assert sorted(ours.columns) == sorted(theirs.columns)
        assert _rows(ours, sorted(theirs.columns)) == _rows(theirs, sorted(theirs.columns))
    assert 2 not in {
        r["id"] for r in read_partitions(spark, dv, PartitionSelection.everything()).df.collect()
    }

    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_DELTA, dv, mapped, plain],
        env=subprocess_env(SPARK_LOCAL_IP="127.0.0.1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("READ", "REFUSED"))]
    assert len(lines) == 3, done.stdout + done.stderr[-3000:]
    assert lines[0].startswith("REFUSED") and "deletion vectors" in lines[0]
    assert "make install" in lines[0]
    assert lines[1].startswith("REFUSED") and "column mapping" in lines[1]
    assert lines[2] == f"READ {plain}"  # a plain table needs no Delta
