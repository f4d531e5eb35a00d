"""The outage simulator's fake domains, served from a process of their own.

The tail and slow-primary benchmarks time requests of a millisecond next to answers
held for a second. The simulator's servers are threads (one per connection); in the
client's process they would take the GIL from the client being timed, so here they run
in a child process (``python -m benchmarks._simulated``) and the client connects to
their loopback ports directly (plain http: no name interception is needed).

Every domain answers healthy requests with ``{}`` after ``--base-latency`` seconds
(a ``time.sleep`` in its handler). The parent sends one JSON command a line on the
child's standard input and reads one JSON answer a line:

- ``{"op": "slow", "host": H, "share": P, "seconds": S, "seed": N}``: from now on a
  share ``P`` of ``H``'s answers is held ``S`` more seconds, drawn by the simulator's
  seeded ``faults.rate(P, faults.latency(S), seed=N)`` (``faults.latency(S)`` when
  ``P`` is 1, healthy when it is 0);
- ``{"op": "counts"}``: per domain, the requests its server received (counted on
  arrival, so a cancelled hedge loser counts) and how many of them were held.

The child exits when its standard input closes or after ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from benchmarks import _harness as h


@dataclass(frozen=True, slots=True)
class Counts:
    """What one fake domain's server saw."""

    requests: int
    held: int


class Simulated:
    """The parent's handle on the child process (see the module docstring)."""

    def __init__(self, process: subprocess.Popen[str], ports: dict[str, int]) -> None:
        self._process = process
        self._lock = threading.Lock()
        self.ports = ports

    def url(self, host: str) -> str:
        return f"http://127.0.0.1:{self.ports[host]}"

    def slow(self, host: str, *, share: float, seconds: float, seed: int) -> None:
        """Hold a seeded ``share`` of ``host``'s answers ``seconds`` longer (a fresh sequence)."""
        self._ask({"op": "slow", "host": host, "share": share, "seconds": seconds, "seed": seed})

    def counts(self) -> dict[str, Counts]:
        answer = self._ask({"op": "counts"})
        return {host: Counts(**c) for host, c in answer["counts"].items()}

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        with self._lock:
            stdin.write(json.dumps(command) + "\n")
            stdin.flush()
            line = stdout.readline()
        if not line:
            raise RuntimeError(f"the simulated domains exited (command {command})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"simulated domains: {answer['error']}")
        return answer


@contextmanager
def simulated(
    hosts: list[str], *, base_latency: float, max_seconds: float = 1800.0
) -> Iterator[Simulated]:
    """Start fake domains ``hosts`` in a child process; stop it on exit."""
    args = ("--base-latency", str(base_latency), "--max-seconds", str(max_seconds), *hosts)
    with h.child("benchmarks._simulated", *args, what="the simulated domains") as (proc, ports):
        yield Simulated(proc, ports)


# ---------------------------------------------------------------- the child


def _serve(hosts: list[str], base_latency: float) -> None:
    from pytest_failover import faults
    from pytest_failover.simulator import FakeDomains, RecordedRequest

    def handler(request: RecordedRequest) -> bytes:
        time.sleep(base_latency)
        return b"{}"

    fd = FakeDomains().start()
    try:
        ports = {host: fd.add(host, handler).http_port for host in hosts}
        print(json.dumps({"ports": ports}), flush=True)
        for line in sys.stdin:  # ends when the parent closes our stdin
            command = json.loads(line)
            try:
                if command["op"] == "slow":
                    share, seconds = float(command["share"]), float(command["seconds"])
                    fault: faults.Fault = (
                        faults.healthy() if share == 0 or seconds == 0
                        else faults.latency(seconds) if share == 1
                        else faults.rate(share, faults.latency(seconds), seed=int(command["seed"]))
                    )
                    fd.fail(command["host"], fault)
                    answer: dict[str, Any] = {"ok": True}
                elif command["op"] == "counts":
                    counts = {host: {"requests": 0, "held": 0} for host in hosts}
                    for r in fd.requests():
                        counts[r.host]["requests"] += 1
                        counts[r.host]["held"] += isinstance(r.fault, faults.Latency)
                    answer = {"counts": counts}
                else:
                    answer = {"error": f"unknown op in {command}"}
            except (KeyError, ValueError, TypeError) as exc:
                answer = {"error": f"{command}: {exc!r}"}
            print(json.dumps(answer), flush=True)
    finally:
        fd.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hosts", nargs="+", help="fake domain names")
    parser.add_argument("--base-latency", type=float, default=0.001)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    args = parser.parse_args()
    watchdog = threading.Timer(args.max_seconds, os._exit, (3,))  # bounded even if orphaned
    watchdog.daemon = True
    watchdog.start()
    _serve(args.hosts, args.base_latency)


if __name__ == "__main__":
    main()
