"""Each use of Dagster's internals (`dagster_partlake.compat`) against the installed Dagster.

An upgrade that moves or changes one fails here, naming it, instead of deep inside a run. No
Spark: each test exercises the Dagster behaviour partlake relies on, in a real instance. (No
`from __future__ import annotations`: Dagster reads the `context` annotations as classes.)
"""

import ast
from pathlib import Path

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSpec,
    AssetExecutionContext,
    BackfillPolicy,
    DagsterInstance,
    DailyPartitionsDefinition,
    Definitions,
    DynamicPartitionsDefinition,
    Output,
    TimeWindowPartitionMapping,
    asset,
    materialize,
)

from dagster_partlake import compat

PACKAGE = Path(__file__).resolve().parents[1] / "dagster_partlake"
DAILY = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-05")


def test_no_module_but_compat_imports_dagster_internals() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "compat.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            modules = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [f"{path}: {m}" for m in modules if m.startswith("dagster._")]
        text = path.read_text()
        if "._compute_log_manager" in text:
            offenders.append(f"{path}: a private attribute of DagsterInstance")
    assert not offenders, offenders


def test_partition_loading_context_resolves_dynamic_keys(instance: DagsterInstance) -> None:
    shops = DynamicPartitionsDefinition(name="shops")
    instance.add_dynamic_partitions("shops", ["berlin", "paris"])
    with compat.partition_loading_context(instance):
        assert shops.get_partition_keys() == ["berlin", "paris"]


def test_run_tags_name_the_partition_range_dagster_reads(instance: DagsterInstance) -> None:
    seen: list[object] = []

    @asset(partitions_def=DAILY, backfill_policy=BackfillPolicy.single_run())
    def days(context: AssetExecutionContext) -> None:
        seen.append(context.partition_key_range)

    result = materialize(
        [days],
        instance=instance,
        tags={
            compat.ASSET_PARTITION_RANGE_START_TAG: "2024-01-02",
            compat.ASSET_PARTITION_RANGE_END_TAG: "2024-01-03",
        },
    )
    assert result.success
    assert [(r.start, r.end) for r in seen] == [("2024-01-02", "2024-01-03")]  # type: ignore[attr-defined]
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    assert compat.PARTITION_NAME_TAG == "dagster/partition"
    single = materialize([days], instance=instance, partition_key="2024-01-04")
    assert instance.get_run_by_id(single.run_id).tags[compat.PARTITION_NAME_TAG] == "2024-01-04"  # type: ignore[union-attr]


def test_a_time_window_without_a_time_dimension_raises_a_public_error(
    instance: DagsterInstance,
) -> None:
    """The IO manager's scd2 snapshot time falls back to the run's start on exactly this error
    (`asset_partitions_time_window` of an output partitioned without a time dimension)."""
    from dagster import DagsterInvariantViolationError, IOManager, StaticPartitionsDefinition

    raised: list[type[BaseException]] = []

    class Probe(IOManager):
        def handle_output(self, context, obj) -> None:  # type: ignore[no-untyped-def]
            try:
                context.asset_partitions_time_window  # noqa: B018 - the access raises
            except DagsterInvariantViolationError as error:
                raised.append(type(error))

        def load_input(self, context) -> None:  # type: ignore[no-untyped-def]
            return None

    @asset(partitions_def=StaticPartitionsDefinition(["a"]))
    def static() -> int:
        return 1

    assert materialize(
        [static], instance=instance, partition_key="a", resources={"io_manager": Probe()}
    ).success
    assert raised, "Dagster no longer raises DagsterInvariantViolationError here"


def test_serialize_value_describes_a_partition_mapping_exactly() -> None:
    from dagster_shared.serdes import deserialize_value

    mapping = TimeWindowPartitionMapping(start_offset=-1, end_offset=0)
    text = compat.serialize_value(mapping)
    assert deserialize_value(text, TimeWindowPartitionMapping) == mapping
    assert compat.serialize_value(TimeWindowPartitionMapping()) != text


