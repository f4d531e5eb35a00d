"""Benchmark: the library's own work per happy-path request, counted in Python opcodes.

A cost figure that is not a timing: it does not move with the machine's load, so a
test can hold it under a ceiling (``tests/benchmarks/test_opcodes.py``). For each
variant it counts the opcodes run in frames whose code lies in the ``pytest_failover``
package, and the calls into them (function entries; a generator or coroutine resumed is
not a new call), over :data:`REQUESTS` GETs after :data:`WARMUP` uncounted ones (the
first requests import modules and fill caches). Variants:

- httpx sync (``FailoverTransport``) and async (``AsyncFailoverTransport``);
- httpx2 sync (``pytest_failover.httpx2.FailoverTransport``), the same request path
  over httpx2 and httpcore2;
- httpx sync and async with ``Policy(hedging=Hedging(delay=1.0))``: hedging configured,
  never due (async: the race's loop timer armed and cancelled each request);
- requests with ``FailoverAdapter`` mounted;
- aiohttp with ``FailoverMiddleware``.

Why no socket (not the loopback server of the other benchmarks): the count must be the
same on every run, and over a socket the library's work depends on the timing of the
answer. A coroutine that has to wait for the socket is suspended, and every frame of ours
in the await chain runs opcodes again when it resumes, as often as the answer was not
there yet; a body may come in one read or in two. So the variants answer ``200 {}`` (the
loopback server's answer) in process, as low down as each client allows, and everything
above that runs as in production:

- httpx: httpx's own ``HTTPTransport`` (``AsyncHTTPTransport``) under ours, its httpcore
  connection pool on httpcore's in-memory network (``MockBackend``): httpcore parses the
  bytes of a keep-alive connection. Not ``httpx.MockTransport``: its answers are not the
  ones a connection gives (a body given as bytes comes already read, so the library skips
  its read and its deadline watch), and its inner transport has no sockets to cut, so a
  configured hedge takes the thread-pool race instead of the calling thread's.
- requests: ``FailoverAdapter`` wraps an ``HTTPAdapter`` whose ``send`` builds the
  response on an unread urllib3 ``HTTPResponse``.
- aiohttp: a last middleware after ``FailoverMiddleware`` builds the ``ClientResponse``.

The sync figures are those of the same requests to the loopback server (checked when
this benchmark was written: httpx sync 1,512 both ways); async ones leave out the resumes
that waiting for a socket adds. What else could vary is pinned: the clock (a fake that
moves 1 ms a read), the random source (seeded), the wall clock (fixed), the garbage
collector (off while counting: a finaliser could run at any point). The pool's domains
are loopback addresses that are never connected to.

No OpenTelemetry SDK is installed, as in an application that does not export: the
library then skips its telemetry altogether. An SDK installed by anything else in the
process would change that, so :func:`measure` refuses to run in such a process and
:func:`measure_in_fresh_process` (what ``python -m benchmarks opcodes`` and the test use)
counts in a new interpreter. Hash randomisation differs between processes: a count that
depended on set or dict order would show up as two processes that disagree.

The library's frames miss what a front-end hands to other packages: the requests and
aiohttp front-ends convert their client's objects, and httpx's or the standard library's
code does much of that work. So ``total=True`` (``--total``) counts every frame's opcodes,
by top-level package, for each front-end and for its bare client (:data:`FRONT_ENDS`):
:func:`added` is their difference, all the work the front-end adds to a request, and a
test holds it under a ceiling too.

Only the calling thread is traced: the deadline watchdog's thread (and, with hedging,
the hedge pool's) does nothing per request here, as no deadline or hedge delay (1 s) is
ever reached.

How it counts depends on the interpreter:

- CPython 3.11: ``sys.settrace``, with ``frame.f_trace_opcodes`` set on each
  frame of the package as it is entered.
- CPython 3.12 and later: ``sys.monitoring`` (PEP 669), its ``PY_START`` and
  ``INSTRUCTION`` events. ``sys.settrace`` runs on that machinery there, and a frame
  whose ``f_trace_opcodes`` is set as it is entered gets no opcode events until its
  code's next call: the first call of each function in a count was missed. On 3.13,
  one call of ``error_type_of`` counted 13 opcodes where the next ones counted 197 each.

Opcodes differ from one CPython minor version to the next, so the tests' ceilings are
per version.

Run: ``python -m benchmarks opcodes`` (or ``python -m benchmarks.opcodes`` for JSON).
"""

