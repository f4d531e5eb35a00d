"""Run one Python block of the docs as a script, in its own process.

    python tests/docs/_bootstrap.py PAGE BLOCK_FILE

The block's file holds its source preceded by blank lines, and is compiled under the
page's name, so a traceback shows the page's own line numbers and text. The current
directory is the page's working directory (its ``file:`` blocks are there).

The example hosts of the docs (``HOSTS``) are fake domains from the outage simulator for
the whole run, and every other host is blocked, so an example never reaches the
internet. A block that starts its own ``FakeDomains`` (to show the whole set-up) still
runs inside these: its own registrations answer for the names it adds.
"""

from __future__ import annotations

import sys
from pathlib import Path

HOSTS = ("api.example.com", "api2.example.com", "api-eu.example.com")


def main(page: str, block_file: str) -> int:
    source = Path(block_file).read_text(encoding="utf-8")
    code = compile(source, page, "exec")
    sys.path[0] = str(Path.cwd())  # as ``python block.py`` would have it
    namespace = {"__name__": "__main__", "__file__": block_file}
    from pytest_failover.simulator import FakeDomains

    with FakeDomains(block_unknown_hosts=True) as fd:
        for host in HOSTS:
            fd.add(host)
        exec(code, namespace)
        if fd.blocked:
            print(f"the example tried to reach hosts outside the docs' fake domains: {fd.blocked}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
