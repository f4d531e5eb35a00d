"""Command-line options every benchmark receives."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    long: bool = False
    rounds: int | None = None
    seconds: float | None = None
    profile: bool = False
    against: str | None = None  # a commit whose package runs beside this tree's (benchmarks._against)

    def pick(self, short: int, long: int) -> int:
        return long if self.long else short

    def rounds_or(self, short: int, long: int) -> int:
        return self.rounds if self.rounds is not None else self.pick(short, long)

    def seconds_or(self, short: float, long: float) -> float:
        if self.seconds is not None:
            return self.seconds
        return long if self.long else short
