"""Quality gates in real Dagster runs on real Spark and Delta: a violated gate commits nothing and
shows a failed asset check; a warned one commits; audits compare with the replaced partitions; a
SQL model's gates refuse what the Python asset's do, with the same message."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetSelection,
    DailyPartitionsDefinition,
    Definitions,
    asset,
    define_asset_job,
)
from deltalake import DeltaTable
from pyspark.sql import DataFrame

from dagster_partlake import DeltaPartitionIOManager, SparkResource, partlake_asset_checks
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.gates.spec import (
    accepted_values,
    expression,
    gates_of,
    not_null,
    row_count,
    unique,
)
from dagster_partlake.partitions.keys import dimension_columns, selection_for_keys
from dagster_partlake.records.writes import write_partitions
from dagster_partlake.storage.location import table_path
from tests.conftest import delta_files, delta_rows

daily = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
SCHEMA = "date date, id long, region string, amount long"
GOOD = [(1, "eu", 5), (2, "us", 7), (3, "eu", 0)]


def _source(spark, lake: Path, day: str, rows: list[tuple]) -> None:
    df = spark.createDataFrame([(dt.date.fromisoformat(day), *r) for r in rows], SCHEMA)
    columns = dimension_columns(daily, {}, asset_name="events")
    write_partitions(
        df,
        table_path(str(lake), ["events"]),
        partition_by=["date"],
        selection=selection_for_keys(columns, [day], {"date": "date"}, asset_name="events"),
        partition_ids=[day],
    )


def _defs(lake: Path, metadata: dict, kind_metadata: dict | None = None) -> Definitions:
    from dagster_partlake import partlake_source

    events = partlake_source("events", partitions_def=daily)

    @asset(partitions_def=daily, metadata={**metadata, **(kind_metadata or {})})
    def checked(events: DataFrame) -> DataFrame:
        return events

    return _location(lake, events, checked)


def _sql_defs(lake: Path, models: Path, directives: str) -> Definitions:
    """`checked` as a SQL model file in `models`, of the same logic as `_defs`' Python asset."""
    from dagster_partlake import partlake_source, sql_assets

    events = partlake_source("events", partitions_def=daily)
    models.mkdir()
    (models / "checked.sql").write_text(
        f"-- @partitions: daily\n{directives}select * from events\n", encoding="utf-8"
    )
    [checked] = sql_assets(models, partitions={"daily": daily}, upstream=[events])
    return _location(lake, events, checked)


def _location(lake: Path, events, checked) -> Definitions:  # type: ignore[no-untyped-def]
    spark = SparkResource(master="local[2]")
    return Definitions(
        assets=[events, checked],
        asset_checks=partlake_asset_checks([checked]),
        jobs=[define_asset_job("checked_job", selection=[checked.key])],
        resources={
            "spark": spark,
            "io_manager": DeltaPartitionIOManager(spark=spark, root=str(lake)),
        },
    )


def _run(defs: Definitions, instance, day: str):
    job = defs.resolve_job_def("checked_job")
    return job.execute_in_process(instance=instance, partition_key=day, raise_on_error=False)


def _check(instance, name: str):
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey("checked"), name), limit=1
    )
    assert history, f"no result for check {name}"
    return history[0]


def _failure(result) -> str:
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures, "the step did not fail"
    return failures[0].step_failure_data.error.to_string()


def _version(lake: Path) -> int:
    return DeltaTable(table_path(str(lake), ["checked"])).version()


CONSTRAINTS = [
    not_null("region"),
    unique("id"),
    accepted_values("region", ["eu", "us"]),
    expression("amount >= 0", name="non_negative"),
    row_count(max=3),
]
VIOLATIONS = {
    "not_null_region": [(1, None, 5)],
    "unique_id": [(1, "eu", 5), (1, "us", 6)],
    "accepted_values_region": [(1, "apac", 5), (2, "mars", 5)],
    "non_negative": [(1, "eu", -5), (2, "eu", None)],
    "row_count": [(i, "eu", 1) for i in range(10, 15)],
}


