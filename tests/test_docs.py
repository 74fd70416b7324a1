"""The documentation: the architecture page maps every module, the README stays short, and the
MkDocs site builds with --strict. No Spark; the site build takes a few seconds."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "dagster_partlake"
ARCHITECTURE = REPO_ROOT / "docs" / "concepts" / "architecture.md"
README = REPO_ROOT / "README.md"
README_MAX_LINES = 200


def package_modules() -> list[str]:
    """Every module of the package as its dotted path (a package's `__init__` as the package),
    `__main__` modules excluded. Read from the files, so nothing is imported."""
    modules = []
    for path in sorted((REPO_ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append(".".join(parts))
    return modules


def test_package_modules_are_found() -> None:
    modules = package_modules()
    assert PACKAGE in modules
    assert f"{PACKAGE}.planning.session" in modules
    assert not any(module.endswith("__main__") for module in modules)


def test_architecture_page_maps_every_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [module for module in package_modules() if f"`{module}`" not in text]
    assert not missing, (
        f"{len(missing)} module(s) missing from {ARCHITECTURE.relative_to(REPO_ROOT)} "
        "(add one line each to its package map, the dotted path in backticks): "
        + ", ".join(missing)
    )


def test_readme_is_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, at most {README_MAX_LINES}: move the rest into docs/"
    )


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason="the dev extra's MkDocs is not installed"
)
def test_docs_site_builds_strict(tmp_path: Path) -> None:
    """The docs build: `mkdocs build --strict`, as `make docs` runs it (about 5 s)."""
    # The checkout's own package, whatever an editable install points at.
    python_path = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(python_path), "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-4000:]}"
    assert (tmp_path / "site" / "concepts" / "architecture" / "index.html").is_file()
    cli_page = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("plan", "run", "history", "restore", "maintain", "spark", "sql"):
        assert f"partlake {command}" in cli_page, f"`partlake {command}` missing from the CLI page"