from __future__ import annotations

import asyncio
import dis
import gc
import io
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from types import CodeType, FrameType, SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import httpx

from benchmarks import _harness as h
from benchmarks._options import Options

if TYPE_CHECKING:
    import aiohttp
    import requests

NAME = "opcodes"
WARMUP = 20
SETTLE = 0.2
"""Seconds the process sleeps between the warm-up and the count, so that the library's own
threads run: the deadline watchdog, started by the first attempt armed, publishes when it
looks next once it has looked, and until then every attempt armed wakes it (a few opcodes
more). On a loaded machine that thread may wait a while for a core: counts taken beside a
valgrind run differed without the pause."""
REQUESTS = 50
URL = "http://127.0.0.1:9/v1/ping"
DOMAINS = ["http://127.0.0.1:9", "http://127.0.0.1:10"]  # loopback, never connected to
HTTPX_SYNC = "httpx sync"
HTTPX_ASYNC = "httpx async"
HTTPX2_SYNC = "httpx2 sync"
HEDGING = "httpx sync, Hedging(delay=1.0)"
ASYNC_HEDGING = "httpx async, Hedging(delay=1.0)"
REQUESTS_ADAPTER = "requests FailoverAdapter"
AIOHTTP = "aiohttp FailoverMiddleware"
VARIANTS = (HTTPX_SYNC, HTTPX_ASYNC, HTTPX2_SYNC, HEDGING, ASYNC_HEDGING, REQUESTS_ADAPTER, AIOHTTP)
BARE_HTTPX = "httpx, bare"
BARE_HTTPX_ASYNC = "httpx async, bare"
BARE_HTTPX2 = "httpx2, bare"
BARE_REQUESTS = "requests, bare"
BARE_AIOHTTP = "aiohttp, bare"
TOTAL_VARIANTS = (
    BARE_HTTPX, HTTPX_SYNC, BARE_HTTPX_ASYNC, HTTPX_ASYNC, BARE_HTTPX2, HTTPX2_SYNC,
    BARE_REQUESTS, REQUESTS_ADAPTER, BARE_AIOHTTP, AIOHTTP,
)  # fmt: skip
"""The variants :func:`measure` counts every frame of (``total=True``)."""
FRONT_ENDS = {
    HTTPX_SYNC: BARE_HTTPX, HTTPX_ASYNC: BARE_HTTPX_ASYNC, HTTPX2_SYNC: BARE_HTTPX2,
    REQUESTS_ADAPTER: BARE_REQUESTS, AIOHTTP: BARE_AIOHTTP,
}  # fmt: skip
"""Each front-end and the bare client it is paired with: the difference of their totals is
all the work the front-end adds to a request, whoever's code runs it."""

Send = Callable[[int], None]
"""Sends ``n`` happy-path GETs through one variant's client."""
Tracer = Callable[[FrameType, str, Any], Any]


@dataclass(frozen=True)
class Count:
    """The library's work over ``requests`` happy-path requests of one variant."""

    requests: int
    opcodes: int
    calls: int
    modules: dict[str, int]  # opcodes per module of the package ("_exchange", "integrations.requests"),
    # or, counting every frame, per top-level package ("httpx", "requests", "pytest_failover", "stdlib")
    general: list[str] = field(default_factory=list)  # the package's look-ups left general (see GENERAL)

    @property
    def per_request(self) -> float:
        return self.opcodes / self.requests

    @property
    def calls_per_request(self) -> float:
        return self.calls / self.requests

    def module_per_request(self, module: str) -> float:
        return self.modules.get(module, 0) / self.requests


# ---------------------------------------------------------------- counting