@pytest.mark.spark
@pytest.mark.parametrize("violated", list(VIOLATIONS))
def test_a_violated_constraint_commits_nothing_and_fails_its_check(
    spark, lake: Path, instance, violated: str
) -> None:
    defs = _defs(lake, {"partlake/constraints": CONSTRAINTS})
    _source(spark, lake, "2024-01-01", GOOD)
    assert _run(defs, instance, "2024-01-01").success
    before = _version(lake)
    rows_before = delta_rows(table_path(str(lake), ["checked"]))
    assert _check(instance, violated).status.value == "SUCCEEDED"

    bad = VIOLATIONS[violated]
    _source(spark, lake, "2024-01-01", GOOD[2:] + bad if violated != "unique_id" else bad)
    result = _run(defs, instance, "2024-01-01")

    assert not result.success
    error = _failure(result)
    assert f"quality gate failed on checked: constraint {violated} failed" in error
    assert "Nothing was committed" in error
    assert _version(lake) == before
    assert delta_rows(table_path(str(lake), ["checked"])) == rows_before
    record = _check(instance, violated)
    assert record.status.value == "FAILED"
    assert record.run_id == result.run_id
    evaluation = record.event.dagster_event.event_specific_data
    metadata = {k: v.value for k, v in evaluation.metadata.items()}
    assert metadata["partlake/outcome"] == "failed"
    expected_offending = {"unique_id": 2, "row_count": 1}.get(violated, len(bad))
    assert metadata["partlake/offending"] == expected_offending
    assert 1 <= len(metadata["partlake/samples"]) <= 5
    # The other gates were evaluated in the same run and passed.
    for other in set(VIOLATIONS) - {violated}:
        assert _check(instance, other).run_id == result.run_id
    # Nothing written is left behind: every data file on disk is a live one.
    table = Path(table_path(str(lake), ["checked"]))
    assert {str(p) for p in table.rglob("*.parquet")} == delta_files(table)


@pytest.mark.spark
def test_a_warned_constraint_commits_and_records_the_warning(spark, lake: Path, instance) -> None:
    defs = _defs(
        lake,
        {"partlake/constraints": [expression("amount >= 0", name="positive", severity="warn")]},
    )
    _source(spark, lake, "2024-01-02", [(1, "eu", -1), (2, "eu", 3)])
    result = _run(defs, instance, "2024-01-02")
    assert result.success
    assert delta_rows(table_path(str(lake), ["checked"]), ["id"]) == [(1,), (2,)]
    record = _check(instance, "positive")
    assert record.status.value == "FAILED"  # Dagster's status of a check that did not pass
    evaluation = record.event.dagster_event.event_specific_data
    assert evaluation.severity == AssetCheckSeverity.WARN
    assert evaluation.metadata["partlake/outcome"].value == "warned"
    assert evaluation.metadata["partlake/offending"].value == 1


AUDITS = [
    {"row_count_change": {"max_change": 0.5}},
    {"no_partition_emptied": True},
    {"column_sum": {"column": "amount", "max_change": 0.2}},
    {"column_mean": {"column": "amount", "max_change": 0.2}, "severity": "warn"},
]


@pytest.mark.spark
@pytest.mark.parametrize(
    ("rows", "failed"),
    [
        # Row count 4 -> 1: a 75% change; sum 40 -> 10.
        ([(1, "eu", 10)], {"row_count_change", "column_sum_amount"}),
        # Same rows, one amount doubled: sum 40 -> 50 (+25%), mean +25% (warn only).
        ([(1, "eu", 10), (2, "eu", 10), (3, "eu", 10), (4, "eu", 20)], {"column_sum_amount"}),
        # The partition emptied.
        ([], {"row_count_change", "no_partition_emptied", "column_sum_amount"}),
    ],
)
def test_audits_compare_with_the_replaced_partition(
    spark, lake: Path, instance, rows: list[tuple], failed: set[str]
) -> None:
    defs = _defs(lake, {"partlake/audits": AUDITS})
    _source(spark, lake, "2024-01-03", [(i, "eu", 10) for i in range(1, 5)])
    assert _run(defs, instance, "2024-01-03").success
    before = _version(lake)

    _source(spark, lake, "2024-01-03", rows)
    result = _run(defs, instance, "2024-01-03")

    assert not result.success
    assert _version(lake) == before
    outcomes = {
        name: _check(instance, name)
        .event.dagster_event.event_specific_data.metadata["partlake/outcome"]
        .value
        for name in ("row_count_change", "no_partition_emptied", "column_sum_amount")
    }
    assert {n for n, o in outcomes.items() if o == "failed"} == failed
    # A small change passes every audit and commits.
    _source(spark, lake, "2024-01-03", [(i, "eu", 10) for i in range(1, 5)] + [(5, "eu", 1)])
    assert _run(defs, instance, "2024-01-03").success
    assert _version(lake) == before + 1


