"""Fake resolvers for fake domains: a DNS-over-HTTPS server and an HTTPDNS endpoint.

    doh = DoHServer()
    server = fd.add("doh.test", doh)                  # any fake domain can serve it
    doh.answer("api.example.com", ["127.0.0.5", "::1"], ttl=60)
    doh.fail("other.example.com", "timeout")
    resolver = DoHResolver("https://doh.test/dns-query", bootstrap=server.address,
                           verify=fd.ssl_context())

Both are ordinary handlers (``handler(request) -> Response``), like ``TusServer``: every
fault of the simulator applies to the domain serving them (``fd.fail("doh.test",
faults.refused())`` takes the resolver down), and on top of that a test sets, per name,
the addresses and TTL to answer or a fault of the resolver's own (``NameFault``):

==============  ==========================================  ==========================================
``NameFault``   ``DoHServer``                                ``HTTPDNSServer``
==============  ==========================================  ==========================================
``nxdomain``    ``NXDOMAIN``                                 ``{"host": ..., "ips": [], "ttl": 0}``
``refused``     ``REFUSED``                                  HTTP 403
``servfail``    ``SERVFAIL``                                 HTTP 503
``timeout``     no answer until the name's rule changes      the same
                (or ``HOLD_LIMIT``)
``garbage``     200, ``application/dns-message``, bytes      200, ``application/json``, a body that
                that are no DNS message                      is not JSON
==============  ==========================================  ==========================================

A name with no rule is ``nxdomain``. ``raw(name, body)`` answers any bytes (the wrong
shapes of a test). Every question is recorded (``queries()``), so a test counts what
reached the server. The DoH server needs dnspython (``pytest-failover[resolve]``).
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias
from urllib.parse import parse_qs, urlsplit

from ..resolve._doh import import_dns
from ._faults import HOLD_LIMIT
from ._handlers import Response
from ._record import RecordedRequest

__all__ = ["DNSQuery", "DoHServer", "HTTPDNSServer", "NameFault"]

NameFault: TypeAlias = Literal["nxdomain", "refused", "servfail", "timeout", "garbage"]
_NAME_FAULTS = ("nxdomain", "refused", "servfail", "timeout", "garbage")
DNS_MESSAGE = "application/dns-message"
GARBAGE = b"\x13\x37 this is no DNS message \xff\xfe"


@dataclass(frozen=True, slots=True, kw_only=True)
class DNSQuery:
    """One question a fake resolver received: the name, the record type (``A``, ``AAAA``;
    ``ANY`` for HTTPDNS, which asks for both) and when (``time.monotonic()``)."""

    name: str
    rdtype: str
    time: float


@dataclass(frozen=True, slots=True)
class _Rule:
    addresses: tuple[str, ...] = ()
    ttl: int = 60
    delay: float = 0.0
    fault: NameFault | None = None
    raw: tuple[bytes, str] | None = None  # body, content type


class _Names:
    """The per-name rules and the questions received, shared by both fake resolvers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: dict[str, _Rule] = {}
        self._queries: list[DNSQuery] = []
        self._changed = threading.Event()  # set (and replaced) when a rule changes

    def answer(
        self, name: str, addresses: Sequence[str], *, ttl: int = 60, delay: float = 0.0
    ) -> None:
        """Answer ``name`` with ``addresses`` (not checked: a test may serve bad ones) and
        ``ttl``, after ``delay`` seconds."""
        if isinstance(addresses, str):
            raise TypeError(f"answer() takes a list of addresses, got the string {addresses!r}")
        self._set(name, _Rule(tuple(addresses), ttl, delay))

    def fail(self, name: str, fault: NameFault) -> None:
        """Give ``name`` a fault of the resolver's own (see the module docstring)."""
        if fault not in _NAME_FAULTS:
            raise ValueError(f"a name's fault is one of {_NAME_FAULTS}, got {fault!r}")
        self._set(name, _Rule(fault=fault))

    def raw(self, name: str, body: bytes | str, *, content_type: str | None = None) -> None:
        """Answer ``name`` with ``body`` as it is (status 200)."""
        data = body.encode() if isinstance(body, str) else bytes(body)
        self._set(name, _Rule(raw=(data, content_type or self._content_type)))

    def forget(self, name: str | None = None) -> None:
        """Drop ``name``'s rule (every rule without one); held answers are let go."""
        with self._lock:
            if name is None:
                self._rules.clear()
            else:
                self._rules.pop(_key(name), None)
            self._changed.set()
            self._changed = threading.Event()

    def queries(self, name: str | None = None) -> list[DNSQuery]:
        """The questions received (about ``name``), oldest first."""
        with self._lock:
            return [q for q in self._queries if name is None or q.name == _key(name)]

    _content_type = DNS_MESSAGE

    def _set(self, name: str, rule: _Rule) -> None:
        with self._lock:
            self._rules[_key(name)] = rule
            self._changed.set()
            self._changed = threading.Event()

    def _asked(self, name: str, rdtype: str) -> _Rule:
        """Record the question; the rule to answer it by, after its delay or hold."""
        with self._lock:
            self._queries.append(DNSQuery(name=name, rdtype=rdtype, time=time.monotonic()))
            rule = self._rules.get(name, _Rule(fault="nxdomain"))
            changed = self._changed
        if rule.fault == "timeout":
            changed.wait(HOLD_LIMIT)  # bounded; cut short by any rule change
        elif rule.delay:
            changed.wait(min(rule.delay, HOLD_LIMIT))
        return rule


