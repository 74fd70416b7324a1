"""Every option a user can write, and the surface test that exercises each.

The options are read from the code, so a new one is required at once: every public entry point
of `dagster_partlake.__all__` (its data types and errors aside), every argument of those that
are functions and every field of those that are settings classes, and every `partlake/*` setting
(`dagster_partlake.spec.settings.SETTINGS`); the options that name a place in storage are
required on local disk and on the S3 server (`[s3]`). A test says what it exercises with
`@covers(...)`; `python -m tests.surface.options` prints the docs page of the mapping.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE = REPO_ROOT / "docs" / "reference" / "surface.md"

# Public names that are values a user reads, not something they write: results and records.
DATA_TYPES = frozenset(
    {"CommitRecord", "Plan", "StalePartition", "PlanInput", "RunPlan", "PlannedRun"}
)
# Arguments not required, with why.
NOT_OPTIONS = {
    ("build_invalidation_sensor", "max_chained_runs"): "deprecated and ignored (warns)",
    ("build_invalidation_sensor", "watch_seconds"): "deprecated and ignored (warns)",
    ("MonitoredRunLauncher", "inst_data"): "Dagster passes it (dagster.yaml configures it)",
}
# Options that name a place in storage: required on disk and on the S3 server.
STORAGE = (
    "partlake_source(path=)",
    "partlake_source(root=)",
    "DeltaPartitionIOManager(root=)",
    "DeltaPartitionIOManager(storage_options=)",
    "SparkResource(storage_options=)",
)
S3 = " [s3]"


def covers(*options: str) -> Callable[[F], F]:
    """Mark a surface test with the options it exercises (names as `required()` spells them)."""

    def mark(test: F) -> F:
        test.covers = options  # type: ignore[attr-defined]
        return test

    return mark


def _arguments(obj: object) -> list[str]:
    from pydantic import BaseModel

    if isinstance(obj, type) and issubclass(obj, BaseModel):
        return list(obj.model_fields)
    if callable(obj):
        return [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
    return []


def required() -> list[str]:
    """Every option a surface test must exercise, in the order of the API and Settings pages."""
    import dagster_partlake
    from dagster_partlake.spec.settings import SETTINGS

    found: list[str] = []
    for name in dagster_partlake.__all__:
        obj = getattr(dagster_partlake, name)
        if name in DATA_TYPES or (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue
        found.append(name)
        found.extend(f"{name}({arg}=)" for arg in _arguments(obj) if (name, arg) not in NOT_OPTIONS)
    found.extend(f"setting {s.key}" for s in SETTINGS)
    found.extend(f"{option}{S3}" for option in STORAGE)
    return found


def covered() -> dict[str, list[str]]:
    """Option -> the surface tests (`module::test`) that say they exercise it."""
    import tests.surface as package

    found: dict[str, list[str]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"tests.surface.{info.name}")
        for attr, test in sorted(vars(module).items()):
            if not attr.startswith("test_"):
                continue
            for option in getattr(test, "covers", ()):
                found.setdefault(option, []).append(f"tests/surface/{info.name}.py::{attr}")
    return found


def page() -> str:
    """docs/reference/surface.md: each option with the tests that exercise it."""
    tests = covered()
    lines = [
        "# What users write, and its tests",
        "",
        "Every public entry point, documented argument and `partlake/*` setting is exercised by",
        "at least one test that writes its own code location the way a user would: a module in a",
        "temporary folder, the real `partlake` and `dagster` commands run from there in",
        "subprocesses, the rows checked with deltalake and the plan empty after the run. The",
        "options that name a place in storage are tested on local disk and on the S3 server",
        "(`[s3]`). The tests are in `tests/surface/`; `tests/surface/test_coverage.py` fails when",
        "an option has none, and keeps this page equal to `python -m tests.surface.options`.",
        "",
        "| option | tests |",
        "| --- | --- |",
    ]
    for option in required():
        shown = "<br>".join(f"`{t}`" for t in tests.get(option, [])) or "**none**"
        lines.append(f"| `{option}` | {shown} |")
    lines.append("")
    lines.append("Not required, with why:")
    lines.append("")
    for (name, arg), why in NOT_OPTIONS.items():
        lines.append(f"- `{name}({arg}=)`: {why}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(page(), end="")
