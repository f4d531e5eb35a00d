"""What each fault does: the one place that maps a fault to a behaviour.

Rules and theory of operation
-----------------------------
A client's attempt to reach a fake domain passes through up to four stages::

    resolve  ->  connect  ->  handshake (https only)  ->  respond (once per request)

Every primitive fault strikes at exactly one stage (``STAGE_OF``). At each stage
the simulator asks the domain's ``FaultState.strike(stage)`` which fault acts
*now*; ``None`` means "nothing here, carry on". The ``on_*`` functions below then
turn that fault into a plain instruction the I/O code carries out without any
further thinking: an error to raise, a port to connect to, a certificate to
present, an answer to write.

Composite faults keep their bookkeeping in ``FaultState`` (the fault values stay
frozen): ``flapping`` counts attempts where its failing fault strikes and hands
over to ``then`` after ``fail`` of them; ``rate`` draws from a seeded
``random.Random`` where its fault strikes. A new ``FaultState`` (a new fault set
on the domain) starts counting from zero.

Keep-alive connections
----------------------
A pooled connection has already passed resolve, connect and handshake, so only
faults that act at ``respond`` reach it. ``FaultState.needs_fresh_connections``
says whether some fault that can still strike acts earlier; while it does, the
domain's open connections are dropped when the fault is set and every answer
closes its connection, so each attempt goes through every stage again. Faults
acting only at ``respond`` leave pooled connections open: the server applies
them to every request, pooled or not.
"""

from __future__ import annotations

import enum
import random
import socket
from dataclasses import dataclass
from typing import Literal

from ..faults import (
    AddressDown,
    ConnectTimeout,
    DnsNxdomain,
    DnsPoisoned,
    DnsTimeout,
    Fault,
    Flapping,
    Healthy,
    KeepAliveClose,
    Latency,
    Rate,
    ReadTimeout,
    Refused,
    Reset,
    Slow,
    Status,
    TlsExpired,
    TlsUntrusted,
    TlsWrongHost,
    Trickle,
)
from ._record import Stage

__all__ = [
    "STAGE_OF",
    "Answer",
    "Certificate",
    "FaultState",
    "LookupFailure",
    "Route",
    "on_connect",
    "on_handshake",
    "on_resolve",
    "on_respond",
    "poisoned",
    "reaches_before_respond",
    "stage_of",
]

STAGE_OF: dict[type[Fault], Stage] = {
    DnsNxdomain: "resolve",
    DnsTimeout: "resolve",
    DnsPoisoned: "resolve",
    Refused: "connect",
    AddressDown: "connect",
    ConnectTimeout: "connect",
    TlsExpired: "handshake",
    TlsWrongHost: "handshake",
    TlsUntrusted: "handshake",
    ReadTimeout: "respond",
    Slow: "respond",
    Reset: "respond",
    KeepAliveClose: "respond",
    Status: "respond",
    Latency: "respond",
    Trickle: "respond",
    Healthy: "respond",
}


def stage_of(fault: Fault) -> Stage:
    """The stage where ``fault`` strikes (for composites: where their failing fault does)."""
    if isinstance(fault, Flapping | Rate):
        return stage_of(fault.fault)
    try:
        return STAGE_OF[type(fault)]
    except KeyError:
        raise TypeError(f"{fault!r} is not a fault the simulator knows") from None


def reaches_before_respond(fault: Fault) -> bool:
    """Whether any fault inside ``fault`` acts at resolve, connect or handshake."""
    match fault:
        case Flapping(then=then, fault=failing):
            return reaches_before_respond(failing) or reaches_before_respond(then)
        case Rate(fault=failing):
            return reaches_before_respond(failing)
        case _:
            return stage_of(fault) != "respond"


_UNSEEDED = random.Random()


class FaultState:
    """The fault set on one domain plus the counters and random sources of its composites.

    Not thread-safe by itself: the owner calls ``strike`` under its lock.
    """

    def __init__(self, fault: Fault) -> None:
        stage_of(fault)  # reject foreign objects now, not on the first request
        self.fault = fault
        self._counts: dict[int, int] = {}
        self._randoms: dict[int, random.Random] = {}

    def strike(self, stage: Stage) -> Fault | None:
        """The primitive fault that acts at ``stage`` for this attempt, if any."""
        return self._pick(self.fault, stage)

    def needs_fresh_connections(self) -> bool:
        """Whether a fault that can still strike acts before ``respond`` (see the module doc).

        A ``flapping`` whose failures are used up counts only its ``then``.
        """
        return self._reaches_early(self.fault)

    def _reaches_early(self, fault: Fault) -> bool:
        match fault:
            case Flapping(fail=fail, then=then, fault=failing):
                if self._counts.get(id(fault), 0) >= fail:
                    return self._reaches_early(then)
                return self._reaches_early(failing) or self._reaches_early(then)
            case _:
                return reaches_before_respond(fault)

    def rng(self) -> random.Random:
        """The domain's random source for jitter (seeded like the top-level ``rate``, if any).

        Without a seed to follow, one process-wide source serves: seeding a new one from
        the OS on every fault change would cost more than the request it jitters.
        """
        if isinstance(self.fault, Rate) and self.fault.seed is not None:
            return self._random_for(self.fault)
        return _UNSEEDED

    def _random_for(self, fault: Fault) -> random.Random:
        key = id(fault)
        if key not in self._randoms:
            seed = fault.seed if isinstance(fault, Rate) else None
            self._randoms[key] = random.Random(seed)
        return self._randoms[key]

    def _pick(self, fault: Fault, stage: Stage) -> Fault | None:
        match fault:
            case Flapping(fail=fail, then=then, fault=failing):
                used = self._counts.get(id(fault), 0)
                if used >= fail:
                    return self._pick(then, stage)
                if stage == stage_of(failing):
                    self._counts[id(fault)] = used + 1
                return self._pick(failing, stage)
            case Rate(p=p, fault=failing):
                if stage != stage_of(failing):
                    return None
                return self._pick(failing, stage) if self._random_for(fault).random() < p else None
            case _:
                return fault if STAGE_OF[type(fault)] == stage else None


