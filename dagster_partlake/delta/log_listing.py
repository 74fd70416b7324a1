"""The files of a Delta log, told apart by name (pure: the caller lists the folder).

- JSON commits `<version:020d>.json`;
- classic checkpoints `<version>.checkpoint.parquet` (which may also be a V2 checkpoint
  published under the classic name: its actions then name sidecar files, read from
  `_delta_log/_sidecars/`);
- multi-part checkpoints `<version>.checkpoint.<part:010d>.<parts:010d>.parquet`, usable only
  when every part is there;
- V2 checkpoints `<version>.checkpoint.<uuid>.json` or `.parquet` (top-level files naming their
  sidecars).

Anything else (`_last_checkpoint`, `.crc` files, log compaction files, temporary files) is not a
commit or a checkpoint a replay needs: the replay lists the folder instead of trusting
`_last_checkpoint`, which a writer may not have updated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SIDECARS = "_sidecars"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its version and its top-level files (names in the log folder)."""

    version: int
    files: tuple[str, ...]
    kind: str  # "classic" (maybe V2 inside), "multi-part" or "v2"


@dataclass(frozen=True)
class Listing:
    """The commits and complete checkpoints of a log folder."""

    commits: tuple[int, ...]  # versions with a JSON commit, ascending
    checkpoints: tuple[Checkpoint, ...]  # ascending by version

    @classmethod
    def of(cls, names: Iterable[str]) -> Listing:
        commits: list[int] = []
        classic: dict[int, str] = {}
        parts: dict[tuple[int, int], dict[int, str]] = {}
        v2: dict[int, list[str]] = {}
        for name in names:
            head, dot, rest = name.partition(".")
            if len(head) != 20 or not head.isdigit() or not dot:
                continue
            version = int(head)
            if rest == "json":
                commits.append(version)
                continue
            pieces = rest.split(".")
            if pieces[0] != "checkpoint" or pieces[-1] not in ("parquet", "json"):
                continue
            if pieces[1:] == ["parquet"]:
                classic[version] = name
            elif len(pieces) == 4 and pieces[1].isdigit() and pieces[2].isdigit():
                parts.setdefault((version, int(pieces[2])), {})[int(pieces[1])] = name
            elif len(pieces) == 3:
                v2.setdefault(version, []).append(name)
        found = [Checkpoint(v, (n,), "classic") for v, n in classic.items()]
        found += [
            Checkpoint(v, tuple(named[i] for i in range(1, total + 1)), "multi-part")
            for (v, total), named in parts.items()
            if total > 0 and set(named) == set(range(1, total + 1))
        ]
        # Several V2 checkpoints of one version are equivalent: take one, by name.
        found += [Checkpoint(v, (min(names_),), "v2") for v, names_ in v2.items()]
        # Of one version's checkpoints the preferred one (V2, classic, multi-part) comes last.
        order = {"v2": 0, "classic": 1, "multi-part": 2}
        found.sort(key=lambda c: (c.version, -order[c.kind]))
        return cls(tuple(sorted(set(commits))), tuple(found))

    def newest_checkpoint(self, at_most: int | None = None) -> Checkpoint | None:
        """The newest complete checkpoint at or before `at_most` (None: any)."""
        for checkpoint in reversed(self.checkpoints):
            if at_most is None or checkpoint.version <= at_most:
                return checkpoint
        return None

    def newest_version(self) -> int | None:
        """The table's newest version (its newest commit or checkpoint; None: no table)."""
        known = [*self.commits[-1:], *(c.version for c in self.checkpoints[-1:])]
        return max(known) if known else None