@pytest.mark.spark
def test_a_sql_model_is_gated_as_the_python_asset_is(spark, tmp_path: Path, instance) -> None:
    """The same constraint and audit, declared in a SQL model file and on a Python asset of the
    same logic: the same refused write, the same message, the same failed check, the table as
    it was."""
    roots = {"python": tmp_path / "python", "sql": tmp_path / "sql"}
    defs = {
        "python": _defs(
            roots["python"],
            {
                "partlake/constraints": [not_null("region")],
                "partlake/audits": [{"row_count_change": {"max_change": 0.5}}],
            },
        ),
        "sql": _sql_defs(
            roots["sql"],
            tmp_path / "models",
            "-- @constraint: not_null(region)\n-- @audit: row_count_change(0.5)\n",
        ),
    }
    seen: dict[str, list[tuple]] = {}
    for front, lake in roots.items():
        _source(spark, lake, "2024-01-01", GOOD)
        assert _run(defs[front], instance, "2024-01-01").success
        before = (_version(lake), delta_rows(table_path(str(lake), ["checked"])))
        seen[front] = []
        # A null region breaks the constraint: the write is refused. Then one row of three
        # breaks the audit (a 67% change): the commit is refused.
        for rows, gate in ((GOOD[1:] + [(1, None, 5)], "not_null_region"),
                           ([(1, "eu", 5)], "row_count_change")):  # fmt: skip
            _source(spark, lake, "2024-01-01", rows)
            result = _run(defs[front], instance, "2024-01-01")
            assert not result.success
            message = re.search(r"quality gate failed on checked: [^\n]*", _failure(result))
            assert message and "Nothing was committed" in message.group(0), _failure(result)
            assert (_version(lake), delta_rows(table_path(str(lake), ["checked"]))) == before
            record = _check(instance, gate)
            assert (record.run_id, record.status.value) == (result.run_id, "FAILED")
            metadata = record.event.dagster_event.event_specific_data.metadata
            seen[front].append((message.group(0), metadata["partlake/outcome"].value))
    assert seen["sql"] == seen["python"]
    assert [outcome for _, outcome in seen["sql"]] == ["failed", "failed"]


@pytest.mark.spark
def test_constraints_gate_a_merge_batch(spark, lake: Path, instance) -> None:
    from dagster_partlake import model_kind_metadata

    defs = _defs(
        lake,
        {"partlake/constraints": [unique("id")]},
        model_kind_metadata("merge", unique_key=["id"], partition_by=[]),
    )
    _source(spark, lake, "2024-01-01", GOOD)
    assert _run(defs, instance, "2024-01-01").success
    before = _version(lake)
    _source(spark, lake, "2024-01-02", [(7, "eu", 1), (7, "us", 2)])
    result = _run(defs, instance, "2024-01-02")
    assert not result.success
    assert "unique_id" in _failure(result)
    assert _version(lake) == before


@pytest.mark.spark
def test_a_check_executed_on_its_own_checks_the_current_rows(spark, lake: Path, instance) -> None:
    defs = _defs(lake, {"partlake/constraints": [accepted_values("region", ["eu"])]})
    _source(spark, lake, "2024-01-01", [(1, "eu", 1)])
    assert _run(defs, instance, "2024-01-01").success
    checks_only = Definitions.merge(
        defs,
        Definitions(
            jobs=[
                define_asset_job(
                    "checks_only", selection=AssetSelection.checks_for_assets(AssetKey("checked"))
                )
            ]
        ),
    ).resolve_job_def("checks_only")
    assert checks_only.execute_in_process(instance=instance).success
    assert _check(instance, "accepted_values_region").status.value == "SUCCEEDED"

    # Someone else writes a row the constraint forbids, bypassing the gate.
    df = spark.createDataFrame([(dt.date(2024, 1, 1), 9, "us", 1)], SCHEMA)
    columns = dimension_columns(daily, {}, asset_name="checked")
    write_partitions(
        df,
        table_path(str(lake), ["checked"]),
        partition_by=["date"],
        selection=selection_for_keys(columns, ["2024-01-01"], {"date": "date"}, asset_name="c"),
        partition_ids=["2024-01-01"],
    )
    result = checks_only.execute_in_process(instance=instance, raise_on_error=False)
    record = _check(instance, "accepted_values_region")
    assert record.run_id == result.run_id
    assert record.status.value == "FAILED"
    evaluation = record.event.dagster_event.event_specific_data
    assert evaluation.metadata["partlake/offending"].value == 1
    assert evaluation.metadata["partlake/samples"].value[0]["region"] == "us"


