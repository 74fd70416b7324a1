"""Retired partitions through cascades: what `PlanInput.retired` holds. Pure, like the planner.

Each asset's own rule (`partlake/retention`, `partitions.retention`) retires some of its
partitions. An asset that asks for `cascade` is retired, in addition, wherever a partition it
reads (through its partition mappings, its own earlier partitions and order-only edges aside) is
retired, by the upstream's own rule or by the upstream's cascade: a privacy rule on raw events
reaches every table that must forget with them. Without `cascade`, a downstream keeps its
partitions, and the planner does not read the retired upstream partitions (`planning.planner`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from dagster_partlake.planning.definition import Key, PlanAsset, Retirement


def cascaded(
    assets: Sequence[PlanAsset],
    own: Mapping[str, Retirement],
    cascading: Collection[str],
) -> dict[str, Retirement]:
    """The retired partitions of every asset: its own rule's (`own`), and for the assets in
    `cascading`, every partition that reads a retired upstream partition.

    Args:
        assets: the planner's assets (any order).
        own: per asset, what its own rule retires.
        cascading: the assets whose rule says `cascade`.
    """
    by_name = {a.name: a for a in assets}
    result: dict[str, Retirement] = {}

    def of(name: str, visiting: frozenset[str]) -> Retirement | None:
        if name in result:
            return result[name]
        asset = by_name.get(name)
        mine = own.get(name)
        if asset is None or name not in cascading or name in visiting:
            if mine is not None:
                result[name] = mine
            return mine
        deps = []
        for dep in asset.deps:
            if dep.upstream == name or dep.order_only:
                continue
            upstream = of(dep.upstream, visiting | {name})
            if upstream is not None:
                deps.append((dep, upstream))
        if not deps:
            if mine is not None:
                result[name] = mine
            return mine
        rule = " or ".join(
            [*([mine.rule] if mine is not None else []),
             *(f"what reads {d.upstream} retired ({u.rule})" for d, u in deps)]
        )  # fmt: skip
        seen: dict[Key, bool] = {}

        def contains(key: Key) -> bool:
            found = seen.get(key)
            if found is None:
                found = (mine is not None and mine.contains(key)) or any(
                    up.contains(u)
                    for dep, up in deps
                    for u in ((key,) if dep.identity else dep.upstream_keys(key))
                )
                seen[key] = found
            return found

        result[name] = Retirement(rule, contains)
        return result[name]

    for asset in assets:
        of(asset.name, frozenset())
    return result
