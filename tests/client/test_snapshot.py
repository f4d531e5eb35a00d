"""``transport.state()``: what a snapshot says of each domain's breaker, read through the public
API only, with an injected clock and an in-process inner transport (no sockets, no sleeps)."""

from __future__ import annotations

import httpx

from pytest_failover import ControlDocument, DomainState, FailoverTransport, Policy, Pool

PRIMARY, BACKUP = "http://127.0.0.1:9", "http://127.0.0.1:10"
COOLDOWN = 10.0


class Clock:
    """Monotonic seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Primary:
    """The inner transport: the primary refuses while ``down``, the backup answers."""

    def __init__(self) -> None:
        self.down = True
        self.asked = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.port == 9:
            self.asked += 1
            if self.down:
                raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, content=b"{}")


def make() -> tuple[FailoverTransport, Clock, Primary]:
    clock, primary = Clock(), Primary()
    policy = Policy(breaker_threshold=1, breaker_cooldown=COOLDOWN, sticky=False)
    transport = FailoverTransport([Pool("api", [PRIMARY, BACKUP])], policy, httpx.MockTransport(primary), clock=clock)
    return transport, clock, primary


def state_of(transport: FailoverTransport) -> DomainState:
    return transport.state().pools["api"].domain(PRIMARY)


def test_probe_due_is_true_exactly_while_an_attempt_would_probe_the_breaker() -> None:
    """Closed and just opened: no probe due; rested: an early probe is due though no
    ordinary request is let through; cooled down: due, and the next request probes it;
    the probe succeeds: closed again, nothing due."""
    transport, clock, primary = make()
    with httpx.Client(transport=transport) as client:
        assert not state_of(transport).probe_due
        assert client.get(PRIMARY + "/x").status_code == 200  # refused, answered by the backup
        opened = state_of(transport)
        assert (opened.breaker, opened.probe_due, opened.can_request) == ("open", False, False)
        clock.now += COOLDOWN / 2  # rested, not cooled down
        assert (state_of(transport).probe_due, state_of(transport).can_request) == (True, False)
        clock.now += COOLDOWN
        assert (state_of(transport).probe_due, state_of(transport).can_request) == (True, True)
        primary.down, asked = False, primary.asked
        assert client.get(PRIMARY + "/x").status_code == 200
        assert primary.asked == asked + 1  # the due probe went to the primary
        closed = state_of(transport)
        assert (closed.breaker, closed.probe_due, closed.can_request) == ("closed", False, True)


def test_a_disabled_domain_has_no_probe_due() -> None:
    """A domain the control document disables gets no attempt, so no probe, even once its
    cooldown is over."""
    transport, clock, _ = make()
    with httpx.Client(transport=transport) as client:
        client.get(PRIMARY + "/x")
    clock.now += 2 * COOLDOWN
    assert state_of(transport).probe_due
    key = b"k" * 32
    signed = ControlDocument.sign(version=1, pools={"api": [PRIMARY]}, expires_in=60, hmac_key=key)
    transport.apply_control(ControlDocument.parse(signed, hmac_key=key))
    assert not state_of(transport).probe_due
    assert transport.state().as_dict()["pools"]["api"]["domains"][0]["probe_due"] is False  # type: ignore[index]  # JSON-able nesting, typed object