def _key(name: str) -> str:
    return name.strip().rstrip(".").lower()


class DoHServer(_Names):
    """A DNS-over-HTTPS server (RFC 8484, GET and POST) answering per-name rules.

    A handler for a fake domain: ``fd.add("doh.test", DoHServer())``; it serves ``path``
    and answers ``404`` elsewhere.
    """

    def __init__(self, *, path: str = "/dns-query") -> None:
        super().__init__()
        self._dns = import_dns()
        self.path = path

    def __call__(self, request: RecordedRequest) -> Response:
        dns = self._dns
        target = urlsplit(request.path)
        if target.path != self.path:
            return Response(404, f"no DoH endpoint at {target.path}; it is {self.path}")
        if request.method == "GET":
            encoded = parse_qs(target.query).get("dns", [""])[0]
            try:
                wire = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            except (binascii.Error, ValueError):
                return Response(400, "the dns parameter is not base64url")
        elif request.method == "POST":
            if request.headers.get("content-type", "") != DNS_MESSAGE:
                return Response(415, f"a POST carries {DNS_MESSAGE}")
            wire = request.body
        else:
            return Response(405, "GET or POST", {"allow": "GET, POST"})
        try:
            query = dns.message.from_wire(wire)
            question = query.question[0]
        except Exception:  # whatever the bytes were, they were not a question
            return Response(400, "not a DNS query")
        name = question.name.to_text(omit_final_dot=True).lower()
        rdtype = dns.rdatatype.to_text(question.rdtype)
        rule = self._asked(name, rdtype)
        if rule.raw is not None:
            return Response(200, rule.raw[0], {"content-type": rule.raw[1]})
        reply = dns.message.make_response(query)
        match rule.fault:
            case "garbage":
                return Response(200, GARBAGE, {"content-type": DNS_MESSAGE})
            case "nxdomain" | "refused" | "servfail" | "timeout":
                code = "NXDOMAIN" if rule.fault == "timeout" else rule.fault.upper()
                reply.set_rcode(dns.rcode.from_text(code))
            case None:
                family = [a for a in rule.addresses if (":" in a) == (rdtype == "AAAA")]
                if family and rdtype in ("A", "AAAA"):
                    rrset = dns.rrset.from_text_list(question.name, rule.ttl, "IN", rdtype, family)
                    reply.answer.append(rrset)
        return Response(200, reply.to_wire(), {"content-type": DNS_MESSAGE})


class HTTPDNSServer(_Names):
    """An HTTPDNS endpoint: ``GET {path}?host=<name>`` answers
    ``{"host": name, "ips": [IPv4...], "ipsv6": [IPv6...], "ttl": ttl}`` (what
    ``pytest_failover.resolve.parse_json`` reads). A handler for a fake domain."""

    _content_type = "application/json"

    def __init__(self, *, path: str = "/d") -> None:
        super().__init__()
        self.path = path

    def __call__(self, request: RecordedRequest) -> Response:
        target = urlsplit(request.path)
        if target.path != self.path:
            return Response(404, f"no HTTPDNS endpoint at {target.path}; it is {self.path}")
        hosts = parse_qs(target.query).get("host", [])
        if request.method != "GET" or len(hosts) != 1:
            return Response(400, "GET ?host=<name>")
        name = _key(hosts[0])
        rule = self._asked(name, "ANY")
        if rule.raw is not None:
            return Response(200, rule.raw[0], {"content-type": rule.raw[1]})
        body: dict[str, Any]
        match rule.fault:
            case "refused":
                return Response(403, "refused")
            case "servfail":
                return Response(503, "server failure")
            case "garbage":
                return Response(200, b"<html>not json", {"content-type": "application/json"})
            case "nxdomain" | "timeout":
                body = {"host": name, "ips": [], "ttl": 0}
            case None:
                body = {
                    "host": name,
                    "ips": [a for a in rule.addresses if ":" not in a],
                    "ipsv6": [a for a in rule.addresses if ":" in a],
                    "ttl": rule.ttl,
                }
        return Response(200, json.dumps(body), {"content-type": "application/json"})
