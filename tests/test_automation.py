"""`partlake_stale()` under Dagster's own automation sensor and the real daemon (`dagster dev`).

The example's lakehouse with Declarative Automation instead of partlake's sensor
(tests/automation_defs.py): a source partition rewritten by another system, which Dagster's own
conditions cannot see, is refreshed with exactly its stale closure, upstream first.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, run_partlake, subprocess_env
from tests.servers import dagster_dev, ended_runs, wait_until
from tests.test_daemon import ingest

pytestmark = [pytest.mark.dagster_cli, pytest.mark.daemon]

MODULE = "tests.automation_defs"
RUNS = """
{ runsOrError { ... on Runs { results {
    runId status creationTime endTime tags { key value } assetSelection { path } } } } }
"""


def runs(dev) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    found = dev.graphql(RUNS)["runsOrError"]["results"]
    for run in found:
        run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
        run["assets"] = sorted("/".join(a["path"]) for a in run["assetSelection"] or [])
    return sorted(found, key=lambda r: r["creationTime"])


@pytest.mark.extended  # CI: partlake_stale() in tests/surface/test_orchestration.py
def test_partlake_stale_refreshes_exactly_the_stale_closure_upstream_first(tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO_ROOT / "scripts" / "dagster.yaml").read_text())
    env = subprocess_env(
        DAGSTER_HOME=str(home),
        PARTLAKE_HOME=str(tmp_path / "lake"),
        PARTLAKE_CACHE_DIR=str(tmp_path / "state-cache"),
        PARTLAKE_SENSOR_INTERVAL_SECONDS="5",
        SPARK_LOCAL_IP="127.0.0.1",
    )
    ingest(env, "--date", "2024-01-01", "--region", "eu", "--region", "us")
    # The lake filled by partlake in one process, as a team moving to automation would have it
    # (filling it through Dagster's runs, one process each, took minutes of this test).
    filled = run_partlake("run", "-m", MODULE, env=env, timeout=600)
    assert filled.returncode == 0, filled.stdout[-3000:] + filled.stderr[-3000:]
    served_at = time.time()
    with dagster_dev(env, tmp_path / "dagster_dev.log", target=("-m", MODULE)) as dev:
        # The automation sensor is on by default: with the lake fresh, it requests nothing.
        assert dev.stale(MODULE) == []
        rewritten_at = time.time()
        ingest(env, "--date", "2024-01-01", "--region", "us", "--seed", "7")
        closure = {(i["asset"], i["partition"]) for i in dev.stale(MODULE)}
        assert closure == {
            ("clean_events", "2024-01-01|us"),
            ("daily_region_stats", "2024-01-01|us"),
            ("monthly_region_stats", "2024-01|us"),
        }
        wait_until(lambda: dev.stale(MODULE) == [], timeout=600, what="the closure to refresh")
        after = ended_runs(
            lambda: [r for r in runs(dev) if r["creationTime"] >= rewritten_at],
            what="the refresh's runs to end",
        )
        assert all(r["status"] == "SUCCESS" for r in after), after
        requested = [
            (asset, r["tags"]["dagster/partition"]) for r in after for asset in r["assets"]
        ]
        assert sorted(requested) == sorted(closure)  # exactly the closure, each once
        assert [r for r in runs(dev) if served_at <= r["creationTime"] < rewritten_at] == []
        order = [asset for asset, _ in requested]
        assert order == ["clean_events", "daily_region_stats", "monthly_region_stats"]
        # Each waited for its upstream: requested after the upstream's run ended.
        for upstream, downstream in zip(after, after[1:], strict=False):
            assert downstream["creationTime"] >= upstream["endTime"] - 1
