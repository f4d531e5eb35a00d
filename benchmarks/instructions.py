"""Benchmark: all the work a request costs, in machine instructions, with and without failover.

The wall-clock ratios of ``happy_path`` and ``frontends`` move by several percent from one
run to the next on a shared 2-core machine, which is as much as the figures they measure.
The opcode counts (``opcodes``) do not move, but they see only Python: not the C work of
allocations, dictionaries and the garbage collector that every object and call brings,
nor what a front-end hands to C code. This benchmark counts everything the CPU runs for a
request, in instructions (valgrind's ``callgrind``, which simulates the CPU: the count is
within about 0.2 % from run to run, whatever the load), for each client bare and with
failover, and
gives the paired ratio: the cost figure of ``happy_path`` without its noise.

Each variant is one of :mod:`benchmarks.opcodes`' (the same in-process answers, the same
pinned clock and random source), or a chat completion through the OpenAI SDK
(``max_retries=0``) over httpx2 on httpcore2's in-memory network, bare and with
``pytest_failover.httpx2``'s transport (issue 28's figure), or httpx over an inner transport that
answers at once, bare, under this tree's transport and under issue 27's filing commit's
(``_against.staged``): ``happy_path``'s in-process figure, whose target is half of that
commit's. Each runs in a fresh interpreter under valgrind twice, with
:data:`FEW` and :data:`MANY` requests after :data:`WARMUP` uncounted ones; the difference of
the two totals, divided by the difference of the counts, is the cost of one request. Only
the requests are counted: valgrind starts with its instrumentation off, and
``callgrind_control`` turns it on once the child has started, imported and warmed up, and
off once it has sent (the child waits for each word on its standard input). Start-up under
instrumentation was 14.5 of each run's 15 seconds; uninstrumented it takes 3. The
difference of the two runs cancels what the hand-over itself costs. ``PYTHONHASHSEED`` is pinned, as the
layout of sets and dicts moves instruction counts by about 0.1 %; the garbage collector
runs as in production (a count of objects, not of time, decides when).

Only the calling thread is counted, as in ``opcodes``, and it keeps the GIL while it sends
(``sys.setswitchinterval``: it never blocks here). The library's deadline watchdog thread
wakes on a clock, at most every 0.25 s while busy: about once in a thousand requests at
full speed, but once in two under valgrind, which runs the program some fifty times slower.
Let in, those wakes cost 3,700 instructions a request in the watchdog's thread and more in
the calling one (the GIL handed over and back), a figure of valgrind's slowness that also
grew with the machine's load. What is left of the thread's timing moves the count of a failover
variant by up to 500 instructions a request from run to run, a bare client's by 100 (3,000
while a thread asleep for good was woken by every request until it ran, not once).

The same runs count the objects a request makes: the calls of CPython's
``_Py_NewReference``, which every new object passes through, from an allocator or a free
list alike (tuples, dicts, floats, frames made objects). Each one is memory touched, and
freed later: the wall time pays for the objects beside the instructions (cache misses,
the allocator's own branches), more than their instructions show.

What it does not count: time spent waiting (a socket, a lock held by another thread, the
scheduler), and how fast each instruction runs (cache misses: a new object is colder than
an old one). A ratio of instructions is therefore a lower bound of the ratio of times in
process; over a socket, the server's work and the system calls are added to both sides
and the ratio shrinks.

Needs valgrind (``apt-get install valgrind``). Run: ``python -m benchmarks instructions``
(about four minutes on 2 cores; the runs go two at a time).
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks import _harness as h
from benchmarks import opcodes
from benchmarks._options import Options

NAME = "instructions"
WARMUP = 30
FEW, MANY = 100, 400

OPENAI = "openai.OpenAI + FailoverTransport"
BARE_OPENAI = "openai.OpenAI, bare"
# httpx over an inner transport that answers at once (``happy_path``'s in-process table):
# what is left is the wrapper's own work, here and at issue 27's filing commit.
IN_PROCESS = "httpx sync, in process"
BARE_IN_PROCESS = "bare httpx, in process"
FILED = "56f57e5"  # issue 27's filing commit: its target is half of what that tree adds here
IN_PROCESS_FILED = f"httpx sync, in process, at {FILED}"

# Each client's failover variant and the bare client it is paired with.
PAIRS = {
    opcodes.HTTPX_SYNC: opcodes.BARE_HTTPX,
    opcodes.HTTPX_ASYNC: opcodes.BARE_HTTPX_ASYNC,
    opcodes.HEDGING: opcodes.BARE_HTTPX,
    opcodes.ASYNC_HEDGING: opcodes.BARE_HTTPX_ASYNC,
    opcodes.HTTPX2_SYNC: opcodes.BARE_HTTPX2,
    opcodes.REQUESTS_ADAPTER: opcodes.BARE_REQUESTS,
    opcodes.AIOHTTP: opcodes.BARE_AIOHTTP,
    OPENAI: BARE_OPENAI,
    IN_PROCESS: BARE_IN_PROCESS,
    IN_PROCESS_FILED: BARE_IN_PROCESS,
}

# the total of a profile's events (its ``summary:`` line counts from the start, which the
# toggled instrumentation leaves at 0)
_TOTALS = re.compile(r"^totals:\s*(\d+)", re.MULTILINE)
_READY, _SENT = "ready", "sent"  # what the child says, each on a line, before and after it sends
# callgrind's calls from anywhere to the function every new object passes through: a
# ``cfn=`` line names the callee (its name given once, then its number alone), and the
# ``calls=`` line after it says how many times it was called from there
_NEW_OBJECT = "_Py_NewReference"
_CALLEE = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?$")


class ValgrindMissing(RuntimeError):
    """valgrind is not installed."""


@dataclass(frozen=True)
class Counts:
    """What a fresh interpreter's main thread ran: instructions, and objects made."""

    instructions: int
    objects: int

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.instructions - other.instructions, self.objects - other.objects)


