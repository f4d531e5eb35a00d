"""Real processes for the panel-query test: the agent's demo, a client workload, Prometheus."""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

    from pytest_failover import Domain, Pool

AGENT_EXE = Path(sys.executable).with_name("failover-agent")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Poll ``url`` until it answers 200; fail early with the log if ``proc`` died."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {timeout} s ({last}):\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``args`` with output to ``log``; terminate (then kill) it on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


@contextlib.contextmanager
def agent_demo(tmp_path: Path, duration: float) -> Iterator[str]:
    """``failover-agent demo`` on a free loopback port; yields its ``host:port``."""
    assert AGENT_EXE.exists(), f"{AGENT_EXE} missing: pip install -e '.[dev]'"
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / "agent.log"
    args = [str(AGENT_EXE), "demo", "--plain", "--listen", address, "--duration", str(duration)]
    with process(args, log) as proc:
        wait_for(f"http://{address}/metrics", proc, log, timeout=30)
        yield address


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    render: Any = None  # set on a subclass per server

    def do_GET(self) -> None:
        body: bytes = self.render()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


@contextlib.contextmanager
def client_workload() -> Iterator[str]:
    """The real failover client with a tiny retry budget against domains that answer 503.

    The demo never exhausts a retry budget, so ``failover_retry_budget_rejections_total``
    would not exist in Prometheus; this workload produces it through the same
    OpenTelemetry SDK -> Prometheus exporter path as the agent, served on its own
    port. Yields ``host:port``.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, generate_latest

    from pytest_failover import (
        ExponentialBackoff,
        FailoverError,
        FailoverTransport,
        Policy,
        Pool,
        RetryBudget,
    )

    registry = CollectorRegistry(auto_describe=True)
    meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    pool = Pool("budget", [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.2:{free_port()}"])
    policy = Policy(
        schedule=ExponentialBackoff(base=0.001, cap=0.01, max_attempts=3),
        attempt_timeout=0.5,
        deadline=2.0,
        retry_budget=RetryBudget(max_tokens=2, token_ratio=0.1),
        breaker_threshold=100,
    )
    # Failed retries that sent bytes are what the budget charges: every domain answers 503.
    unavailable = httpx.MockTransport(lambda request: httpx.Response(503))
    transport = FailoverTransport([pool], policy=policy, transport=unavailable, meter_provider=meter_provider)
    with httpx.Client(transport=transport) as client:
        for _ in range(3):
            with contextlib.suppress(FailoverError):
                client.get(f"{pool.domains[0].url}/work")

    # A second reader on the same registry (one target_info is enough) for the stand-in below.
    stand_in = MeterProvider(metric_readers=[PrometheusMetricReader(disable_target_info=True, registry=registry)])
    record_hedging_and_slow_calls(stand_in, pool)

    def render() -> bytes:
        return generate_latest(registry)

    handler = type("Handler", (_MetricsHandler,), {"render": staticmethod(render)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="client-workload-metrics", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        stand_in.shutdown(timeout_millis=1000)
        meter_provider.shutdown(timeout_millis=1000)


def record_hedging_and_slow_calls(meter_provider: MeterProvider, pool: Pool) -> None:
    """Stand-in for the client's hedging and slow-call telemetry (issue 11), not emitted yet.

    The counters, names, attributes and meter (the client's scope, version and
    schema) are the ones semconv gives the client; replace this with hedged,
    slow traffic through ``Policy(hedging=..., slow_calls=...)`` once the client
    records them. One hedge of each outcome to the backup, slow calls and a
    slow-call breaker opening on the primary.
    """
    from opentelemetry import metrics

    from pytest_failover import __version__, semconv

    meter = metrics.get_meter(semconv.CLIENT_SCOPE, __version__, meter_provider=meter_provider,
                              schema_url=semconv.SCHEMA_URL)
    primary, backup = pool.domains[0], pool.domains[1]

    def where(domain: Domain) -> dict[str, str]:
        return {semconv.FAILOVER_POOL: pool.name, semconv.FAILOVER_DOMAIN: domain.url,
                semconv.SERVER_ADDRESS: domain.host}

    hedges = meter.create_counter(semconv.FAILOVER_HEDGES, unit=semconv.UNIT_HEDGE)
    for outcome in semconv.HEDGE_OUTCOMES:
        hedges.add(1, {**where(backup), semconv.FAILOVER_HEDGE_OUTCOME: outcome})
    meter.create_counter(semconv.FAILOVER_SLOW_CALLS, unit=semconv.UNIT_CALL).add(10, where(primary))
    meter.create_counter(semconv.FAILOVER_BREAKER_TRANSITIONS, unit=semconv.UNIT_TRANSITION).add(1, {
        **where(primary),
        semconv.FAILOVER_BREAKER_FROM: semconv.BREAKER_CLOSED,
        semconv.FAILOVER_BREAKER_TO: semconv.BREAKER_OPEN,
        semconv.FAILOVER_REASON: semconv.BREAKER_REASON_SLOW_CALLS,
    })


@contextlib.contextmanager
def prometheus(binary: str, tmp_path: Path, targets: dict[str, str], rule_files: list[Path]) -> Iterator[str]:
    """A real Prometheus scraping ``targets`` (job -> host:port) every second; yields its base URL."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [address]}]} for job, address in targets.items()
        ],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    address = f"127.0.0.1:{free_port()}"
    args = [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address={address}",
        "--log.level=warn",
    ]
    log = tmp_path / "prometheus.log"
    with process(args, log) as proc:
        wait_for(f"http://{address}/-/ready", proc, log, timeout=30)
        yield f"http://{address}"
