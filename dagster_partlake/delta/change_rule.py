"""What counts as a change of a partition, and when it happened.

A partition changed when a commit changed its set of live files with actions marked
`dataChange: true` (a file is its path plus its deletion vector); maintenance (`dataChange:
false`: OPTIMIZE, partlake's compaction) changes nothing. Its lastUpdated is the time of the
newest commit that changed it:

- when that commit added new files to the partition (data-changing adds without a deletion
  vector), the newest `modificationTime` among them. partlake's writer stamps its files with its
  commit's time (the record's `commit_time_ms`), so for partlake's commits this is exactly the
  time their records use; other writers stamp the time they wrote the file, moments before
  their commit. A file keeps that time in every checkpoint, so a partition whose change is older
  than the log's JSON commits still reads the same;
- when it added none there (a deletion-vector DELETE re-adds a file with its old
  `modificationTime`, a remove-only commit adds nothing), the commit's own time: for a
  partlake commit the time it stamped on its actions (`deletionTimestamp`, the record's commit
  time), for other writers the commit's `inCommitTimestamp`, else `commitInfo.timestamp`, else
  the commit file's modification time.

A commit partlake made through delta-spark (the `delta-spark` writer: its record is in
`commitInfo.userMetadata`, `dagster_partlake.delta.payload`) changes every partition it changed
at its own time, whatever times Spark gave its files: its record learns no other time before
it commits, and it takes that one when read.

A partition no JSON commit of the log (still) says anything about takes the newest
`modificationTime` of its live files, which for files added as above is the same time. The cold
replay (`log_state.read_log_state`) and the catch-up (`state._follow_log`) both reduce their
actions with `ChangeTimes`, so they agree.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dagster_partlake.columnar.intmap import ABSENT

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ints = npt.NDArray[np.int64]

# A commitInfo line written by partlake: its record, or its maintenance record.
PARTLAKE_KEYS = (b'"partlake":{', b'"partlake_maintenance":{')
# A commitInfo line of a commit partlake made through delta-spark: its record is the
# userMetadata string (`record.to_user_metadata`): a JSON string starting `{"partlake":{`.
NATIVE_KEY = rb'"{\"partlake\":{'

_HEAD = re.compile(rb'\{"commitInfo":\{"(inCommitTimestamp|timestamp)":(-?\d+)[,}]')
_ICT = re.compile(rb'"inCommitTimestamp":(-?\d+)[,}]')
_SMALL_LINE = 1 << 20  # larger commitInfo lines are partlake records: never `json.loads`ed


@dataclass(frozen=True)
class CommitClock:
    """What a commitInfo line says about its commit's time."""

    partlake: bool = False  # written by partlake through delta-rs: its actions carry its time
    timestamp: int | None = None  # inCommitTimestamp, else commitInfo.timestamp (ms)
    native: bool = False  # written by partlake through delta-spark: its own time is the time


def commit_clock(head: bytes, *, partlake: bool, native: bool = False) -> CommitClock:
    """The clock of a commitInfo line from its first bytes (`head`: the whole line when it is
    small) and whether a partlake key (`partlake`) or a partlake userMetadata (`native`) was
    seen anywhere in it."""
    partlake = partlake or any(key in head for key in PARTLAKE_KEYS)
    native = native or NATIVE_KEY in head
    found = _HEAD.match(head)
    if found is not None and (
        found.group(1) == b"inCommitTimestamp" or b"inCommitTimestamp" not in head
    ):
        return CommitClock(partlake, int(found.group(2)), native)
    ict = _ICT.search(head)
    if ict is not None:
        return CommitClock(partlake, int(ict.group(1)), native)
    if len(head) < _SMALL_LINE:
        try:
            info = json.loads(head).get("commitInfo") or {}
        except ValueError:
            info = {}
        value = info.get("inCommitTimestamp", info.get("timestamp"))
        if isinstance(value, int) and not isinstance(value, bool):
            return CommitClock(partlake, value, native)
    return CommitClock(partlake, None, native)


