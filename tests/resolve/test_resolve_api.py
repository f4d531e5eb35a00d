"""The resolve module's face: the intended names, and dnspython only when a DoH resolver is made."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from pytest_failover import resolve, semconv
from pytest_failover.resolve import (
    AllResolversFailed,
    Answer,
    BadAnswer,
    ForbiddenAddress,
    NoAddresses,
    ResolveError,
    ResolverUnavailable,
    ResolveTimeout,
    interleave,
)


def test_exported_names_are_exactly_the_intended_ones() -> None:
    """The package exports the resolvers, the answer, the errors and the parsers, nothing else."""
    assert sorted(resolve.__all__) == [
        "AddressFilter", "AllResolversFailed", "Answer", "BadAnswer", "CachingResolver",
        "ChainResolver", "DoHResolver", "ForbiddenAddress", "HTTPDNSResolver", "NoAddresses",
        "Parse", "ResolveError", "ResolveTimeout", "Resolver", "ResolverUnavailable",
        "SystemResolver", "interleave", "parse_dns_json", "parse_json", "parse_text",
        "public_or_loopback",
    ]  # fmt: skip


def test_the_error_tree_is_as_documented() -> None:
    """Every error is a ResolveError; a forbidden address is a bad answer."""
    for error in (ResolveTimeout, ResolverUnavailable, NoAddresses, BadAnswer, AllResolversFailed):
        assert issubclass(error, ResolveError)
    assert issubclass(ForbiddenAddress, BadAnswer)


@pytest.mark.parametrize(
    "statement",
    [
        "import pytest_failover, pytest_failover.resolve, pytest_failover.simulator",
        "from pytest_failover.resolve import SystemResolver, HTTPDNSResolver, CachingResolver; "
        "from pytest_failover import FailoverTransport",
    ],
)
def test_importing_does_not_import_dnspython(statement: str) -> None:
    """dnspython (the ``resolve`` extra) is imported only when a DoH resolver or server is made."""
    code = f"import sys; {statement}; print(sorted(m for m in sys.modules if m == 'dns' or m.startswith('dns.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("given", "ordered"),
    [
        (["::1", "::2", "127.0.0.1", "127.0.0.2"], ("::1", "127.0.0.1", "::2", "127.0.0.2")),
        (["127.0.0.1", "127.0.0.2", "127.0.0.3", "::1"], ("127.0.0.1", "::1", "127.0.0.2", "127.0.0.3")),
        (["127.0.0.1", "127.0.0.1", "::1", "::1"], ("127.0.0.1", "::1")),
    ],
)
def test_families_are_interleaved_first_family_first(given: list[str], ordered: tuple[str, ...]) -> None:
    """RFC 8305: the first address's family leads, then they alternate; duplicates go."""
    assert interleave(given) == ordered


@pytest.mark.parametrize(
    ("field", "value"),
    [("addresses", ()), ("addresses", ("localhost",)), ("ttl", -1.0), ("ttl", float("nan")), ("source", "dns")],
)
def test_an_answer_checks_itself(field: str, value: object) -> None:
    """An Answer that makes no sense cannot be built."""
    fields: dict[str, object] = {
        "host": "a.test", "addresses": ("127.0.0.1",), "ttl": 1.0, "source": semconv.RESOLVE_SOURCE_SYSTEM
    }
    fields[field] = value
    with pytest.raises(ValueError, match=field.rstrip("es") if field == "addresses" else field):
        Answer(**fields)  # type: ignore[arg-type]  # deliberately wrong values


@pytest.mark.parametrize("side", ["sync", "async"])
@pytest.mark.parametrize("kind", ["doh", "httpdns", "chain", "caching"])
def test_a_failed_lookup_leaves_nothing_to_the_cyclic_collector(kind: str, side: str) -> None:
    """A resolver whose endpoint refuses raises its error with no frame of its own holding
    it (nor the errors it came from): the errors, the endpoint's and the chain's, are freed
    by reference counting alone. Each kept in a local of a frame its traceback holds was a
    cycle: about eight objects for the collector at every failed lookup. A cache's leader
    sets its error on its flight, and none of its frames holds the flight; a look-up that
    finds the error cached raises a twin no frame holds either."""
    from client.garbage import left_for_the_collector  # tests/client: a package on the rootdir path
    from client.servers import closed_port

    from pytest_failover.resolve import (
        CachingResolver,
        ChainResolver,
        DoHResolver,
        HTTPDNSResolver,
        ResolveError,
    )

    refusing = f"http://127.0.0.1:{closed_port()}"
    doh = DoHResolver(refusing + "/dns-query", timeout=1.0)
    httpdns = HTTPDNSResolver(refusing + "/d?host={host}", timeout=1.0)
    resolvers: dict[str, DoHResolver | HTTPDNSResolver | ChainResolver | CachingResolver] = {
        "doh": doh, "httpdns": httpdns, "chain": ChainResolver([doh, httpdns]), "caching": CachingResolver(doh),
    }
    resolver = resolvers[kind]

    def run_sync() -> None:
        for _ in range(3):
            if isinstance(resolver, CachingResolver):
                resolver.forget()  # a lookup of its own, then the error it keeps
            for _ in range(2):
                with pytest.raises(ResolveError):
                    resolver.resolve("api.example.com")

    async def run_async() -> None:
        for _ in range(3):
            if isinstance(resolver, CachingResolver):
                resolver.forget()
            for _ in range(2):
                with pytest.raises(ResolveError):
                    await resolver.aresolve("api.example.com")
        await resolver.aclose()

    run = run_sync if side == "sync" else lambda: asyncio.run(run_async())
    assert left_for_the_collector(run, (type(resolver), BaseException)) == []
    resolver.close()
