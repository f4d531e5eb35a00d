"""Where the agent's log records go: above the live table on a terminal, plain lines otherwise."""

from __future__ import annotations

import logging
import sys

from .console import LiveReporter, Reporter

__all__ = ["QUIET_LOGGERS", "setup_logging"]

QUIET_LOGGERS = ("apscheduler", "httpx", "httpcore")
"""Libraries whose INFO lines would drown the agent's own: WARNING and above only."""


def setup_logging(level: str, reporter: Reporter) -> None:
    """Replace the root logger's handlers with one that suits ``reporter``, at ``level``."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler: logging.Handler
    if isinstance(reporter, LiveReporter):
        from rich.logging import RichHandler

        handler = RichHandler(console=reporter.console, show_path=False, markup=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s"))
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The exporters log every failed batch; failover_agent.telemetry says it once per outage.
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
