"""A warm worker's code files (`orchestration.warm.code_files`): the code location's own modules
wherever they are imported from, so a change on disk retires the worker, and no installed
package or standard library module."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import dagster

from dagster_partlake.orchestration.warm import code_files


def test_a_module_on_the_python_path_outside_the_working_directory_is_a_code_file(
    tmp_path: Path,
) -> None:
    # As `dagster dev -m my_module` with my_module's folder on PYTHONPATH, started elsewhere
    # (a worker of such a code location ran a run with the old code after a change).
    folder = tmp_path / "code"
    folder.mkdir()
    module = folder / "partlake_warm_files_probe.py"
    module.write_text("VERSION = 1\n")
    sys.path.insert(0, str(folder))
    try:
        importlib.import_module("partlake_warm_files_probe")
        files = code_files()
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("partlake_warm_files_probe", None)
    real = os.path.realpath(module)
    assert real in files
    assert files[real][0] == module.stat().st_size
    assert os.path.realpath(dagster.__file__) not in files
    assert os.path.realpath(os.__file__) not in files
