"""The house rules of the package that a linter does not check: no function longer than 80 lines
(the import contract and the type checker run in `make lint`)."""

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
