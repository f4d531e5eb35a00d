"""Every listener of the fake domains queues a burst of connections, as a production
server's does: the kernel's own view of each listening socket (``ss``)."""

from __future__ import annotations

import subprocess

from pytest_failover.simulator import FakeDomains

BURST = 1000  # the cold-burst scenario's concurrent requests


def _accept_queue(port: int) -> int:
    """The accept queue's size of the loopback listener on ``port``: ``ss`` shows it as the
    Send-Q of a listening socket."""
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True, timeout=10
    ).stdout.split()
    assert out, f"no listener on port {port}"
    return int(out[2])  # State Recv-Q Send-Q Local Peer


def test_a_burst_of_connections_waits_in_the_accept_queue(fd: FakeDomains) -> None:
    """A thousand clients that connect at once are queued, not dropped: at 128, one cold
    burst overflowed the queue 3,145 times and sent 276 SYN cookies (connects retried a
    second later, requests on connections not accepted yet timed out)."""
    domain = fd.add("burst.example.com")
    for port in (domain.http_port, domain.https_port):
        assert _accept_queue(port) >= BURST
