"""Real processes for the panel-query test: the agent's demo, a client workload, Prometheus."""

from __future__ import annotations

import contextlib
import http.server
import re
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

    from pytest_failover import Pool

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
def agent_demo(tmp_path: Path, duration: float, outage_at: float | None = None) -> Iterator[str]:
    """``failover-agent demo`` on a loopback port it picks itself; yields its ``host:port``,
    as it logs it. (A port picked here and handed over could be taken in between, by
    any other process: the demo then listens elsewhere, as it says, and a test waiting on
    the first port waited in vain.) ``outage_at``: its primary's DNS failure and its backup's
    expiring certificate come that many seconds in (``--outage-at``), not 8 s and 20 s in."""
    assert AGENT_EXE.exists(), f"{AGENT_EXE} missing: pip install -e '.[dev]'"
    log = tmp_path / "agent.log"
    args = [str(AGENT_EXE), "demo", "--plain", "--listen", "127.0.0.1:0", "--duration", str(duration)]
    if outage_at is not None:
        args += ["--outage-at", str(outage_at)]
    with process(args, log) as proc:
        address = listening(proc, log)
        wait_for(f"http://{address}/metrics", proc, log, timeout=30)
        yield address


_LISTENING = re.compile(r"listening on http://(127\.0\.0\.1:\d+)")


def listening(proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> str:
    """The ``host:port`` a process started with ``--listen 127.0.0.1:0`` logged (no port race)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _LISTENING.search(log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{proc.args!r} is not listening:\n{log.read_text(errors='replace')[-3000:]}")


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

    hedge_and_slow_down(meter_provider, pool)
    drop_a_connection(meter_provider, pool)

    def render() -> bytes:
        return generate_latest(registry)

    handler = type("Handler", (_MetricsHandler,), {"render": staticmethod(render)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for the loop's next poll: 0.05 s rather than up to 0.5 s (the default)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="client-workload-metrics", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        meter_provider.shutdown(timeout_millis=1000)


def hedge_and_slow_down(meter_provider: MeterProvider, pool: Pool) -> None:
    """Hedged, slow traffic through the real client, on ``pool``'s two domains (an
    in-process inner transport: the primary answers in 50 ms, the backup as told).

    The pool's hedge throttle earns half a hedge per request, so every other request
    hedges: throttled, won (the backup answers first), throttled, lost (the backup
    answers 503), throttled, cancelled (the backup is slower), and the seventh slow
    call on the primary opens its breaker with ``failover.reason = "slow_calls"``.
    """
    from pytest_failover import FailoverTransport, Hedging, Policy, SlowCalls

    primary = pool.domains[0]
    backup_delay, backup_status = 0.0, 200

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == primary.host:
            time.sleep(0.05)
            return httpx.Response(200)
        time.sleep(backup_delay)
        return httpx.Response(backup_status)

    policy = Policy(
        hedging=Hedging(delay=0.01, max_ratio=0.5),
        slow_calls=SlowCalls(threshold=0.02, minimum_calls=6),
        sticky=False,
        breaker_cooldown=60.0,
    )
    transport = FailoverTransport(
        [pool], policy=policy, transport=httpx.MockTransport(handler), meter_provider=meter_provider
    )
    with httpx.Client(transport=transport) as client:
        for backup_delay, backup_status in [(0.0, 200), (0.0, 200), (0.0, 200), (0.0, 503), (0.0, 200), (0.2, 200), (0.0, 200)]:  # noqa: B007 - the handler reads them
            client.get(f"{primary.url}/slow")
    if transport.state().pools[pool.name].domains[0].breaker != "open":
        raise AssertionError(f"slow calls did not open {primary.url}: {transport.state()}")


def drop_a_connection(meter_provider: MeterProvider, pool: Pool) -> None:
    """A GET whose first connection closes before any byte of the answer (httpcore's
    words for a server's keep-alive timeout meeting the request), sent to the same domain
    again and answered there: one ``dropped`` attempt, as no demo produces it."""
    from pytest_failover import FailoverTransport

    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url.host))
        if len(sent) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx.Response(200)

    transport = FailoverTransport([pool], transport=httpx.MockTransport(handler), meter_provider=meter_provider)
    with httpx.Client(transport=transport) as client:
        client.get(f"{pool.domains[0].url}/kept-alive")
    if sent != [pool.domains[0].host] * 2:
        raise AssertionError(f"the dropped GET was not sent to the same domain again: {sent}")


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
