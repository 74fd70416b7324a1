"""Model kinds: what a run does to its table (partition, table, tracked, append, merge, scd2).

Declaration apart from execution: `spec` parses and validates `partlake/kind` metadata (pure);
`write` performs one output's write as its kind says, through the storage adapter. May import
the base modules, `delta/` and `partitions/`; a quality gate reaches a write only as the
`WriteTarget.check` callback, so kinds do not import gates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_partlake.lazy import lazy_names

if TYPE_CHECKING:
    from dagster_partlake.kinds.spec import (
        KINDS,
        ORDERED_KINDS,
        Kind,
        ModelKind,
        model_kind,
        model_kind_metadata,
    )
    from dagster_partlake.kinds.write import KindWrite, WriteTarget, write_output

__all__ = [
    "KINDS",
    "ORDERED_KINDS",
    "Kind",
    "KindWrite",
    "ModelKind",
    "WriteTarget",
    "model_kind",
    "model_kind_metadata",
    "write_output",
]

_LAZY = {
    "KINDS": "dagster_partlake.kinds.spec",
    "ORDERED_KINDS": "dagster_partlake.kinds.spec",
    "Kind": "dagster_partlake.kinds.spec",
    "ModelKind": "dagster_partlake.kinds.spec",
    "model_kind": "dagster_partlake.kinds.spec",
    "model_kind_metadata": "dagster_partlake.kinds.spec",
    "KindWrite": "dagster_partlake.kinds.write",
    "WriteTarget": "dagster_partlake.kinds.write",
    "write_output": "dagster_partlake.kinds.write",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
