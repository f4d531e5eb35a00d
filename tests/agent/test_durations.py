"""Durations: one parser, each key with its own units (``slo.window``: one number of h, d or w;
the maintenance keys: numbers of s, m, h and d, largest first); errors name the key and the units."""

from __future__ import annotations

import re

import pytest
from failover_agent.durations import KEYS, Units, seconds


@pytest.mark.parametrize(("text", "expected"), [("90s", 90), ("5m", 300), ("2h", 7200), ("1h30m", 5400),
                                                ("1d", 86_400), ("1d2h3m4s", 93_784)])
def test_maintenance_durations_sum_their_parts(text: str, expected: int) -> None:
    """A maintenance duration is whole numbers of s, m, h and d, summed."""
    assert seconds(text, "maintenance.duration") == seconds(text, "maintenance.drain") == expected


@pytest.mark.parametrize(("text", "expected"), [("30d", 30 * 86_400), ("28d", 28 * 86_400), ("4w", 28 * 86_400),
                                                ("720h", 30 * 86_400)])
def test_slo_windows_are_one_number_of_hours_days_or_weeks(text: str, expected: int) -> None:
    assert seconds(text, "slo.window") == expected


@pytest.mark.parametrize("text", ["30 days", "30", "d", "0d", "030d", "90m", "3600s", "4w2d", "30D", ""])
def test_a_bad_slo_window_names_the_key_and_its_units(text: str) -> None:
    """Minutes, seconds, several parts or anything else: the error says what slo.window takes."""
    with pytest.raises(ValueError, match=r"^slo\.window takes ") as caught:
        seconds(text, "slo.window")
    assert str(caught.value) == ("slo.window takes one whole number of h (hours), d (days) or w (weeks), "
                                 f"such as '30d', '28d' or '4w': not {text!r}")


@pytest.mark.parametrize("text", ["2 hours", "1w", "30m1h", "5m5m", "0m", "1.5h", "-5m", "5", ""])
def test_a_bad_maintenance_duration_names_the_key_and_its_units(text: str) -> None:
    """Weeks, a smaller unit first, a repeated unit, zero, fractions: the error says what the key takes."""
    for key in ("maintenance.duration", "maintenance.drain", "--for"):
        with pytest.raises(ValueError, match=rf"^{re.escape(key)} takes ") as caught:
            seconds(text, key)
        assert str(caught.value) == (
            f"{key} takes whole numbers of s (seconds), m (minutes), h (hours) or d (days), the largest unit "
            f"first, such as '90s', '5m', '2h' or '1h30m': not {text!r}")


def test_every_key_parses_its_own_examples() -> None:
    """Each key's examples (shown in its errors) are durations it accepts."""
    for key, units in KEYS.items():
        assert all(seconds(example, key) > 0 for example in units.examples), key


def test_units_must_be_known() -> None:
    with pytest.raises(ValueError, match="units 'hy': use letters of wdhms"):
        Units(units="hy", several=False, examples=("1h",))