class _Tracer:
    """Counts the opcodes of the package's frames: a ``sys.settrace`` function, or the
    callbacks of :func:`_monitored`."""

    def __init__(self, package: str) -> None:
        self._root = package + os.sep
        self.opcodes: Counter[str] = Counter()
        self.calls = 0
        self._modules: dict[CodeType, str | None] = {}
        self._entries: dict[CodeType, int] = {}
        self._locals: dict[str, Tracer] = {}
        self.ran: set[tuple[CodeType, int]] = set()  # each instruction counted: its code, its offset

    def module(self, code: CodeType) -> str | None:
        """The name ``code``'s opcodes count under; None when they are not counted."""
        module = self._modules.get(code, "")
        if module == "":
            module = self._modules[code] = self._module_of(code)
        return module

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Tracer | None:
        code = frame.f_code
        module = self.module(code)
        if module is None:
            return None  # not ours: no opcode events for this frame
        if frame.f_lasti <= self._entry(code):  # entered, not resumed
            self.calls += 1
        frame.f_trace_lines = False
        frame.f_trace_opcodes = True
        local = self._locals.get(module)
        if local is None:
            local = self._locals[module] = self._counting(module)
        return local

    def _module_of(self, code: CodeType) -> str | None:
        name = code.co_filename
        if not name.startswith(self._root) or not name.endswith(".py"):
            return None
        return name[len(self._root) : -3].replace(os.sep, ".").removesuffix(".__init__")

    def _entry(self, code: CodeType) -> int:
        """Where a frame of ``code`` stands when it is entered: its first ``RESUME``
        (a generator's frame stands there on its first run, later at a yield)."""
        entry = self._entries.get(code)
        if entry is None:
            offsets = (i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")
            entry = self._entries[code] = next(offsets, 0)
        return entry

    def _counting(self, module: str) -> Tracer:
        opcodes, ran = self.opcodes, self.ran

        def local(frame: FrameType, event: str, arg: Any) -> Tracer:
            if event == "opcode":
                opcodes[module] += 1
                ran.add((frame.f_code, frame.f_lasti))
            return local

        return local


class _EveryFrame(_Tracer):
    """The same count over every frame the thread runs, by top-level package: the
    package's own, a dependency's (``httpx``, ``urllib3``, ``aiohttp``...), the standard
    library's (``stdlib``, its frozen modules too), this benchmark's (``benchmarks``: the
    in-process answers and the loop that sends) or ``other`` (code made at run time)."""

    def __init__(self, package: str) -> None:
        super().__init__(package)
        self._ours = os.path.basename(package)
        self._site = os.sep + "site-packages" + os.sep
        self._stdlib = os.path.dirname(os.__file__) + os.sep
        self._benchmarks = os.path.dirname(__file__) + os.sep

    def _module_of(self, code: CodeType) -> str | None:
        name = code.co_filename
        if name.startswith(self._root):
            return self._ours
        _, site, below = name.partition(self._site)
        if site:
            return below.split(os.sep, 1)[0].removesuffix(".py")
        if name.startswith((self._stdlib, "<frozen ")):
            return "stdlib"
        return "benchmarks" if name.startswith(self._benchmarks) else "other"


def count_opcodes(send: Send, requests: int, *, total: bool = False, ran: set[tuple[CodeType, int]] | None = None) -> Count:
    """The package's opcodes and calls while ``send(requests)`` runs in this thread
    (``total``: every frame's, by top-level package); each instruction counted added to
    ``ran``, if given (its code and offset)."""
    import pytest_failover

    package = os.path.dirname(pytest_failover.__file__)  # as the code objects spell it
    tracer = _EveryFrame(package) if total else _Tracer(package)
    collecting = gc.isenabled()
    gc.disable()
    try:
        with _counting(tracer):
            send(requests)
    finally:
        if collecting:
            gc.enable()
    if ran is not None:
        ran |= tracer.ran
    return Count(requests, sum(tracer.opcodes.values()), tracer.calls, dict(tracer.opcodes.most_common()))


GENERAL = frozenset({
    "LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "LOAD_GLOBAL", "LOAD_SUPER_ATTR",  # never quickened (3.11), or left general (3.12+)
    "LOAD_ATTR_ADAPTIVE", "LOAD_METHOD_ADAPTIVE", "STORE_ATTR_ADAPTIVE", "LOAD_GLOBAL_ADAPTIVE",  # 3.11's left general
})  # fmt: skip
"""The general forms of the attribute and global look-ups. The interpreter specialises each
look-up for what it meets (PEP 659): an attribute in an instance's values, in a slot, a
method of the class, a module's global. One it cannot specialise stays general, and runs a
full look-up at every run: on CPython 3.11, an attribute of the class read through an
instance, an instance's attribute whose name the class binds to an object of a mutable
class (``_transport._FailoverBase._library``), a method looked up on an instance's own
attribute (``state.clock()``, where ``clock`` is a callable in a slot). The opcode count does
not see the difference."""


def general_lookups(ran: set[tuple[CodeType, int]]) -> list[str]:
    """Of the instructions in ``ran`` (code, offset), the look-ups the interpreter runs in a
    general form (:data:`GENERAL`) as it stands now, each as ``"qualified name: OPNAME
    name"``, sorted. Asked after the code ran again untraced: tracing leaves specialised
    instructions in their general form until they run again."""
    offsets: dict[CodeType, set[int]] = {}
    for code, offset in ran:
        offsets.setdefault(code, set()).add(offset)
    return sorted(
        f"{code.co_qualname}: {instruction.opname} {instruction.argval}"
        for code, at in offsets.items()
        for instruction in dis.get_instructions(code, adaptive=True)
        if instruction.offset in at and instruction.opname in GENERAL
    )


@contextmanager
def _traced(tracer: _Tracer) -> Iterator[None]:
    """``tracer`` as this thread's ``sys.settrace`` function (CPython 3.11)."""
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(previous)


if sys.version_info >= (3, 12):

    @contextmanager
    def _monitored(tracer: _Tracer) -> Iterator[None]:
        """``tracer``'s counts, taken with ``sys.monitoring`` (CPython 3.12 and later): every
        code object is instrumented from its next start, so a function's first call counts in
        full. A code location whose opcodes do not count is disabled at its first event. The
        events are the interpreter's, not a thread's: those of another thread (the deadline
        watchdog's look, every ``MAX_SLEEP`` while requests come) are let through uncounted,
        as ``sys.settrace``, set for one thread, never sees them."""
        monitoring = sys.monitoring
        events = monitoring.events
        tool = next((i for i in range(6) if monitoring.get_tool(i) is None), None)
        if tool is None:
            raise RuntimeError("opcodes: every sys.monitoring tool id is taken (a debugger or a coverage tool?)")
        disable = monitoring.DISABLE
        module_of = tracer.module
        opcodes, ran = tracer.opcodes, tracer.ran
        counting, thread = threading.get_ident(), threading.get_ident

        def started(code: CodeType, offset: int) -> object:
            if module_of(code) is None:
                return disable
            if thread() == counting:
                tracer.calls += 1
            return None

        def instruction(code: CodeType, offset: int) -> object:
            module = module_of(code)
            if module is None:
                return disable
            if thread() == counting:
                opcodes[module] += 1
                ran.add((code, offset))
            return None

        monitoring.use_tool_id(tool, "benchmarks.opcodes")
        try:
            monitoring.register_callback(tool, events.PY_START, started)
            monitoring.register_callback(tool, events.INSTRUCTION, instruction)
            monitoring.restart_events()  # locations an earlier count disabled count again
            monitoring.set_events(tool, events.PY_START | events.INSTRUCTION)
            try:
                yield
            finally:
                monitoring.set_events(tool, events.NO_EVENTS)
        finally:
            monitoring.register_callback(tool, events.PY_START, None)
            monitoring.register_callback(tool, events.INSTRUCTION, None)
            monitoring.free_tool_id(tool)

    _counting = _monitored
else:
    _counting = _traced


# ---------------------------------------------------------------- pinned inputs


class _Clock:
    """A monotonic clock that moves 1 ms each time it is read. It starts at
    ``time.monotonic()``: the library's deadline watchdog compares attempt deadlines
    with the real clock, so they must lie ahead of it (10 s, as on a real clock)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def _pinned() -> dict[str, Any]:
    """The transports' time and random inputs, the same on every run; no providers
    (no SDK installed: the library skips telemetry)."""
    return {"clock": _Clock(), "wall_clock": lambda: 1_700_000_000.0, "random": random.Random(27).random}


_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"  # the server's


# ---------------------------------------------------------------- variants


@contextmanager
def _httpx(
    answers: int, *, asynchronous: bool = False, hedging: bool = False, httpx2: bool = False, failover: bool = True
) -> Iterator[Send]:
    """httpx's own transport under ours, its connection pool on httpcore's in-memory
    network: one keep-alive connection that has ``answers`` answers to read (``httpx2``:
    httpx2's transport under ``pytest_failover.httpx2``'s, on httpcore2's; ``failover=False``:
    the same transport alone, the bare client)."""
    import httpcore

    import pytest_failover as pf

    pools = [pf.Pool("bench", DOMAINS)]
    policy = pf.Policy(hedging=pf.Hedging(delay=1.0)) if hedging else None
    answered = [_ANSWER] * answers
    http: Any = httpx
    core: Any = httpcore
    front: Any = pf
    if httpx2:
        import httpcore2 as core
        import httpx2 as http

        from pytest_failover import httpx2 as front
    if not asynchronous:
        inner = http.HTTPTransport()
        inner._pool = core.ConnectionPool(network_backend=core.MockBackend(answered))
        transport = front.FailoverTransport(pools, policy, inner, **_pinned()) if failover else inner
        with http.Client(transport=transport) as client:

            def send(n: int) -> None:
                for _ in range(n):
                    _check(client.get(URL).status_code)

            yield send
        return
    ainner = http.AsyncHTTPTransport()
    ainner._pool = core.AsyncConnectionPool(network_backend=core.AsyncMockBackend(answered))
    atransport = front.AsyncFailoverTransport(pools, policy, ainner, **_pinned()) if failover else ainner
    aclient = http.AsyncClient(transport=atransport)

    async def many(n: int) -> None:
        for _ in range(n):
            _check((await aclient.get(URL)).status_code)

    with _on_loop(_StillLoop(), many, aclient.aclose) as asend:
        yield asend


@contextmanager
def _on_loop(
    loop: asyncio.AbstractEventLoop,
    many: Callable[[int], Coroutine[Any, Any, None]],
    close: Callable[[], Coroutine[Any, Any, None]],
) -> Iterator[Send]:
    """``many`` run on ``loop``; then ``close`` and the loop closed."""
    try:
        yield lambda n: loop.run_until_complete(many(n))
    finally:
        loop.run_until_complete(close())
        loop.close()


@contextmanager
def _requests(*, failover: bool = True) -> Iterator[Send]:
    """A session whose adapter answers in process, under a ``FailoverAdapter`` (or bare)."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3 import HTTPResponse

    import pytest_failover as pf
    from pytest_failover.integrations.requests import FailoverAdapter

    class Answer(HTTPAdapter):
        """Answers every request at once, as a connection would: ``200 {}``."""

        def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
                 verify: bool | str = True, cert: Any = None, proxies: Any = None) -> requests.Response:  # fmt: skip
            headers = {"Content-Type": "application/json", "Content-Length": "2"}
            raw = HTTPResponse(io.BytesIO(b"{}"), headers=headers, status=200, preload_content=False)
            return self.build_response(request, raw)

    # The adapter takes no clock: it shares the state of a transport built with the pinned one.
    state = pf.FailoverTransport([pf.Pool("bench", DOMAINS)], **_pinned())
    with requests.Session() as session:
        session.mount("http://", FailoverAdapter.sharing(state, adapter=Answer()) if failover else Answer())

        # Every answer is kept until the variant is done. The adapter's deadline watchdog holds
        # each answer a while, and lets go of it in its own thread: the urllib3 response's
        # finaliser (its ``closed`` property, in Python) then ran in this thread or in that one,
        # as the threads' timing fell, and the count of every frame moved with it.
        kept: list[requests.Response] = []

        def send(n: int) -> None:
            for _ in range(n):
                response = session.get(URL)
                kept.append(response)
                _check(response.status_code)

        yield send


