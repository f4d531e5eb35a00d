"""``failover-agent`` as one location sees the world: its own servers behind the shared names.

Like geo-DNS, each location resolves the fake domains' names to a server of its own (a
``FakeDomains`` of the test, one per location), so a fault given to one location's server
is seen from that location only. The first argument, JSON, maps a host name to a loopback
port; every other name resolves as usual. The rest is the real command line:
``python located_agent.py '{"api.example.com": 8080}' run agent.toml`` is
``failover-agent run agent.toml`` in that location.
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

_PORTS: dict[str, int] = {}
_real_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and name.lower() in _PORTS:
        return _real_getaddrinfo("127.0.0.1", _PORTS[name.lower()], *args, **kwargs)
    return _real_getaddrinfo(host, port, *args, **kwargs)


if __name__ == "__main__":
    _PORTS.update(json.loads(sys.argv.pop(1)))
    socket.getaddrinfo = _getaddrinfo
    from failover_agent.cli import main

    main(prog_name="failover-agent")
