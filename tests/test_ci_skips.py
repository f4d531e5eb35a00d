"""In CI a skip fails the run, whether a test or a whole module was skipped (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")
MODULE_SKIP = """
import pytest

pytest.importorskip("no_such_module_for_the_ci_rule")


def test_never_collected() -> None:
    pass
"""
TEST_SKIP = """
import pytest


def test_skips() -> None:
    pytest.skip("a real component is missing")
"""


@pytest.mark.parametrize(("source", "outcome"), [(MODULE_SKIP, "errors"), (TEST_SKIP, "failed")])
@pytest.mark.parametrize("ci", ["true", ""])
def test_a_skip_fails_only_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, outcome: str, ci: str
) -> None:
    """Under ``CI=true`` a skipped module or test is a failure naming the reason; else a skip."""
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_it=source)
    monkeypatch.setenv("CI", ci)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    if ci:
        result.assert_outcomes(**{outcome: 1})
        result.stdout.fnmatch_lines(["*skipped in CI, which must run every test*"])
    else:
        result.assert_outcomes(skipped=1)