@dataclass(frozen=True)
class Pair:
    """Instructions (and objects made) per request of a client with failover and of its
    bare client."""

    variant: str
    bare: str
    failover_per_request: float
    bare_per_request: float
    failover_objects: float
    bare_objects: float

    @property
    def added(self) -> float:
        return self.failover_per_request - self.bare_per_request

    @property
    def ratio(self) -> float:
        return self.failover_per_request / self.bare_per_request


def total_instructions(variant: str, requests: int, *, warmup: int = WARMUP, timeout: float = 300.0) -> int:
    """The instructions a fresh interpreter's main thread runs to start, warm ``variant``
    up with ``warmup`` requests and send ``requests`` more (valgrind's count)."""
    return totals(variant, requests, warmup=warmup, timeout=timeout).instructions


def objects_made(profile: str) -> int:
    """How many objects a callgrind profile's thread made: its calls of
    :data:`_NEW_OBJECT`, summed over every caller."""
    names: dict[str, str] = {}
    callee = ""
    made = 0
    for line in profile.splitlines():
        named = _CALLEE.match(line)
        if named is not None:
            number, name = named.groups()
            if name is not None:
                names[number] = name
            if line.startswith("cfn="):
                callee = names.get(number, "")
        elif callee == _NEW_OBJECT and line.startswith("calls="):
            made += int(line[6:].split(maxsplit=1)[0])
            callee = ""
    return made


