"""``failover-agent demo --outage-at SECONDS``: the demo's outage brought to SECONDS in, the
timeline's order kept; a time that would break it is a usage error and starts nothing."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from failover_agent import demo
from failover_agent.cli import main
from failover_agent.demo import TIMELINE, Step, demo_timeline


@pytest.fixture
def played(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Step, ...]]:
    """The timelines ``failover-agent demo`` hands to the demo, which starts nothing."""
    timelines: list[tuple[Step, ...]] = []

    def run_demo(*, timeline: tuple[Step, ...], **_options: Any) -> int:
        timelines.append(timeline)
        return 0

    monkeypatch.setattr(demo, "run_demo", run_demo)
    return timelines


def _demo(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, ["demo", *args], prog_name="failover-agent")
    return result.exit_code, result.output.splitlines()


def test_the_outage_moves_and_the_rest_stays() -> None:
    """Both outage steps, and only they, come SECONDS in; the steps stay in time order."""
    sooner = demo_timeline(1.5)
    assert [(at, action) for at, _, action in sooner] == [
        (0.0, "heal"), (1.5, "dns_down"), (1.5, "cert_expiring"), (35.0, "dns_up"), (50.0, "cert_fresh")]
    assert [text for _, text, _ in sooner] == [text for _, text, _ in TIMELINE]
    assert sorted(sooner, key=lambda step: step[0]) == list(sooner)


def test_the_command_plays_the_moved_timeline_or_the_scripted_one(played: list[tuple[Step, ...]]) -> None:
    """``--outage-at`` reaches the demo as a derived timeline; without it the demo plays
    TIMELINE itself, which the option does not replace."""
    assert _demo("--outage-at", "1.5") == (0, [])
    assert _demo() == (0, [])
    assert played == [demo_timeline(1.5), TIMELINE]
    assert played[1] is TIMELINE and demo.TIMELINE is TIMELINE


@pytest.mark.parametrize("seconds", ["0", "35", "-1", "nan", "inf"])
def test_a_time_outside_the_steps_around_the_outage_is_a_usage_error(
    played: list[tuple[Step, ...]], seconds: str
) -> None:
    """At 0 s or before, the outage would precede the healthy start; at 35 s or after, the
    primary's recovery; NaN and infinity are no time: exit 2, the range named, no demo."""
    shown = f"{float(seconds):g}"
    assert _demo("--outage-at", seconds) == (2, [
        f"Error: Invalid value for '--outage-at': {shown} is not in the range 0<SECONDS<35: the outage "
        "comes after the timeline's 0 s step and before its 35 s step (see 'failover-agent demo --help')"])
    assert played == []
