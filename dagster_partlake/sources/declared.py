"""A source's declaration as the asset's metadata keeps it, read back: one reader for every kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from dagster_partlake.errors import PartlakeConfigError

T = TypeVar("T")


def from_settings(
    cls: type[T], settings: Mapping[str, Any], *, source: str, key: str, secret: str = ""
) -> T:
    """The declaration `cls` (a dataclass) from the metadata entry `key` of source `source`
    (`secret`: a field never kept there).

    Raises:
        PartlakeConfigError: an unknown or malformed entry, naming the source and the key.
    """
    known = {f.name for f in fields(cls)} - {secret}  # type: ignore[arg-type]
    unknown = sorted(set(settings) - known)
    if unknown:
        raise PartlakeConfigError(
            f"source {source}: {key} has unknown key(s) {', '.join(unknown)}; the keys are "
            f"{', '.join(sorted(known))}."
        )
    try:
        return cls(**dict(settings))
    except TypeError as error:
        raise PartlakeConfigError(f"source {source}: {key}: {error}") from error