@contextmanager
def _aiohttp(*, failover: bool = True) -> Iterator[Send]:
    """A session whose last middleware answers in process, after a ``FailoverMiddleware`` (or alone)."""
    import aiohttp
    from aiohttp.client_middlewares import ClientHandlerType
    from aiohttp.helpers import TimerNoop
    from multidict import CIMultiDict, CIMultiDictProxy

    import pytest_failover as pf
    from pytest_failover.integrations.aiohttp import FailoverMiddleware

    headers = CIMultiDict({"Content-Type": "application/json", "Content-Length": "2"})
    raw = tuple((name.encode(), value.encode()) for name, value in headers.items())

    async def answer(request: aiohttp.ClientRequest, handler: ClientHandlerType) -> aiohttp.ClientResponse:
        """The last middleware: answers ``200 {}`` at once, as the connection would."""
        response = aiohttp.ClientResponse(
            request.method, request.url, writer=None, continue100=None, timer=TimerNoop(),
            request_info=request.request_info, traces=[], loop=loop, session=request.session,
            stream_writer=cast(Any, SimpleNamespace(output_size=0)),  # nothing was written: no connection
        )  # fmt: skip
        response.status, response._headers, response._body = 200, CIMultiDictProxy(headers), b"{}"
        response._raw_headers = raw  # as the connection's parser leaves both
        return response

    # The middleware takes no clock: it shares the state of a transport built with the pinned one.
    state = pf.AsyncFailoverTransport([pf.Pool("bench", DOMAINS)], **_pinned())
    loop = _StillLoop()

    async def start() -> aiohttp.ClientSession:
        middlewares = (FailoverMiddleware.sharing(state), answer) if failover else (answer,)
        return aiohttp.ClientSession(middlewares=middlewares)

    session = loop.run_until_complete(start())

    async def many(n: int) -> None:
        for _ in range(n):
            async with session.get(URL) as response:
                await response.read()
                _check(response.status)

    with _on_loop(loop, many, session.close) as send:
        yield send


