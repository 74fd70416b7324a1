"""The synthetic lake of the planning benchmark: four Delta tables src -> a1 -> a2 -> a3.

Each table has N partitions `date` (daily, Delta `date` column) x `region` (static, 100 values), one
tiny Parquet file per partition (one file written once and hard-linked everywhere). `src` is a
plain Delta table written "by another system" (its log: JSON commits only); a1..a3 carry partlake
`CommitRecord`s exactly like `DeltaPartitionIOManager` writes them, so that everything starts
fresh, and the checkpoint partlake's writer asks for after a commit of more than 64 MB of JSON
(`dagster_partlake.delta.transaction.checkpoint_when_due`). No Spark: delta-rs commits.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from typing import Any

from dagster_partlake.delta.payload import with_actions

START = dt.date(1990, 1, 1)  # 10,000 days (the 1M size) end before today
REGIONS = 100
ASSETS = ("src", "a1", "a2", "a3")
MANAGED = ("a1", "a2", "a3")
UPSTREAM = {"a1": "src", "a2": "a1", "a3": "a2"}
PARTITION_BY = ["date", "region"]
CONDITIONS = ("eager", "any_deps_updated")


# --------------------------------------------------------------------------------------------
# The synthetic layout
# --------------------------------------------------------------------------------------------


class Layout:
    """N = days x 100 regions; Dagster keys are 'YYYY-MM-DD|rNN' (dimensions in name order)."""

    def __init__(self, n: int) -> None:
        if n < REGIONS or n % REGIONS:
            raise SystemExit(f"size {n}: must be a positive multiple of {REGIONS}")
        self.n = n
        self.days = n // REGIONS
        self.regions = [f"r{i:02d}" for i in range(REGIONS)]
        self.dates = [(START + dt.timedelta(days=d)).isoformat() for d in range(self.days)]

    def values(self, index: int) -> tuple[str, str]:
        return self.dates[index // REGIONS], self.regions[index % REGIONS]

    def key(self, index: int) -> str:
        date, region = self.values(index)
        return f"{date}|{region}"

    def keys(self) -> list[str]:
        return [f"{d}|{r}" for d in self.dates for r in self.regions]

    def old_key(self, which: int = 0) -> str:
        """A partition of the first week (day 2 or 4), well outside Dagster's latest window."""
        day = min(2 + 2 * which, self.days - 1, 6)
        return f"{self.dates[day]}|{self.regions[(7 + 13 * which) % REGIONS]}"

    def ten_percent(self, offset: int = 5) -> list[str]:
        return [self.key(i) for i in range(offset, self.n, 10)]

    def end_date(self) -> str:
        return (START + dt.timedelta(days=self.days)).isoformat()  # exclusive in Dagster


def build_defs(
    layout: Layout,
    root: str,
    condition: str | None,
    code_version: str = "1",
    *,
    checks: bool = False,
) -> Any:
    """src (AssetSpec) -> a1 -> a2 -> a3 (@asset, code_version '1', bodies never run); with
    `checks`, partlake's asset checks (partlake_fresh) registered."""
    from dagster import (
        AssetSpec,
        AutomationCondition,
        DailyPartitionsDefinition,
        Definitions,
        MultiPartitionsDefinition,
        StaticPartitionsDefinition,
        asset,
    )

    from dagster_partlake import DeltaPartitionIOManager, partlake_asset_checks

    partitions = MultiPartitionsDefinition(
        {
            "date": DailyPartitionsDefinition(
                start_date=START.isoformat(), end_date=layout.end_date()
            ),
            "region": StaticPartitionsDefinition(layout.regions),
        }
    )
    automation = {
        None: None,
        "eager": AutomationCondition.eager(),
        "any_deps_updated": AutomationCondition.any_deps_updated(),
    }[condition]
    src = AssetSpec("src", partitions_def=partitions)

    def managed(name: str, upstream: Any) -> Any:
        @asset(
            name=name,
            partitions_def=partitions,
            deps=[upstream],
            code_version=code_version,
            automation_condition=automation,
        )
        def _managed() -> None:
            raise RuntimeError("plan_scale assets are never run")

        return _managed

    a1 = managed("a1", src)
    a2 = managed("a2", a1)
    a3 = managed("a3", a2)
    return Definitions(
        assets=[src, a1, a2, a3],
        asset_checks=partlake_asset_checks([a1, a2, a3]) if checks else None,
        resources={"io_manager": DeltaPartitionIOManager(root=root)},
    )