@dataclass
class ChangeTimes:
    """The data-changing actions of some commits, reduced to each partition's newest change.

    `add` takes them a block at a time: per action its commit version, its partition (an id in
    `VALUES`) and, for a new file, its modification time (`ABSENT` otherwise). `stamp` and
    `clock` give each commit's own time (`commit_time`)."""

    versions: list[Ints] = field(default_factory=list)
    partitions: list[Ints] = field(default_factory=list)
    new_times: list[Ints] = field(default_factory=list)
    stamps: dict[int, int] = field(default_factory=dict)  # version -> newest action stamp
    clocks: dict[int, CommitClock] = field(default_factory=dict)
    file_times: dict[int, int] = field(default_factory=dict)  # version -> commit file mtime

    def add(self, versions: Ints, partitions: Ints, new_times: Ints) -> None:
        if len(versions):
            self.versions.append(versions)
            self.partitions.append(partitions)
            self.new_times.append(new_times)

    def stamp(self, version: int, newest: int) -> None:
        """The newest time a commit stamped on its data-changing actions."""
        if newest > self.stamps.get(version, ABSENT):
            self.stamps[version] = newest

    def commit_time(self, version: int) -> int | None:
        """A commit's own time (None: unknown, the caller's `file_times` has none either)."""
        clock = self.clocks.get(version, CommitClock())
        if clock.partlake and not clock.native and version in self.stamps:
            return self.stamps[version]
        if clock.timestamp is not None:
            return clock.timestamp
        return self.file_times.get(version)

    def newest_changes(self, *, since: int = -1) -> tuple[Ints, Ints, Ints]:
        """(partition ids ascending, the version of each one's newest change, its time), for the
        changes of commits after version `since`.

        Raises:
            ValueError: a commit whose time is needed has none (no commitInfo, no file time).
        """
        import numpy as np

        if not self.versions:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        versions = np.concatenate(self.versions)
        partitions = np.concatenate(self.partitions)
        new_times = np.concatenate(self.new_times)
        keep = versions > since
        versions, partitions, new_times = versions[keep], partitions[keep], new_times[keep]
        order = np.lexsort((versions, partitions))
        versions, partitions, new_times = versions[order], partitions[order], new_times[order]
        starts = np.flatnonzero(np.r_[True, partitions[1:] != partitions[:-1]])
        if not len(starts):
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        ends = np.r_[starts[1:], len(partitions)]
        newest = versions[ends - 1]  # sorted by version within a partition
        of_newest = versions == np.repeat(newest, ends - starts)
        times = np.where(of_newest, new_times, ABSENT)
        found = np.maximum.reduceat(times, starts)
        native = [v for v, clock in self.clocks.items() if clock.native]
        if native:  # partlake's delta-spark commits: their own time (the module docstring)
            found[np.isin(newest, native)] = ABSENT
        missing = np.flatnonzero(found == ABSENT)
        if len(missing):
            own = {int(v): self.commit_time(int(v)) for v in np.unique(newest[missing])}
            if any(t is None for t in own.values()):
                raise ValueError("a commit with no time: no commitInfo and no file time")
            found[missing] = [own[int(v)] for v in newest[missing]]
        return partitions[starts], newest, found

    def versions_without_clock(self) -> list[int]:
        """Commits whose own time may be needed but that say nothing of it (their file time)."""
        seen = {int(v) for chunk in self.versions for v in _unique(chunk)}
        return sorted(
            v
            for v in seen
            if self.clocks.get(v, CommitClock()).timestamp is None
            and not (self.clocks.get(v, CommitClock()).partlake and v in self.stamps)
        )


def _unique(values: Ints) -> Ints:
    import numpy as np

    if len(values) and bool(np.all(values == values[0])):  # (a block of one commit: most)
        return values[:1]
    return np.unique(values)