def totals(variant: str, requests: int, *, warmup: int = WARMUP, timeout: float = 300.0) -> Counts:
    """The instructions a fresh interpreter's main thread runs to send ``requests`` of
    ``variant`` after ``warmup`` uncounted ones, and the objects it makes (valgrind's counts,
    with the instrumentation on for those requests only)."""
    valgrind = shutil.which("valgrind")
    control = shutil.which("callgrind_control")  # (valgrind's own package ships it)
    if valgrind is None or control is None:
        raise ValgrindMissing("the instructions benchmark needs valgrind: apt-get install valgrind")
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "callgrind.out"
        command = [
            valgrind, "--tool=callgrind", "--cache-sim=no", "--separate-threads=yes", "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable, "-m", "benchmarks.instructions", "--child", variant, str(requests), str(warmup),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        with subprocess.Popen(command, cwd=h.ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as child:  # fmt: skip
            overdue = threading.Timer(timeout, child.kill)  # a child past its time ends: its reads end
            overdue.start()
            try:
                for word, instrument in ((_READY, "on"), (_SENT, "off")):
                    _expect(child, word)
                    subprocess.run([control, f"--instr={instrument}", str(child.pid)], check=True,
                                   capture_output=True, timeout=max(1.0, deadline - time.monotonic()))  # fmt: skip
                    _say(child)
                _, errors = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
                child.kill()
                _, errors = child.communicate()
                raise RuntimeError(f"valgrind on {variant!r} failed: {exc}: {errors[-2000:]}") from exc
            finally:
                overdue.cancel()
        main_thread = Path(f"{out}-01")  # callgrind's file of thread 1
        profile = main_thread.read_text() if main_thread.exists() else ""
        found = _TOTALS.search(profile)
        if child.returncode != 0 or found is None:
            raise RuntimeError(f"valgrind on {variant!r} failed ({child.returncode}): {errors[-2000:]}")
    return Counts(int(found.group(1)), objects_made(profile))


def _expect(child: subprocess.Popen[str], word: str) -> None:
    """Wait for the child to say ``word`` on a line of its own (its other lines are passed
    over; a child that ends, or is killed past its time, never says it)."""
    assert child.stdout is not None
    for line in iter(child.stdout.readline, ""):
        if line.strip() == word:
            return
    raise RuntimeError(f"the child never said {word!r} (exit status {child.wait()})")


def _say(child: subprocess.Popen[str]) -> None:
    """Tell the child to go on (a line on its standard input)."""
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.flush()


def per_request(variant: str, few: int = FEW, many: int = MANY, *, warmup: int = WARMUP) -> float:
    """Instructions per request of ``variant``: the difference of two runs' totals."""
    if not 0 <= few < many:
        raise ValueError(f"need 0 <= few < many, got {few} and {many}")
    with ThreadPoolExecutor(2) as pool:  # two valgrinds at once: one per core
        low, high = pool.map(lambda n: total_instructions(variant, n, warmup=warmup), (few, many))
    return (high - low) / (many - few)


def measure(pairs: dict[str, str] = PAIRS, few: int = FEW, many: int = MANY) -> list[Pair]:
    """Every pair's instructions per request (each bare client counted once), two valgrinds
    at a time, one per core."""
    if not 0 <= few < many:
        raise ValueError(f"need 0 <= few < many, got {few} and {many}")
    variants = sorted({*pairs, *pairs.values()})
    jobs = [(variant, n) for variant in variants for n in (many, few)]  # the longest first
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: totals(*job), jobs), strict=True))
    runs = many - few
    added = {v: counts[v, many] - counts[v, few] for v in variants}
    return [
        Pair(variant, bare, added[variant].instructions / runs, added[bare].instructions / runs,
             added[variant].objects / runs, added[bare].objects / runs)
        for variant, bare in pairs.items()
    ]  # fmt: skip


def run(opts: Options) -> h.Report:
    """``python -m benchmarks instructions``: the table of pairs."""
    started = time.monotonic()
    pairs = measure()
    report = h.Report(NAME)
    table = h.Table(
        "All the work of one happy-path request, in machine instructions (valgrind; within 0.2 % run to run)",
        ["client", "bare", "with failover", "**ratio**", "added per request", "objects made (bare, with)"],
    )
    for pair in pairs:
        table.rows.append([
            pair.variant, f"{pair.bare_per_request / 1000:,.0f}k", f"{pair.failover_per_request / 1000:,.0f}k",
            f"**{pair.ratio:.3f}x**", f"{pair.added / 1000:+,.1f}k",
            f"{pair.bare_objects:,.0f}, {pair.failover_objects:,.0f}",
        ])  # fmt: skip
    added = {pair.variant: pair.added for pair in pairs}
    if added.get(IN_PROCESS_FILED, 0) > 0:
        table.notes.append(
            f"In process, this tree adds **{added[IN_PROCESS] / added[IN_PROCESS_FILED]:.2f}** of the "
            f"instructions issue 27's filing commit ({FILED}) adds to a request "
            f"({added[IN_PROCESS] / 1000:+,.1f}k against {added[IN_PROCESS_FILED] / 1000:+,.1f}k; the issue's "
            "target: half, which `happy_path --against` reads in CPU time)."
        )
    table.notes.append(
        f"Each client answered in process as in `opcodes` (httpx on httpcore's in-memory network; "
        f"the *in process* rows over an inner transport that answers at once, as in `happy_path`); "
        f"{MANY} and {FEW} requests after {WARMUP} uncounted ones, in fresh interpreters under "
        "callgrind, the difference of the totals per request. No OpenTelemetry SDK."
    )
    report.tables.append(table)
    report.data = {pair.variant: {"bare": pair.bare, "failover": pair.failover_per_request,
                                  "bare_per_request": pair.bare_per_request, "failover_objects": pair.failover_objects,
                                  "bare_objects": pair.bare_objects} for pair in pairs}  # fmt: skip
    report.seconds = time.monotonic() - started
    return report


