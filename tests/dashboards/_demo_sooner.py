"""``failover-agent demo`` with its outage brought forward, for tests that wait for it::

    python _demo_sooner.py SECONDS demo --listen 127.0.0.1:0 ...

The demo's own code runs (its fake domains, its agent, its timeline task, its command line);
only two steps of its timeline move: the primary's DNS failure (8 s in) and the backup's
certificate expiring in 5 days (20 s in) both happen SECONDS in. A test that needs the demo's
outage in Prometheus then waits seconds for it, not half a minute.
"""

from __future__ import annotations

import sys

# first, as the console script does: its start-up (httpx's command line left out), then the group
from failover_agent import __main__ as entry
from failover_agent import demo

SOONER = ("dns_down", "cert_expiring")


def main(argv: list[str]) -> None:
    at = float(argv[0])
    # still in the timeline's order: both steps stay after the first (0 s) and before the next (35 s)
    demo.TIMELINE = tuple((at if action in SOONER else when, text, action) for when, text, action in demo.TIMELINE)
    entry.main(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
