"""A fleet of worker processes and a dying primary: local-only breakers against shared health.

Set-up: ``workers`` processes each send GETs in a loop (one every ``gap`` seconds) through a
``FailoverTransport`` over two loopback fake domains, a primary and a backup (threaded HTTP
servers in this process, a new connection per request). The primary dies (its port refuses
connections) at ``die_at`` and comes back at ``back_at``; ``Policy(sticky=False,
breaker_threshold=3)``, so without shared health every worker pays the threshold itself. The
variants differ only in ``shared=RedisHealth(...)`` (one real redis-server).

Each worker records every attempt that went to the primary, and whether its own breaker made
that attempt a probe (the primary was DUE or open before the request). Reported, fleet-wide:

- *discovery*: attempts on the dead primary in its first cooldown (before any probe is due);
  target with shared health: at most ``threshold + workers``;
- *outage probes*: probes of the dead primary per cooldown after that (target: 1);
- *failback probes*: probes that reached the recovered primary (target: exactly 1).

Run: ``python -m benchmarks fleet`` (a worker is ``python -m benchmarks.fleet worker JSON``).
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from benchmarks._options import Options
from benchmarks._redis_server import RedisServer

NAME = "fleet"
THRESHOLD = 3


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Domain:
    """A loopback HTTP server on a fixed port that can die (refuse) and come back."""

    def __init__(self) -> None:
        self.server: http.server.ThreadingHTTPServer | None = None
        self.port = 0
        self.start()

    def start(self) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), _Answer)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Outcome:
    """What one variant's fleet did (times relative to the start)."""

    workers: int
    cooldown: float
    die_at: float
    back_at: float
    attempts: list[tuple[float, bool]] = field(default_factory=list)  # on the primary: (t, probe)
    requests: int = 0
    errors: int = 0
    states: list[list[str]] = field(default_factory=list)  # each worker's shared states seen

    @property
    def discovery(self) -> int:
        return sum(1 for t, _ in self.attempts if self.die_at <= t < self.die_at + self.cooldown)

    @property
    def outage_probes(self) -> list[float]:
        return [t for t, probe in self.attempts if probe and self.die_at + self.cooldown <= t < self.back_at]

    @property
    def failback_probes(self) -> int:
        return sum(1 for t, probe in self.attempts if probe and t >= self.back_at)

    def shortest_gap(self) -> float | None:
        """The shortest time between two probes of the dead primary, fleet-wide (one
        probe per cooldown means about a cooldown)."""
        probes = self.outage_probes
        return min((b - a for a, b in itertools.pairwise(probes)), default=None)


def fleet(
    *,
    workers: int,
    redis_url: str | None,
    cooldown: float = 1.0,
    die_at: float = 1.0,
    back_at: float = 4.5,
    end_at: float = 7.0,
    gap: float = 0.01,
    redis_down: tuple[float, float] | None = None,
    on_redis_down: Any = None,
    on_redis_up: Any = None,
) -> Outcome:
    """Run one fleet and gather what its workers saw. ``redis_down``: call ``on_redis_down``
    and ``on_redis_up`` at those times (kill and restart Redis mid-run)."""
    primary, backup = _Domain(), _Domain()
    prefix = f"fleet{time.time_ns()}"
    config = {
        "primary": primary.url, "backup": backup.url, "redis": redis_url, "prefix": prefix,
        "cooldown": cooldown, "threshold": THRESHOLD, "end_at": end_at, "gap": gap,
    }
    procs = [
        subprocess.Popen([sys.executable, "-m", "benchmarks.fleet", "worker", json.dumps(config)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent)
        for _ in range(workers)
    ]
    outcome = Outcome(workers=workers, cooldown=cooldown, die_at=die_at, back_at=back_at)
    try:
        for proc in procs:  # each says "ready" once imported (and connected, with shared health)
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        start = time.time() + 0.2
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start!r}\n".encode())
            proc.stdin.flush()
        events = [(die_at, primary.stop), (back_at, primary.start)]
        if redis_down is not None:
            events += [(redis_down[0], on_redis_down), (redis_down[1], on_redis_up)]
        for at, action in sorted(events, key=lambda e: e[0]):
            time.sleep(max(0.0, start + at - time.time()))
            action()
        for proc in procs:
            out, _ = proc.communicate(timeout=end_at + 30)
            seen = json.loads(out)
            outcome.attempts += [(t - start, probe) for t, probe in seen["primary"]]
            outcome.requests += seen["requests"]
            outcome.errors += seen["errors"]
            outcome.states.append(seen["states"])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        primary.stop()
        backup.stop()
    outcome.attempts.sort()
    return outcome


