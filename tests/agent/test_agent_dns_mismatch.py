"""The DNS comparison of ``[pools.resolver]``: a poisoned system DNS next to a DoH server that
answers correctly exports ``failover_dns_mismatch`` 1, a healthy one 0; bad values are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_support import Sample, config, eventually, fake_domains, pick, running, scrape
from failover_agent.config import ConfigError, parse_config

from pytest_failover import faults, semconv
from pytest_failover.simulator import DoHServer, FakeDomains

__all__ = ["fake_domains"]

API = "api.example.com"
MISMATCH = semconv.METRICS[semconv.FAILOVER_DNS_MISMATCH].prometheus


def _api(url: str = f"https://{API}") -> dict[str, str]:
    return {"failover_pool": "api", "server_address": url.removeprefix("https://"), "probe_location": "test-lab"}


async def _mismatch(fd: FakeDomains, tmp_path: Path, *, poisoned: bool) -> float:
    """The agent's ``failover_dns_mismatch`` of api.example.com, its system DNS poisoned or not,
    with a DoH server (doh.test, reached by its IP) that answers the real address."""
    doh = DoHServer()
    doh_domain = fd.add("doh.test", doh)
    api = fd.add(API)
    doh.answer(API, [api.address], ttl=60)
    if poisoned:
        fd.fail(API, faults.dns_poisoned())
    resolver = {"doh": "https://doh.test/dns-query", "bootstrap": [doh_domain.address], "timeout": 0.3}
    cfg = config(fd, tmp_path, [f"https://{API}"], resolver=resolver)
    async with running(cfg) as agent:

        async def exported() -> list[float]:
            samples: dict[Sample, float] = await scrape(agent)
            return pick(samples, MISMATCH, **_api())

        [value] = await eventually(exported)
        assert isinstance(value, float)
        status = agent.state.domains[("api", f"https://{API}")]
        assert status.dns is not None and status.dns.resolver == (api.address,)
        assert (status.dns.system == (api.address,)) is not poisoned
    return value


async def test_a_poisoned_system_dns_and_a_correct_doh_server_export_mismatch_1(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """The system's answer and DoH's share no address: the agent says 1."""
    assert await _mismatch(fake_domains, tmp_path, poisoned=True) == 1.0


async def test_a_healthy_system_dns_exports_mismatch_0(fake_domains: FakeDomains, tmp_path: Path) -> None:
    """Both resolvers answer the domain's address: the agent says 0."""
    assert await _mismatch(fake_domains, tmp_path, poisoned=False) == 0.0


def _pool(resolver: dict[str, Any]) -> dict[str, Any]:
    return {"pools": [{"name": "api", "domains": [f"https://{API}"], "resolver": resolver}]}


@pytest.mark.parametrize(
    ("resolver", "error"),
    [
        ({}, ("pools[0].resolver", "set either doh (a DNS-over-HTTPS URL such as "
              "'https://dns.example/dns-query') or httpdns (a URL template such as "
              "'https://203.0.113.1/d?host={host}'), not neither")),
        ({"doh": "https://a.test/q", "httpdns": "https://b.test/d?host={host}"},
         ("pools[0].resolver", "set either doh (a DNS-over-HTTPS URL such as "
          "'https://dns.example/dns-query') or httpdns (a URL template such as "
          "'https://203.0.113.1/d?host={host}'), not both")),
        ({"httpdns": "https://b.test/d"},
         ("pools[0].resolver", "httpdns: 'https://b.test/d' has no '{host}' for the name to resolve, "
          "such as 'https://203.0.113.1/d?host={host}'")),
        ({"doh": "https://a.test/q", "bootstrap": ["doh.test"]},
         ("pools[0].resolver.bootstrap", "'doh.test' is not an IP address: bootstrap is the resolver's "
          "own address, such as '192.0.2.53', so reaching it needs no DNS")),
        ({"doh": "ftp://a.test/q"},
         ("pools[0].resolver.doh", "unsupported scheme 'ftp' (expected http or https, "
          "e.g. 'https://dns.example/dns-query')")),
        ({"doh": "https://a.test/q", "bootstrp": ["127.0.0.1"]},
         ("pools[0].resolver.bootstrp", "unknown key: did you mean 'bootstrap'?")),
    ],
)
def test_bad_resolver_values_get_a_clear_error(resolver: dict[str, Any], error: tuple[str, str]) -> None:
    """Each bad ``[pools.resolver]`` value is refused with the message that says what to write."""
    with pytest.raises(ConfigError) as caught:
        parse_config(_pool(resolver))
    assert caught.value.errors == [error]


def test_a_good_resolver_builds_the_librarys() -> None:
    """``doh`` with a bootstrap IP, or an ``httpdns`` template, builds that resolver."""
    doh = parse_config(_pool({"doh": "https://a.test/q", "bootstrap": ["127.0.0.1"]})).pools[0].resolver
    httpdns = parse_config(_pool({"httpdns": "https://127.0.0.1/d?host={host}"})).pools[0].resolver
    assert doh is not None and httpdns is not None
    built = [doh.to_resolver(), httpdns.to_resolver()]
    assert [type(r).__name__ for r in built] == ["DoHResolver", "HTTPDNSResolver"]
    for resolver in built:
        resolver.close()
