"""Asset settings checked when the code location loads (`dagster_partlake.spec`).

The specs themselves without Spark; the small code locations of tests/bad_settings/ as a user
meets them: imported, planned (`partlake plan` in a subprocess), snapshotted as Dagster does at
load, and served by a real `dagster dev`, whose load error names the asset and the setting. The
example and every other test code location still load.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetIn,
    AssetKey,
    DailyPartitionsDefinition,
    Definitions,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    asset,
)
from dagster._core.remote_representation.external_data import RepositorySnap

from dagster_partlake import partlake_asset_checks, partlake_source
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.incremental.spec import Incremental
from dagster_partlake.planning.graph import LakeGraph
from dagster_partlake.spec.load import check_assets
from dagster_partlake.spec.model import InputSpec, model_spec, spec_of
from dagster_partlake.spec.settings import SETTINGS
from tests.conftest import REPO_ROOT, run_partlake, subprocess_env
from tests.servers import dagster_dev, wait_until

DAILY = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
DAILY_REGION = MultiPartitionsDefinition(
    {"date": DAILY, "region": StaticPartitionsDefinition(["eu", "us"])}
)


def _spec(metadata: dict[str, Any], *, partitions_def: Any = DAILY, managed: bool = True) -> Any:
    return model_spec(
        AssetKey("orders"), metadata=metadata, partitions_def=partitions_def, managed=managed
    )


# -- one asset's settings, without Dagster definitions or Spark ---------------------------------


@pytest.mark.parametrize(
    ("metadata", "partitions_def", "message"),
    [
        ({"partlake/kind": "upsert"}, DAILY, "asset orders has 'partlake/kind' 'upsert'"),
        (
            {"partlake/kind": "table"},
            DAILY,
            "asset orders is partitioned, so kind 'table' would replace",
        ),
        ({"partlake/kind": "merge"}, DAILY, "orders is a 'merge' model but has no 'partlake/uniq"),
        (
            {"partlake/constraints": [{"not_null": []}]},
            DAILY,
            "partlake/constraints entry not_null of asset orders needs a column name",
        ),
        (
            {"partlake/kind": "append", "partlake/audits": [{"no_partition_emptied": True}]},
            DAILY,
            "asset orders of kind append declares partlake/audits",
        ),
        (
            {"partition_expr": {"day": "d"}},
            DAILY_REGION,
            "partition_expr of asset orders names unknown dimension(s) day; its dimensions are "
            "date, region",
        ),
        ({"partition_expr": "d"}, DAILY_REGION, "partition_expr of asset orders is 'd'; a multi"),
        ({"partition_expr": {"date": "d"}}, DAILY, "of asset orders is {'date': 'd'}; a single"),
        ({"partition_expr": "d"}, None, "asset orders sets partition_expr, but it has no parti"),
        (
            {"partition_expr": {"date": "x", "region": "x"}},
            DAILY_REGION,
            "asset orders stores several partition dimensions in column(s) x",
        ),
        ({"schema_mode": "merge"}, DAILY, "asset orders has schema_mode 'merge'; the one mode"),
        ({"partlake/fail_if_no_input": "yes"}, DAILY, "partlake/fail_if_no_input of asset orde"),
        ({"partlake/conditions": [{"action": "skip"}]}, DAILY, "partlake/conditions entry {'"),
        ({"partlake/stream": {"mode": "sometimes"}}, DAILY, "partlake/stream of asset orders ha"),
        (
            {"partlake/stream": {}, "partlake/kind": "merge", "partlake/unique_key": ["id"]},
            DAILY,
            "streaming asset orders is of kind 'merge'; a stream appends each micro-batch",
        ),
        ({"partlake/path": "landing/x"}, DAILY, "asset orders sets partlake/path 'landing/x', b"),
        ({"partlake/format": "folder"}, DAILY, "asset orders sets partlake/format 'folder', but"),
        ({"partlake/incremental": "logs"}, DAILY, "partlake/incremental of input (every input) o"),
    ],
)
def test_a_bad_setting_names_the_asset_and_the_setting(
    metadata: dict[str, Any], partitions_def: Any, message: str
) -> None:
    with pytest.raises(PartlakeConfigError, match=_literal(message)):
        _spec(metadata, partitions_def=partitions_def)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"partlake/format": "csv"}, "asset orders has partlake/format 'csv'; use 'delta'"),
        ({"partlake/path": ""}, "asset orders has partlake/path ''; give the source's location"),
        ({"partlake/after_commit": "archive"}, "source orders sets partlake/after_commit, which"),
        (
            {"partlake/format": "folder", "partlake/after_commit": "move"},
            "partlake/after_commit of source orders is 'move'; use 'archive'",
        ),
    ],
)
def test_a_bad_source_setting_names_the_source_and_the_setting(
    metadata: dict[str, Any], message: str
) -> None:
    with pytest.raises(PartlakeConfigError, match=_literal(message)):
        _spec(metadata, managed=False)


def test_an_unknown_key_is_refused_with_the_key_meant() -> None:
    with pytest.raises(
        PartlakeConfigError, match=_literal("(did you mean 'partlake/unique_key'?)")
    ):
        _spec({"partlake/kind": "merge", "partlake/uniqe_key": ["id"]})
    with pytest.raises(PartlakeConfigError, match="'partlake/colour', which is not a partlake"):
        _spec({"partlake/colour": "blue"})
    with pytest.raises(PartlakeConfigError, match="reads only in an input's metadata, AssetIn"):
        _spec({"partlake/version": 3})
    # Keys of other integrations are theirs.
    assert _spec({"dagster/column_schema": None, "owner": "me"}).kind.kind == "partition"


def test_input_settings_are_parsed_and_checked_per_input() -> None:
    @asset(partitions_def=DAILY)
    def events() -> None: ...

    @asset(
        partitions_def=DAILY,
        ins={
            "events": AssetIn(metadata={"partlake/version": 3}),
            "clicks": AssetIn(metadata={"partlake/incremental": {"column": "ts"}}),
        },
        metadata={"partlake/incremental": "log"},
    )
    def sessions(events: Any, clicks: Any) -> None: ...

    spec = spec_of(sessions, AssetKey("sessions"))
    # The asset's `partlake/incremental` is every input's default; a pinned input reads its
    # version whole (the planner and the IO manager skip incremental reads of pins).
    events_in = spec.input("events")
    assert events_in == InputSpec("events", "events", Incremental("log"), version=3)
    assert events_in is not None and events_in.pinned
    clicks = spec.input("clicks")
    assert clicks is not None and clicks.incremental is not None
    assert clicks.incremental.column == "ts"
    assert spec_of(sessions, AssetKey("sessions")) is spec  # parsed once

    for metadata, message in [
        ({"partlake/version": -1}, "partlake/version of input events of asset bad is -1"),
        (
            {"partlake/version": 1, "partlake/timestamp": "2024-01-01"},
            "input events of asset bad pins both partlake/version and partlake/timestamp",
        ),
        ({"partlake/timestamp": "yesterday"}, "partlake/timestamp of input events of asset bad"),
        ({"partlake/kind": "merge"}, "input events of asset bad sets 'partlake/kind', which"),
        ({"partlake/versoin": 1}, "(did you mean 'partlake/version'?)"),
    ]:

        @asset(name="bad", partitions_def=DAILY, ins={"events": AssetIn(metadata=metadata)})
        def bad(events: Any) -> None: ...

        with pytest.raises(PartlakeConfigError, match=_literal(message)):
            check_assets([events, bad])


def test_a_stream_and_its_input_are_checked_together() -> None:
    landing = partlake_source("landing", folder=True)
    table = partlake_source("table")

    @asset(partitions_def=DAILY, metadata={"partlake/stream": {}})
    def from_folder(landing: Any) -> None: ...

    @asset(metadata={"partlake/stream": {"format": "json", "schema": "id long"}})
    def from_table(table: Any) -> None: ...

    daily = partlake_source("daily", partitions_def=DAILY)

    @asset(partitions_def=DAILY, metadata={"partlake/stream": {}})
    def copy(daily: Any) -> None: ...

    for assets, message in [
        ([landing, from_folder], "the stream input landing is a folder of files, but partlake/"),
        ([table, from_table], "the stream input table is a Delta table, but partlake/stream g"),
        ([daily, copy], "Drop copy's partitions_def and keep its"),
    ]:
        with pytest.raises(PartlakeConfigError, match=_literal(message)):
            check_assets(assets)


def test_the_settings_reference_lists_every_setting() -> None:
    page = (REPO_ROOT / "docs" / "reference" / "settings.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    listed = [row.split("`")[1] for row in rows]
    assert listed == [s.key for s in SETTINGS]
    # Each row says what its setting's row in the code says (its read_by once went missing).
    on = {
        ("asset",): "asset",
        ("input",): "input (`AssetIn`)",
        ("asset", "input"): "asset and input (`AssetIn`)",
    }
    for setting, row in zip(SETTINGS, rows, strict=True):
        cells = [f"`{setting.key}`", on[setting.on], setting.applies_to, setting.type]
        cells.append(setting.checked)
        assert row == "| " + " | ".join(c.replace("|", "&#124;") for c in cells) + " |", row


def _literal(text: str) -> str:
    import re

    return re.escape(text)


# -- code locations as they load -----------------------------------------------------------------

BAD = {
    # module: (asset, what the error must say of the setting)
    "kind": ("orders", "'partlake/kind' 'upsert', which is not a model kind; use one of"),
    "gate": ("payments", "partlake/constraints entry {'not_null': ['id'], 'severity': 'fatal'}"),
    "incremental": ("sessions", "partlake/incremental of input clicks of asset sessions is"),
    "partitioning": ("visits", "partition_expr of asset visits names unknown dimension(s) day"),
    "unknown_key": ("accounts", "'partlake/uniqe_key', which is not a partlake setting (did"),
}


@pytest.mark.parametrize("module", sorted(BAD))
def test_a_bad_code_location_fails_at_load(module: str) -> None:
    asset_name, setting = BAD[module]
    name = f"tests.bad_settings.{module}"
    if module != "unknown_key":
        # partlake_asset_checks runs while the module is imported: its import fails.
        with pytest.raises(PartlakeConfigError, match=_literal(setting)) as error:
            importlib.import_module(name)
        assert asset_name in str(error.value)
        return
    defs = importlib.import_module(name).defs  # no partlake_asset_checks: it imports
    with pytest.raises(PartlakeConfigError, match=_literal(setting)):
        RepositorySnap.from_def(defs.get_repository_def())  # what Dagster does at load
    with pytest.raises(PartlakeConfigError, match=_literal(setting)):
        LakeGraph(defs)  # what every partlake command and the sensor's ticks build


LOADING = [
    "definitions",
    "tests.automation_defs",
    "tests.dimensions_defs",
    "tests.hold_defs",
    "tests.root_defs",
    "tests.stream_defs",
    "tests.bad_settings.good",
]


@pytest.mark.parametrize("module", LOADING)
def test_the_example_and_the_test_code_locations_load(module: str) -> None:
    defs = importlib.import_module(module).defs
    assert isinstance(defs, Definitions)
    graph = LakeGraph(defs)
    RepositorySnap.from_def(defs.get_repository_def())
    # The planner and the IO manager read the same parsed values.
    for name, spec in graph.specs.items():
        node = graph.asset_graph.get(spec.key)
        assert spec_of(node.assets_def, spec.key) is spec
        assert graph.assets[name].columns == spec.columns


def test_partlake_asset_checks_of_the_example_keeps_its_checks() -> None:
    import definitions

    checks = partlake_asset_checks(definitions.ASSETS)
    assert len(checks) == len(definitions.defs.asset_checks or [])


@pytest.mark.dagster_cli
@pytest.mark.parametrize("module", ["kind", "unknown_key"])
def test_partlake_plan_names_the_asset_and_the_setting(tmp_path: Path, module: str) -> None:
    asset_name, setting = BAD[module]
    env = _env(tmp_path)
    proc = run_partlake("plan", "-m", f"tests.bad_settings.{module}", env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    error = proc.stderr.splitlines()[0]
    assert error.startswith("Error: ") and asset_name in error and setting in error, proc.stderr


# What the UI shows of a code location that failed to load: the error and its causes.
WORKSPACE = """
{ workspaceOrError { ... on Workspace { locationEntries {
    name loadStatus locationOrLoadError { __typename ... on PythonError {
        message errorChain { error { message } } } } } } } }
