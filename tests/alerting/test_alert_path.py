"""The alert path end to end: agent -> Prometheus -> Alertmanager -> webhook.

A loopback HTTP server is the only domain of pool ``e2e``; ``failover-agent run`` probes it
every 0.5 s. A real Prometheus scrapes the agent every 0.5 s with the shipped rules
(``for:`` shortened to 1 s, evaluated every 0.25 s) and sends to a real Alertmanager running
the shipped configuration (its webhook URLs pointed at this test, its waits shortened). Once
Prometheus has stored the healthy domain and found the Alertmanager, the test stops
the domain's server, and the webhook must receive ``FailoverPoolAllDomainsDown`` for the pool,
routed to the ``oncall`` receiver; with the rules ``failover-agent rules`` writes for the
pool's SLO instead, the fast-burn page.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from dashboards._stack import free_port, process, wait_for
from failover_agent.slo import ALERT_NAME

from .conftest import ALERTMANAGER_CONFIG, RULES

AGENT_EXE = Path(sys.executable).with_name("failover-agent")
DEADLINE = 40.0  # seconds from the outage to the webhook call, at most
READY_DEADLINE = 30.0  # seconds for Prometheus to store a healthy probe and find the Alertmanager
# Prometheus' intervals: a fraction of the agent's 0.5 s probe interval for the rules, so an
# outage reaches the webhook in a few evaluations; the same as the probes for the scrapes (a
# scrape that times out would mark the series stale and reset the alerts' `for:`)
SCRAPE_INTERVAL, EVALUATION_INTERVAL = "500ms", "250ms"


class _Hook(http.server.BaseHTTPRequestHandler):
    received: queue.Queue[tuple[str, dict[str, Any]]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.put((self.path, json.loads(body)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # the domain's health answer
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


@contextlib.contextmanager
def serve(received: queue.Queue[tuple[str, dict[str, Any]]]) -> Iterator[http.server.ThreadingHTTPServer]:
    """A loopback HTTP server: answers GET with 200, queues POSTed JSON."""
    handler = type("Hook", (_Hook,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for the loop's next poll: the outage starts, and the test ends, 0.05 s after
    # it is called rather than up to 0.5 s (the default)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def agent_config(domain: str, listen: str) -> str:
    return "\n".join([
        'location = "e2e"', "",
        "[exporters.prometheus]", f'listen = "{listen}"', "",
        "[[pools]]", 'name = "e2e"', f'domains = ["{domain}"]',
        "[pools.probe]", 'path = "/health"', "interval = 0.5", "timeout = 0.5",
        "[pools.readiness]", "enabled = false", "",
    ])


def fast_rules(tmp_path: Path) -> Path:
    """The shipped rules with every ``for:`` at 1 s."""
    text = re.sub(r"\bfor: \d+[smh]\b", "for: 1s", RULES.read_text(encoding="utf-8"))
    path = tmp_path / "alerts.yml"
    path.write_text(text, encoding="utf-8")
    return path


def fast_alertmanager_config(tmp_path: Path, hook: str) -> Path:
    """The shipped configuration, its webhooks at ``hook`` and its waits at an evaluation."""
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text(encoding="utf-8"))
    config["route"].update(group_wait=EVALUATION_INTERVAL, group_interval=EVALUATION_INTERVAL)
    for receiver in config["receivers"]:
        for webhook in receiver["webhook_configs"]:
            webhook["url"] = f"{hook}/{receiver['name']}"
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertPath:
    """The running path: the pool's only domain, what the webhook received, the processes' logs."""

    domain: http.server.ThreadingHTTPServer
    received: queue.Queue[tuple[str, dict[str, Any]]]
    logs: dict[str, Path]

    def tails(self) -> str:
        return "\n".join(f"{name}: {log.read_text(errors='replace')[-2000:]}" for name, log in self.logs.items())


@contextlib.contextmanager
def alert_path(tmp_path: Path, prometheus_bin: str, alertmanager_bin: str, rules: Path,
               agent_extra: str = "") -> Iterator[AlertPath]:
    """The agent (its configuration plus ``agent_extra``) on one healthy domain, Prometheus with
    ``rules``, the shipped Alertmanager configuration, a webhook; all ready, the healthy domain
    scraped, the Alertmanager found."""
    assert AGENT_EXE.exists(), f"{AGENT_EXE} missing: pip install -e '.[dev]'"
    received: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
    with serve(received) as hook, contextlib.ExitStack() as stack:
        hook_url = f"http://127.0.0.1:{hook.server_address[1]}"
        domain = stack.enter_context(serve(queue.Queue()))
        agent_address = f"127.0.0.1:{free_port()}"
        config = tmp_path / "agent.toml"
        config.write_text(agent_config(f"http://127.0.0.1:{domain.server_address[1]}", agent_address) + agent_extra)
        logs = {name: tmp_path / f"{name}.log" for name in ("prometheus", "alertmanager", "agent")}
        agent = stack.enter_context(process(
            [str(AGENT_EXE), "run", "--config", str(config), "--plain", "--log-level", "WARNING"], logs["agent"]))

        am_address = f"127.0.0.1:{free_port()}"
        am = stack.enter_context(process([
            alertmanager_bin, f"--config.file={fast_alertmanager_config(tmp_path, hook_url)}",
            f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address={am_address}",
            "--cluster.listen-address=", "--log.level=warn",
        ], logs["alertmanager"]))

        prom_address = f"127.0.0.1:{free_port()}"
        prom_config = tmp_path / "prometheus.yml"
        prom_config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                       "evaluation_interval": EVALUATION_INTERVAL},
            "rule_files": [str(rules)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am_address]}]}]},
            "scrape_configs": [{"job_name": "failover-agent", "static_configs": [{"targets": [agent_address]}]}],
        }), encoding="utf-8")
        prom = stack.enter_context(process([
            prometheus_bin, f"--config.file={prom_config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={prom_address}", "--log.level=warn",
        ], logs["prometheus"]))

        wait_for(f"http://{agent_address}/healthz", agent, logs["agent"], timeout=30)
        wait_for(f"http://{am_address}/-/ready", am, logs["alertmanager"], timeout=30)
        wait_for(f"http://{prom_address}/-/ready", prom, logs["prometheus"], timeout=30)
        path = AlertPath(domain=domain, received=received, logs=logs)
        # Prometheus applies its targets and Alertmanagers some 5 s after its start: the outage
        # comes once it stored a healthy probe (the outage is a change) and can deliver an alert
        # (it sends a firing alert again only after a minute)
        healthy_and_found(f"http://{prom_address}", path)
        yield path


def healthy_and_found(prometheus: str, path: AlertPath) -> None:
    """Poll ``prometheus`` until it stored a successful probe of the pool and has an active
    Alertmanager (bounded)."""
    query = {"query": 'failover_probe_success{failover_pool="e2e"} == 1'}
    deadline = time.monotonic() + READY_DEADLINE
    with httpx.Client(base_url=prometheus, timeout=5, trust_env=False) as client:
        while time.monotonic() < deadline:
            healthy = client.get("/api/v1/query", params=query).json()["data"]["result"]
            found = client.get("/api/v1/alertmanagers").json()["data"]["activeAlertmanagers"]
            if healthy and found:
                return
            time.sleep(0.1)
    raise AssertionError(f"no healthy probe stored or no Alertmanager found within {READY_DEADLINE} s\n"
                         + path.tails())


def first_firing(path: AlertPath, name: str, **labels: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(webhook path, payload, alert) of the first firing ``name`` with ``labels`` within
    DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    seen: list[str] = []
    while time.monotonic() < deadline:
        try:
            where, payload = path.received.get(timeout=1.0)
        except queue.Empty:
            continue
        for alert in payload["alerts"]:
            seen.append(f"{where}: {alert['labels']['alertname']} {alert['status']}")
            wanted = {"alertname": name, **labels}
            if alert["status"] == "firing" and {k: alert["labels"].get(k) for k in wanted} == wanted:
                return where, payload, alert
    raise AssertionError(f"no {name} within {DEADLINE} s; webhook got {seen}\n{path.tails()}")


def stop(domain: http.server.ThreadingHTTPServer) -> None:
    """The domain's outage: connects are refused from now on."""
    domain.shutdown()
    domain.server_close()


