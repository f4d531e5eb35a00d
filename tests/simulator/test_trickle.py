"""The ``trickle`` fault: headers at once, then the body a byte per interval, over real sockets."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from pytest_failover import faults
from pytest_failover.simulator import FakeDomains

URL = "http://api.example.com/v1/rooms"


@pytest.fixture
def api(fd: FakeDomains) -> FakeDomains:
    """One healthy fake domain."""
    fd.add("api.example.com")
    return fd


def test_trickle_is_built_by_name_and_validated() -> None:
    """``by_name`` and the function agree; text becomes bytes; a negative interval is rejected."""
    assert faults.by_name("trickle", 0.1, "ab") == faults.trickle(0.1, b"ab") == faults.Trickle(0.1, b"ab")
    assert faults.trickle().name == "trickle"
    with pytest.raises(ValueError, match="must be"):
        faults.trickle(-1)


def test_headers_come_at_once_and_the_body_a_byte_per_interval(api: FakeDomains) -> None:
    """A per-read timeout longer than the interval never fires: the whole body arrives, late."""
    api.fail("api.example.com", faults.trickle(0.05, b"12345"))
    with httpx.Client(timeout=1.0) as client:
        started = time.perf_counter()
        with client.stream("GET", URL) as response:
            head_at = time.perf_counter() - started
            assert response.status_code == 200
            assert response.headers["content-length"] == "5"
            chunks = list(response.iter_raw())
        total = time.perf_counter() - started
    assert b"".join(chunks) == b"12345"
    assert head_at < 0.2  # the head does not wait for the body
    assert total - head_at >= 0.24 and total < 3.0  # five bytes, 0.05 s apart, the first after one wait
    assert [str(r.fault) for r in api.requests("api.example.com")] == ["trickle"]


def test_without_a_body_the_handlers_answer_trickles(api: FakeDomains) -> None:
    """``trickle(interval)`` sends the domain's own answer, slowly."""
    api.fail("api.example.com", faults.trickle(0.001))
    with httpx.Client(timeout=2.0) as client:
        response = client.get(URL)
    assert response.json()["domain"] == "api.example.com"


def test_a_fault_change_cuts_a_trickling_answer(api: FakeDomains) -> None:
    """Healing the domain hangs up on a body still trickling: the client sees the end of stream."""
    api.fail("api.example.com", faults.trickle(0.2, b"x" * 50))
    sock = socket.create_connection(("api.example.com", 80), timeout=5)
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(4096)
        started = time.perf_counter()
        api.heal("api.example.com")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            data = sock.recv(4096)
            if not data:
                break
            received += data
        else:
            pytest.fail("the trickling answer was not cut")
        assert time.perf_counter() - started < 1.0
        assert len(received.split(b"\r\n\r\n", 1)[1]) < 50
    finally:
        sock.close()
