"""In CI a run that left out the httpx2 half of the transport's tests fails (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

HALVES = """
import pytest

@pytest.mark.parametrize("kind", ["sync", "async", "httpx2", "httpx2-async"])
def test_behaviour(kind):
    pass
"""


@pytest.mark.parametrize(
    ("ci", "args", "fails"),
    [
        ("true", ["-k", "not httpx2"], True),  # deselected
        ("true", ["-k", "sync and not httpx2"], True),
        ("true", [], False),  # both halves ran
        ("true", ["-n", "2", "-k", "not httpx2"], True),  # counted where xdist's reports arrive
        ("true", ["-n", "2"], False),
        ("", ["-k", "not httpx2"], False),  # outside CI a partial run is fine
        ("true", ["-k", "httpx2"], False),  # no httpx half: nothing to match it against
    ],
)
def test_a_ci_run_without_the_httpx2_half_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, args: list[str], fails: bool
) -> None:
    """The run's outcome follows which halves ran, under CI only."""
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8").replace('pytest_plugins = ["pytester"]', ""))
    pytester.makepyfile(test_halves=HALVES)
    result = pytester.runpytest_subprocess("-p", "no:randomly", *args)
    assert result.ret == (pytest.ExitCode.TESTS_FAILED if fails else pytest.ExitCode.OK)
    if fails:
        result.stdout.fnmatch_lines(["*transport tests ran against httpx and none against httpx2*"])


def test_a_ci_run_that_skips_the_httpx2_half_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A skip of the httpx2 half fails the run in CI (as every skip there does: the skipped
    tests fail)."""
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8").replace('pytest_plugins = ["pytester"]', ""))
    pytester.makepyfile(
        test_halves=HALVES.replace("    pass", "    if kind.startswith('httpx2'):\n        pytest.skip('no httpx2')")
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["FAILED *test_behaviour[[]httpx2[]] - skipped in CI*"])
