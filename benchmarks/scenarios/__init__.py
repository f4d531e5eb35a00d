"""Availability scenarios (issue #9, item 1): the real transports, real loopback sockets,
scripted fault timelines, many concurrent clients, four clients side by side.

Run ``python -m benchmarks.scenarios`` (full size, a few minutes) or
``python -m benchmarks scenarios`` (the same, inside the benchmark suite); the
Markdown goes to stdout, the figures to ``benchmarks/results/scenarios.json``.
``--small`` runs the CI sizes, ``--only flapping`` one scenario, ``--client ours`` one client.

- ``_timeline``: per-domain states over time, applied to the simulator, with a record of
  when each change really took effect;
- ``_clients``: our transport with ``Policy()``, the same policy through the requests
  adapter (threads) and the aiohttp middleware (tasks), the seed schedule
  ``Policy.agora(retry_budget=None, breaker_threshold=10**9)``, and ``httpx-retries``;
- ``_sides``: what a client offers the driver (a GET per side) and the attempt counts;
  ``_httpx`` and ``_frontends`` build the sides on each library;
- ``_load``: async tasks and threads, each side sharing one client, bounded;
- ``_metrics``: the availability gap, attempts (reported, network, server), latency;
- ``_scenarios``: cold burst, flapping, failback, rolling outage, trickle, total outage;
- ``_report``: the tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks import _harness as h
    from benchmarks._options import Options

__all__ = ["run"]


def run(opts: Options) -> h.Report:
    """The suite's entry point (``python -m benchmarks scenarios``): every scenario, full size."""
    from ._main import run_all

    return run_all(opts)
