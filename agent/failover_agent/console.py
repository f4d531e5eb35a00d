"""What the operator sees: a live rich table on a terminal, plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from pytest_failover.semconv import BREAKER_CLOSED, BREAKER_HALF_OPEN, BREAKER_OPEN

from .state import AgentState

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["LiveReporter", "LogReporter", "Reporter", "make_reporter"]

log = logging.getLogger("failover_agent")


class Reporter:
    """Receives notable events and, periodically, the whole state."""

    def event(self, text: str, *, level: int = logging.INFO) -> None:
        log.log(level, "%s", text)

    def refresh(self, state: AgentState) -> None:
        """Called after every check; a plain reporter has nothing to redraw."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class LogReporter(Reporter):
    """Plain, timestamped lines (for logs, pipes and CI)."""


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


class LiveReporter(Reporter):
    """A rich table updated in place, with events printed above it."""

    def __init__(self, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = Console(file=stream or sys.stdout)
        self._live = Live(console=self._console, auto_refresh=False, transient=False)
        self._last = 0.0

    @property
    def console(self) -> Console:
        """The rich ``Console`` the table and the events are printed on (log records too)."""
        return self._console

    def start(self) -> None:
        self._live.start()

    def stop(self) -> None:
        self._live.stop()

    def event(self, text: str, *, level: int = logging.INFO) -> None:
        style = {logging.WARNING: "yellow", logging.ERROR: "bold red"}.get(level, "")
        stamp = time.strftime("%H:%M:%S")
        self._console.print(f"[dim]{stamp}[/dim] {text}", style=style, markup=True, highlight=False)

    def refresh(self, state: AgentState) -> None:
        now = time.monotonic()
        if now - self._last < 0.2:
            return
        self._last = now
        self._live.update(self._table(state), refresh=True)

    def _table(self, state: AgentState) -> Any:
        from rich.table import Table

        table = Table(title=f"failover-agent @ {state.location}", expand=False)
        for col in ("pool", "target", "state", "last", "latency", "breaker", "ready"):
            table.add_column(col)
        for name, pool in list(state.pools.items()):
            last = pool.last
            if last is None:
                pstate = "[dim]pending[/dim]"
            elif last.success:
                pstate = "[green]available[/green]"
            else:
                pstate = "[bold red]UNAVAILABLE[/bold red]"
            detail = "-" if last is None else (
                f"via {(last.served_by or '?').split('://', 1)[-1]} ({last.attempts} att.)"
                if last.success else f"{last.error_type}")
            table.add_row(name, "[bold]pool[/bold]", pstate, detail, _ms(last.duration if last else None), "", "")
            for (pname, url), d in list(state.domains.items()):
                if pname != name:
                    continue
                r = d.last
                if r is None:
                    dstate = "[dim]pending[/dim]"
                elif r.success:
                    dstate = "[green]up[/green]"
                else:
                    dstate = "[red]down[/red]"
                what = "-" if r is None else (str(r.status) if r.success else f"{r.error_type}")
                breaker = pool.breakers.get(url, BREAKER_CLOSED)
                bstyle = {BREAKER_OPEN: "red", BREAKER_HALF_OPEN: "yellow"}.get(breaker, "green")
                if d.readiness is None:
                    ready = "" if d.is_primary else "[dim]pending[/dim]"
                elif d.readiness.ready:
                    ready = "[green]ready[/green]"
                else:
                    bad = ",".join(k for k, (ok, _) in d.readiness.checks.items() if not ok)
                    ready = f"[red]not ready: {bad}[/red]"
                disabled = state.control is not None and url in state.control.disabled.get(name, ())
                label = url.split("://", 1)[-1] + (" [red]disabled[/red]" if disabled else "")
                table.add_row("", label, dstate, what, _ms(r.duration if r else None),
                              f"[{bstyle}]{breaker}[/{bstyle}]", ready)
        return table


def make_reporter(force_plain: bool = False) -> Reporter:
    """A live view on a terminal, plain lines otherwise."""
    if not force_plain and sys.stdout.isatty():
        try:
            return LiveReporter()
        except ImportError:  # pragma: no cover - rich is an agent dependency
            pass
    return LogReporter()
