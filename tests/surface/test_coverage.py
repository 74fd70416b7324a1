"""Every option users can write has a surface test, and the docs page says which. No Spark."""

from __future__ import annotations

from tests.surface.options import PAGE, covered, page, required


def test_every_option_has_a_surface_test() -> None:
    tests = covered()
    missing = [option for option in required() if not tests.get(option)]
    assert not missing, f"{len(missing)} option(s) without a surface test: {', '.join(missing)}"


def test_every_covered_option_is_an_option() -> None:
    unknown = sorted(set(covered()) - set(required()))
    assert not unknown, f"@covers names option(s) that do not exist: {', '.join(unknown)}"


def test_the_docs_page_maps_each_option_to_its_tests() -> None:
    assert PAGE.read_text(encoding="utf-8") == page(), (
        "docs/reference/surface.md is out of date: python -m tests.surface.options > "
        "docs/reference/surface.md"
    )
