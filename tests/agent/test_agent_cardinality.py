"""Cardinality on a real run: the demo's agent (its default configuration: three domains,
readiness and control on) goes through its outage and back, and at no scrape does any domain
appear in more than 20 series (blackbox_exporter's figure; the issue's ceiling)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import httpx
from failover_agent.demo import BACKUP, PRIMARY, REGIONAL
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.status_page import demo_agent

CEILING = 20
DOMAINS = (PRIMARY, BACKUP, REGIONAL)


def naming(text: str) -> dict[str, Counter[str]]:
    """Per demo domain, its series by metric name: those with a label whose value is the
    domain's host or a URL of it (``failover_switches_total`` names two)."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values = set(sample.labels.values())
            for host in DOMAINS:
                if host in values or any(v.startswith(f"https://{host}") for v in values):
                    out[host][sample.name] += 1
    return out


def ready(text: str, **labels: str) -> list[float]:
    """Values of ``failover_readiness_ready`` whose labels include ``labels``."""
    return [sample.value for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == "failover_readiness_ready" and labels.items() <= sample.labels.items()]


async def test_no_domain_is_named_by_more_than_20_series() -> None:
    """Healthy, the primary's DNS failing (failover, breaker transitions, a switch), the
    backup's certificate about to expire, the primary back (the switch back): scraped twice
    a second, every domain stays within the ceiling, and each is counted (the scan works).
    Each step comes once the scrapes show what the one before did (no fixed timeline to
    wait out), and the scrapes go on a second after the last."""
    worst: dict[str, tuple[int, dict[str, int]]] = {}
    async with demo_agent() as demo, httpx.AsyncClient(trust_env=False, timeout=10) as client:
        def heal() -> None:
            demo.domains.heal(PRIMARY)

        def named(text: str, host: str, name: str) -> int:
            return naming(text)[host][name]

        # (what the scrapes must show first, the step then taken): the demo's timeline, in order
        story: list[tuple[Callable[[str], bool], Callable[[], None] | None]] = [
            # healthy: the control document out for every domain, the backup's certificate checked
            (lambda text: all(named(text, host, "failover_control_domain_disabled") for host in DOMAINS)
             and ready(text, server_address=BACKUP, check="cert") == [1.0], demo.primary_dns_fails),
            # the client failed over to the backup
            (lambda text: named(text, PRIMARY, "failover_switches_total") >= 1, demo.backup_cert_expires_soon),
            # the primary's breaker opened, the backup's certificate check failed
            (lambda text: named(text, PRIMARY, "failover_breaker_transitions_total") >= 1
             and ready(text, server_address=BACKUP, check="cert") == [0.0], heal),
            # the primary's breaker half-open then closed again, the switch back to it
            (lambda text: named(text, PRIMARY, "failover_breaker_transitions_total") >= 3
             and named(text, PRIMARY, "failover_switches_total") >= 2, None),
        ]
        after = 2  # scrapes once the story is told: a second more
        started = time.monotonic()
        for tick in range(120):  # 60 s: bounded
            text = (await client.get(demo.url + "metrics")).text
            for host, counted in naming(text).items():
                total = sum(counted.values())
                if total > worst.get(host, (0, {}))[0]:
                    worst[host] = (total, dict(counted))
            if story and story[0][0](text):
                step = story.pop(0)[1]
                if step is not None:
                    step()
            elif not story:
                after -= 1
                if after == 0:
                    break
            await asyncio.sleep(max(0.0, started + (tick + 1) * 0.5 - time.monotonic()))
    for host, (total, names) in sorted(worst.items()):
        print(f"{host}: {total} series at most: {names}")  # seen with pytest -s
    assert not story, f"the story stopped before {len(story)} of its steps (60 s)"
    assert set(worst) == set(DOMAINS)
    assert all(total <= CEILING for total, _ in worst.values()), worst
    primary = worst[PRIMARY][1]
    assert primary.get("failover_breaker_transitions_total", 0) >= 2, primary  # the outage did happen
