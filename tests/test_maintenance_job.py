"""The example's nightly maintenance job through the real `dagster job execute`: it compacts the
tables, records what it did on each asset, and leaves nothing stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus
from deltalake import DeltaTable

from dagster_partlake.delta.state import StateCache
from dagster_partlake.delta.table import table_exists
from dagster_partlake.planning.session import make_plan
from tests.conftest import REPO_ROOT, cli_env, delta_rows
from tests.delta.test_maintenance import split_a_file

pytestmark = pytest.mark.spark

DAGSTER = str(Path(sys.executable).parent / "dagster")


def files_count(root: str) -> int:
    return len(DeltaTable(root).file_uris())


def execute(env: dict[str, str], config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DAGSTER, "job", "execute", "-m", "definitions", "-j", "partlake_maintenance"]
        + ["-c", str(config)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_maintenance_job_compacts_and_invalidates_nothing(
    example, lake: Path, tmp_path: Path
) -> None:
    _, graph = example
    clean = graph.assets["clean_events"].path
    split_a_file(clean)
    files_before = files_count(clean)
    rows = delta_rows(clean)
    states = StateCache().sync(clean).last_updated
    env = cli_env(tmp_path, lake)

    refused = tmp_path / "refused.yaml"
    refused.write_text(
        "ops:\n  partlake_maintenance_tables:\n    config:\n      retention_hours: 0\n"
    )
    bad = execute(env, refused)
    assert bad.returncode != 0
    assert "retention of 0 hours" in bad.stdout + bad.stderr
    assert files_count(clean) == files_before  # refused before any table was touched

    config = tmp_path / "maintenance.yaml"
    config.write_text(
        "ops:\n  partlake_maintenance_tables:\n    config:\n      target_file_mb: 64\n"
    )
    done = execute(env, config)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert files_count(clean) == files_before - 1
    assert delta_rows(clean) == rows
    assert StateCache().sync(clean).last_updated == states
    assert not make_plan(graph, StateCache()).plan

    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        runs = instance.get_runs()
        assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE]
        observed = {
            e.dagster_event.event_specific_data.asset_observation.asset_key.to_user_string(): (
                e.dagster_event.event_specific_data.asset_observation
            )
            for e in instance.all_logs(runs[0].run_id, of_type=DagsterEventType.ASSET_OBSERVATION)
            if e.dagster_event is not None
        }
    written = {
        n
        for n, a in graph.assets.items()
        if not a.is_source and not a.is_folder and table_exists(a.path)
    }
    assert set(observed) == written and "clean_events" in written
    text = {k: v.value for k, v in observed["clean_events"].metadata.items()}
    assert text["partlake/maintenance/compact"].startswith("compacted 1 partition(s): 2 -> 1")
    assert text["partlake/maintenance/vacuum"].startswith("removed 0 file(s)")
    assert text["partlake/maintenance/checkpoint"].startswith("checkpoint at version")