def test_log_check_evaluation_reaches_the_instance_from_a_step(instance: DagsterInstance) -> None:
    @asset(check_specs=[AssetCheckSpec("rows_ok", asset="gated")])
    def gated(context: AssetExecutionContext):  # type: ignore[no-untyped-def]
        compat.log_check_evaluation(
            context.op_execution_context._step_execution_context,  # noqa: SLF001 - as the IO manager
            AssetCheckEvaluation(asset_key=context.asset_key, check_name="rows_ok", passed=False),
        )
        yield Output(None)

    assert materialize([gated], instance=instance, raise_on_error=False) is not None
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(gated.key, "rows_ok"), limit=5
    )
    assert history and history[0].event is not None
    data = history[0].event.dagster_event.event_specific_data  # type: ignore[union-attr]
    assert data.check_name == "rows_ok" and data.passed is False  # type: ignore[union-attr]


def test_check_outputs_are_what_dagster_expects_of_a_check_step(instance: DagsterInstance) -> None:
    """A check step whose results were logged as evaluations yields `check_outputs`; without
    them Dagster logs that the step did not yield its outputs."""
    from dagster import multi_asset_check

    missing = "did not yield or return expected outputs"

    @asset
    def gated() -> None:
        return None

    def checks(name: str, *, outputs: bool):  # type: ignore[no-untyped-def]
        specs = [AssetCheckSpec(f"{name}_{c}", asset=gated.key) for c in ("a", "b")]

        @multi_asset_check(name=name, specs=specs, can_subset=True)
        def logged(context):  # type: ignore[no-untyped-def]
            for spec in specs:
                compat.log_check_evaluation(
                    compat.step_context_of(context),
                    AssetCheckEvaluation(asset_key=gated.key, check_name=spec.name, passed=True),
                )
            if outputs:
                yield from compat.check_outputs(context, context.selected_asset_check_keys)

        return logged

    with_outputs, without = checks("with_outputs", outputs=True), checks("without", outputs=False)
    result = materialize([gated, with_outputs, without], instance=instance)
    assert result.success
    said = [r.user_message for r in instance.all_logs(result.run_id) if missing in r.user_message]
    assert len(said) == 1 and "'without'" in said[0], said
    for name in ("with_outputs_a", "with_outputs_b"):
        history = instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(gated.key, name), limit=5
        )
        assert [h.status for h in history] == [compat.CHECK_PASSED]


def test_threadsafe_in_process_runs_swaps_and_restores_the_instance(
    instance: DagsterInstance,
) -> None:
    from dagster._core.storage.noop_compute_log_manager import NoOpComputeLogManager

    before = instance.compute_log_manager
    handlers = instance.get_yaml_python_handlers()
    with compat.threadsafe_in_process_runs(instance, 2):
        assert isinstance(instance.compute_log_manager, NoOpComputeLogManager)
        assert instance.get_yaml_python_handlers() == handlers
    assert instance.compute_log_manager is before
    assert "get_yaml_python_handlers" not in vars(instance)
    with compat.threadsafe_in_process_runs(instance, 1):  # one run at a time: nothing to do
        assert instance.compute_log_manager is before


def test_asset_graph_is_what_definitions_resolve_to() -> None:
    from dagster._core.definitions.assets.graph.asset_graph import AssetGraph

    @asset
    def lone() -> None: ...

    assert isinstance(Definitions(assets=[lone]).resolve_asset_graph(), AssetGraph)


