"""How every benchmark hands over its result: indented JSON on stdout and in its `--out` file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(result: dict[str, Any], out: str | Path) -> int:
    """Write `result` to `out` (its folder made) and stdout; the command's exit status."""
    text = json.dumps(result, indent=2)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text + "\n")
    print(text)
    return 0
