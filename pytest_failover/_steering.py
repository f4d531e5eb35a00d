"""Traffic steering: the pure parts (time windows, rendezvous hashing, weight draws).

A pool can steer a request's first attempt away from plain pool order:

- *weights* (gray release) send a share, in percent, of first attempts to a domain;
- *affinity* sends a key (a user id) to the domain that rendezvous (highest random
  weight, HRW) hashing picks among the healthy affinity domains;
- a *named order* (``extensions={"failover": {"order": "wechat"}}``) or the current
  *time window*'s order replaces the pool order for the whole request.

Nothing here reads a clock or a random source: the wall time and the draws are
arguments. The pool's choice (``PoolCore.choose``) then walks the order built from
these answers, so breakers, probes and the rest of the rules stay in one place.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
import zoneinfo
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import semconv

__all__ = [
    "AFFINITY",
    "ORDER",
    "TIME_ORDER",
    "WEIGHT",
    "TimeOrder",
    "key_unit",
    "rendezvous_rank",
    "windows_overlap",
]

# Why a request's order is not the pool's (``RequestPlan.steering``, the request span's
# ``failover.steering``).
WEIGHT = semconv.STEERING_WEIGHT  # a weight draw put a domain first
AFFINITY = semconv.STEERING_AFFINITY  # the affinity key's rendezvous ranking went first
ORDER = semconv.STEERING_ORDER  # the request named an order
TIME_ORDER = semconv.STEERING_TIME_ORDER  # the current time window's order

_CLOCK_TIME = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
_DAY = 24 * 60


@dataclass(frozen=True, slots=True, init=False)
class TimeOrder:
    """A daily window whose order replaces the pool order while it lasts.

    ``TimeOrder(start="22:00", end="06:00", tz="Asia/Shanghai", order=[...])``: from
    22:00 to 06:00 local time in ``tz`` (an IANA name read with :mod:`zoneinfo`); the
    window may cross midnight; ``start`` is inside it, ``end`` is not. ``order`` lists
    some or all of the pool's domains; the others follow in pool order.
    """

    start: str
    end: str
    tz: str
    order: tuple[str, ...]
    zone: zoneinfo.ZoneInfo = field(repr=False, compare=False)
    # minutes after local midnight
    start_minute: int = field(repr=False, compare=False)
    end_minute: int = field(repr=False, compare=False)

    def __init__(self, *, start: str, end: str, tz: str, order: Sequence[str]) -> None:
        start_minute = _minute_of(start, "start")
        end_minute = _minute_of(end, "end")
        if start_minute == end_minute:
            raise ValueError(f"TimeOrder start and end are both {start!r}: the window would be empty")
        if not isinstance(tz, str) or not tz:
            raise ValueError(f"TimeOrder tz {tz!r}: expected an IANA time zone such as 'Asia/Shanghai'")
        try:
            zone = zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(
                f"TimeOrder tz {tz!r}: not a time zone zoneinfo knows ({exc}); "
                "expected an IANA name such as 'Asia/Shanghai'"
            ) from None
        if isinstance(order, str) or not order or not all(isinstance(d, str) for d in order):
            raise ValueError(f"TimeOrder order {order!r}: expected a non-empty list of base URLs")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        object.__setattr__(self, "tz", tz)
        object.__setattr__(self, "order", tuple(order))
        object.__setattr__(self, "zone", zone)
        object.__setattr__(self, "start_minute", start_minute)
        object.__setattr__(self, "end_minute", end_minute)

    def spans(self) -> tuple[tuple[int, int], ...]:
        """The window as half-open minute ranges of one day (two when it crosses midnight)."""
        if self.start_minute < self.end_minute:
            return ((self.start_minute, self.end_minute),)
        return tuple((a, b) for a, b in ((self.start_minute, _DAY), (0, self.end_minute)) if a < b)

    def covers(self, wall: float) -> bool:
        """Is the Unix time ``wall`` inside this window, in its time zone?"""
        return self.covers_minute(self.local_minute(wall))

    def covers_minute(self, minute: float) -> bool:
        if self.start_minute < self.end_minute:
            return self.start_minute <= minute < self.end_minute
        return minute >= self.start_minute or minute < self.end_minute

    def local_minute(self, wall: float) -> float:
        """Minutes after local midnight in this window's time zone at the Unix time ``wall``."""
        local = _dt.datetime.fromtimestamp(wall, self.zone)
        return local.hour * 60 + local.minute + (local.second + local.microsecond / 1e6) / 60

    def __repr__(self) -> str:
        return f"TimeOrder(start={self.start!r}, end={self.end!r}, tz={self.tz!r}, order={list(self.order)!r})"


def _minute_of(text: object, name: str) -> int:
    if not isinstance(text, str):
        raise ValueError(f"TimeOrder {name} {text!r}: expected a local time 'HH:MM' such as '22:00'")
    match = _CLOCK_TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"TimeOrder {name} {text!r}: expected a local time 'HH:MM' from 00:00 to 23:59")
    return int(match[1]) * 60 + int(match[2])


def windows_overlap(windows: Iterable[TimeOrder]) -> tuple[TimeOrder, TimeOrder] | None:
    """The first two windows that share a minute, or None. Windows of one time zone only."""
    seen: list[tuple[TimeOrder, tuple[tuple[int, int], ...]]] = []
    for window in windows:
        spans = window.spans()
        for other, other_spans in seen:
            if any(a < d and c < b for a, b in spans for c, d in other_spans):
                return other, window
        seen.append((window, spans))
    return None


def _digest(key: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def rendezvous_rank(key: str, names: Sequence[str]) -> list[int]:
    """Indexes of ``names`` by descending rendezvous (HRW) score for ``key``: the first
    is the key's node; removing any other node leaves it first. The hash is stable
    across processes and machines (BLAKE2b), so every client agrees."""
    prefix = key.encode() + b"\x00"
    scores = [(_digest(prefix + name.encode()), i) for i, name in enumerate(names)]
    scores.sort(reverse=True)
    return [i for _, i in scores]


def key_unit(key: str) -> float:
    """A number in [0, 1) fixed by ``key`` (and independent of its HRW scores): the
    weight draw of a request with an affinity key, so a key stays on one side."""
    return _digest(key.encode() + b"\x00weights") / 2.0**64