def test_a_partition_gets_one_result_outside_a_run_and_reports_need_ids_of_their_own(
    instance: DagsterInstance,
) -> None:
    """Dagster 1.13 refuses a second result for a partition outside a run (run id "" and a
    unique index over asset, check, run id and partition); `record_check_evaluations` records
    each report under an id of its own. When Dagster lifts the limit, the first half fails."""
    import sqlalchemy.exc
    from dagster import AssetCheckEvaluation, AssetCheckKey, AssetKey

    def result(passed: bool) -> AssetCheckEvaluation:
        return AssetCheckEvaluation(
            asset_key=AssetKey("x"), check_name="fresh", passed=passed, partition="a"
        )

    instance.report_runless_asset_event(result(False))
    try:
        instance.report_runless_asset_event(result(True))
    except sqlalchemy.exc.IntegrityError:
        pass
    else:
        raise AssertionError("Dagster now records repeated runless results: drop the workaround")
    key = AssetCheckKey(AssetKey("x"), "fresh")
    for number, passed in enumerate((True, False, True)):
        compat.record_check_evaluations(instance, [result(passed)], f"report-{number}")
    (info,) = instance.event_log_storage.get_asset_check_partition_info([key])
    assert info.partition_key == "a" and info.latest_execution_status.value == "SUCCEEDED"


def test_results_count_for_a_partition_only_while_they_target_its_latest_materialization(
    instance: DagsterInstance,
) -> None:
    """The check's partition statuses (the UI's Partitions tab) count a result only while it
    targets the partition's latest materialization: untargeted, a result on a materialized
    partition counts for nothing. `targeting_latest_materializations` adds the target."""
    from dagster import AssetKey

    @asset(partitions_def=DAILY)
    def daily() -> None: ...

    assert materialize([daily], instance=instance, partition_key="2024-01-02").success
    key = AssetCheckKey(AssetKey("daily"), "fresh")

    def result(partition: str) -> AssetCheckEvaluation:
        return AssetCheckEvaluation(
            asset_key=key.asset_key, check_name="fresh", passed=False, partition=partition
        )

    compat.record_check_evaluations(instance, [result("2024-01-02")], "untargeted")
    (info,) = instance.event_log_storage.get_asset_check_partition_info([key])
    assert not info.is_current  # Dagster's rule; when it changes, the targeting is moot

    targeted = compat.targeting_latest_materializations(
        instance, [result("2024-01-02"), result("2024-01-03")]
    )
    [materialization] = instance.fetch_materializations(AssetKey("daily"), limit=1).records
    first = targeted[0].target_materialization_data
    assert first is not None and first.storage_id == materialization.storage_id
    assert first.run_id == materialization.run_id
    assert targeted[1].target_materialization_data is None  # never materialized: nothing to target
    compat.record_check_evaluations(instance, targeted, "targeted")
    infos = {
        i.partition_key: i for i in instance.event_log_storage.get_asset_check_partition_info([key])
    }
    assert infos["2024-01-02"].is_current and infos["2024-01-03"].is_current
    assert infos["2024-01-02"].latest_execution_status.value == "FAILED"


def test_asset_graph_of_step_inside_and_outside_a_code_location(instance: DagsterInstance) -> None:
    from dagster import AssetCheckResult, AssetSelection, Definitions, asset_check, define_asset_job

    seen: list[set[str]] = []

    @asset
    def upstream() -> None:
        return None

    @asset(deps=[upstream])
    def checked() -> None:
        return None

    @asset_check(asset=checked)
    def graph_check(context):  # type: ignore[no-untyped-def]
        graph = compat.asset_graph_of_step(context)
        seen.append({k.to_user_string() for k in graph.get_all_asset_keys()})
        return AssetCheckResult(passed=True)

    job = define_asset_job("checks", selection=AssetSelection.checks_for_assets(checked))
    defs = Definitions(assets=[upstream, checked], asset_checks=[graph_check], jobs=[job])
    # Outside a code location: no repository on the step context, the job's graph.
    assert defs.resolve_job_def("checks").execute_in_process(instance=instance).success
    # In one (as the UI runs it): the repository's graph.
    assert materialize([upstream, checked, graph_check], instance=instance).success
    assert all({"upstream", "checked"} <= keys for keys in seen) and len(seen) == 2


