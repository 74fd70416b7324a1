"""`partlake_fresh`: partlake's verdict on each partition, as a partitioned Dagster asset check.

Dagster shows an asset partition as materialized or missing; it cannot see that a partition went
stale because a source was rewritten out of band. partlake's planner can, and this check carries
its verdict into the UI, per partition: passed when the partition is fresh, failed with severity
WARN when it is stale, with the reason, the upstream partitions that caused it (as `partlake
plan --json` says them) and the partition's lastUpdated. It never fails a run.

Who reports results:
- the check step of every run that materializes the asset (the sensor's, `partlake run`'s, the
  UI's): passed for each partition the run's commit wrote, with that partition's own rows and
  lastUpdated from the commit record;
- the sensor, on every tick that plans, for the partitions whose verdict changed
  (`dagster_partlake.freshness.report`), and `partlake plan --report`;
- the check executed on its own (the UI's "Execute"): a plan of the code location, for the
  run's partitions.

`partlake_asset_checks(assets)` declares it for every managed partitioned asset, together with
the quality gates' checks (`dagster_partlake.gates.checks`). It first checks every asset's
partlake settings (`dagster_partlake.spec.load`): a code location calls it at import with all
its assets, so a bad setting fails the code location's load, naming the asset and the setting.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetsDefinition,
    MetadataValue,
    Output,
    PreviewWarning,
    multi_asset_check,
)

from dagster_partlake.compat import (
    asset_graph_of_step,
    check_outputs,
    log_check_evaluation,
    step_context_of,
    targeting_latest_materializations,
)
from dagster_partlake.errors import TableUnreadableError
from dagster_partlake.gates.checks import gate_checks
from dagster_partlake.metadata import (
    BECAUSE_KEY,
    FRESH_CHECK,
    LAST_UPDATED_KEY,
    REASON_KEY,
    RETIRED_KEY,
    ROWS_KEY,
)
from dagster_partlake.spec.load import check_assets

if TYPE_CHECKING:
    from dagster import AssetCheckKey, AssetSpec

    from dagster_partlake.columnar.interner import Key
    from dagster_partlake.planning.planner import StalePartition
    from dagster_partlake.records.record import CommitRecord

# The check op of an asset is named <asset path joined by __> + this suffix.
CHECK_OP_SUFFIX = "_partlake_fresh"

# What the sensor and `partlake plan` say when the code location registers no partlake_fresh.
MISSING_CHECKS = (
    "partlake_fresh is not registered, so the UI cannot show which partitions are stale: add "
    "asset_checks=partlake_asset_checks(assets) to the code location's Definitions."
)


def checked_assets(asset_check_keys: Collection[AssetCheckKey]) -> dict[str, AssetKey]:
    """Name -> key of the assets that have `partlake_fresh` among `asset_check_keys`."""
    return {
        k.asset_key.to_user_string(): k.asset_key for k in asset_check_keys if k.name == FRESH_CHECK
    }


def partlake_asset_checks(assets: Sequence[object]) -> list[AssetChecksDefinition]:
    """The asset checks partlake reports to: `partlake_fresh` on every managed partitioned
    asset, and one check per quality gate (`partlake/constraints`, `partlake/audits`).

    Every asset's partlake settings are checked first (`dagster_partlake.spec`): called at
    import with all the code location's assets, as below, it makes a bad setting fail the code
    location's load (in `dagster dev`, `dagster definitions validate`, `partlake plan`) rather
    than the first run that reaches it.

    Example:
        .. code-block:: python

            defs = Definitions(assets=assets, asset_checks=partlake_asset_checks(assets), ...)

    Raises:
        PartlakeConfigError: an asset's setting is unknown, malformed or does not fit it; the
            message names the asset and the setting.
    """
    check_assets(assets)
    return [*gate_checks(assets), *fresh_checks(assets)]


def fresh_checks(assets: Iterable[object]) -> list[AssetChecksDefinition]:
    """One `partlake_fresh` check per managed partitioned asset of `assets`."""
    checks = []
    for assets_def in assets:
        if not isinstance(assets_def, AssetsDefinition) or not assets_def.is_materializable:
            continue
        for key in assets_def.keys:
            spec = assets_def.specs_by_key[key]
            if spec.partitions_def is not None:
                checks.append(_fresh_check(key, spec))
    return checks


def _fresh_check(key: AssetKey, asset_spec: AssetSpec) -> AssetChecksDefinition:
    # Partitioned checks are "preview" in Dagster 1.13; partlake relies on them on purpose, and
    # the warning would print once per asset on every import of the user's code location.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)
        spec = AssetCheckSpec(
            FRESH_CHECK,
            asset=key,
            partitions_def=asset_spec.partitions_def,
            # Never blocking: a stale partition is news, not a reason to stop anything.
            blocking=False,
            description=(
                "partlake's verdict per partition: passed when fresh, failed (warn) when stale, "
                "with the reason and the upstream partitions that caused it."
            ),
        )

    @multi_asset_check(
        name=f"{'__'.join(key.path)}{CHECK_OP_SUFFIX}",
        specs=[spec],
        can_subset=True,
        required_resource_keys={"io_manager"},
        description=f"partlake_fresh of {key.to_user_string()}.",
    )
    # Unannotated: Dagster validates the annotation object, which postponed annotations hide.
    def _fresh(context) -> Iterator[Output]:
        try:
            evaluations = _evaluations(context, key)
        except Exception as error:  # noqa: BLE001 - a verdict is news: it never fails a run
            context.log.warning(
                f"partlake_fresh could not judge {key.to_user_string()}'s partitions of this "
                f"run, so it reports nothing for them: {error}. The sensor, or `partlake plan "
                "--report`, reports them once that is mended."
            )
            evaluations = []
        # Logged, not yielded: an `AssetCheckResult` cannot say its partition.
        for evaluation in targeting_latest_materializations(context.instance, evaluations):
            log_check_evaluation(step_context_of(context), evaluation)
        yield from check_outputs(context, context.selected_asset_check_keys)

    return _fresh


def _evaluations(context: AssetCheckExecutionContext, key: AssetKey) -> list[AssetCheckEvaluation]:
    """This run's verdicts on the asset's partitions: the ones its commits wrote (one, or one
    per partition of an in-order kind's run), else a plan."""
    from dagster_partlake.delta.payload import WHOLE_TABLE_ID
    from dagster_partlake.delta.table import table_exists
    from dagster_partlake.records.queries import run_records

    io_manager = context.resources.io_manager
    root = io_manager.table_location(key)
    partitions = list(context.partition_keys) if context.has_partition_key else []
    run_id = context.op_execution_context.run_id
    covering = partitions or [WHOLE_TABLE_ID]
    records = run_records(root, run_id, covering=covering) if table_exists(root) else []
    if records:
        newest: dict[str | None, AssetCheckEvaluation] = {}
        for record in records:  # oldest first: a partition's newest verdict wins
            for evaluation in written_evaluations(key, record, partitions or None):
                newest[evaluation.partition] = evaluation
        return list(newest.values())
    return _planned(context, key, partitions)


def written_evaluations(
    key: AssetKey, record: CommitRecord, partitions: Sequence[str] | None = None
) -> list[AssetCheckEvaluation]:
    """Passed for each partition `record`'s commit wrote (of `partitions`, if given), with its
    own rows and lastUpdated."""
    wanted = set(partitions) if partitions is not None else None
    rows = record.rows_by_partition or {}
    return [
        fresh_evaluation(key, pid, record.written_last_updated(pid), rows.get(pid))
        for pid in record.partition_keys
        if wanted is None or pid in wanted
    ]


def _planned(
    context: AssetCheckExecutionContext, key: AssetKey, partitions: Sequence[str]
) -> list[AssetCheckEvaluation]:
    """The check executed on its own: plan the code location, judge the run's partitions."""
    from dagster_partlake.delta.state import StateCache
    from dagster_partlake.planning.graph import LakeGraph
    from dagster_partlake.planning.session import make_plan

    graph = LakeGraph(
        asset_graph=asset_graph_of_step(context),
        resources={"io_manager": context.resources.io_manager},
    )
    result = make_plan(graph, StateCache(), dynamic_partitions_store=context.instance)
    name = key.to_user_string()
    for unreadable in result.plan.unreadable:
        if name in unreadable.held:  # not judged: neither fresh nor stale
            raise TableUnreadableError(unreadable.message)
    stale = {i.partition: i for i in result.plan.items if i.asset == name}
    states = result.inputs.states.get(name, {})
    evaluations = []
    for partition in partitions:
        state = states.get(partition)
        updated = state.last_updated if state is not None else None
        item = stale.get(partition)
        evaluations.append(
            stale_evaluation(key, item, updated)
            if item is not None
            else fresh_evaluation(key, partition, updated)
        )
    return evaluations


def fresh_evaluation(
    key: AssetKey, partition: Key, last_updated_ms: int | None, rows: int | None = None
) -> AssetCheckEvaluation:
    """`partlake_fresh` passed for one partition."""
    metadata = _last_updated(last_updated_ms)
    if rows is not None:
        metadata[ROWS_KEY] = MetadataValue.int(rows)
    return AssetCheckEvaluation(
        asset_key=key,
        check_name=FRESH_CHECK,
        passed=True,
        partition=partition,
        metadata=metadata,
        description="fresh",
    )


def retired_evaluation(key: AssetKey, partition: Key, rule: str) -> AssetCheckEvaluation:
    """`partlake_fresh` passed for one partition retired on purpose (`partlake/retention`):
    Dagster's Partitions tab has no status of its own for it, so the check says "retired"."""
    return AssetCheckEvaluation(
        asset_key=key,
        check_name=FRESH_CHECK,
        passed=True,
        partition=partition,
        metadata={RETIRED_KEY: MetadataValue.text(rule)},
        description=f"retired ({rule}): never rebuilt",
    )


def stale_evaluation(
    key: AssetKey, item: StalePartition, last_updated_ms: int | None
) -> AssetCheckEvaluation:
    """`partlake_fresh` failed (severity WARN) for one stale partition, with why."""
    because = ", ".join(item.because)
    return AssetCheckEvaluation(
        asset_key=key,
        check_name=FRESH_CHECK,
        passed=False,
        partition=item.partition,
        severity=AssetCheckSeverity.WARN,
        metadata={
            REASON_KEY: MetadataValue.text(item.reason),
            BECAUSE_KEY: MetadataValue.json(list(item.because)),
            **_last_updated(last_updated_ms),
        },
        description=f"{item.reason}" + (f" because {because}" if because else ""),
    )


def _last_updated(last_updated_ms: int | None) -> dict[str, MetadataValue]:
    if last_updated_ms is None:
        return {}
    when = dt.datetime.fromtimestamp(last_updated_ms / 1000, dt.UTC)
    return {LAST_UPDATED_KEY: MetadataValue.timestamp(when)}
