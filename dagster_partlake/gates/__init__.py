"""Quality gates: constraints and audits checked before a commit, and their asset checks.

`spec` parses `partlake/constraints` and `partlake/audits` (pure); `evaluate` runs them on a
batch with Spark; `before_commit` is the `GateCheck` a write calls on its batch before the
commit; `checks` declares them as Dagster asset checks and logs
their results into the writing step; `failures` finds which stale partitions last failed a
gate. May import the base modules, `delta/`, `partitions/` and `kinds.spec`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.gates.before_commit import GateCheck
    from dagster_partlake.gates.checks import gate_checks, log_gate_results
    from dagster_partlake.gates.evaluate import GateInput
    from dagster_partlake.gates.failures import last_gate_failures
    from dagster_partlake.gates.spec import (
        Gate,
        GateFailedError,
        GateResult,
        Gates,
        accepted_values,
        expression,
        gates_of,
        not_null,
        row_count,
        unique,
    )

__all__ = [
    "Gate",
    "GateCheck",
    "GateFailedError",
    "GateInput",
    "GateResult",
    "Gates",
    "accepted_values",
    "expression",
    "gates_of",
    "last_gate_failures",
    "log_gate_results",
    "not_null",
    "gate_checks",
    "row_count",
    "unique",
]

_LAZY = {
    "GateCheck": "dagster_partlake.gates.before_commit",
    "Gate": "dagster_partlake.gates.spec",
    "GateFailedError": "dagster_partlake.gates.spec",
    "GateResult": "dagster_partlake.gates.spec",
    "Gates": "dagster_partlake.gates.spec",
    "accepted_values": "dagster_partlake.gates.spec",
    "expression": "dagster_partlake.gates.spec",
    "gates_of": "dagster_partlake.gates.spec",
    "not_null": "dagster_partlake.gates.spec",
    "row_count": "dagster_partlake.gates.spec",
    "unique": "dagster_partlake.gates.spec",
    "GateInput": "dagster_partlake.gates.evaluate",
    "log_gate_results": "dagster_partlake.gates.checks",
    "gate_checks": "dagster_partlake.gates.checks",
    "last_gate_failures": "dagster_partlake.gates.failures",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
