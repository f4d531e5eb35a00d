"""Page-level rules of the documentation site."""

from __future__ import annotations

from ._markdown import ROOT

BENCHMARKS_MAX_BYTES = 20_000


def test_the_benchmarks_page_is_a_reference_of_at_most_20_kb() -> None:
    """docs/benchmarks.md holds the method and the current figures; their history is in git and
    the changelog, so the page is replaced as figures change, not added to (issue 27)."""
    size = (ROOT / "docs" / "benchmarks.md").stat().st_size
    assert size <= BENCHMARKS_MAX_BYTES, (
        f"docs/benchmarks.md is {size} bytes (limit {BENCHMARKS_MAX_BYTES}): replace superseded "
        "figures instead of adding new ones beside them"
    )