def worker(config: dict[str, Any]) -> None:
    """One worker process: requests in a loop from ``start`` to ``end``; prints what it saw."""
    import logging

    import httpx

    from pytest_failover import Domain, FailoverTransport, Policy, Pool

    logging.getLogger("pytest_failover").addHandler(logging.NullHandler())
    logging.getLogger("pytest_failover").propagate = False
    shared = None
    if config["redis"] is not None:
        from pytest_failover.shared import RedisHealth

        shared = RedisHealth(config["redis"], prefix=config["prefix"], max_backoff=0.2)
    policy = Policy(sticky=False, breaker_threshold=config["threshold"], breaker_cooldown=config["cooldown"])
    transport = FailoverTransport([Pool("api", [config["primary"], config["backup"]])], policy, shared=shared)
    primary = Domain.parse(config["primary"]).url
    seen: dict[str, Any] = {"primary": [], "requests": 0, "errors": 0, "states": []}

    def note_state() -> None:
        state = transport.state().shared
        if state is not None and (not seen["states"] or seen["states"][-1] != state.state):
            seen["states"].append(state.state)

    deadline = time.monotonic() + 10
    while shared is not None and shared.state != "connected" and time.monotonic() < deadline:
        time.sleep(0.01)
    note_state()
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    with httpx.Client(transport=transport) as client:
        time.sleep(max(0.0, start - time.time()))
        while time.time() < start + config["end_at"]:
            probe = transport.state().pools["api"].domain(primary).probe_due
            seen["requests"] += 1
            try:
                response = client.get(f"{config['primary']}/ping")
                attempts = response.extensions["failover"].attempts
            except httpx.HTTPError as exc:
                seen["errors"] += 1
                attempts = getattr(exc, "attempts", ())
            now = time.time()
            for i, record in enumerate(attempts):
                if record.domain == primary:
                    seen["primary"].append((now, probe and i == 0))
            note_state()
            time.sleep(config["gap"])
    seen["start"] = start
    print(json.dumps(seen))


@contextlib.contextmanager
def _redis() -> Iterator[Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            yield server
        finally:
            server.stop()


def run(opts: Options) -> h.Report:
    started = time.monotonic()
    report = h.Report(NAME)
    workers = opts.pick(8, 8)
    table = h.Table(
        f"{workers} workers, the primary refuses from t = 1 s to t = 4.5 s "
        f"(threshold {THRESHOLD}, cooldown 1 s, sticky=False)",
        ["variant", "attempts on the dead primary, first cooldown", "probes of the dead primary (2.5 cooldowns)",
         "shortest gap between two probes", "probes reaching the recovered primary", "requests", "errors"],
    )
    with _redis() as server:
        for name, url in (("local-only (no shared=)", None), ("shared=RedisHealth(...)", server.url)):
            outcome = fleet(workers=workers, redis_url=url)
            gap = outcome.shortest_gap()
            table.rows.append([
                name, str(outcome.discovery), str(len(outcome.outage_probes)),
                "-" if gap is None else h.ms(gap),
                str(outcome.failback_probes), f"{outcome.requests:,}", str(outcome.errors),
            ])
            report.data[name] = {
                "discovery": outcome.discovery, "outage_probes": outcome.outage_probes,
                "failback_probes": outcome.failback_probes, "requests": outcome.requests, "errors": outcome.errors,
            }
    table.notes.append(
        f"targets with shared health: at most threshold + workers = {THRESHOLD + workers} attempts on the dead "
        "primary, 1 probe per cooldown for the whole fleet, exactly 1 probe at failback"
    )
    report.tables.append(table)
    report.seconds = time.monotonic() - started
    return report


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker(json.loads(sys.argv[2]))
    else:
        raise SystemExit("usage: python -m benchmarks fleet (or: python -m benchmarks.fleet worker JSON)")
