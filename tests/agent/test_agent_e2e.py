"""End to end: the agent probing fake domains of the outage simulator, scraped over HTTP."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import httpx
from agent_support import (
    HMAC_KEY,
    Sample,
    config,
    cors_handler,
    eventually,
    fake_domains,
    pick,
    running,
    scrape,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pytest_failover import ControlDocument, faults
from pytest_failover.simulator import FakeDomains

__all__ = ["fake_domains"]

PRIMARY = "https://api.example.com"
BACKUP = "https://api2.example.com"
REGIONAL = "https://api-eu.example.com"
THIRD = "https://api3.example.com"


def origin(url: str) -> dict[str, str]:
    """The labels that name a domain in the agent's own series (an https URL without a port)."""
    return {"url_scheme": "https", "server_address": url.removeprefix("https://"), "server_port": "443"}


async def test_dns_fault_shows_primary_down_pool_available_and_breaker_open(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """After a DNS fault on the primary: probe down, pool still up via the backup, breaker
    open in spans and metrics, and the signed control document disables the primary."""
    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    fd.add("api2.example.com", cors_handler())
    spans = InMemorySpanExporter()
    cfg = config(fd, tmp_path, [PRIMARY, BACKUP], policy={"sticky": False})
    async with running(cfg, span_exporters=[spans]) as agent:
        await eventually(lambda: (p := agent.state.pools["api"].last) is not None and p.served_by == PRIMARY)
        fd.fail("api.example.com", faults.dns_nxdomain())

        async def degraded() -> dict[Sample, float] | None:
            s = await scrape(agent)
            ok = (
                pick(s, "failover_probe_success", **origin(PRIMARY)) == [0.0]
                and pick(s, "failover_probe_success", **origin(BACKUP)) == [1.0]
                and pick(s, "failover_pool_available", failover_pool="api") == [1.0]
                and pick(s, "failover_pool_serving", **origin(BACKUP)) == [1.0]
                and pick(s, "failover_breaker_transitions_total", failover_domain=PRIMARY,
                         failover_breaker_to="open")
                and pick(s, "failover_control_domain_disabled", **origin(PRIMARY)) == [1.0]
            )
            return s if ok else None

        samples = await eventually(degraded)
        # Every agent metric carries the pool, the host and the location.
        (labels,) = [ls for (n, ls), _ in samples.items()
                     if n == "failover_probe_success" and ("server_address", "api.example.com") in ls]
        assert {("failover_pool", "api"), ("server_address", "api.example.com"), ("server_port", "443"),
                ("url_scheme", "https"), ("probe_location", "test-lab")} <= labels
        assert pick(samples, "failover_probe_status_code", **origin(PRIMARY)) == [0.0]
        assert pick(samples, "failover_probe_status_code", **origin(BACKUP)) == [200.0]
        for phase in ("dns", "connect", "tls", "ttfb", "transfer"):
            assert pick(samples, "failover_probe_phase_duration_seconds", **origin(BACKUP), phase=phase), phase
        assert pick(samples, "failover_probe_phase_duration_seconds", **origin(PRIMARY), phase="dns")
        (backup_took,) = pick(samples, "failover_probe_duration_seconds", **origin(BACKUP))
        assert backup_took > 0
        assert pick(samples, "failover_probe_duration_seconds", **origin(PRIMARY))  # failed probes last too
        (version,) = pick(samples, "failover_control_version", failover_pool="api")
        (issued,) = pick(samples, "failover_control_issued_timestamp_seconds", failover_pool="api")
        assert version > 0 and abs(issued - time.time()) < 60
        # The client's metrics got the location too.
        assert pick(samples, "failover_attempts_total", probe_location="test-lab")
        # The pinned probe says why.
        last = agent.state.domains[("api", PRIMARY)].last
        assert last is not None and last.error_type == "dns_error"

        def opened_in_a_span() -> bool:
            # The metric is recorded at the transition; the span that carries the event ends
            # when its request does, a moment later.
            return any(
                e.name == "failover.breaker.transition" and e.attributes is not None
                and e.attributes["failover.domain"] == PRIMARY and e.attributes["failover.breaker.to"] == "open"
                for span in spans.get_finished_spans() for e in span.events
            )

        assert await eventually(opened_in_a_span)
        assert any(span.name == "failover api" for span in spans.get_finished_spans())

        assert agent.address is not None
        host, port = agent.address
        async with httpx.AsyncClient(trust_env=False) as client:
            raw = (await client.get(f"http://{host}:{port}/control.json")).content
            health = await client.get(f"http://{host}:{port}/healthz")
            page = await client.get(f"http://{host}:{port}/")
            status = (await client.get(f"http://{host}:{port}/status.json")).json()
        doc = ControlDocument.parse(raw, hmac_key=HMAC_KEY)
        assert doc.disabled["api"] == frozenset({PRIMARY})
        doc.check([cfg.pools[0].to_pool()], None)  # fits the pools: never every domain
        assert health.status_code == 200
        assert page.status_code == 200 and "assets/status.js" in page.text  # the page: test_status_page.py
        history = status["pools"]["api"]["domains"][PRIMARY]["history"]
        assert history["down_since"] is not None and history["results"][-1][3] == "dns_error"

        fd.heal("api.example.com")
        await eventually(lambda: (r := agent.state.domains[("api", PRIMARY)].last) is not None and r.success)


async def test_readiness_flags_expiring_certificate_and_cors_mismatch(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """A backup whose certificate expires in 3 days and whose CORS answer differs from the
    primary's is not ready, nor one whose health field differs; an identical backup is."""
    fd = fake_domains
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3)
    fd.add("api.example.com", cors_handler())
    fd.add("api2.example.com", cors_handler(origin="https://other.example.com"), cert_not_after=soon)
    fd.add("api-eu.example.com", cors_handler())
    fd.add("api3.example.com", cors_handler(status="degraded"))
    cfg = config(fd, tmp_path, [PRIMARY, BACKUP, REGIONAL, THIRD],
                 readiness={"interval": 1.0, "timeout": 1.0,
                            "cors_origins": ["https://app.example.com"], "cert_warning_days": 14.0,
                            "health_field": "status"})
    async with running(cfg) as agent:
        def expected(s: dict[Sample, float]) -> bool:
            return (
                pick(s, "failover_readiness_ready", **origin(BACKUP), check="cert") == [0.0]
                and pick(s, "failover_readiness_ready", **origin(BACKUP), check="cors") == [0.0]
                and pick(s, "failover_readiness_ready", **origin(BACKUP), check="health") == [1.0]
                and all(pick(s, "failover_readiness_ready", **origin(REGIONAL), check=c) == [1.0]
                        for c in ("cert", "cors", "health"))
                and pick(s, "failover_readiness_ready", **origin(THIRD), check="health") == [0.0]
                and pick(s, "failover_readiness_ready", **origin(THIRD), check="cors") == [1.0]
            )

        async def checked() -> dict[Sample, float] | None:
            s = await scrape(agent)
            return s if expected(s) else None

        # Polled until it holds: one check timing out on a loaded machine only delays it.
        s = await eventually(checked)
        # The primary is what the backups are compared with: it has no readiness series.
        assert not pick(s, "failover_readiness_ready", **origin(PRIMARY))
        # expiry as a Unix time, for every https domain (the primary too)
        (backup,) = pick(s, "failover_tls_cert_expiry_timestamp_seconds", **origin(BACKUP))
        assert 2 * 86400 < backup - time.time() < 3 * 86400 + 60
        (regional,) = pick(s, "failover_tls_cert_expiry_timestamp_seconds", **origin(REGIONAL))
        assert regional - time.time() > 14 * 86400
        assert pick(s, "failover_tls_cert_expiry_timestamp_seconds", **origin(PRIMARY))
        readiness = agent.state.domains[("api", BACKUP)].readiness
        assert readiness is not None
        assert "access-control-allow-origin" in readiness.checks["cors"][1]


async def test_pinned_probe_reports_phases_and_error_types(
    fake_domains: FakeDomains, tmp_path: Path
) -> None:
    """A pinned HTTPS probe times dns, connect, tls, ttfb and total; failures carry an error.type."""
    from failover_agent.checks.domain import DomainProber
    from failover_agent.wire import ssl_context

    fd = fake_domains
    fd.add("api.example.com", cors_handler())
    cfg = config(fd, tmp_path, [PRIMARY], probe={"timeout": 1.0, "interval": 1.0, "json_check": {"field": "status", "equals": "ok"}})
    probe = cfg.pools[0].probe
    prober = DomainProber(ssl_context(fd.ca_bundle))
    try:
        ok = await prober.probe(PRIMARY, probe)
        assert ok.success and ok.status == 200 and ok.error_type is None
        assert {"dns", "connect", "tls", "ttfb", "transfer", "total"} <= set(ok.phases)
        assert ok.phases["total"] >= ok.phases["tls"] > 0
        cases = [
            (faults.dns_nxdomain(), "dns_error"),
            (faults.refused(), "connection_refused"),
            (faults.tls_expired(), "server_certificate_invalid"),
            (faults.status(503), "503"),
            (faults.slow(3.0), "read_timeout"),
        ]
        for fault, error_type in cases:
            fd.fail("api.example.com", fault)
            result = await prober.probe(PRIMARY, probe)
            assert (result.success, result.error_type) == (False, error_type), (fault, result)
        fd.heal("api.example.com")
        fd.add("api.example.com", lambda request: {"status": "degraded"})
        result = await prober.probe(PRIMARY, probe)
        assert (result.success, result.status, result.error_type) == (False, 200, "body_mismatch")
    finally:
        await prober.aclose()