def test_an_outage_reaches_the_webhook(tmp_path: Path, prometheus_bin: str, alertmanager_bin: str) -> None:
    """Stopping the pool's only domain makes the webhook receive FailoverPoolAllDomainsDown (oncall)."""
    with alert_path(tmp_path, prometheus_bin, alertmanager_bin, fast_rules(tmp_path)) as path:
        stop(path.domain)
        where, payload, alert = first_firing(path, "FailoverPoolAllDomainsDown")
        assert where == "/oncall" and payload["receiver"] == "oncall"
        assert alert["labels"]["failover_pool"] == "e2e"
        assert alert["labels"]["severity"] == "page"
        assert f"127.0.0.1:{path.domain.server_address[1]}" in alert["annotations"]["description"]


def test_a_fast_burn_pages_through_alertmanager(tmp_path: Path, prometheus_bin: str, alertmanager_bin: str) -> None:
    """With the rules of ``failover-agent rules`` for the pool's SLO, the same outage burns the
    budget of 99.9 % at far more than 14.4x over 1h and 5m: the webhook receives the page, oncall."""
    slo = '\n[[slo]]\npool = "e2e"\nobjective = 99.9\n'
    (tmp_path / "slo.toml").write_text(agent_config("http://127.0.0.1:9", "127.0.0.1:0") + slo)
    rules = tmp_path / "slo.yml"
    subprocess.run([str(AGENT_EXE), "rules", str(tmp_path / "slo.toml"), "-o", str(rules)], check=True,
                   capture_output=True, timeout=60)
    with alert_path(tmp_path, prometheus_bin, alertmanager_bin, rules, agent_extra=slo) as path:
        stop(path.domain)
        where, payload, alert = first_firing(path, ALERT_NAME, long_window="1h", short_window="5m")
        assert where == "/oncall" and payload["receiver"] == "oncall"
        assert {k: alert["labels"][k] for k in ("failover_pool", "slo", "severity")} == {
            "failover_pool": "e2e", "slo": "e2e", "severity": "page"}
        assert alert["annotations"]["summary"] == (
            "SLO e2e burns its error budget 14.4x as fast as it may (over 1h and 5m)")


