"""Quality gates as Dagster asset checks: declared with the asset, evaluated in its write.

`gate_checks(assets)` (part of `partlake_asset_checks`) declares one asset check per gate of
each asset that has gates (one `multi_asset_check` per asset), so the UI lists them on the asset.
Their results come from the write itself: the IO manager evaluates the gates on the staged data
before the commit and logs one `AssetCheckEvaluation` per gate into the run
(`log_gate_results`), passed, failed (nothing committed, the step fails) or warned (committed).
In such a run the check step only yields the checks' outputs, as Dagster expects of it. Executed
on its own (the UI's "Execute" on a check), it evaluates the constraints on the table's current
rows; audits compare a write with what it replaced, so they are evaluated only in writes and
have no result there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetsDefinition,
    DagsterEventType,
    MetadataValue,
    Output,
    multi_asset_check,
)

from dagster_partlake.compat import check_outputs, log_check_evaluation
from dagster_partlake.gates.spec import GateResult, Gates, gates_of
from dagster_partlake.kinds.spec import model_kind
from dagster_partlake.metadata import FAILING_PARTITIONS_KEY

if TYPE_CHECKING:
    from dagster import AssetSpec, OutputContext

GATE_OUTCOME_KEY = "partlake/outcome"
WRITTEN_PARTITIONS_KEY = "partlake/partitions_written"
# The check op of an asset is named <asset path joined by __> + this suffix.
CHECK_OP_SUFFIX = "_partlake_gates"


def gate_checks(assets: Sequence[object]) -> list[AssetChecksDefinition]:
    """The asset checks of the gates declared by `assets` (partlake/constraints, partlake/audits);
    `dagster_partlake.partlake_asset_checks` declares them with partlake_fresh."""
    checks = []
    for assets_def in assets:
        if not isinstance(assets_def, AssetsDefinition):
            continue
        for key in assets_def.keys:
            spec = assets_def.specs_by_key[key]
            metadata = dict(spec.metadata or {})
            gates = gates_of(metadata, asset_name=key.to_user_string(), kind=_kind(spec, metadata))
            if gates:
                checks.append(_checks_for(key, gates, spec))
    return checks


def _kind(spec: AssetSpec, metadata: dict[str, Any]) -> str:
    return model_kind(
        metadata, partitioned=spec.partitions_def is not None, asset_name=spec.key.to_user_string()
    ).kind


def _checks_for(key: AssetKey, gates: Gates, asset_spec: AssetSpec) -> AssetChecksDefinition:
    specs = [
        AssetCheckSpec(
            gate.name,
            asset=key,
            description=f"partlake {gate.family} ({gate.severity}): {gate.describe()}",
            # Not Dagster-blocking: the gate already stopped a bad batch before its commit, and
            # a blocking spec would make downstream steps wait for this check step.
            blocking=False,
            metadata={"partlake/gate": gate.type, "partlake/severity": gate.severity},
        )
        for gate in gates.all
    ]

    @multi_asset_check(
        name=f"{'__'.join(key.path)}{CHECK_OP_SUFFIX}",
        specs=specs,
        can_subset=True,
        required_resource_keys={"io_manager"},
        description=(
            f"Quality gates of {key.to_user_string()}, evaluated before each commit by the IO "
            "manager; on their own they check the table's current rows against the constraints."
        ),
    )
    # Unannotated: Dagster validates the annotation object, which postponed annotations hide.
    def _gates(context) -> Iterator[AssetCheckResult | Output]:
        keys = context.selected_asset_check_keys
        selected = {k.name for k in keys}
        if _evaluated_in_run(context, key, selected):
            yield from check_outputs(context, keys)
            return
        results = list(_on_current_rows(context, asset_spec, gates, selected))
        yield from results
        # The audits, evaluated only in writes.
        done = {r.check_name for r in results}
        yield from check_outputs(context, [k for k in keys if k.name not in done])

    return _gates


def _evaluated_in_run(context: AssetCheckExecutionContext, key: AssetKey, names: set[str]) -> bool:
    """Whether this run's write of the asset already logged the gates' results.

    Read from this run's own events: the latest evaluation in the instance may belong to another
    run writing the same asset at the same time.
    """
    logged = {
        record.dagster_event.event_specific_data.check_name
        for record in context.instance.all_logs(
            context.run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
        )
        if record.dagster_event is not None
        and record.dagster_event.event_specific_data.asset_key == key
    }
    return names <= logged


def _on_current_rows(
    context: AssetCheckExecutionContext, asset_spec: AssetSpec, gates: Gates, selected: set[str]
) -> Iterator[AssetCheckResult]:
    from dagster_partlake.delta.reader import open_table, read_snapshot
    from dagster_partlake.delta.selection import PartitionSelection
    from dagster_partlake.gates.evaluate import GateInput, evaluate
    from dagster_partlake.partitions.keys import KeyCodec, dimension_columns

    io_manager = context.resources.io_manager
    key = asset_spec.key
    metadata = dict(asset_spec.metadata or {})
    name = key.to_user_string()
    snapshot = open_table(io_manager.table_location(key), table_name=name)
    partitions_def = asset_spec.partitions_def
    columns = dimension_columns(partitions_def, metadata, asset_name=name) if partitions_def else []
    codec = KeyCodec(columns, snapshot.column_types)
    rows = read_snapshot(
        io_manager.spark.spark_session, snapshot, PartitionSelection.everything()
    ).df
    constraints = Gates(tuple(g for g in gates.constraints if g.name in selected))
    results = evaluate(
        constraints,
        GateInput(
            asset_name=name,
            new=rows,
            partition_columns=[c.column for c in columns],
            keys=[],
            key_of=lambda values: codec.key([values[c.column] for c in columns]) or "__all__",
        ),
    )
    for result in results:
        yield AssetCheckResult(
            asset_key=key,
            check_name=result.gate.name,
            passed=result.passed,
            severity=_severity(result),
            metadata={**_metadata(result), "partlake/table_version": snapshot.table.version()},
            description=result.summary(),
        )


def log_gate_results(
    context: OutputContext, results: Sequence[GateResult], keys: Sequence[str]
) -> None:
    """Log one asset check evaluation per gate result into the run of an output's step."""
    step_context = context.step_context
    for result in results:
        log_check_evaluation(
            step_context,
            AssetCheckEvaluation(
                asset_key=context.asset_key,
                check_name=result.gate.name,
                passed=result.passed,
                metadata={
                    **_metadata(result),
                    WRITTEN_PARTITIONS_KEY: MetadataValue.json(list(keys) or ["__all__"]),
                },
                severity=_severity(result),
                description=result.summary(),
                blocking=False,
            ),
        )


def _severity(result: GateResult) -> AssetCheckSeverity:
    return AssetCheckSeverity.WARN if result.gate.severity == "warn" else AssetCheckSeverity.ERROR


def _metadata(result: GateResult) -> dict[str, Any]:
    return {
        GATE_OUTCOME_KEY: MetadataValue.text(result.outcome),
        "partlake/offending": MetadataValue.int(result.offending),
        "partlake/checked": MetadataValue.int(result.checked),
        "partlake/samples": MetadataValue.json(json.loads(json.dumps(result.samples, default=str))),
        FAILING_PARTITIONS_KEY: MetadataValue.json(list(result.failing_partitions)),
    }
