"""The agent as a subprocess: SIGHUP reloads (a bad file is rejected), SIGTERM/SIGINT exit 0."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/slow"):
            time.sleep(0.6)
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def targets() -> Iterator[list[str]]:
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Handler) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    for server in servers:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(domains: list[str], port: int, path: str = "/health", interval: float = 0.2,
            timeout: float = 0.2) -> str:
    listed = ", ".join(f'"{d}"' for d in domains)
    return f"""
location = "proc"
[[pools]]
name = "api"
domains = [{listed}]
[pools.policy]
attempt_timeout = {timeout}
deadline = 1.0
[pools.probe]
path = "{path}"
interval = {interval}
timeout = {timeout}
[pools.readiness]
enabled = false
[exporters.prometheus]
listen = "127.0.0.1:{port}"
"""


def _wait(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _start(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "failover_agent.cli", "run", "--config", str(cfg), "--plain"],
            stdout=out, stderr=subprocess.STDOUT,
        )


def _status(port: int) -> dict[str, Any]:
    status: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/status.json", timeout=1,
                                       trust_env=False).json()
    return status


def test_sighup_reloads_and_rejects_a_bad_config_then_sigterm_exits_0(
    targets: list[str], tmp_path: Path
) -> None:
    """A valid new file adds a domain; an invalid one is logged and the old config keeps running."""
    port = _free_port()
    cfg, log = tmp_path / "agent.toml", tmp_path / "agent.log"
    cfg.write_text(_config(targets[:1], port))
    proc = _start(cfg, log)
    try:
        def up(url: str) -> bool:
            d = _status(port)["pools"]["api"]["domains"].get(url)
            return bool(d and d["last"] and d["last"]["success"])

        _wait(lambda: up(targets[0]))
        cfg.write_text(_config(targets, port))
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: up(targets[1]))

        cfg.write_text(_config(targets, port).replace('domains = [', 'domains = ["ftp://nope", '))
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: "reload rejected" in log.read_text())
        assert "pools[0].domains[0]: unsupported scheme 'ftp'" in log.read_text()
        before = _status(port)["pools"]["api"]["domains"][targets[1]]["last"]["at"]
        _wait(lambda: _status(port)["pools"]["api"]["domains"][targets[1]]["last"]["at"] > before)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", trust_env=False).status_code == 200

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "SIGTERM received" in text and "agent stopped" in text
    assert "Traceback" not in text


def test_sigint_with_a_probe_in_flight_exits_0_within_the_timeout(
    targets: list[str], tmp_path: Path
) -> None:
    """SIGINT while probes wait on a slow target: in-flight probes end within their timeout."""
    port = _free_port()
    cfg, log = tmp_path / "agent.toml", tmp_path / "agent.log"
    cfg.write_text(_config(targets[:1], port, path="/slow", interval=1.0, timeout=0.9))
    proc = _start(cfg, log)
    try:
        _wait(lambda: _status(port)["pools"]["api"]["domains"][targets[0]]["last"])
        time.sleep(0.1)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 5.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "SIGINT received" in text and "agent stopped" in text
    assert "Traceback" not in text


def test_demo_runs_probes_fake_domains_and_exits_0(tmp_path: Path) -> None:
    """``failover-agent demo --duration`` needs nothing else: it starts fake domains, probes
    them through the failover client, serves its listener and stops by itself."""
    log = tmp_path / "demo.log"
    with log.open("wb") as out:
        # 3 s: the first probes and the pool's first answer are logged 0.35 s in (1 s on a loaded
        # machine), and a CI run's load comes in bursts
        proc = subprocess.run(
            [sys.executable, "-m", "failover_agent.cli", "demo", "--duration", "3", "--listen", "127.0.0.1:0",
             "--plain"],
            stdout=out, stderr=subprocess.STDOUT, timeout=60,
        )
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "TIMELINE +0s: all domains healthy" in text
    assert "pool served by https://api.example.com" in text
    assert "https://api2.example.com is UP" in text
    assert "listening on http://127.0.0.1:" in text
    assert "agent stopped" in text and "Traceback" not in text


def test_the_demo_says_how_to_read_its_control_document(tmp_path: Path) -> None:
    """The demo prints the command that reads /control.json (a JWS served as application/jose,
    which jq and json.load cannot read); fed the document, that command prints its payload."""
    said = re.compile(r"to read it: curl -s (?P<url>\S+) \| failover-agent control verify - --key (?P<key>\S+)$")
    log = tmp_path / "demo.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "failover_agent.cli", "demo", "--duration", "30",
                                 "--listen", "127.0.0.1:0", "--plain"], stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while (found := next(filter(None, map(said.search, log.read_text().splitlines())), None)) is None:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            response = httpx.get(found["url"], timeout=10)
            while response.status_code == 503 and time.monotonic() < deadline:  # not signed yet
                time.sleep(0.1)
                response = httpx.get(found["url"], timeout=10)
            verify = subprocess.run([str(Path(sys.executable).with_name("failover-agent")), "control", "verify",
                                     "-", "--key", found["key"]], input=response.content, capture_output=True,
                                    timeout=30, check=False)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert response.headers["content-type"] == "application/jose"
    assert verify.returncode == 0, verify.stderr
    assert set(json.loads(verify.stdout)) == {"exp", "iat", "pools", "version"}


async def test_watch_file_calls_back_when_the_file_changes(tmp_path: Path) -> None:
    """--watch: a change of the file's modification time triggers a reload, once per change."""
    import asyncio
    import os

    from failover_agent.service import watch_file

    path = tmp_path / "agent.toml"
    path.write_text("a")
    calls: list[float] = []

    async def changed() -> None:
        calls.append(path.stat().st_mtime)

    task = asyncio.get_running_loop().create_task(watch_file(path, changed, interval=0.02))
    try:
        await asyncio.sleep(0.1)
        assert calls == []
        os.utime(path, (1_000_000, 1_000_000))
        for _ in range(100):
            if calls:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert calls == [1_000_000]
    finally:
        task.cancel()
