"""The status page's memory: per check, its last results and its uptime counts.

Pure and bounded: time is passed in, nothing here does I/O, and what one check costs does not
grow with time or probe rate. Per check (a pool probe or a domain probe) it keeps

- the last :data:`BARS` results (time, success, latency, a short label) in a ring of arrays;
- success / total counts per minute for the last hour and per hour for the last
  :data:`HOURS` hours, from which the uptime over 1 h, 24 h and 7 d is read. The windows are
  whole slots: "1 h" is the current minute and the 59 before it, "24 h" the current hour and
  the 23 before it, "7 d" the current hour and the 167 before it. A window is read over the
  time its results actually cover (from the oldest result still counted: exact while the
  bars hold it, else the start of its slot), and a longer window whose results all lie in
  the shorter one before it has no figure of its own (it would repeat that one's);
- whether it is up and since when (the first result of the current streak).

About 2.5 KB per check at a 15 s interval, whatever the time it has run: the counts are
arrays of the narrowest unsigned type that holds them (one byte a slot while a slot holds at
most 255 results, wider only when one holds more: a check every 15 s counts 240 an hour) and a
result's label is the index of that label in a table all checks share (status codes, error
types and domains: a few dozen strings). Stored as 4-byte counts and a pointer a label, the
same history was 4.5 KB per check, 6.7 MiB of the agent's 1,000 domains.
:class:`~failover_agent.status.store.HistoryFile` makes it survive restarts.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["BARS", "HOURS", "MINUTES", "WINDOWS", "Counts", "History", "Key", "Sample", "Series"]

BARS = 90
"""How many results each check keeps for its bars and its latency chart."""
MINUTES = 60
"""Minute slots: the 1 h uptime."""
HOURS = 7 * 24
"""Hour slots: the 24 h and 7 d uptime."""
WINDOWS: dict[str, tuple[str, int]] = {"1h": ("minutes", 60), "24h": ("hours", 24), "7d": ("hours", HOURS)}
"""Uptime window name -> (which counts, how many slots)."""

Key = tuple[str, str]
"""A check: ``(pool, domain URL)``; the pool probe's domain is ``""``."""

_WIDER = {"B": "H", "H": "I", "I": "Q"}
"""An unsigned array's type -> the next wider one (1, 2, 4, 8 bytes)."""


def _zeros(size: int) -> array[int]:
    return array("B", bytes(size))


def _added(values: array[int], i: int, n: int) -> array[int]:
    """``values`` with ``n`` added at ``i``: the same array, or a wider copy when its type
    cannot hold the sum."""
    while True:
        try:
            values[i] += n
        except OverflowError:
            values = array(_WIDER[values.typecode], values)
        else:
            return values


class _Labels:
    """The labels of every check's results, each stored once: a result keeps its index.

    Append-only (another thread may read an index while the loop adds a label); it holds the
    distinct status codes, error types and serving domains seen, a few dozen strings."""

    def __init__(self) -> None:
        self._names: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def index(self, label: str) -> int:
        found = self._index.get(label)
        if found is None:
            found = self._index[label] = len(self._names)
            self._names.append(label)
        return found

    def __getitem__(self, index: int) -> str:
        return self._names[index]


_LABELS = _Labels()


@dataclass(frozen=True, slots=True)
class Sample:
    """One result of a check."""

    at: float
    ok: bool
    latency: float
    label: str  # the status code, the error type, or (pool probes) the domain that served