@contextmanager
def _openai(answers: int, *, failover: bool) -> Iterator[opcodes.Send]:
    """``openai.OpenAI`` (``max_retries=0``, the recipe of docs/llm-sdks.md) over httpx2's
    transport on httpcore2's in-memory network, under ``pytest_failover.httpx2``'s
    transport or bare: a chat completion a call, the loopback server's answer."""
    import httpcore2
    import httpx2
    import openai

    from benchmarks._server import _COMPLETION
    from benchmarks.sdks import MESSAGES
    from pytest_failover import Pool
    from pytest_failover.httpx2 import FailoverTransport

    inner = httpx2.HTTPTransport()
    inner._pool = httpcore2.ConnectionPool(network_backend=httpcore2.MockBackend([_COMPLETION] * answers))
    transport = FailoverTransport([Pool("bench", opcodes.DOMAINS)], None, inner, **opcodes._pinned()) if failover else inner
    base_url = opcodes.DOMAINS[0] + "/v1"
    with openai.OpenAI(api_key="bench", base_url=base_url, max_retries=0, http_client=httpx2.Client(transport=transport)) as sdk:
        create = sdk.chat.completions.create

        def send(n: int) -> None:
            for _ in range(n):
                if create(model="bench", messages=MESSAGES).choices[0].message.content != "Hello.":
                    raise RuntimeError("not the completion")

        yield send


@contextmanager
def _in_process(tree: str | None, *, failover: bool = True) -> Iterator[opcodes.Send]:
    """``httpx.Client`` over an inner transport that answers at once, under the
    ``FailoverTransport`` of this tree (``tree`` None) or of the commit ``tree`` names
    (``_against.staged``), or bare: ``happy_path``'s in-process clients, on the real clock."""
    import pytest_failover
    from benchmarks._against import staged
    from benchmarks.happy_path import InProcess

    package = pytest_failover if tree is None else staged(tree)
    pool = package.Pool("bench", list(opcodes.DOMAINS))
    transport = package.FailoverTransport([pool], transport=InProcess()) if failover else InProcess()
    url = opcodes.DOMAINS[0] + "/v1/ping"
    with httpx.Client(transport=transport) as client:
        get = client.get

        def send(n: int) -> None:
            for _ in range(n):
                if get(url).status_code != 200:
                    raise RuntimeError("not the in-process answer")

        yield send


_BUILD: dict[str, Callable[[int], AbstractContextManager[opcodes.Send]]] = {
    **opcodes._BUILD,
    OPENAI: lambda answers: _openai(answers, failover=True),
    BARE_OPENAI: lambda answers: _openai(answers, failover=False),
    IN_PROCESS: lambda answers: _in_process(None),
    IN_PROCESS_FILED: lambda answers: _in_process(FILED),
    BARE_IN_PROCESS: lambda answers: _in_process(None, failover=False),
}


def _child(variant: str, requests: int, warmup: int) -> None:
    """Warm ``variant`` up, then send ``requests`` (what valgrind counts), each step once
    the parent says so (:func:`totals`)."""
    with _BUILD[variant](warmup + requests) as send:
        send(warmup)
        gc.collect()
        sys.setswitchinterval(1000.0)  # no thread woken by a clock takes the GIL meanwhile
        print(_READY, flush=True)
        sys.stdin.readline()  # the instrumentation is on
        send(requests)
        print(_SENT, flush=True)
        sys.stdin.readline()  # and off


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__)
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "REQUESTS", "WARMUP"),
                        help="send the requests (what valgrind runs)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.child:
        variant, requests, warmup = args.child
        _child(variant, int(requests), int(warmup))
        return 0
    print(run(Options()).markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