# --------------------------------------------------------------------------------------------
# Writing the Delta tables (no Spark: one tiny Parquet file, hard links, delta-rs commits)
# --------------------------------------------------------------------------------------------


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([("value", pa.int64()), ("date", pa.date32()), ("region", pa.string())])


_SEEDS: dict[str, str] = {}  # root -> the seed file currently hard-linked


def _seed(root: str) -> tuple[str, int]:
    """The tiny Parquet file every partition links to (one row, column `value`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    seed = _SEEDS.get(root) or os.path.join(root, "seed.parquet")
    if not os.path.exists(seed):
        pq.write_table(pa.table({"value": pa.array([1], pa.int64())}), seed)
    _SEEDS[root] = seed
    return seed, os.path.getsize(seed)


def _table(root: str, name: str) -> str:
    return os.path.join(root, "warehouse", name)


def _link_file(root: str, table: str, date: str, region: str, name: str) -> str:
    # One folder per date, not per partition: a million partitions would be a million folders
    # (Delta finds a file's partition in the log, never from its path).
    relative = f"date={date}/{region}-{name}"
    target = os.path.join(table, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    seed = _SEEDS.get(root) or _seed(root)[0]
    try:
        os.link(seed, target)
    except OSError as error:
        if error.errno != errno.EMLINK:
            raise
        # ext4 allows 65,000 links per inode: continue with a fresh copy of the seed.
        fresh = os.path.join(root, f"seed-{uuid.uuid4().hex[:8]}.parquet")
        shutil.copyfile(seed, fresh)
        _SEEDS[root] = fresh
        os.link(fresh, target)
    return relative


def _partlake_info(asset: str, keys: Sequence[str], now_ms: int, consumed: dict) -> dict:
    """The commit record DeltaPartitionIOManager writes for these partitions."""
    from dagster_partlake.records.record import CommitRecord

    return (
        CommitRecord(
            asset_key=asset,
            partition_keys=tuple(keys),
            code_version="1",
            run_id=f"plan-scale-{uuid.uuid4().hex[:8]}",
            consumed=consumed,
        )
        .committed(write_id=uuid.uuid4().hex, commit_time_ms=now_ms)
        .to_commit_info()
    )


def build_lake(layout: Layout, root: str) -> dict[str, Any]:
    """Create src and a1..a3 with every partition fresh; returns timings."""
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, CommitProperties, create_table_with_add_actions

    from dagster_partlake.delta.transaction import checkpoint_when_due

    os.makedirs(os.path.join(root, "warehouse"), exist_ok=True)
    seed, size = _seed(root)
    schema = DeltaSchema.from_arrow(_schema())
    stats = json.dumps({"numRecords": 1})
    base = int(time.time() * 1000) - 24 * 3600 * 1000
    timings: dict[str, float] = {}
    last_updated: dict[str, int] = {}  # upstream key -> lastUpdated (ms)
    for position, asset in enumerate(ASSETS):
        started = time.perf_counter()
        table = _table(root, asset)
        adds = []
        now_ms = base + position * 3600 * 1000
        written: dict[str, int] = {}
        for i in range(layout.n):
            date, region = layout.values(i)
            # Sources: lastUpdated differs per partition; managed: the commit time.
            t = now_ms + (i % 1000) if asset == "src" else now_ms
            adds.append(
                AddAction(
                    _link_file(root, table, date, region, "part-0.parquet"),
                    size,
                    {"date": date, "region": region},
                    t,
                    True,
                    stats,
                )
            )
            written[f"{date}|{region}"] = t
        linked = time.perf_counter()
        info = None
        if asset != "src":
            info = with_actions(
                _partlake_info(asset, layout.keys(), now_ms, {UPSTREAM[asset]: last_updated}),
                adds=len(adds),
                removes=0,
                data_change=True,
            )
        create_table_with_add_actions(
            table,
            schema,
            adds,
            mode="error",
            partition_by=PARTITION_BY,
            name=asset,
            commit_properties=CommitProperties(custom_metadata=info) if info else None,
        )
        timings[f"{asset}_files_s"] = round(linked - started, 3)
        timings[f"{asset}_commit_s"] = round(time.perf_counter() - linked, 3)
        if asset != "src":
            # As partlake's writer does after a commit this large (`checkpoint_when_due`); src,
            # written by another system, keeps its log as JSON only.
            begun = time.perf_counter()
            timings[f"{asset}_checkpoint"] = checkpoint_when_due(table)
            timings[f"{asset}_checkpoint_s"] = round(time.perf_counter() - begun, 3)
        last_updated = written
    return timings


def _live(table: str, keys: set[str] | None) -> dict[str, list[tuple[str, int, int]]]:
    """key -> [(path, size, modification_time)] of the live files (of `keys`, or all)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(table).get_add_actions(flatten=True))
    dates = pc.cast(actions.column("partition.date"), pa.string()).to_pylist()
    regions = actions.column("partition.region").to_pylist()
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    times = actions.column("modification_time").to_pylist()
    result: dict[str, list[tuple[str, int, int]]] = {}
    for date, region, path, size, t in zip(dates, regions, paths, sizes, times, strict=True):
        key = f"{date}|{region}"
        if keys is None or key in keys:
            result.setdefault(key, []).append((path, size, int(t)))
    return result


