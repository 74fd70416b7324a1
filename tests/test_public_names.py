"""Public names come from one mapping per package (`_LAZY`: name -> the module defining it):
`__all__`, the lazy loader and the `TYPE_CHECKING` re-exports agree with it, every name resolves
to its module's object, and the API reference pages document exactly `__all__`. No Spark: the
files are read, and the packages imported."""

from __future__ import annotations

import ast
import importlib
import re
from collections import Counter
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = REPO_ROOT / "dagster_partlake"
DOCS = REPO_ROOT / "docs" / "reference"
# Reference pages and the package whose `__all__` each documents, one `::: name` entry apiece.
PAGES = {"api.md": "dagster_partlake", "delta.md": "dagster_partlake.delta"}


def lazy_packages() -> list[str]:
    """Every package whose `__init__` resolves its public names lazily (`_LAZY`)."""
    found = []
    for init in sorted(PACKAGE_DIR.rglob("__init__.py")):
        if "_LAZY = " in init.read_text(encoding="utf-8"):
            found.append(".".join(init.parent.relative_to(REPO_ROOT).parts))
    return found


def _init_tree(package: str) -> ast.Module:
    path = REPO_ROOT.joinpath(*package.split("."), "__init__.py")
    return ast.parse(path.read_text(encoding="utf-8"))


def lazy_mapping(package: str) -> dict[str, str]:
    """The package's `_LAZY` literal, read from its source."""
    for node in _init_tree(package).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets
        ):
            keys = [ast.literal_eval(k) for k in node.value.keys]  # type: ignore[attr-defined]
            duplicated = [k for k, n in Counter(keys).items() if n > 1]
            assert not duplicated, f"{package}._LAZY lists {duplicated} twice"
            return dict(ast.literal_eval(node.value))
    raise AssertionError(f"{package} has no _LAZY mapping")


def type_checking_imports(package: str) -> dict[str, str]:
    """name -> module of the imports under `if TYPE_CHECKING:` in the package's `__init__`."""
    imported: dict[str, str] = {}
    for node in _init_tree(package).body:
        if not (isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            assert isinstance(statement, ast.ImportFrom) and statement.module, ast.dump(statement)
            for alias in statement.names:
                name = alias.asname or alias.name
                assert alias.asname in (None, alias.name), f"{package}: {alias.name} renamed"
                assert name not in imported, f"{package} imports {name} twice for type checkers"
                imported[name] = statement.module
    return imported


def documented(page: str, package: str) -> list[str]:
    """The names of a reference page's `::: package.name` entries (mkdocstrings)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(rf"^::: {re.escape(package)}\.(\w+)\s*$", text, flags=re.MULTILINE)


def test_the_lazy_packages_are_found() -> None:
    packages = lazy_packages()
    assert {"dagster_partlake", "dagster_partlake.delta", "dagster_partlake.planning"} <= set(
        packages
    )


@pytest.mark.parametrize("package", lazy_packages())
def test_all_the_lazy_loader_and_the_type_checking_imports_agree(package: str) -> None:
    module = importlib.import_module(package)
    lazy = lazy_mapping(package)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{package}.__all__ repeats a name"
    assert sorted(exported) == sorted(lazy), (
        f"{package}.__all__ and its _LAZY differ: only in __all__ "
        f"{sorted(set(exported) - set(lazy))}, only in _LAZY {sorted(set(lazy) - set(exported))}"
    )
    seen = type_checking_imports(package)
    assert seen == lazy, (
        f"{package}'s TYPE_CHECKING imports and its _LAZY differ: "
        f"{sorted(set(seen.items()) ^ set(lazy.items()))}"
    )
    for name, where in lazy.items():  # the loader gives each name its module's object
        assert getattr(module, name) is getattr(importlib.import_module(where), name), name
    assert set(exported) <= set(dir(module))


@pytest.mark.parametrize("package", lazy_packages())
def test_no_public_name_is_also_a_submodule(package: str) -> None:
    """Importing `package.x` sets the package's attribute `x` to that module, so a public name
    `x` would be the module or the object depending on what was imported before."""
    folder = REPO_ROOT.joinpath(*package.split("."))
    submodules = {p.stem for p in folder.glob("*.py")} | {
        p.parent.name for p in folder.glob("*/__init__.py")
    }
    clashes = sorted(set(lazy_mapping(package)) & submodules)
    assert not clashes, f"{package} exports {clashes}, which are also its submodules' names"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_reference_page_documents_exactly_the_public_names(page: str) -> None:
    package = PAGES[page]
    names = documented(page, package)
    exported = set(importlib.import_module(package).__all__)
    repeated = sorted(n for n, count in Counter(names).items() if count > 1)
    assert not repeated, f"docs/reference/{page} documents {repeated} twice"
    assert set(names) == exported, (
        f"docs/reference/{page} and {package}.__all__ differ: add a '::: {package}.<name>' "
        f"entry for {sorted(exported - set(names))}; not public: {sorted(set(names) - exported)}"
    )


def test_the_api_overview_names_every_public_name() -> None:
    overview = (DOCS / "api.md").read_text(encoding="utf-8").split("## Overview", 1)[1]
    overview = overview.split("\n## ", 1)[0]
    import dagster_partlake

    missing = [n for n in dagster_partlake.__all__ if not re.search(rf"`{n}[`(]", overview)]
    assert not missing, f"the Overview table of docs/reference/api.md does not name {missing}"
