"""The alert path end to end: agent -> Prometheus -> Alertmanager -> webhook.

A loopback HTTP server is the only domain of pool ``e2e``; ``failover-agent run`` probes it
every 0.5 s. A real Prometheus scrapes the agent every second with the shipped rules
(``for:`` shortened to 1 s) and sends to a real Alertmanager running the shipped
configuration (its webhook URLs pointed at this test, its waits shortened). The test stops
the domain's server, and the webhook must receive ``FailoverPoolAllDomainsDown`` for the pool,
routed to the ``oncall`` receiver.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import queue
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from dashboards._stack import free_port, process, wait_for

from .conftest import ALERTMANAGER_CONFIG, RULES

AGENT_EXE = Path(sys.executable).with_name("failover-agent")
DEADLINE = 40.0  # seconds from the outage to the webhook call, at most


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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
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
    """The shipped configuration, its webhooks at ``hook`` and its waits at a second."""
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text(encoding="utf-8"))
    config["route"].update(group_wait="1s", group_interval="1s")
    for receiver in config["receivers"]:
        for webhook in receiver["webhook_configs"]:
            webhook["url"] = f"{hook}/{receiver['name']}"
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def test_an_outage_reaches_the_webhook(tmp_path: Path, prometheus_bin: str, alertmanager_bin: str) -> None:
    """Stopping the pool's only domain makes the webhook receive FailoverPoolAllDomainsDown (oncall)."""
    assert AGENT_EXE.exists(), f"{AGENT_EXE} missing: pip install -e '.[dev]'"
    received: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
    with serve(received) as hook, contextlib.ExitStack() as stack:
        hook_url = f"http://127.0.0.1:{hook.server_address[1]}"
        domain = stack.enter_context(serve(queue.Queue()))
        agent_address = f"127.0.0.1:{free_port()}"
        config = tmp_path / "agent.toml"
        config.write_text(agent_config(f"http://127.0.0.1:{domain.server_address[1]}", agent_address))
        agent_log = tmp_path / "agent.log"
        agent = stack.enter_context(process(
            [str(AGENT_EXE), "run", "--config", str(config), "--plain", "--log-level", "WARNING"], agent_log))

        am_address = f"127.0.0.1:{free_port()}"
        am_log = tmp_path / "alertmanager.log"
        am = stack.enter_context(process([
            alertmanager_bin, f"--config.file={fast_alertmanager_config(tmp_path, hook_url)}",
            f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address={am_address}",
            "--cluster.listen-address=", "--log.level=warn",
        ], am_log))

        prom_address = f"127.0.0.1:{free_port()}"
        prom_config = tmp_path / "prometheus.yml"
        prom_config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(fast_rules(tmp_path))],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am_address]}]}]},
            "scrape_configs": [{"job_name": "failover-agent", "static_configs": [{"targets": [agent_address]}]}],
        }), encoding="utf-8")
        prom_log = tmp_path / "prometheus.log"
        prom = stack.enter_context(process([
            prometheus_bin, f"--config.file={prom_config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={prom_address}", "--log.level=warn",
        ], prom_log))

        wait_for(f"http://{agent_address}/healthz", agent, agent_log, timeout=30)
        wait_for(f"http://{am_address}/-/ready", am, am_log, timeout=30)
        wait_for(f"http://{prom_address}/-/ready", prom, prom_log, timeout=30)
        time.sleep(2)  # a few healthy probes and scrapes first: the outage is a change
        domain.shutdown()
        domain.server_close()  # connects are refused from now on

        deadline = time.monotonic() + DEADLINE
        seen: list[str] = []
        while time.monotonic() < deadline:
            try:
                path, payload = received.get(timeout=1.0)
            except queue.Empty:
                continue
            for alert in payload["alerts"]:
                name = alert["labels"]["alertname"]
                seen.append(f"{path}: {name} {alert['status']}")
                if name == "FailoverPoolAllDomainsDown" and alert["status"] == "firing":
                    assert path == "/oncall" and payload["receiver"] == "oncall"
                    assert alert["labels"]["failover_pool"] == "e2e"
                    assert alert["labels"]["severity"] == "page"
                    assert f"127.0.0.1:{domain.server_address[1]}" in alert["annotations"]["description"]
                    return
        raise AssertionError(
            f"no FailoverPoolAllDomainsDown within {DEADLINE} s; webhook got {seen}\n"
            f"prometheus: {prom_log.read_text(errors='replace')[-2000:]}\n"
            f"alertmanager: {am_log.read_text(errors='replace')[-2000:]}\n"
            f"agent: {agent_log.read_text(errors='replace')[-2000:]}"
        )
