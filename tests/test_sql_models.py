"""SQL model files (`dagster_partlake.sql`): directives onto metadata, dependencies from the
syntax tree, default and named partition mappings, code versions, column lineage, every bad input
(one error naming the file and line, nothing loaded), `partlake sql lint`, and the `SqlModels`
component under the real `dg` CLI. No Spark here: runs are in test_sql_runs.py and
test_example_sql.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dagster import (
    AllPartitionMapping,
    AssetKey,
    DailyPartitionsDefinition,
    Definitions,
    DimensionPartitionMapping,
    IdentityPartitionMapping,
    MultiPartitionMapping,
    StaticPartitionsDefinition,
    TimeWindowPartitionMapping,
    asset,
)

from dagster_partlake import SqlModelError, model_kind_metadata, partlake_source, sql_assets
from dagster_partlake.gates.spec import accepted_values, expression, not_null, row_count, unique
from definitions.assets import clean_events, daily_region_stats, raw_events
from definitions.partitions import daily_region, monthly_region
from tests.conftest import REPO_ROOT, cli_env, run_partlake, subprocess_env

PARTITIONS = {
    "daily_region": daily_region,
    "monthly_region": monthly_region,
    "by_region": StaticPartitionsDefinition(["eu", "us", "apac"]),
}
UPSTREAM = [raw_events, clean_events, daily_region_stats]


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return folder


def load(folder: Path, **kwargs):
    options = {"partitions": PARTITIONS, "upstream": UPSTREAM, **kwargs}
    return {a.key.to_user_string(): a for a in sql_assets(folder, **options)}


def spec_of(assets_def):
    return assets_def.specs_by_key[assets_def.key]


def test_directives_become_the_metadata_a_python_asset_declares(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "models",
        {
            "marts/orders.sql": """
                -- Orders, upserted.
                -- @kind: merge
                -- @unique_key: event_id, region
                -- @partitions: daily_region
                -- @partition_by:
                -- @constraint: not_null(event_id, user_id)
                -- @constraint: unique(event_id, severity=warn)
                -- @constraint: accepted_values(region, 'eu', 'us', 'apac')
                -- @constraint: expression(amount >= 0, name=non_negative)
                -- @constraint: row_count(>, 0)
                -- @incremental: watermark(event_ts)
                -- @description: Every order,
                -- @description: once.
                -- @group: sales
                -- @owners: team:analytics, ann@example.com
                -- @tags: domain=sales, pii
                select event_id, user_id, amount, region, event_ts from clean_events
            """,
            "stats.sql": """
                -- @partitions: daily_region
                -- @audit: row_count_change(0.5)
                -- @audit: no_partition_emptied()
                -- @audit: column_sum(events, max_change=0.2, severity=warn)
                -- @audit: column_mean(events, 0.3, name=mean_events)
                select date, region, count(*) as events from clean_events group by date, region
            """,
        },
    )
    assets = load(folder, group_name="sql")
    orders = spec_of(assets["marts/orders"])
    metadata = {k: v for k, v in orders.metadata.items() if k.startswith("partlake/")}
    assert metadata.pop("partlake/sql_path") == str((folder / "marts/orders.sql").resolve())
    assert metadata == {
        **model_kind_metadata("merge", unique_key=["event_id", "region"], partition_by=[]),
        "partlake/constraints": [
            not_null("event_id", "user_id"),
            unique("event_id", severity="warn"),
            accepted_values("region", ["eu", "us", "apac"]),
            expression("amount >= 0", name="non_negative"),
            row_count(min=1),
        ],
        "partlake/incremental": {"column": "event_ts"},
    }
    assert orders.partitions_def == daily_region
    assert orders.group_name == "sales"
    assert list(orders.owners) == ["team:analytics", "ann@example.com"]
    assert orders.tags["domain"] == "sales" and orders.tags["pii"] == ""
    assert orders.description.startswith("Every order,\nonce.\n\n```sql\nselect event_id")
    assert assets["marts/orders"].backfill_policy is None  # merge: one unit of work per run
    stats = spec_of(assets["stats"])
    assert stats.metadata["partlake/audits"] == [
        {"row_count_change": {"max_change": 0.5}},
        {"no_partition_emptied": True},
        {"column_sum": {"column": "events", "max_change": 0.2}, "severity": "warn"},
        {"column_mean": {"column": "events", "max_change": 0.3}, "name": "mean_events"},
    ]
    assert stats.group_name == "sql"  # no @group: the group given to sql_assets
    assert assets["stats"].backfill_policy is not None  # partition kind: a range in one run


def test_dependencies_come_from_the_syntax_tree(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "models",
        {
            "staging/events.sql": """
                -- @partitions: daily_region
                select event_id, user_id, date, region from raw_events
            """,
            # FROM, JOIN, a subquery in WHERE and a CTE; the CTE's name is not a table.
            "marts/users.sql": """
                -- @partitions: daily_region
                with recent as (select user_id, date, region from staging.events)
                select r.user_id, r.date, r.region, s.events
                from recent r
                join daily_region_stats s on s.date = r.date and s.region = r.region
                where r.user_id in (select user_id from clean_events where amount > 0)
            """,
        },
    )
    assets = load(folder)
    users = assets["marts/users"]
    assert set(users.keys_by_input_name.values()) == {
        AssetKey(["staging", "events"]),
        AssetKey("daily_region_stats"),
        AssetKey("clean_events"),
    }
    assert assets["staging/events"].keys_by_input_name == {"raw_events": AssetKey("raw_events")}
    # Column lineage from the same tree, through the CTE, for the UI's column lineage view.
    lineage = spec_of(users).metadata["dagster/column_lineage"].value
    deps = {
        c: {(d.asset_key.to_user_string(), d.column_name) for d in v}
        for c, v in lineage.deps_by_column.items()
    }
    assert deps["user_id"] == {("staging/events", "user_id")}
    assert deps["events"] == {("daily_region_stats", "events")}
    # staging/events' output columns are known, so lineage traces columns of raw_events.
    staging = spec_of(assets["staging/events"]).metadata["dagster/column_lineage"].value
    assert {d.asset_key for d in staging.deps_by_column["date"]} == {AssetKey("raw_events")}


def test_common_partition_mappings_need_no_directive(tmp_path: Path) -> None:
    months = MultiPartitionMapping(
        {
            "date": DimensionPartitionMapping(
                "month", TimeWindowPartitionMapping(allow_nonexistent_upstream_partitions=True)
            ),
            "region": DimensionPartitionMapping("region", IdentityPartitionMapping()),
        }
    )
    folder = write(
        tmp_path / "models",
        {
            "same.sql": "-- @partitions: daily_region\nselect * from clean_events\n",
            "monthly.sql": "-- @partitions: monthly_region\nselect * from daily_region_stats\n",
            "everything.sql": "select count(*) as n from daily_region_stats\n",
            "named.sql": (
                "-- @partitions: monthly_region\n-- @depends_on: daily_region_stats (months)\n"
                "select * from daily_region_stats\n"
            ),
            "all_days.sql": (
                "-- @partitions: monthly_region\n-- @depends_on: clean_events (all)\n"
                "select count(*) as n from clean_events\n"
            ),
        },
    )
    assets = load(folder, mappings={"months": months})
    defs = Definitions(assets=[*UPSTREAM, *assets.values()])
    graph = defs.resolve_asset_graph()

    def mapping(child: str, parent: str):
        return graph.get_partition_mapping(AssetKey.from_user_string(child), AssetKey(parent))

    assert isinstance(mapping("same", "clean_events"), IdentityPartitionMapping)
    derived = mapping("monthly", "daily_region_stats")
    assert isinstance(derived, MultiPartitionMapping)
    assert derived.downstream_mappings_by_upstream_dimension == (
        months.downstream_mappings_by_upstream_dimension
    )
    assert isinstance(mapping("everything", "daily_region_stats"), AllPartitionMapping)
    assert mapping("named", "daily_region_stats") == months
    assert isinstance(mapping("all_days", "clean_events"), AllPartitionMapping)
    assert spec_of(assets["everything"]).partitions_def is None


def test_a_month_of_a_daily_upstream_reads_the_days_it_has(tmp_path: Path) -> None:
    """The default time-window mapping allows upstream windows that do not exist (a daily
    upstream ending within the month), as the planner plans it; importing sql_assets shows
    no Dagster beta warning for it."""
    from dagster import MonthlyPartitionsDefinition, TimeWindowPartitionMapping

    days = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
    months = MonthlyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
    daily = partlake_source("daily", partitions_def=days)
    folder = write(tmp_path / "models", {"monthly.sql": "-- @partitions: m\nselect * from daily\n"})
    (monthly,) = sql_assets(folder, partitions={"m": months}, upstream=[daily])
    mapping = monthly.get_partition_mapping(AssetKey("daily"))
    assert isinstance(mapping, TimeWindowPartitionMapping)
    assert mapping.allow_nonexistent_upstream_partitions
    quiet = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import dagster_partlake.sql.definition"],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert quiet.returncode == 0, quiet.stderr[-2000:]


def test_code_version_changes_with_the_query_or_directives_only(tmp_path: Path) -> None:
    base = """
        -- @partitions: daily_region
        select date, region, count(*) as n from clean_events group by date, region
    """
    edits = {
        "whitespace": """
            -- @partitions:   daily_region

            SELECT date,   region,
                   count(*) AS n
            FROM clean_events   GROUP BY date, region
        """,
        "comment": """
            -- a comment about this model
            -- @partitions: daily_region
            -- @description: what it is
            select date, region, count(*) as n -- per day
            from clean_events /* block */ group by date, region
        """,
        "query": """
            -- @partitions: daily_region
            select date, region, count(*) as n from clean_events where amount > 0
            group by date, region
        """,
        "directive": """
            -- @partitions: daily_region
            -- @constraint: not_null(date)
            select date, region, count(*) as n from clean_events group by date, region
        """,
    }
    version = {}
    for name, text in {"base": base, **edits}.items():
        folder = write(tmp_path / name, {"m.sql": text})
        version[name] = spec_of(load(folder)["m"]).code_version
    assert version["whitespace"] == version["base"]
    assert version["comment"] == version["base"]
    assert version["query"] != version["base"]
    assert version["directive"] != version["base"]


def test_python_assets_and_sources_are_referenced_like_models(tmp_path: Path) -> None:
    daily = DailyPartitionsDefinition(start_date="2024-01-01")
    orders = partlake_source(["shop", "orders"], partitions_def=daily)

    @asset(key=["shop", "customers"])
    def customers() -> None: ...

    folder = write(
        tmp_path / "models",
        {
            "report.sql": """
                -- @partitions: daily
                select o.date, c.name from shop.orders o join shop.customers c on o.id = c.id
            """
        },
    )
    [report] = sql_assets(folder, partitions={"daily": daily}, upstream=[orders, customers])
    assert set(report.keys_by_input_name) == {"shop__orders", "shop__customers"}


BAD = {
    "unknown directive": (
        {"m.sql": "-- @partitions: daily_region\n-- @materialized: table\nselect 1 as x\n"},
        r"m\.sql:2: unknown directive @materialized; the directives are @kind",
    ),
    "unknown kind": (
        {"m.sql": "-- @kind: upsert\nselect 1 as x\n"},
        r"m\.sql:1: @kind 'upsert' is not a model kind; use one of partition, table",
    ),
    "unknown partitions": (
        {"m.sql": "-- @partitions: hourly\nselect 1 as x\n"},
        r"m\.sql:1: @partitions 'hourly' is not one of the partitions given to sql_assets: "
        r"by_region, daily_region, monthly_region",
    ),
    "unknown gate": (
        {"m.sql": "-- @constraint: positive(amount)\nselect 1 as x\n"},
        r"m\.sql:1: @constraint 'positive' is not one of the constraints not_null",
    ),
    "an audit that is a constraint": (
        {"m.sql": "-- @partitions: daily_region\n-- @audit: row_count(>, 0)\nselect 1 as x\n"},
        r"m\.sql:2: @audit 'row_count' is not one of the audits .* write "
        r"`-- @constraint: row_count\(>, 0\)`",
    ),
    "a malformed gate": (
        {"m.sql": "-- @audit: column_sum(revenue)\nselect 1 as x\n"},
        r"m\.sql:1: @audit 'column_sum\(revenue\)' does not fit; write `column_sum\(column, 0.5\)`",
    ),
    "bad incremental": (
        {"m.sql": "-- @incremental: sometimes\nselect 1 as x\n"},
        r"m\.sql:1: @incremental 'sometimes' is not an incremental mode",
    ),
    "bad owner": (
        {"m.sql": "-- @owners: ann\nselect 1 as x\n"},
        r"m\.sql:1: @owners 'ann' is neither an email address nor a team name",
    ),
    "repeated directive": (
        {"m.sql": "-- @group: a\n-- @group: b\nselect 1 as x\n"},
        r"m\.sql:2: @group is already set on line 1; keep one",
    ),
    "no colon": (
        {"m.sql": "-- @kind merge\nselect 1 as x\n"},
        r"m\.sql:1: directive @kind lacks its colon; write `-- @kind: merge`",
    ),
    "table that is no asset": (
        {"m.sql": "-- @partitions: daily_region\nselect *\nfrom clean_events\njoin nowhere.x\n"},
        r"m\.sql:4: table nowhere\.x is no asset: it is neither a model of this folder "
        r"\(good, m\) nor one of the other assets",
    ),
    "cycle": (
        {
            "a.sql": "select x from c\n",
            "b.sql": "select x from a\n",
            "c.sql": "-- comment\nselect x\nfrom b\n",
        },
        r"b\.sql:1: the models form a cycle: a -> c -> b -> a",
    ),
    "kind that does not fit its partitions": (
        {"m.sql": "-- @kind: table\n-- @partitions: daily_region\nselect 1 as x\n"},
        r"m\.sql:1: asset m is partitioned, so kind 'table' would replace every partition .* "
        r"remove @partitions",
    ),
    "merge without a key": (
        {"m.sql": "-- @kind: merge\nselect 1 as x\n"},
        r"m\.sql:1: asset m is a 'merge' model but has no 'partlake/unique_key'; .*"
        r"`-- @unique_key: id`",
    ),
    "audit on a merge": (
        {
            "m.sql": "-- @kind: merge\n-- @unique_key: x\n-- @audit: no_partition_emptied()\n"
            "select 1 as x\n"
        },
        r"m\.sql:1: asset m of kind merge declares @audit",
    ),
    "SQL that does not parse": (
        {"m.sql": "-- @partitions: daily_region\nselect a,\nfrom clean_events where (\n"},
        r"m\.sql:3: the SQL does not parse \(Spark dialect\)",
    ),
    "not a query": (
        {"m.sql": "insert into clean_events select 1\n"},
        r"m\.sql:1: the statement is a INSERT, but a model is one query",
    ),
    "two statements": (
        {"m.sql": "select 1 as x;\nselect 2 as x\n"},
        r"m\.sql:2: the file holds 2 statements; a model is exactly one query",
    ),
    "two files, one asset key": (
        {"staging/orders.sql": "select 1 as x\n", "Staging/Orders.sql": "select 2 as x\n"},
        r"orders\.sql:1: gives asset key staging/orders, as .*Staging/Orders\.sql does",
    ),
    "a model with the key of another asset": (
        {"clean_events.sql": "select 1 as x\n"},
        r"clean_events\.sql:1: gives asset key clean_events, which another asset .* already has",
    ),
    "no default mapping": (
        {"m.sql": "-- @partitions: by_region\nselect 1 as x\nfrom raw_events r\n"},
        r"m\.sql:3: model m \(partitions Static\) reads raw_events "
        r"\(partitions date: Daily, region: Static\), and no default mapping fits",
    ),
    "depends_on an unread table": (
        {"m.sql": "-- @depends_on: raw_events (all)\nselect 1 as x from clean_events\n"},
        r"m\.sql:1: @depends_on names raw_events, which the query does not read",
    ),
    "depends_on an unknown mapping": (
        {"m.sql": "-- @depends_on: clean_events (weeks)\nselect 1 as x from clean_events\n"},
        r"m\.sql:1: @depends_on mapping 'weeks' is not one of all, identity",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_error_naming_file_and_line(tmp_path: Path, case: str) -> None:
    files, message = BAD[case]
    folder = write(tmp_path / "models", files)
    # A good model beside the bad one: it is not loaded either.
    (folder / "good.sql").write_text("select 1 as x\n", encoding="utf-8")
    with pytest.raises(SqlModelError, match=message) as raised:
        sql_assets(folder, partitions=PARTITIONS, upstream=UPSTREAM)
    assert str(raised.value).startswith(str(folder.resolve()))


def test_partlake_sql_lint_checks_every_file_without_spark(tmp_path: Path, lake: Path) -> None:
    env = cli_env(tmp_path, lake)
    good = run_partlake("sql", "lint", str(REPO_ROOT / "definitions" / "sql"), env=env)
    assert good.returncode == 0, good.stderr
    assert good.stdout.strip() == "3 file(s) checked: no problem found."
    folder = write(
        tmp_path / "models",
        {
            "a.sql": "-- @kind: nope\nselect 1 as x\n",
            "b.sql": "select x from\n",
            "c.sql": "-- @partitions: daily_region\nselect * from clean_events join d\n",
            "ok.sql": "select x from c\n",
        },
    )
    bad = run_partlake("sql", "lint", str(folder), env=env)
    assert bad.returncode == 1
    lines = bad.stdout.strip().splitlines()
    assert lines[0].endswith(
        "a.sql:1: @kind 'nope' is not a model kind; use one of partition, "
        "table, tracked, append, merge, scd2."
    )
    assert "b.sql:1: the SQL does not parse (Spark dialect)" in lines[1]
    assert lines[-1] == "4 file(s) checked, 2 with a problem."
    assert "pyspark" not in bad.stderr
    # With the code location, tables that are no asset are found too.
    located = run_partlake("sql", "lint", str(folder), "-m", "definitions", env=env)
    assert located.returncode == 1
    assert "c.sql:2: table d is no asset" in located.stdout
    assert located.stdout.strip().splitlines()[-1] == "4 file(s) checked, 3 with a problem."
    # The errors between files, all in one lint: a kind that does not fit its partitions, two
    # files giving one asset key, and a cycle among the models that have no other problem.
    between = write(
        tmp_path / "between",
        {
            "k.sql": "-- @kind: table\n-- @partitions: daily_region\nselect 1 as v\n",
            "staging/orders.sql": "select 1 as v\n",
            "Staging/Orders.sql": "select 2 as v from x\n",
            "x.sql": "select v from z\n",
            "y.sql": "select v from x\n",
            "z.sql": "-- comment\nselect v\nfrom y\n",
        },
    )
    linted = run_partlake("sql", "lint", str(between), env=env)
    assert linted.returncode == 1
    shown = between.resolve()  # outside the working directory: the full path
    assert linted.stdout.splitlines() == [
        f"{shown}/k.sql:1: asset k is partitioned, so kind 'table' would replace every partition "
        "on each run; use 'partition' (or 'tracked'), or remove @partitions.",
        f"{shown}/staging/orders.sql:1: gives asset key staging/orders, as "
        f"{shown}/Staging/Orders.sql does (names are case-insensitive in SQL); rename one of the "
        "files.",
        f"{shown}/y.sql:1: the models form a cycle: x -> z -> y -> x; a model cannot read, "
        "directly or not, its own output. Remove the reference to x or split the model.",
        "6 file(s) checked, 3 with a problem.",
    ]


DG = str(Path(sys.executable).parent / "dg")


@pytest.mark.dagster_cli
def test_sql_models_component_under_dg(tmp_path: Path) -> None:
    """A dg project declares a models folder in defs.yaml; `dg list defs` and `dg check defs`
    load it in a subprocess, and a bad model fails `dg check defs` naming its file and line."""
    project = tmp_path / "shop"
    src = project / "src" / "shop"
    write(
        project,
        {
            "pyproject.toml": """
                [project]
                name = "shop"
                version = "0.1.0"
                requires-python = ">=3.11"

                [tool.dg]
                directory_type = "project"

                [tool.dg.project]
                root_module = "shop"
            """,
            "src/shop/__init__.py": "",
            "src/shop/definitions.py": """
                from pathlib import Path

                import dagster as dg


                @dg.definitions
                def defs():
                    return dg.load_from_defs_folder(
                        path_within_project=Path(__file__).parent.parent.parent
                    )
            """,
            "src/shop/partitions.py": """
                from dagster import DailyPartitionsDefinition

                daily = DailyPartitionsDefinition(start_date="2024-01-01")
            """,
            "src/shop/defs/raw/assets.py": """
                from dagster_partlake import partlake_source
                from shop.partitions import daily

                orders = partlake_source("raw_orders", partitions_def=daily)
            """,
            "src/shop/defs/models/defs.yaml": f"""
                type: dagster_partlake.SqlModels
                attributes:
                  path: models
                  partitions:
                    daily: shop.partitions:daily
                  upstream: [shop.defs.raw.assets]
                  group_name: sql
                  io_manager:
                    root: {tmp_path / "lake"}
                    spark_master: local[1]
                  sensor: true
            """,
            "src/shop/defs/models/models/staging/orders.sql": """
                -- @partitions: daily
                -- @constraint: not_null(order_id)
                select order_id, amount, date from raw_orders where amount > 0
            """,
            "src/shop/defs/models/models/order_totals.sql": """
                -- @description: Orders and revenue over all days.
                select count(*) as orders, sum(amount) as revenue from staging.orders
            """,
        },
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = subprocess_env(DAGSTER_HOME=str(home))
    env["PYTHONPATH"] = os.pathsep.join([str(project / "src"), env["PYTHONPATH"]])

    def dg(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [DG, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )

    listed = dg("list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    found = json.loads(listed.stdout)
    assets = {a["asset_key"]: a for a in found["assets"]}
    assert set(assets) == {"raw_orders", "staging/orders", "order_totals"}
    assert assets["order_totals"]["dependency_keys"] == ["staging/orders"]
    assert assets["order_totals"]["group_name"] == "sql"
    assert assets["order_totals"]["description"].startswith("Orders and revenue over all days.")
    assert assets["staging/orders"]["source"].endswith("models/staging/orders.sql:1")
    # Its constraint, and partlake's verdict per partition of the partitioned model.
    assert sorted(c["key"] for c in found["asset_checks"]) == [
        "staging/orders:not_null_order_id",
        "staging/orders:partlake_fresh",
    ]
    assert [s["name"] for s in found["sensors"]] == ["partlake_invalidation"]
    assert {r["name"] for r in found["resources"]} == {"io_manager", "spark"}
    checked = dg("check", "defs")
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "All definitions loaded successfully." in checked.stdout + checked.stderr

    (src / "defs/models/models/broken.sql").write_text(
        "-- @kind: table\nselect 1 as x\nfrom nope\n"
    )
    broken = dg("check", "defs")
    assert broken.returncode != 0
    assert "broken.sql:3: table nope is no asset" in broken.stdout + broken.stderr
    shutil.rmtree(project)


@pytest.mark.parametrize(
    ("kind", "extra", "metadata"),
    [
        ("partition", "", model_kind_metadata("partition")),
        ("tracked", "", model_kind_metadata("tracked")),
        ("append", "-- @partition_by:\n", model_kind_metadata("append", partition_by=[])),
        (
            "merge",
            "-- @unique_key: event_id\n",
            model_kind_metadata("merge", unique_key=["event_id"]),
        ),
        (
            "scd2",
            "-- @unique_key: event_id\n",
            model_kind_metadata("scd2", unique_key=["event_id"]),
        ),
    ],
)
def test_every_kind_and_incremental_mode(tmp_path: Path, kind: str, extra: str, metadata) -> None:
    text = f"-- @kind: {kind}\n-- @partitions: daily_region\n{extra}"
    text += "-- @incremental: log\nselect event_id, date, region from clean_events\n"
    [model] = sql_assets(write(tmp_path, {"m.sql": text}), partitions=PARTITIONS, upstream=UPSTREAM)
    declared = {k: v for k, v in spec_of(model).metadata.items() if k.startswith("partlake/")}
    assert declared.pop("partlake/sql_path")
    assert declared == {**metadata, "partlake/incremental": "log"}
    table = write(
        tmp_path / "t",
        {
            "m.sql": "-- @kind: table\n-- @incremental: log(allow_full_reread)\n"
            "select * from clean_events\n"
        },
    )
    [model] = sql_assets(table, partitions=PARTITIONS, upstream=UPSTREAM)
    assert spec_of(model).metadata["partlake/kind"] == "table"
    assert spec_of(model).metadata["partlake/incremental"] == {
        "mode": "log",
        "allow_full_reread": True,
    }


def test_partlake_sql_render_refuses_what_is_no_model_run(tmp_path: Path, lake: Path) -> None:
    env = cli_env(tmp_path, lake)
    cases = {
        ("clean_events", "--partition", "2024-01-01|eu"): (
            "Error: asset clean_events is no SQL model of the code location; its SQL models are "
            "marts/monthly_region_summary, marts/user_activity, staging/events."
        ),
        ("staging/events",): (
            "Error: SQL model staging/events is partitioned; choose the run's partition with "
            "--partition, e.g. the first one, 2024-01-01|eu."
        ),
        ("staging/events", "--partition", "2024-13-01|eu"): (
            "Error: partition key '2024-13-01|eu' is not in the partitions of asset staging/events"
        ),
    }
    for args, message in cases.items():
        proc = run_partlake("sql", "render", "-m", "definitions", *args, env=env)
        assert proc.returncode == 1 and proc.stderr.startswith(message), proc.stderr
        assert proc.stdout == ""