def test_gate_declarations_are_validated() -> None:
    with pytest.raises(PartlakeConfigError, match="exactly one of"):
        gates_of({"partlake/constraints": [{"not_nul": ["a"]}]}, asset_name="a")
    with pytest.raises(PartlakeConfigError, match="severity 'fatal'"):
        gates_of(
            {"partlake/constraints": [{"not_null": ["a"], "severity": "fatal"}]}, asset_name="a"
        )
    with pytest.raises(PartlakeConfigError, match="two gates named 'x'"):
        gates_of(
            {
                "partlake/constraints": [
                    {"not_null": ["a"], "name": "x"},
                    {"unique": ["a"], "name": "x"},
                ]
            },
            asset_name="a",
        )
    with pytest.raises(PartlakeConfigError, match="kind merge declares partlake/audits"):
        gates_of(
            {"partlake/audits": [{"no_partition_emptied": True}]}, asset_name="a", kind="merge"
        )
    with pytest.raises(PartlakeConfigError, match="max_change"):
        gates_of({"partlake/audits": [{"column_sum": {"column": "x"}}]}, asset_name="a")
    with pytest.raises(PartlakeConfigError, match="non-negative integers"):
        gates_of({"partlake/constraints": [{"row_count": {"min": -1}}]}, asset_name="a")
    gates = gates_of({"partlake/constraints": CONSTRAINTS}, asset_name="a")
    assert [g.name for g in gates.all] == list(VIOLATIONS)


@pytest.mark.spark
def test_an_invalid_expression_names_the_fix_and_commits_nothing(
    spark, lake: Path, instance
) -> None:
    defs = _defs(lake, {"partlake/constraints": [expression("no_such_column > 0", name="bad")]})
    _source(spark, lake, "2024-01-01", GOOD)
    result = _run(defs, instance, "2024-01-01")
    assert not result.success
    assert "cannot be evaluated on its data" in _failure(result)
    assert not DeltaTable.is_deltatable(table_path(str(lake), ["checked"]))


