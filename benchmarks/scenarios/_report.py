"""Markdown tables (one per scenario, every client side by side) and the targets table."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import _harness as h

from ._clients import TARGETED
from ._metrics import Outcome

__all__ = ["TARGETS", "Row", "Target", "scenario_table", "targets_table"]


@dataclass(frozen=True, slots=True)
class Row:
    """One client in one variant of one scenario."""

    scenario: str
    variant: str
    client: str  # the client's key (``_clients``)
    outcome: Outcome


def _num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _outcomes(o: Outcome) -> str:
    parts = [f"HTTP {k} x{v}" for k, v in o.statuses.items()]
    parts += [f"{k} x{v}" for k, v in o.errors.items()]
    if o.hung:
        parts.append(f"**hung x{o.hung}**")
    return ", ".join(parts)


def _extra(o: Outcome) -> str:
    return "; ".join(f"{k}: {v}" for k, v in o.extra.items() if not isinstance(v, dict)) or "-"


def scenario_table(title: str, rows: Sequence[Row], notes: Sequence[str] = ()) -> h.Table:
    table = h.Table(
        title,
        ["variant", "client", "requests", "failed", "gap", "attempts / request (reported, network, server)",
         "attempts on dead domains (server, network)", "p50", "p99", "foreign exc.", "counts match",
         "scenario figures", "outcomes"],
    )
    for row in rows:
        o = row.outcome
        table.rows.append([
            row.variant,
            row.client,
            str(o.requests),
            str(o.failed),
            f"{o.gap} ({100 * o.gap_share:.2f} %)",
            f"{_num(o.attempts_reported)}, {_num(o.attempts_network)}, {_num(o.attempts_server)}",
            f"{o.dead_server}, {o.dead_network}",
            h.ms(o.p50),
            h.ms(o.p99),
            str(o.foreign),
            "yes" if o.counts_match else "**no**",
            _extra(o),
            _outcomes(o),
        ])
    table.notes.extend(notes)
    return table


@dataclass(frozen=True, slots=True)
class Target:
    """A target of the issues for our clients: which rows it reads, and the check."""

    scenario: str
    text: str
    measure: Callable[[Outcome], float | None]
    limit: float

    def judge(self, rows: Sequence[Row], client: str) -> tuple[str, bool]:
        """The worst figure over the scenario's rows of ``client``, and whether it is in bounds."""
        values = [self.measure(r.outcome) for r in rows if r.scenario == self.scenario and r.client == client]
        known = [v for v in values if v is not None]
        if not known:
            return "not run", False
        worst = max(known)
        return f"{worst:g}", worst <= self.limit


def _failback_max(o: Outcome) -> float | None:
    keys = [k for k in o.extra if k.endswith("max requests reaching the recovering primary per cooldown")]
    return max(float(o.extra[k]) for k in keys) if keys else None


def _get(key: str) -> Callable[[Outcome], float | None]:
    def read(o: Outcome) -> float | None:
        value: Any = o.extra.get(key)
        return None if value is None else float(value)

    return read


TARGETS = (
    Target("cold burst", "0 user-visible failures (every variant)", lambda o: float(o.failed), 0),
    Target("flapping", "availability gap <= 0.5 %", lambda o: 100 * o.gap_share, 0.5),
    Target("failback", "<= 1 request per cooldown reaches the recovering primary, per transport",
           _failback_max, 1),
    Target("total outage", "<= 1.1 attempts per request once the budget has drained",
           _get("attempts per request once drained"), 1.1),
    Target("trickle", "deadline exceeded by <= 100 ms", _get("max over the deadline (ms)"), 100),
    Target("every scenario", "no exception other than the client library's own escapes",
           lambda o: float(o.foreign), 0),
    Target("every scenario", "reported attempts = network attempts ~ what the servers saw",
           lambda o: 0.0 if o.counts_match else 1.0, 0),
)  # fmt: skip


def targets_table(rows: Sequence[Row]) -> h.Table:
    columns = [f"{head}: {client}" for client in TARGETED for head in ("worst", "met")]
    table = h.Table("Targets for our clients (issues #9, #11 and #12)", ["scenario", "target", *columns])
    for target in TARGETS:
        scoped = rows if target.scenario != "every scenario" else [
            Row("every scenario", r.variant, r.client, r.outcome) for r in rows
        ]
        cells = [target.scenario, target.text]
        for client in TARGETED:
            figure, met = target.judge(scoped, client)
            cells += [figure, "-" if figure == "not run" else "yes" if met else "**no**"]
        table.rows.append(cells)
    return table
