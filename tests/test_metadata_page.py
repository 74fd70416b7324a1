"""The Metadata keys page (docs/reference/metadata.md) is the code's: equal to what
scripts/metadata_page.py writes from `SETTINGS`, listing every key the load-time checker
accepts, and each of its examples passes that checker in a code location that loads
(tests/metadata_examples_defs.py: imported, as `partlake_asset_checks` checks it, snapshotted
as Dagster does, planned as every `partlake` command does, and validated by `dagster definitions
validate` in a subprocess)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.spec.settings import SETTINGS, On, check_keys
from tests.conftest import REPO_ROOT, subprocess_env

PAGE = REPO_ROOT / "docs" / "reference" / "metadata.md"
MODULE = "tests.metadata_examples_defs"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "metadata_page", REPO_ROOT / "scripts" / "metadata_page.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_what_the_generator_writes() -> None:
    assert PAGE.read_text(encoding="utf-8") == load_script().render(), (
        "docs/reference/metadata.md differs from the code's SETTINGS: run `make docs-metadata` "
        "(python scripts/metadata_page.py)"
    )


def _string_constants() -> set[str]:
    """Every string the package assigns to a module-level name: the candidates for keys."""
    found = set()
    for path in (REPO_ROOT / "dagster_partlake").rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(value.value)
    return found


def _accepted(key: str) -> bool:
    """Whether the load-time checker takes `key` in an asset's or an input's metadata."""
    places: tuple[On, ...] = ("asset", "input")
    for on in places:
        try:
            check_keys({key: None}, on=on, owner="asset probe")
        except PartlakeConfigError:
            continue
        return True
    return False


def test_every_key_the_checker_accepts_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    headings = {line[4:-1] for line in page.splitlines() if line.startswith("## `")}
    candidates = {s for s in _string_constants() if s.startswith("partlake/")}
    accepted = {key for key in candidates if _accepted(key)} | {s.key for s in SETTINGS}
    assert {"partlake/kind", "partlake/version", "partition_expr"} <= accepted
    assert accepted - headings == set(), "keys the checker accepts, missing from the page"
    assert headings == {s.key for s in SETTINGS}, "the page lists a key the checker refuses"
    # The checker refuses what is not a setting: the probe above can tell.
    assert not _accepted("partlake/skipped")  # written by partlake, never read from a user


def test_every_example_is_placed_in_the_examples_code_location() -> None:
    from tests import metadata_examples_defs as examples

    assert set(examples.PLACED) == {s.key for s in SETTINGS}, (
        "put the example of each new key on an asset, source or input of "
        "tests/metadata_examples_defs.py"
    )
    for setting in SETTINGS:  # an input's key on an input, an asset's on an asset
        for owner in examples.PLACED[setting.key]:
            on = "input" if owner.startswith("input ") else "asset"
            assert on in setting.on, f"the example of {setting.key} is on {owner}"


def test_the_examples_pass_the_checks_of_a_code_location_load() -> None:
    """Imported (`partlake_asset_checks` checks every asset), snapshotted as Dagster's code
    server does, and planned from as every `partlake` command does."""
    from dagster._core.remote_representation.external_data import RepositorySnap

    from dagster_partlake.planning.graph import LakeGraph
    from tests import metadata_examples_defs as examples

    RepositorySnap.from_def(examples.defs.get_repository_def())
    graph = LakeGraph(examples.defs)
    assert graph.specs["order_history"].kind.kind == "merge"
    assert graph.specs["clean_orders"].writer == "delta-spark"
    pinned = graph.specs["pinned"]
    assert {(i.upstream, i.version, i.timestamp) for i in pinned.inputs} == {
        ("order_history", 3, None),
        ("click_events", None, "2024-01-05T00:00:00Z"),
    }


@pytest.mark.dagster_cli
def test_dagster_definitions_validate_loads_the_examples(tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    env = subprocess_env(DAGSTER_HOME=str(home), PARTLAKE_HOME=str(tmp_path / "lake"))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-m", MODULE],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
