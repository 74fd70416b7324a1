"""A run of tests/landing_defs.py's consumer that is SIGKILLed after its commit and before the
consumed files move, for tests/test_landing.py.

    python -m tests.landing_process LAKE AFTER_COMMIT
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from dagster import DagsterInstance, materialize

import dagster_partlake.io_manager.manager as io_manager_module
from tests.landing_defs import consumer, landing_assets, resources


def main() -> None:
    lake, after_commit = Path(sys.argv[1]), sys.argv[2]
    real_finish = io_manager_module.finish

    def die_before_moving(root: str, files: object, mode: object) -> int:
        if files:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_finish(root, files, mode)  # type: ignore[arg-type]

    io_manager_module.finish = die_before_moving  # type: ignore[assignment]
    assets = landing_assets(after_commit)
    materialize(
        assets,
        selection=[consumer(assets).key],
        resources=resources(lake),
        instance=DagsterInstance.ephemeral(),
    )


if __name__ == "__main__":
    main()
