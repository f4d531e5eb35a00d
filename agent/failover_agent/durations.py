"""Durations written in ``agent.toml``, on the command line and in the SLO rules: one parser,
each key with the units it takes.

A duration is whole numbers, each followed by a unit (``s`` second, ``m`` minute, ``h`` hour,
``d`` day, ``w`` week), the largest unit first and each unit at most once: ``90s``, ``5m``,
``1h30m``, ``30d``, ``4w``. What each key accepts is a row of :data:`KEYS`:

========================  ===========  ==============  =====================================
key                       units        parts           why
========================  ===========  ==============  =====================================
``slo.window``            h, d, w      one             written as it is into PromQL ranges and
                                                       alert texts, as Sloth's and Pyrra's
``maintenance.duration``  s, m, h, d   one or more     a window's length, ``1h30m`` reads best
``maintenance.drain``     s, m, h, d   one or more     how long before a window clients leave
``--for``, ``--in``,      s, m, h, d   one or more     ``failover-agent maintenance start``'s
``--drain``                                            length, delay and drain
``rules.window``          m, h, d      one             the burn-rate alerts' own windows
                                                       (``5m`` .. ``3d``; not user input)
========================  ===========  ==============  =====================================

A text that does not fit is a ``ValueError`` naming the key, the units it takes and examples.
Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["KEYS", "UNITS", "Units", "seconds"]

UNITS: dict[str, int] = {"w": 7 * 86_400, "d": 86_400, "h": 3600, "m": 60, "s": 1}
"""Every unit and its seconds, largest first."""

_NAMES = {"w": "w (weeks)", "d": "d (days)", "h": "h (hours)", "m": "m (minutes)", "s": "s (seconds)"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Units:
    """What one key accepts: ``units`` (letters of :data:`UNITS`, in the order its errors list
    them), one part or several, examples."""

    units: str
    several: bool
    examples: tuple[str, ...]
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.units or set(self.units) - UNITS.keys():
            raise ValueError(f"units {self.units!r}: use letters of {''.join(UNITS)}")
        ordered = [unit for unit in UNITS if unit in self.units]
        if self.several:
            pattern = "".join(f"(?:(?P<{u}>[1-9][0-9]*){u})?" for u in ordered)
        else:
            pattern = f"(?P<n>[1-9][0-9]*)(?P<unit>[{''.join(ordered)}])"
        object.__setattr__(self, "_pattern", re.compile(pattern))

    def rule(self) -> str:
        """The accepted form, in words."""
        names = [_NAMES[unit] for unit in self.units]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        how = "whole numbers of" if self.several else "one whole number of"
        order = ", the largest unit first" if self.several else ""
        return f"{how} {listed}{order}"

    def seconds(self, text: str, key: str) -> int:
        """The seconds of ``text`` (``ValueError`` naming ``key``, the units and examples)."""
        found = self._pattern.fullmatch(text)
        if found is None or not any(found.groups()):
            examples = ", ".join(repr(e) for e in self.examples[:-1]) + f" or {self.examples[-1]!r}"
            raise ValueError(f"{key} takes {self.rule()}, such as {examples}: not {text!r}")
        if not self.several:
            return int(found["n"]) * UNITS[found["unit"]]
        return sum(int(n) * UNITS[unit] for unit, n in found.groupdict().items() if n is not None)


_MAINTENANCE = Units(units="smhd", several=True, examples=("90s", "5m", "2h", "1h30m"))

KEYS: dict[str, Units] = {
    "slo.window": Units(units="hdw", several=False, examples=("30d", "28d", "4w")),
    "maintenance.duration": _MAINTENANCE,
    "maintenance.drain": _MAINTENANCE,
    "--for": _MAINTENANCE,
    "--in": _MAINTENANCE,
    "--drain": _MAINTENANCE,
    "rules.window": Units(units="mhd", several=False, examples=("5m", "1h", "3d")),
}
"""Every key that takes a duration, and what it accepts (the module docstring's table)."""


def seconds(text: str, key: str) -> int:
    """The seconds of ``text`` written for ``key`` (a key of :data:`KEYS`); ``ValueError`` if it
    does not fit that key: the message names the key, its units and examples."""
    return KEYS[key].seconds(text, key)