def _replace(
    root: str, asset: str, keys: Sequence[str], info: dict | None, now_ms: int
) -> dict[str, Any]:
    """One commit replacing every live file of `keys` with a new file (modification_time now)."""
    from deltalake import DeltaTable
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

    table = _table(root, asset)
    seed, size = _seed(root)
    live = _live(table, set(keys))
    stats = json.dumps({"numRecords": 1})
    name = f"part-{uuid.uuid4().hex[:12]}.parquet"
    actions: list[Any] = []
    for key in keys:
        date, region = key.split("|")
        relative = _link_file(root, table, date, region, name)
        actions.append(
            AddAction(relative, size, {"date": date, "region": region}, now_ms, True, stats)
        )
        for path, old_size, _ in live.get(key, []):
            actions.append(
                RemoveAction(path, True, now_ms, old_size, {"date": date, "region": region})
            )
    if info is not None:  # as partlake's transaction writes it
        removes = sum(isinstance(a, RemoveAction) for a in actions)
        info = with_actions(info, adds=len(actions) - removes, removes=removes, data_change=True)
    DeltaTable(table).create_write_transaction(
        actions,
        mode="append",
        schema=DeltaSchema.from_arrow(_schema()),
        partition_by=PARTITION_BY,
        commit_properties=CommitProperties(custom_metadata=info) if info else None,
    )
    return {"files_added": len(keys), "version": DeltaTable(table).version()}


def change_source(root: str, keys: Sequence[str]) -> dict[str, Any]:
    """Another system rewrites `keys` of src (no partlake commit info)."""
    started = time.perf_counter()
    result = _replace(root, "src", keys, None, int(time.time() * 1000))
    return {**result, "seconds": round(time.perf_counter() - started, 3)}


def repair(root: str, keys: Sequence[str]) -> dict[str, Any]:
    """What runs of a1, a2, a3 for `keys` would commit: everything fresh again."""
    started = time.perf_counter()
    for asset in MANAGED:
        upstream = _live(_table(root, UPSTREAM[asset]), set(keys))
        consumed = {k: max(t for _, _, t in upstream[k]) for k in keys}
        now_ms = int(time.time() * 1000)
        _replace(
            root,
            asset,
            keys,
            _partlake_info(asset, keys, now_ms, {UPSTREAM[asset]: consumed}),
            now_ms,
        )
        time.sleep(0.002)  # strictly increasing commit times
    return {"seconds": round(time.perf_counter() - started, 3)}