@pytest.mark.spark
def test_counts_taken_while_writing_spare_a_read_of_the_staged_rows(spark, tmp_path: Path) -> None:
    """The job that writes the files counts, per file, each row constraint's violations
    (`extras`); with those counts and the files' rows, the gates need no read of the rows, and a
    counted violation is located by partition."""
    import shutil

    from dagster_partlake.delta.files import Extras, write_files
    from dagster_partlake.delta.schema import spark_to_arrow
    from dagster_partlake.gates.evaluate import GateInput, evaluate, extras
    from dagster_partlake.storage.location import TableLocation

    gates = gates_of(
        {
            "partlake/constraints": [
                not_null("region"),
                expression("amount >= 0", name="non_negative"),
                row_count(max=3),
            ]
        },
        asset_name="checked",
    )
    day1, day2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    rows = [(day1, 1, "eu", 5), (day2, 2, None, 7), (day2, 3, "us", 1)]
    path = tmp_path / "written"
    df = spark.createDataFrame(rows, SCHEMA)
    flags, sums = extras(gates)
    schema = spark_to_arrow(df.select(*[c for c in df.columns if c != "date"], "date").schema)
    written = write_files(
        df,
        TableLocation.parse(path),
        partition_by=["date"],
        schema=schema,
        extras=Extras(flags=flags, sums=sums),
    )
    counted: dict[str, dict[str, int]] = {}
    for f in written.files:
        into = counted.setdefault(f.partition_values["date"] or "", {"_rows": 0})
        into["_rows"] += f.num_records
        for name, n in f.flags.items():
            into[name] = into.get(name, 0) + n
    assert counted == {
        "2024-01-01": {"_rows": 1, "_bad0": 0, "_bad1": 0},
        "2024-01-02": {"_rows": 2, "_bad0": 1, "_bad1": 0},
    }
    given = {
        "asset_name": "checked",
        "new": spark.read.parquet(str(path)),
        "partition_columns": ["date"],
        "keys": ["2024-01-01", "2024-01-02"],
        "key_of": lambda values: values["date"],
    }
    found = {r.gate.name: r for r in evaluate(gates, GateInput(**given, counted=counted))}
    assert not found["not_null_region"].passed
    assert found["not_null_region"].offending == 1
    assert found["not_null_region"].failing_partitions == ("2024-01-02",)
    assert found["non_negative"].passed and found["row_count"].passed

    # Nothing violated: the verdicts come without reading the rows, which are gone here.
    shutil.rmtree(path)
    clean_counts = {k: {**v, "_bad0": 0} for k, v in counted.items()}
    clean = evaluate(gates, GateInput(**given, counted=clean_counts))
    assert [r.passed for r in clean] == [True, True, True]
    assert [r.checked for r in clean] == [3, 3, 2]
    # Without the counts the gates read them, and Spark finds the files missing.
    with pytest.raises(Exception, match="(?i)not exist|FileNotFound|FAILED_READ_FILE"):
        evaluate(gates, GateInput(**given))


@pytest.mark.spark
def test_the_write_judges_unique_when_one_task_wrote_every_row(spark, tmp_path: Path) -> None:
    """A write's task counts its rows whose key hash another of its rows has: when one task
    wrote every file, none means the key is unique, and `unique` needs no read of the rows;
    otherwise (several tasks, a repeated hash, a floating-point key) the gate groups the rows."""
    import shutil

    from dagster_partlake.delta.files import Extras, write_files
    from dagster_partlake.delta.schema import spark_to_arrow
    from dagster_partlake.gates.evaluate import GateInput, evaluate, repeats
    from dagster_partlake.storage.location import TableLocation

    gates = gates_of({"partlake/constraints": [unique("id", "region")]}, asset_name="checked")
    day1, day2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    schema = "date date, id long, region string, amount double"

    def written(rows: list[tuple], name: str, tasks: int = 1, key: tuple[str, ...] = ()):
        df = spark.createDataFrame(rows, schema)
        df = df.coalesce(1) if tasks == 1 else df.repartition(tasks)
        return write_files(
            df,
            TableLocation.parse(tmp_path / name),
            partition_by=["date"],
            schema=spark_to_arrow(df.select("id", "region", "amount", "date").schema),
            extras=Extras(repeats={"_dup0": key or repeats(gates)["_dup0"]}),
        )

    # One task, across two partitions: (2, 'us') appears twice, (1, 'eu') once, (3, null) twice,
    # which as SQL's UNIQUE is no repeat (a key with a null column equals no other).
    rows = [
        (day1, 1, "eu", 1.0),
        (day1, 2, "us", 1.0),
        (day2, 2, "us", 2.0),
        (day2, 3, None, 0.0),
        (day2, 3, None, 0.0),
    ]
    assert written(rows, "repeated").repeated("_dup0") == 2
    unique_rows = [r for i, r in enumerate(rows) if i not in (2, 4)]
    once = written(unique_rows, "unique")
    assert len({f.task for f in once.files}) == 1 and len(once.files) == 2
    assert once.repeated("_dup0") == 0
    # Several tasks with rows: no task saw every row.
    assert written(unique_rows, "tasks", tasks=3).repeated("_dup0") is None
    # -0.0 and 0.0 are one group to Spark, not one hash: not counted.
    assert written(unique_rows, "double", key=("amount",)).repeated("_dup0") is None

    given = {
        "asset_name": "checked",
        "new": lambda: spark.read.parquet(str(tmp_path / "unique")),
        "partition_columns": ["date"],
        "keys": ["2024-01-01", "2024-01-02"],
        "key_of": lambda values: values["date"],
        "counted": {"2024-01-01": {"_rows": 2}, "2024-01-02": {"_rows": 1}},
    }
    # Counted as unique by the write: a verdict without reading the rows, which are gone here.
    shutil.rmtree(tmp_path / "unique")
    [result] = evaluate(gates, GateInput(**given, repeated={"_dup0": 0}))
    assert result.passed and result.checked == 3
    # A repeat (or no count) is judged on the rows: Spark finds them missing.
    for repeated in ({"_dup0": 2}, {"_dup0": None}, None):
        with pytest.raises(Exception, match="(?i)not exist|FileNotFound|FAILED_READ_FILE"):
            evaluate(gates, GateInput(**given, repeated=repeated))


