"""What a kind's write did (`KindWrite`), and the checks every kind makes before it commits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_partlake.records.queries import same_inputs_commit
from dagster_partlake.records.record import CommitRecord
from dagster_partlake.records.writes import AlreadyWritten, CommitResult

if TYPE_CHECKING:
    from dagster_partlake.delta.snapshot import Snapshot


@dataclass(frozen=True)
class KindWrite:
    """What a write did: the commit (None when a retried append found its own, or another run
    had committed the same), row metrics."""

    commit: CommitResult | None
    record: CommitRecord
    metrics: dict[str, int]
    unchanged_partitions: tuple[str, ...] = ()
    files_rewritten: int = 0
    # Nothing committed: this run (its id) already had, from the same inputs (`once_per_inputs`).
    already_written_by: str | None = None
    note: str | None = None  # what the run's log should say about the write (a merge roll back)
    warning: bool = False  # the note is a warning
    gates_seconds: float = 0.0  # evaluating the quality gates, their results logged


def unless_written(snapshot: Snapshot, record: CommitRecord, once_per_inputs: bool) -> None:
    """Raise `AlreadyWritten` when `once_per_inputs` and another run already committed these
    partitions from the same inputs (checked on each attempt's snapshot)."""
    if once_per_inputs and (prior := same_inputs_commit(snapshot, record)) is not None:
        raise AlreadyWritten(prior)
