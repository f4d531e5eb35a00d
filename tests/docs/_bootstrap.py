"""Run one Python block of the docs as a script, in its own process, as a reader runs it.

    python tests/docs/_bootstrap.py PAGE BLOCK_FILE

The block's file holds its source preceded by blank lines, and is compiled under the
page's name, so a traceback shows the page's own line numbers and text. The current
directory is the page's working directory (its ``file:`` blocks are there).

Nothing is set up around the block: no fake domains, no patched resolver. A block that
needs fake domains starts its own ``FakeDomains``, as the page shows it. The one addition is
a fence: an audit hook refuses every name lookup and connection that would leave the
machine (any host but loopback), so an example that forgot its set-up fails here, naming
the host, instead of reaching the internet.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

#: Hosts the fence let no lookup or connection reach, in the order they were tried.
BLOCKED: list[str] = []


def _is_loopback(host: object) -> bool:
    if host is None or host in ("", b"", "localhost", b"localhost"):
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    try:
        return ipaddress.ip_address(str(host).partition("%")[0]).is_loopback
    except ValueError:
        return False


def _fence(event: str, args: tuple[object, ...]) -> None:
    """Refuse lookups of, and connections to, hosts that are not loopback."""
    if event == "socket.getaddrinfo":
        host = args[0]
    elif event == "socket.connect" and isinstance(args[1], tuple):
        host = args[1][0]
    else:
        return
    if not _is_loopback(host):
        BLOCKED.append(str(host))
        raise socket.gaierror(socket.EAI_NONAME, f"the docs test lets no example reach {host!r}")


def main(page: str, block_file: str) -> int:
    source = Path(block_file).read_text(encoding="utf-8")
    code = compile(source, page, "exec")
    sys.path[0] = str(Path.cwd())  # as ``python block.py`` would have it
    namespace = {"__name__": "__main__", "__file__": block_file}
    sys.addaudithook(_fence)
    try:
        exec(code, namespace)
    finally:
        if BLOCKED:
            print(f"the example tried to reach hosts that are not loopback: {sorted(set(BLOCKED))}")
    return 1 if BLOCKED else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
