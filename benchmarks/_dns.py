"""Real resolution failures for names under ``.invalid`` (RFC 6761), without sending a
DNS query anywhere: ``socket.getaddrinfo`` raises ``gaierror(EAI_NONAME)`` for them, as
a resolver answering NXDOMAIN makes it do. Every other name passes through untouched."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def nxdomain_for_invalid() -> Iterator[None]:
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name.rstrip(".").lower().endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        socket.getaddrinfo = real