# -- resolve ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LookupFailure:
    """``socket.getaddrinfo`` waits ``after`` seconds, then raises ``gaierror(code, message)``."""

    code: int
    message: str
    after: float = 0.0

    def error(self) -> socket.gaierror:
        return socket.gaierror(self.code, self.message)


def on_resolve(fault: Fault | None) -> LookupFailure | None:
    """How a lookup of the domain's name ends (``None``: it resolves)."""
    match fault:
        case DnsNxdomain():
            return LookupFailure(socket.EAI_NONAME, "Name or service not known")
        case DnsTimeout(seconds=seconds):
            return LookupFailure(socket.EAI_AGAIN, "Temporary failure in name resolution", seconds)
        case _:
            return None


# -- connect ------------------------------------------------------------------------------------


class Route(enum.Enum):
    """Where a connect to the domain's address really goes."""

    LISTENER = "the domain's server"
    CLOSED_PORT = "a bound port nobody listens on: the kernel answers RST"
    BLACKHOLE = "a listener whose accept queue is full: the SYN is dropped"
    HANG_UP = "a listener that resets each connection it accepts: a TLS handshake meets a reset"


def poisoned(fault: Fault | None) -> DnsPoisoned | None:
    """The poisoning a lookup of the domain's name meets, if any (it then answers the wrong address)."""
    return fault if isinstance(fault, DnsPoisoned) else None


def on_connect(fault: Fault | None, address: str = "") -> Route:
    """Where a connect to the domain's ``address`` goes."""
    match fault:
        case Refused():
            return Route.CLOSED_PORT
        case AddressDown(address=down, stage=stage):
            if down != address:
                return Route.LISTENER
            return Route.HANG_UP if stage == "handshake" else Route.CLOSED_PORT
        case ConnectTimeout():
            return Route.BLACKHOLE
        case _:
            return Route.LISTENER


# -- TLS handshake ------------------------------------------------------------------------------


class Certificate(enum.Enum):
    """Which certificate the https listener presents."""

    GOOD = "the domain's certificate from the trusted test CA"
    EXPIRED = "the domain's name, the trusted CA, validity in the past"
    WRONG_HOST = "the trusted CA, another name"
    UNTRUSTED = "the domain's name, a CA nobody trusts"


def on_handshake(fault: Fault | None) -> Certificate:
    match fault:
        case TlsExpired():
            return Certificate.EXPIRED
        case TlsWrongHost():
            return Certificate.WRONG_HOST
        case TlsUntrusted():
            return Certificate.UNTRUSTED
        case _:
            return Certificate.GOOD


# -- respond ------------------------------------------------------------------------------------

#: How long a ``read_timeout`` holds a request before giving up on the client (bounded wait).
HOLD_LIMIT = 300.0


@dataclass(frozen=True, slots=True)
class Answer:
    """How the server answers one request.

    Wait ``delay`` seconds (or, with ``hold``, until the client or the simulator
    hangs up), then write ``status`` (or the handler's answer when ``None``);
    with ``reset``, cut the connection with a TCP RST halfway through the body (halfway
    through the head of an answer without a body);
    with ``trickle``, send the head at once and the body a byte every ``trickle`` s;
    with ``unanswered`` (``"close"`` or ``"reset"``), on a kept-alive connection, close
    the connection (with a TCP RST for ``"reset"``) and write nothing: a request on a new
    connection is answered as if no fault held.
    """

    delay: float = 0.0
    hold: bool = False
    status: Status | None = None
    reset: bool = False
    trickle: float | None = None
    unanswered: Literal["close", "reset"] | None = None


def on_respond(fault: Fault | None, rng: random.Random) -> Answer:
    match fault:
        case ReadTimeout():
            return Answer(hold=True)
        case Slow(seconds=seconds):
            return Answer(delay=seconds)
        case Latency(seconds=seconds, jitter=jitter):
            return Answer(delay=max(0.0, seconds + rng.uniform(-jitter, jitter)))
        case Reset():
            return Answer(reset=True)
        case KeepAliveClose(reset=reset):
            return Answer(unanswered="reset" if reset else "close")
        case Status():
            return Answer(status=fault)
        case Trickle(interval=interval, body=body):
            return Answer(trickle=interval, status=None if body is None else Status(200, body))
        case _:
            return Answer()