@pytest.mark.spark
def test_unique_ignores_null_keys_whether_the_write_or_a_grouping_judges_it(
    spark, tmp_path: Path
) -> None:
    """As SQL's UNIQUE, a row whose key has a null column is no duplicate: one task writing
    three such rows and no repeated key counts no repeat, and `unique` passes on that count
    without reading the rows; a real repeat beside them fails it with its two rows only. The
    grouping (several tasks wrote the rows) judges the same."""
    import shutil

    from dagster_partlake.delta.files import Extras, WrittenFiles, write_files
    from dagster_partlake.delta.schema import spark_to_arrow
    from dagster_partlake.gates.evaluate import GateInput, evaluate, repeats
    from dagster_partlake.storage.location import TableLocation

    gates = gates_of({"partlake/constraints": [unique("id", "region")]}, asset_name="checked")
    day1, day2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    # Three keys with a null column, equal but for it: their hashes would be one.
    nulls = [(day1, None, "eu", 1.0), (day1, None, "eu", 2.0), (day2, None, "eu", 3.0)]
    distinct = [*nulls, (day1, 1, "eu", 4.0), (day2, 1, "us", 5.0)]
    repeated = [*distinct, (day2, 1, "us", 6.0)]  # (1, 'us') twice

    def write(rows: list[tuple], name: str, tasks: int) -> WrittenFiles:
        df = spark.createDataFrame(rows, "date date, id long, region string, amount double")
        df = df.coalesce(1) if tasks == 1 else df.repartition(tasks)
        return write_files(
            df,
            TableLocation.parse(tmp_path / name),
            partition_by=["date"],
            schema=spark_to_arrow(df.select("id", "region", "amount", "date").schema),
            extras=Extras(repeats=repeats(gates)),
        )

    def judge(files: WrittenFiles, name: str):  # type: ignore[no-untyped-def]
        counted: dict[str, dict[str, int]] = {}
        for f in files.files:
            day = counted.setdefault(str(f.partition_values["date"]), {"_rows": 0})
            day["_rows"] += f.num_records
        [result] = evaluate(
            gates,
            GateInput(
                asset_name="checked",
                new=lambda: spark.read.parquet(str(tmp_path / name)),
                partition_columns=["date"],
                keys=sorted(counted),
                key_of=lambda values: values["date"],
                counted=counted,
                repeated={"_dup0": files.repeated("_dup0")},
            ),
        )
        return result

    # The write's verdict: no repeat counted, so the gate reads nothing (the files are gone).
    once = write(distinct, "distinct", tasks=1)
    assert len({f.task for f in once.files}) == 1 and once.repeated("_dup0") == 0
    shutil.rmtree(tmp_path / "distinct")
    result = judge(once, "distinct")
    assert result.passed and result.offending == 0 and result.checked == 5
    # A real repeat: its two rows are counted, not the null keys, and the grouping fails it.
    twice = write(repeated, "repeated", tasks=1)
    assert len({f.task for f in twice.files}) == 1 and twice.repeated("_dup0") == 2
    result = judge(twice, "repeated")
    assert not result.passed and result.offending == 2 and result.checked == 6
    assert [(s["id"], s["region"], s["rows"]) for s in result.samples] == [(1, "us", 2)]
    # Several tasks: nothing counted, the grouping alone judges, and the same way.
    for rows, name, passed in (
        (distinct, "tasks_distinct", True),
        (repeated, "tasks_repeated", False),
    ):
        files = write(rows, name, tasks=3)
        assert files.repeated("_dup0") is None
        result = judge(files, name)
        assert result.passed is passed and result.offending == (0 if passed else 2), result
