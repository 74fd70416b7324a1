"""Load a code location's `Definitions` from a Python module (like `dagster ... -m MODULE`)."""

from __future__ import annotations

import importlib
import os
import sys

from dagster import Definitions

from dagster_partlake.compat import definitions_of_function
from dagster_partlake.errors import PartlakeConfigError


def load_definitions(module: str) -> Definitions:
    """The `Definitions` object of a Python module (like `dagster ... -m MODULE`)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise PartlakeConfigError(
            f"cannot import module {module!r} ({error}); run from the directory that contains it "
            "or install it."
        ) from error
    # As Dagster loads a module: a `@dg.definitions` function (a dg project's) first.
    lazy = [d for v in vars(loaded).values() if (d := definitions_of_function(v)) is not None]
    found = lazy or [v for v in vars(loaded).values() if isinstance(v, Definitions)]
    if len(found) != 1:
        raise PartlakeConfigError(
            f"module {module!r} has {len(found)} Definitions objects; it needs exactly one "
            "(e.g. `defs = Definitions(...)`, or a function decorated with @dg.definitions)."
        )
    return found[0]
