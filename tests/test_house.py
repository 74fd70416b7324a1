"""The house rules of the package that a linter does not check: no function longer than 80 lines,
and no record field named in the storage adapter (the import contract and the type checker run
in `make lint`)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dagster_partlake"
MAX_LINES = 80


def test_no_function_is_over_80_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert not long, f"functions over {MAX_LINES} lines (split them): {long}"


# What only the records layer interprets (`CommitRecord`): the storage adapter (delta/) commits
# and reads a record as an opaque payload (`delta.payload.CommitPayload`) and names none of it.
RECORD_NAMES = {
    "CommitRecord",
    "asset_key",
    "code_version",
    "consumed",
    "consumed_files",
    "content_hashes",
    "run_id",
    "snapshot_ms",
    "stream_batch",
    "stream_query",
    "watermarks",
}
RECORD_STRINGS = RECORD_NAMES | {"kind", "stream"}
# Modules of delta/ that still name record fields, and why (issue 32, point 5): remove a module
# from here when it is clean (the test says so).
NOT_YET_CLEAN = {
    "__init__.py": "still exports CommitRecord by name (a lazy name of the records layer)",
}


def _names_in(tree: ast.AST) -> set[str]:
    """Identifiers, attributes, arguments and string constants (docstrings left out)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in RECORD_NAMES:
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in RECORD_NAMES:
            found.add(node.attr)
        elif isinstance(node, ast.arg | ast.keyword) and node.arg in RECORD_NAMES:
            found.add(str(node.arg))
        elif isinstance(node, ast.alias) and node.name in RECORD_NAMES:
            found.add(node.name)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and node.value.split("/")[0] in RECORD_STRINGS
        ):
            found.add(node.value)
    return found


def test_the_storage_adapter_names_no_record_field() -> None:
    named = {
        path.name: found
        for path in sorted((PACKAGE / "delta").glob("*.py"))
        if (found := _names_in(ast.parse(path.read_text(), str(path))))
    }
    unexpected = {name: sorted(found) for name, found in named.items() if name not in NOT_YET_CLEAN}
    assert not unexpected, (
        f"delta/ modules name what only the records layer reads: {unexpected}; carry it in the "
        "commit payload's opaque fields (delta.payload) and read it in the records layer"
    )
    clean = sorted(set(NOT_YET_CLEAN) - set(named))
    assert not clean, f"these delta/ modules are clean now: remove them from NOT_YET_CLEAN: {clean}"


def test_every_benchmark_module_imports() -> None:
    """A benchmark is run rarely, so a name it imports that moved away goes unnoticed until
    someone needs its numbers (benchmarks/plan_requests.py imported a helper removed from
    backfill.py for a stop): each module of benchmarks/ imports."""
    import importlib

    root = Path(__file__).resolve().parents[1]
    failed = {}
    for path in sorted((root / "benchmarks").glob("*.py")):
        name = f"benchmarks.{path.stem}" if path.stem != "__init__" else "benchmarks"
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - every failure, named with its module
            failed[name] = f"{type(error).__name__}: {error}"
    assert not failed, failed