"""


@pytest.mark.dagster_cli
@pytest.mark.daemon
def test_dagster_dev_shows_the_load_error_of_a_bad_code_location(tmp_path: Path) -> None:
    """Both hooks under a real `dagster dev` (one code server per code location, so two bad
    ones, the per-setting messages being the in-process tests' above): `kind` fails while its
    module is imported (partlake_asset_checks), `unknown_key` while its snapshot is built (the
    sensor's asset selection); `good` loads beside them."""
    env = _env(tmp_path)
    bad = ["kind", "unknown_key"]
    modules = [f"tests.bad_settings.{m}" for m in ("good", *bad)]
    with dagster_dev(env, tmp_path / "dagster_dev.log", modules=modules) as dev:

        def loaded() -> list[dict[str, Any]] | None:
            entries = dev.graphql(WORKSPACE)["workspaceOrError"]["locationEntries"]
            done = len(entries) == len(modules)
            return entries if done and all(e["loadStatus"] == "LOADED" for e in entries) else None

        entries = {e["name"]: e for e in wait_until(loaded, timeout=120, what="code locations")}
    good = entries["tests.bad_settings.good"]["locationOrLoadError"]
    assert good["__typename"] == "RepositoryLocation", good
    for module in bad:
        asset_name, setting = BAD[module]
        error = entries[f"tests.bad_settings.{module}"]["locationOrLoadError"]
        assert error["__typename"] == "PythonError", (module, error)
        shown = "\n".join([error["message"], *(c["error"]["message"] for c in error["errorChain"])])
        assert f"PartlakeConfigError: asset {asset_name} " in shown, shown
        assert setting in shown, shown


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text((REPO_ROOT / "scripts" / "dagster.yaml").read_text())
    return subprocess_env(
        DAGSTER_HOME=str(home),
        PARTLAKE_HOME=str(tmp_path / "lake"),
        PARTLAKE_CACHE_DIR=str(tmp_path / "state-cache"),
    )
