"""Writes docs/reference/metadata.md, one section per metadata key, from the code that checks them.

    python scripts/metadata_page.py           # write the page (`make docs-metadata`)
    python scripts/metadata_page.py --check   # change nothing; exit 1 if the page differs

The keys, what each is for, its example, where it goes, its type and what loading the code
location checks are the rows of `dagster_partlake.spec.settings.SETTINGS`, the registry
`check_keys` refuses every other `partlake/*` key by. tests/test_metadata_page.py keeps the page
equal to this output, finds every key the checker accepts on it, and loads a code location that
carries every example (tests/metadata_examples_defs.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGE = REPO_ROOT / "docs" / "reference" / "metadata.md"
sys.path.insert(0, str(REPO_ROOT))  # the checkout's package, whatever an install points at

from dagster_partlake.spec.settings import SETTINGS, Setting  # noqa: E402

HEAD = """\
# Metadata keys

<!-- Written by scripts/metadata_page.py from dagster_partlake.spec.settings.SETTINGS
(`make docs-metadata`); a test fails when this page and that output differ. Edit the code. -->

Every metadata key partlake reads, with what it is for and one example value, written from the
registry the code location's load checks them with (`dagster_partlake.spec.settings.SETTINGS`):
a key that is not here is refused when the code location loads, and each example here passes
those checks (a test loads a code location carrying all of them). The
[Asset settings](settings.md) page has the same keys in one table and says when they are
checked.

Keys of an asset go in its definition metadata, `@asset(metadata={...})` (or
`partlake_source(..., metadata={...})`); keys of an input in `AssetIn(metadata={...})`.
"""

_WHERE = {
    ("asset",): "the asset's definition metadata, `@asset(metadata={...})`",
    ("input",): "an input's metadata, `AssetIn(metadata={...})`",
    ("asset", "input"): (
        "an input's metadata, `AssetIn(metadata={...})`, or the asset's definition metadata "
        "(then the default of every input)"
    ),
}


def literal(value: Any) -> str:
    """`value` as Python source, as a user writes it in `metadata={...}`."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"an example of type {type(value).__name__} has no literal form: {value!r}")


def section(setting: Setting) -> str:
    entry = f"{{{literal(setting.key)}: {literal(setting.example)}}}"
    example = f"AssetIn(metadata={entry})" if setting.on == ("input",) else f"metadata={entry}"
    return "\n".join(
        [
            f"## `{setting.key}`",
            "",
            setting.description,
            "",
            f"- example: `{example}`",
            f"- where: {_WHERE[setting.on]}",
            f"- read for: {setting.applies_to}",
            f"- type: {setting.type}",
            f"- checked when the code location loads: {setting.checked}",
            "",
        ]
    )


def render() -> str:
    """The page, as this checkout's code says it."""
    return HEAD + "".join("\n" + section(s) for s in SETTINGS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    args = parser.parse_args(argv)
    text = render()
    current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else ""
    if args.check:
        if current != text:
            print(f"{PAGE.relative_to(REPO_ROOT)} differs from the code: make docs-metadata")
            return 1
        return 0
    if current != text:
        PAGE.write_text(text, encoding="utf-8")
        print(f"wrote {PAGE.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
