"""Gather-plan glue shared by the CLI and the sensor: load a code location, plan it."""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster import Definitions

from dagster_partlake.delta.state import StateCache, TableState
from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.graph import LakeGraph, gather_plan_input
from dagster_partlake.planner import Plan, PlanInput, plan


def load_definitions(module: str) -> Definitions:
    """The `Definitions` object of a Python module (like `dagster ... -m MODULE`)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise PartlakeConfigError(
            f"cannot import module {module!r} ({error}); run from the directory that contains it "
            "or install it."
        ) from error
    found = [v for v in vars(loaded).values() if isinstance(v, Definitions)]
    if len(found) != 1:
        raise PartlakeConfigError(
            f"module {module!r} has {len(found)} Definitions objects; it needs exactly one "
            "(e.g. `defs = Definitions(...)`)."
        )
    return found[0]


@dataclass(frozen=True)
class PlanResult:
    plan: Plan
    inputs: PlanInput
    states: dict[str, TableState | None]
    seconds: float


def make_plan(
    graph: LakeGraph,
    cache: StateCache,
    *,
    select: Sequence[str] | None = None,
    dynamic_partitions_store: Any = None,
) -> PlanResult:
    """Sync partition state, plan the whole graph, keep the selected assets' partitions.

    Raises:
        PartlakeConfigError: `select` names an asset the code location does not have.
    """
    started = time.perf_counter()
    if select:
        unknown = sorted(set(select) - set(graph.assets))
        if unknown:
            raise PartlakeConfigError(
                f"unknown asset(s) {', '.join(unknown)}; the code location has "
                f"{', '.join(sorted(graph.assets))}."
            )
    inputs, states = gather_plan_input(
        graph, cache, dynamic_partitions_store=dynamic_partitions_store
    )
    result = plan(inputs)
    if select:
        result = result.select(select)
    return PlanResult(result, inputs, states, time.perf_counter() - started)
