"""Shared machinery: the loopback server process, interleaved timing, statistics, tables.

Timing rules used by every benchmark:
- Variants are timed in short *rounds* (tens of milliseconds); each round runs every
  variant once, in a rotated order, so a burst of noise on this shared machine hits all
  of them alike. The per-round (paired) ratio vs the baseline is the robust figure.
- A round's figure is its mean per operation; a benchmark reports the median of
  the rounds and the 25th/75th percentiles. Ratios vs a baseline are given both
  as a ratio of medians and as the median of per-round (paired) ratios.
- Every loop is bounded in count and in time.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


# ---------------------------------------------------------------- loopback server


@dataclass
class Server:
    """A running ``benchmarks._server`` process."""

    process: subprocess.Popen[str]
    ports: list[int]

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, index: int = 0) -> str:
        return f"http://127.0.0.1:{self.ports[index]}"

    def count(self) -> int:
        """Requests answered so far (asked over a fresh connection)."""
        return self.counts()["count"]

    def counts(self) -> dict[str, int]:
        """``count``: requests answered so far; ``connections``: the connections that carried
        one (asked over a fresh connection, which neither counts)."""
        with socket.create_connection(("127.0.0.1", self.ports[0]), timeout=5) as sock:
            sock.sendall(b"GET /__count HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        answer = json.loads(data.split(b"\r\n\r\n", 1)[1])
        return {"count": int(answer["count"]), "connections": int(answer["connections"])}


@contextmanager
def child(module: str, *args: str, what: str) -> Iterator[tuple[subprocess.Popen[str], Any]]:
    """Run ``python -m module args`` (a benchmark's servers): it prints ``{"ports": ...}``
    once listening (yielded with the process) and exits when its stdin closes, which
    happens on exit here."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{what} did not start")
        yield proc, json.loads(line)["ports"]
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def server(ports: int = 1, *, status_503: int = 0, max_seconds: float = 900.0) -> Iterator[Server]:
    """Start the fast loopback server in another process; stop it on exit."""
    args = ("--ports", str(ports), "--status-503", str(status_503), "--max-seconds", str(max_seconds))
    with child("benchmarks._server", *args, what="benchmark server") as (proc, ports_bound):
        yield Server(proc, ports_bound)


def closed_port() -> int:
    """A loopback port with nothing listening: connects are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# ---------------------------------------------------------------- /proc readings


_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (and its reaped children), from /proc."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / _TICKS


def proc_rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


def proc_peak_rss_bytes(pid: int) -> int:
    """Peak resident set size (VmHWM) of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return proc_rss_bytes(pid)


# ---------------------------------------------------------------- timing


Runner = Callable[[int], None]
"""Runs ``n`` operations of one variant (the thing timed)."""


def interleave(
    variants: Mapping[str, Runner],
    *,
    rounds: int,
    per_round: int,
    max_seconds: float,
    warmup: int = 1,
    min_rounds: int = 3,
) -> Timings:
    """Per-operation wall seconds and process CPU seconds of each variant, one figure per round.

    Each round runs every variant ``per_round`` times in a rotated order. Stops after
    ``rounds`` rounds or once ``max_seconds`` have passed (but never before
    ``min_rounds``). ``warmup`` untimed rounds come first.
    """
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name](max(1, per_round // 4))
    samples: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    start = time.monotonic()
    for r, order in enumerate(rotations(names, rounds)):
        if r % 10 == 0:
            gc.collect()  # outside the timing; the collector stays on while timing, as in real use
        for name in order:
            c0 = time.process_time()
            t0 = time.perf_counter()
            variants[name](per_round)
            samples[name].append((time.perf_counter() - t0) / per_round)
            cpu[name].append((time.process_time() - c0) / per_round)
        if r + 1 >= min_rounds and time.monotonic() - start > max_seconds:
            break
    return Timings(samples, cpu)


T = TypeVar("T")


def rotations(items: Sequence[T], count: int) -> Iterator[list[T]]:
    """The order of each of ``count`` rounds: ``items`` rotated by one more each round, every
    other round reversed, so that each runs first, last and beside every other alike."""
    for r in range(count):
        shift = r % len(items)
        order = list(items[shift:]) + list(items[:shift])
        yield order[::-1] if r % 2 else order


@dataclass(frozen=True)
class Timings:
    """Per-round figures: ``wall`` (perf_counter) and ``cpu`` (this process's CPU, all threads)."""

    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]


@dataclass(frozen=True)
class Stats:
    median: float
    p25: float
    p75: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        if not values:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        if len(values) == 1:
            return cls(values[0], values[0], values[0], 1)
        q = statistics.quantiles(values, n=4, method="inclusive")
        return cls(statistics.median(values), q[0], q[2], len(values))


def paired_ratios(samples: Sequence[float], baseline: Sequence[float]) -> Stats:
    """Median (and quartiles) of per-round ratios ``sample / baseline``."""
    return Stats.of([a / b for a, b in zip(samples, baseline, strict=False) if b > 0])


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


# ---------------------------------------------------------------- reports


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        lines.append("| " + " | ".join(self.headers) + " |")
        lines.append("|" + "|".join("---" for _ in self.headers) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            lines.append("")
            lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


@dataclass
class Report:
    name: str
    tables: list[Table] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    extra: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def markdown(self) -> str:
        text = "\n".join(t.markdown() for t in self.tables)
        text += "".join(self.extra)
        return text + f"\n_{self.name}: ran in {self.seconds:.0f} s_\n"


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "loadavg_at_start": os.getloadavg(),
    }


def save(report: Report, meta: Mapping[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{report.name}.json"
    path.write_text(json.dumps({"meta": dict(meta), "data": report.data,
                                "markdown": report.markdown()}, indent=2, default=str))
    return path