class Counts:
    """Successes and totals per time slot of ``width`` seconds, in a ring of ``slots``.

    The ring holds the latest slot seen and the ``slots - 1`` before it: slot ``stamp`` (whole
    widths since 1970) lives at ``stamp % slots``. Moving on to a later slot zeroes the ones
    skipped, so no slot needs to remember its stamp (two arrays, not three: 1 KB less per
    check, 1.5 MiB at 1,000 domains)."""

    __slots__ = ("_last", "_ok", "_total", "width")

    def __init__(self, slots: int, width: float) -> None:
        self.width = width
        self._last = -1  # the latest stamp counted (-1: none yet)
        self._ok = _zeros(slots)  # widened as counts grow (the module docstring)
        self._total = _zeros(slots)

    def add(self, at: float, ok: int, total: int = 1) -> None:
        """Count ``total`` results at ``at``, ``ok`` of them successes (older than the ring: dropped)."""
        stamp = int(at // self.width)
        size = len(self._total)
        if stamp > self._last:
            self._advance(stamp, size)
        elif stamp <= self._last - size:
            return
        i = stamp % size
        self._total = _added(self._total, i, total)
        self._ok = _added(self._ok, i, ok)

    def _advance(self, stamp: int, size: int) -> None:
        """Make ``stamp`` the latest slot: zero the slots between the old latest and it."""
        if self._last < 0 or stamp - self._last >= size:
            self._ok, self._total = _zeros(size), _zeros(size)
        else:
            for skipped in range(self._last + 1, stamp + 1):
                self._ok[skipped % size] = self._total[skipped % size] = 0
        self._last = stamp

    def window_start(self, now: float, slots: int) -> float:
        """When the window of the current slot and the ``slots - 1`` before it begins."""
        return (int(now // self.width) - slots + 1) * self.width

    def ratio(self, now: float, slots: int) -> float | None:
        """Successes / total over the current slot and the ``slots - 1`` before it (None: no result)."""
        last = int(now // self.width)
        size = len(self._total)
        first = max(last - slots + 1, self._last - size + 1)
        ok = total = 0
        for stamp in range(first, min(last, self._last) + 1):
            ok += self._ok[stamp % size]
            total += self._total[stamp % size]
        return None if total == 0 else ok / total

    def copy(self) -> Counts:
        twin = Counts.__new__(Counts)
        twin.width, twin._last, twin._ok, twin._total = self.width, self._last, self._ok[:], self._total[:]
        return twin

    def slots(self) -> Iterator[tuple[int, int, int]]:
        """``(stamp, ok, total)`` of every slot holding a result, oldest first."""
        size = len(self._total)
        for stamp in range(max(0, self._last - size + 1), self._last + 1):
            if self._total[stamp % size]:
                yield stamp, self._ok[stamp % size], self._total[stamp % size]


class Series:
    """The history of one check (see the module docstring)."""

    __slots__ = ("_at", "_head", "_labels", "_latency", "_ok", "_size", "first", "hours", "minutes", "since",
                 "up")

    def __init__(self) -> None:
        self._at = array("d", [0.0]) * BARS
        self._latency = array("f", [0.0]) * BARS  # float32: microseconds are plenty
        self._ok = bytearray(BARS)
        self._labels = _zeros(BARS)  # indices in _LABELS, widened past 255 labels
        self._head = 0  # where the next result goes
        self._size = 0
        self.minutes = Counts(MINUTES, 60.0)
        self.hours = Counts(HOURS, 3600.0)
        self.up: bool | None = None
        self.since: float | None = None  # first result of the current up or down streak
        self.first: float | None = None  # the oldest result counted (the uptime's coverage)

    def add(self, sample: Sample, *, count: bool = True) -> None:
        """Record ``sample`` (``count=False``: for the bars only, its counts are restored apart)."""
        i = self._head
        self._at[i], self._latency[i], self._ok[i] = sample.at, sample.latency, sample.ok
        self._labels[i] = 0
        self._labels = _added(self._labels, i, _LABELS.index(sample.label))
        self._head = (i + 1) % BARS
        self._size = min(self._size + 1, BARS)
        if count:
            self.minutes.add(sample.at, int(sample.ok))
            self.hours.add(sample.at, int(sample.ok))
            self.counted_since(sample.at)
        if self.up is not sample.ok:
            self.up, self.since = sample.ok, sample.at

    def samples(self) -> list[Sample]:
        """The kept results, oldest first."""
        return [Sample(at, bool(ok), latency, label) for at, ok, latency, label in self._ordered()]

    def _ordered(self) -> zip[tuple[float, int, float, str]]:
        start = (self._head - self._size) % BARS
        order = [(start + n) % BARS for n in range(self._size)]
        return zip([self._at[i] for i in order], [self._ok[i] for i in order],
                   [self._latency[i] for i in order], [_LABELS[self._labels[i]] for i in order], strict=True)

    def counted_since(self, at: float) -> None:
        """Results are counted from ``at`` on, or earlier (a restored history's oldest)."""
        self.first = at if self.first is None else min(self.first, at)

    def uptime(self, now: float) -> dict[str, tuple[float | None, float | None]]:
        """Per window of :data:`WINDOWS`: the success ratio (0..1) and the seconds its results
        cover, ``None`` when they cover the whole window. ``(None, None)``: no result, or every
        result lies in the shorter window before it (the module docstring's rule)."""
        first = self.first
        out: dict[str, tuple[float | None, float | None]] = {}
        shorter_start: float | None = None
        for name, (which, slots) in WINDOWS.items():
            counts: Counts = getattr(self, which)
            start = counts.window_start(now, slots)
            ratio = counts.ratio(now, slots)
            if first is None or ratio is None or (shorter_start is not None and first >= shorter_start):
                out[name] = (None, None)
            else:
                out[name] = (ratio, None if first <= start else max(0.0, now - first))
            shorter_start = start
        return out

    def copy(self) -> Series:
        """An independent copy (cheap: the arrays are copied in C), to describe in another thread."""
        twin = Series.__new__(Series)
        twin._at, twin._latency, twin._ok = self._at[:], self._latency[:], self._ok[:]
        twin._labels, twin._head, twin._size = self._labels[:], self._head, self._size
        twin.minutes, twin.hours = self.minutes.copy(), self.hours.copy()
        twin.up, twin.since, twin.first = self.up, self.since, self.first
        return twin

    def describe(self, now: float) -> dict[str, object]:
        """The JSON form served in ``/status.json`` (documented in docs/agent.md)."""
        uptime = self.uptime(now)
        return {
            "results": [[at, ok, round(latency, 6), label] for at, ok, latency, label in self._ordered()],
            "uptime": {k: None if v is None else round(v, 6) for k, (v, _) in uptime.items()},
            "covered": {k: None if c is None else round(c, 3) for k, (_, c) in uptime.items()},
            "up": self.up,
            "since": self.since,
            "down_since": self.since if self.up is False else None,
        }


class History:
    """Every check's :class:`Series`, by :data:`Key`."""

    def __init__(self) -> None:
        self._series: dict[Key, Series] = {}

    def __len__(self) -> int:
        return len(self._series)

    def __contains__(self, key: object) -> bool:
        return key in self._series

    def series(self, key: Key) -> Series:
        """The series of ``key``, created empty on first use."""
        found = self._series.get(key)
        if found is None:
            found = self._series[key] = Series()
        return found

    def get(self, key: Key) -> Series | None:
        return self._series.get(key)

    def add(self, key: Key, sample: Sample) -> Series:
        series = self.series(key)
        series.add(sample)
        return series

    def keep_only(self, keys: Iterable[Key]) -> None:
        """Forget the checks not in ``keys`` (targets removed by a reload)."""
        wanted = set(keys)
        for key in [k for k in self._series if k not in wanted]:
            del self._series[key]
