"""Run by ``test_without_httpx.py`` in a process where ``import httpx`` fails (``None`` in
``sys.modules``, set before this file runs): what a user with only httpx2 installed (the
OpenAI 3.x and Anthropic 2.x SDKs bring no other) can do. Prints one line per check; the
test compares them."""

from __future__ import annotations

import sys

import httpx2

from pytest_failover import ControlDocument, ControlPoller, Policy, Pool, faults
from pytest_failover.control import ControlKey
from pytest_failover.httpx2 import FailoverTransport
from pytest_failover.resolve import DoHResolver
from pytest_failover.simulator import DoHServer, FakeDomains, Response


def main() -> None:
    with FakeDomains() as fd:
        doh = DoHServer()
        doh_domain = fd.add("doh.test", doh)
        api = fd.add("api.test")
        api2 = fd.add("api2.test")
        fd.fail("api.test", faults.dns_poisoned())  # only the DoH resolver knows its address
        doh.answer("api.test", list(api.addresses), ttl=60)
        doh.answer("api2.test", list(api2.addresses), ttl=60)
        resolver = DoHResolver("https://doh.test/dns-query", bootstrap=doh_domain.address, verify=fd.ssl_context())
        pool = Pool("api", ["https://api.test", "https://api2.test"])
        transport = FailoverTransport(pool, Policy(resolver=resolver))
        with httpx2.Client(transport=transport) as client:
            print("resolved by DoH:", client.get("https://api.test/v1").json()["domain"])
            fd.fail("api.test", faults.refused())
            print("failed over to:", client.get("https://api.test/v1").json()["domain"])

        key = ControlKey.from_secret(b"k" * 32)
        signed = ControlDocument.sign(version=3, pools={"api": ["https://api2.test"]}, expires_in=60, key=key)
        fd.add("control.test", lambda request: Response(body=signed, headers={"Content-Type": "application/jose"}))
        poller = ControlPoller("https://control.test/control.json", transport, key=key, verify=fd.ssl_context())
        print("control polled:", poller.poll_once(), transport.state().pools["api"].domain("https://api2.test").enabled)
        resolver.close()
        transport.close()
    try:
        from pytest_failover import FailoverTransport as HttpxTransport  # noqa: F401  # the httpx one: must say what to install
    except ImportError as exc:
        print("httpx transport:", exc)
    print("httpx imported:", isinstance(sys.modules.get("httpx"), type(sys)))


if __name__ == "__main__":
    main()
