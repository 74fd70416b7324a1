"""Incremental inputs and run guards: which upstream rows a run reads, and whether it runs.

`spec` parses `partlake/incremental` (pure); `reads` reads only what the consumer has not read
(log-based or by watermark); `guards` parses and judges `partlake/fail_if_no_input` and
`partlake/conditions`; `landing` consumes a landing folder's files once. May import the base
modules and `delta/`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.incremental.guards import (
        Condition,
        RunFacts,
        RunGuardError,
        RunGuards,
        conditions_of,
        guards_of,
        judge,
        judge_guards,
    )
    from dagster_partlake.incremental.landing import AfterCommit, after_commit_of
    from dagster_partlake.incremental.reads import (
        IncrementalRead,
        UpstreamRewrittenError,
        read_incremental,
    )
    from dagster_partlake.incremental.spec import Incremental, incremental_of

__all__ = [
    "AfterCommit",
    "Condition",
    "Incremental",
    "IncrementalRead",
    "RunFacts",
    "RunGuardError",
    "RunGuards",
    "UpstreamRewrittenError",
    "after_commit_of",
    "conditions_of",
    "guards_of",
    "incremental_of",
    "judge",
    "judge_guards",
    "read_incremental",
]

_LAZY = {
    "Incremental": "dagster_partlake.incremental.spec",
    "incremental_of": "dagster_partlake.incremental.spec",
    "IncrementalRead": "dagster_partlake.incremental.reads",
    "UpstreamRewrittenError": "dagster_partlake.incremental.reads",
    "read_incremental": "dagster_partlake.incremental.reads",
    "Condition": "dagster_partlake.incremental.guards",
    "RunFacts": "dagster_partlake.incremental.guards",
    "RunGuardError": "dagster_partlake.incremental.guards",
    "RunGuards": "dagster_partlake.incremental.guards",
    "guards_of": "dagster_partlake.incremental.guards",
    "judge_guards": "dagster_partlake.incremental.guards",
    "conditions_of": "dagster_partlake.incremental.guards",
    "judge": "dagster_partlake.incremental.guards",
    "AfterCommit": "dagster_partlake.incremental.landing",
    "after_commit_of": "dagster_partlake.incremental.landing",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