def test_a_domain_in_maintenance_pages_nobody(tmp_path: Path, prometheus_bin: str, alertmanager_bin: str) -> None:
    """The pool's only domain in a maintenance window goes down: the webhook receives the pool's
    symptom (FailoverPoolUnavailable: users fail, which no window plans) and, by then and for a few
    evaluations more, nothing about the domain (FailoverPoolAllDomainsDown, FailoverDomainDown)."""
    now = time.time()

    def rfc3339(at: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))

    window = (f'\n[[maintenance]]\npool = "e2e"\nstart = {rfc3339(now - 60)}\nend = {rfc3339(now + 3600)}\n'
              'reason = "e2e"\n')
    with alert_path(tmp_path, prometheus_bin, alertmanager_bin, fast_rules(tmp_path), agent_extra=window) as path:
        stop(path.domain)
        # every alert received until the first one and for 3 s (twelve evaluations) more: the domain
        # alerts are evaluated every 0.25 s with `for: 1s` like the pool's, so had they fired, they
        # would be in (a window in the past makes this test fail on FailoverPoolAllDomainsDown)
        names: list[str] = []
        deadline, until = time.monotonic() + DEADLINE, None
        while time.monotonic() < (deadline if until is None else until):
            try:
                _where, payload = path.received.get(timeout=0.5)
            except queue.Empty:
                continue
            names += [alert["labels"]["alertname"] for alert in payload["alerts"] if alert["status"] == "firing"]
            if until is None and names:
                until = time.monotonic() + 3.0
        assert not {"FailoverPoolAllDomainsDown", "FailoverDomainDown"} & set(names), names
        assert "FailoverPoolUnavailable" in names, f"{names}\n{path.tails()}"