class _StillLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock stands still. aiohttp rounds its timers up to the next
    whole second, so on a moving clock the order of the cancelled timers in the loop's heap,
    and the loop's work to drop them, depends on where a second began: a count of every
    frame's opcodes moved with it. And the failover loop's deadline watch keeps one timer at
    its earliest deadline (a hedge's, 1 s on): a run that took longer, traced on a loaded
    machine, saw it fire (99 opcodes more, in one process and not the other). No timer is ever
    due here (none is shorter than the attempt's time), so nothing waits on the clock."""

    def __init__(self) -> None:
        super().__init__()
        self._now = super().time()

    def time(self) -> float:
        return self._now


def _check(status: int) -> None:
    if status != 200:
        raise RuntimeError(f"status {status}, expected the in-process 200")


_BUILD: dict[str, Callable[[int], AbstractContextManager[Send]]] = {  # answers -> the variant's sender
    HTTPX_SYNC: _httpx,
    HTTPX_ASYNC: lambda answers: _httpx(answers, asynchronous=True),
    HTTPX2_SYNC: lambda answers: _httpx(answers, httpx2=True),
    HEDGING: lambda answers: _httpx(answers, hedging=True),
    ASYNC_HEDGING: lambda answers: _httpx(answers, asynchronous=True, hedging=True),
    REQUESTS_ADAPTER: lambda answers: _requests(),
    AIOHTTP: lambda answers: _aiohttp(),
    BARE_HTTPX: lambda answers: _httpx(answers, failover=False),
    BARE_HTTPX_ASYNC: lambda answers: _httpx(answers, asynchronous=True, failover=False),
    BARE_HTTPX2: lambda answers: _httpx(answers, httpx2=True, failover=False),
    BARE_REQUESTS: lambda answers: _requests(failover=False),
    BARE_AIOHTTP: lambda answers: _aiohttp(failover=False),
}


# ---------------------------------------------------------------- public functions


def measure(
    requests: int = REQUESTS,
    warmup: int = WARMUP,
    *,
    total: bool = False,
    variants: tuple[str, ...] | None = None,
    general: bool = False,
) -> dict[str, Count]:
    """Each variant's count over ``requests`` GETs after ``warmup`` ones, in this process
    (``total``: every frame's opcodes, for each of :data:`TOTAL_VARIANTS`; ``variants``:
    those only; ``general``: with the package's look-ups left general, ``Count.general``).
    Those of a variant are its own in a process that ran it alone: code two front-ends
    share meets the classes of both, and a look-up specialised for one misses on the other's.

    Raises RuntimeError if an OpenTelemetry SDK is installed in this process: the
    library would then do its telemetry, and the figures would not be the no-SDK ones.
    """
    from opentelemetry import metrics, trace

    providers = (trace.get_tracer_provider(), metrics.get_meter_provider())
    if any(not type(p).__module__.startswith(("opentelemetry.trace", "opentelemetry.metrics")) for p in providers):
        raise RuntimeError("an OpenTelemetry SDK is installed in this process: use measure_in_fresh_process()")
    counts: dict[str, Count] = {}
    for name in variants or (TOTAL_VARIANTS if total else VARIANTS):
        with _BUILD[name](warmup + requests + warmup) as send:
            send(warmup)
            time.sleep(SETTLE)
            ran: set[tuple[CodeType, int]] = set()
            count = count_opcodes(send, requests, total=total, ran=ran)
            if general:  # the package's look-ups left general, once its code ran again untraced
                send(warmup)
                count = Count(count.requests, count.opcodes, count.calls, count.modules, general_lookups(ran))
            counts[name] = count
    return counts


def measure_in_fresh_process(
    requests: int = REQUESTS,
    warmup: int = WARMUP,
    timeout: float = 120.0,
    *,
    total: bool = False,
    variants: tuple[str, ...] = (),
    general: bool = False,
) -> dict[str, Count]:
    """:func:`measure` in a new interpreter (``python -m benchmarks.opcodes``)."""
    output = subprocess.run(
        [sys.executable, "-m", "benchmarks.opcodes", "--requests", str(requests), "--warmup", str(warmup),
         *(["--total"] if total else []), *(["--general"] if general else []),
         *(f"--variant={name}" for name in variants)],
        cwd=h.ROOT, capture_output=True, text=True, check=True, timeout=timeout,
    ).stdout  # fmt: skip
    return {name: Count(**fields) for name, fields in json.loads(output).items()}


def added(totals: dict[str, Count], front_end: str) -> Count:
    """All the work ``front_end`` adds to a request: its total less its bare client's
    (:data:`FRONT_ENDS`), over the same number of requests, per package."""
    mine, bare = totals[front_end], totals[FRONT_ENDS[front_end]]
    if mine.requests != bare.requests:
        raise ValueError(f"{front_end}: {mine.requests} requests counted against {bare.requests} bare ones")
    modules = Counter(mine.modules)
    modules.subtract(bare.modules)
    by_package = {name: n for name, n in modules.most_common() if n}
    return Count(mine.requests, mine.opcodes - bare.opcodes, mine.calls - bare.calls, by_package)


def run(opts: Options) -> h.Report:
    """``python -m benchmarks opcodes``: the counts, per variant and per module."""
    started = time.monotonic()
    counts = measure_in_fresh_process()
    report = h.Report(NAME)
    table = h.Table(
        "The library's own work per happy-path request (Python opcodes; deterministic)",
        ["variant", "**opcodes per request**", "calls per request", "opcodes per request, by module"],
    )
    for name, count in counts.items():
        modules = ", ".join(f"`{m}` {n / count.requests:,.0f}" for m, n in count.modules.items())
        table.rows.append([name, f"**{count.per_request:,.0f}**", f"{count.calls_per_request:,.0f}", modules])
    table.notes.append(
        f"{REQUESTS} GETs per variant after {WARMUP} uncounted ones, each answered in process (no socket); "
        "only frames whose code lies in the pytest_failover package are counted. No OpenTelemetry SDK. "
        "The same figures on every run: `tests/benchmarks/test_opcodes.py` holds them under ceilings."
    )
    table.notes.append("Target (issue 27): httpx sync <= 750 opcodes per request.")
    report.tables.append(table)
    totals = measure_in_fresh_process(total=True)
    front = h.Table(
        "All the work a front-end adds to a request: every frame's opcodes, less the bare client's (deterministic)",
        ["front-end", "bare client", "**added opcodes per request**", "added calls", "added, by package"],
    )
    for name, bare in FRONT_ENDS.items():
        more = added(totals, name)
        packages = ", ".join(f"`{m}` {n / more.requests:+,.0f}" for m, n in more.modules.items())
        front.rows.append([
            name, f"{totals[bare].per_request:,.0f}", f"**{more.per_request:+,.0f}**",
            f"{more.calls_per_request:+,.0f}", packages,
        ])  # fmt: skip
    front.notes.append(
        "The same requests, each client answered in process as above, every frame in the calling thread "
        "counted (the client's own, httpx's, the standard library's): the front-end's conversions show "
        "here, where the library-only count misses the work they hand to other packages."
    )
    report.tables.append(front)
    report.data = {name: asdict(count) for name, count in counts.items()}
    report.data["total"] = {name: asdict(count) for name, count in totals.items()}
    report.seconds = time.monotonic() - started
    return report


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.opcodes", description="Print the counts as JSON.")
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--total", action="store_true", help="count every frame's opcodes (TOTAL_VARIANTS)")
    parser.add_argument("--variant", action="append", choices=[*VARIANTS, *TOTAL_VARIANTS], help="only this one (repeatable)")
    parser.add_argument("--general", action="store_true", help="list the look-ups left general (GENERAL)")
    args = parser.parse_args(argv)
    variants = tuple(args.variant or ()) or None
    counts = measure(args.requests, args.warmup, total=args.total, variants=variants, general=args.general)
    print(json.dumps({name: asdict(count) for name, count in counts.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
