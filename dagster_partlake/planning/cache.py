"""The last plan of a code location, kept on disk next to the table states.

A new process (`partlake plan`, `partlake run`) finds the table states in the on-disk state cache
(`dagster_partlake.delta.state`), but would still judge every partition of every asset: at
100,000 partitions per asset that full plan is most of its first plan's time. So every plan made
with an on-disk cache is saved with what it was computed from: the version of every table and a
signature of the graph (assets, tables and the store they are on, code versions, partitions,
dependencies with their partition mappings, and the partition keys of root assets). A new
process whose persisted states are at exactly those versions, with the same signature, starts
from that plan and plans only what the commits since then changed
(`dagster_partlake.planning.replan`). Anything it cannot describe exactly (dynamic partitions, a
custom partition mapping, a folder source) is never saved, and a damaged file is ignored.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_partlake.compat import serialize_value
from dagster_partlake.planning.planner import Key, Plan, StalePartition

if TYPE_CHECKING:
    from dagster import PartitionsDefinition

    from dagster_partlake.planning.graph import LakeAsset, LakeGraph

# 2: plans judged by lastUpdated as the time of the commit that changed a partition
# (`delta.change_rule`); a plan saved by format 1 (its files' newest modification time) is
# planned again in full, never resumed.
_FORMAT = (2, marshal.version, *sys.version_info[:2])


@dataclass(frozen=True)
class Stamp:
    """Which plan a process last saved: its graph signature, table versions and items."""

    signature: str
    versions: dict[str, int | None]
    items: tuple[StalePartition, ...]


@dataclass(frozen=True)
class SavedPlan:
    signature: str
    versions: dict[str, int | None]  # asset -> table version the plan saw (None: no table)
    plan: Plan


def signature(graph: LakeGraph, partition_keys: Mapping[str, Sequence[Key]]) -> str | None:
    """A digest of everything but table states that a plan depends on; None when some part
    cannot be described exactly (then no plan is saved or reused)."""
    if graph.has_dynamic_partitions:
        return None
    parts: list[str] = []
    for name in sorted(graph.assets):
        asset = graph.assets[name]
        if asset.is_folder:
            return None  # a folder's state is walked anew, never persisted
        described = _partitions(asset.partitions_def)
        if described is None:
            return None
        parts.append(
            repr(
                (
                    name,
                    asset.location.cache_key,
                    asset.is_source,
                    asset.code_version,
                    asset.kind,
                    asset.decoupled,
                    asset.stream,
                    [(c.column, c.dimension) for c in asset.columns],
                    described,
                )
            )
        )
        for parent in asset.parents:
            if parent not in graph.assets:
                continue
            mapping = _mapping(graph, asset, graph.assets[parent])
            if mapping is None:
                return None
            parts.append(repr((name, parent, mapping, graph.input_metadata(name, parent))))
    for name in sorted(partition_keys):
        parts.append(repr((name, len(partition_keys[name]))))
        parts.append("\x1f".join(k or "" for k in partition_keys[name]))
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def _partitions(partitions_def: PartitionsDefinition | None) -> str | None:
    from dagster import (
        MultiPartitionsDefinition,
        StaticPartitionsDefinition,
        TimeWindowPartitionsDefinition,
    )

    if partitions_def is None:
        return "none"
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return repr(partitions_def)  # start, end, timezone, fmt, end_offset, cron schedule
    if isinstance(partitions_def, StaticPartitionsDefinition):
        return "static:" + "\x1f".join(partitions_def.get_partition_keys())
    if isinstance(partitions_def, MultiPartitionsDefinition):
        dims = [(d.name, _partitions(d.partitions_def)) for d in partitions_def.partitions_defs]
        return None if any(d is None for _, d in dims) else repr(sorted(dims))
    return None


def _mapping(graph: LakeGraph, child: LakeAsset, parent: LakeAsset) -> str | None:
    try:
        return serialize_value(graph.asset_graph.get_partition_mapping(child.key, parent.key))
    except Exception:  # noqa: BLE001 - a mapping serdes cannot describe: never reuse a plan
        return None


def _file(persist_dir: str, graph: LakeGraph) -> str:
    # One file per set of tables: a new signature (new code, a new day) replaces the plan. A
    # table is named with its store (`TableLocation.cache_key`): the same URIs on another S3
    # server are other tables, with a plan of their own.
    tables = repr(sorted((name, a.location.cache_key) for name, a in graph.assets.items()))
    return os.path.join(persist_dir, f"plan-{hashlib.sha1(tables.encode()).hexdigest()}.plan")


def load(persist_dir: str, graph: LakeGraph, graph_signature: str) -> SavedPlan | None:
    """The plan saved for this graph with this signature, or None."""
    try:
        with open(_file(persist_dir, graph), "rb") as saved:
            data = marshal.load(saved)
        if data.get("format") != _FORMAT or data.get("signature") != graph_signature:
            return None
        items = tuple(
            StalePartition(asset, partition, reason, tuple(because))
            for asset, partition, reason, because in data["items"]
        )
        return SavedPlan(
            graph_signature, dict(data["versions"]), Plan(items, tuple(data["asset_order"]))
        )
    except (OSError, ValueError, EOFError, TypeError, KeyError, AttributeError):
        return None


def save(
    persist_dir: str,
    graph: LakeGraph,
    graph_signature: str,
    versions: Mapping[str, int | None],
    plan: Plan,
) -> None:
    """Keep `plan` for the next process (never a plan with unreadable tables)."""
    if plan.unreadable:
        return
    data = {
        "format": _FORMAT,
        "signature": graph_signature,
        "versions": dict(versions),
        "asset_order": list(plan.asset_order),
        "items": [(i.asset, i.partition, i.reason, list(i.because)) for i in plan.items],
    }
    try:
        os.makedirs(persist_dir, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=persist_dir, suffix=".tmp")
        with os.fdopen(handle, "wb") as saved:
            marshal.dump(data, saved)
        os.replace(temp, _file(persist_dir, graph))
    except (OSError, ValueError):
        pass  # an optimization only