def test_a_sensor_selection_sees_the_asset_graph_when_the_code_location_is_snapshotted() -> None:
    from dagster import AssetSelection, sensor
    from dagster._core.remote_representation.external_data import RepositorySnap

    seen = []
    selection = compat.all_assets_checked_at_load(seen.append)

    @asset
    def one() -> None: ...

    @sensor(asset_selection=selection)
    def watching(context):  # noqa: ANN001, ANN202 - Dagster reads the signature
        return None

    defs = Definitions(assets=[one], sensors=[watching])
    assert not seen  # building the definitions does not snapshot them
    snap = RepositorySnap.from_def(defs.get_repository_def())
    assert len(seen) == 1 and isinstance(seen[0], compat.AssetGraph)
    assert seen[0].get_all_asset_keys() == {one.key}
    # The snapshot (what the webserver and the daemon see) holds Dagster's own selection, and
    # the selection selects what AssetSelection.all() does.
    assert snap.sensors[0].asset_selection == AssetSelection.all()
    assert selection.resolve(seen[0]) == AssetSelection.all().resolve(seen[0])


def test_a_backfill_request_becomes_a_backfill_listed_until_it_ends() -> None:
    """`backfill_request` (`RunRequest.for_asset_graph_subset` over a private AssetGraphSubset)
    and `backfills_in_progress` (private BulkActionsFilter) against the installed Dagster."""
    import time

    from dagster import Definitions, StaticPartitionsDefinition, asset, instance_for_test
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill

    parts = StaticPartitionsDefinition(["a", "b", "c"])

    @asset(partitions_def=parts)
    def up() -> None: ...

    @asset(partitions_def=parts, deps=[up])
    def down() -> None: ...

    graph = Definitions(assets=[up, down]).resolve_asset_graph()
    pairs = [(up.key, "a"), (down.key, "a"), (up.key, "c")]
    request = compat.backfill_request(graph, pairs, {"partlake/sensor": "s"})
    subset = request.asset_graph_subset
    assert subset is not None
    assert {(p.asset_key, p.partition_key) for p in subset.iterate_asset_partitions()} == set(pairs)
    with instance_for_test() as instance:
        instance.add_backfill(
            PartitionBackfill.from_asset_graph_subset(
                backfill_id="b1",
                dynamic_partitions_store=instance,
                backfill_timestamp=time.time(),
                asset_graph_subset=subset,
                tags=dict(request.tags),
                title=None,
                description=None,
                run_config=None,
            )
        )
        [(backfill_id, found)] = compat.backfills_in_progress(
            instance, {"partlake/sensor": "s"}, graph
        )
        assert backfill_id == "b1" and set(found) == set(pairs)
        assert compat.backfills_in_progress(instance, {"partlake/sensor": "other"}, graph) == []
        backfill = instance.get_backfill("b1")
        assert backfill is not None
        instance.update_backfill(backfill.with_status(BulkActionStatus.COMPLETED_SUCCESS))
        assert compat.backfills_in_progress(instance, {"partlake/sensor": "s"}, graph) == []


def test_a_definitions_function_is_loaded_as_dagster_loads_it() -> None:
    """`@dg.definitions` (a dg project's `definitions.py`) gives Dagster's private
    LazyDefinitions, which `partlake -m MODULE` calls as `dagster -m MODULE` does."""
    import dagster as dg

    @asset
    def one() -> int:
        return 1

    @dg.definitions
    def defs() -> Definitions:
        return Definitions(assets=[one])

    loaded = compat.definitions_of_function(defs)
    assert loaded is not None and [k.to_user_string() for k in loaded.resolve_all_asset_keys()] == [
        "one"
    ]
    assert compat.definitions_of_function(Definitions(assets=[one])) is None
    assert compat.definitions_of_function(len) is None
