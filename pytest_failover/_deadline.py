"""Deadlines over a whole exchange: connect, send, and every byte the transport reads.

httpx's timeouts apply to each network operation, so a server that trickles one
byte every 0.4 s never trips a 3 s read timeout and can hold a call for ever.
An attempt's time is therefore bounded from outside:

- async: the attempt runs under its event loop's deadline watch (:class:`_LoopWatch`),
  the watchdog's twin for a loop: arming adds the attempt to a set, disarming takes
  it out, and one loop timer at the earliest deadline cancels the task of an attempt
  past its time, which turns into ``TimeoutError`` as under ``asyncio.timeout``, an
  outer cancellation staying one; a task in a section anyio shields (httpcore handing a
  connection back) is cut once the section is over (:func:`_shielded`).
  ``asyncio.timeout`` did this with a timer of its own per attempt: about 400 opcodes
  of asyncio's Python a request (the ``Timeout``, a ``TimerHandle`` pushed on the
  loop's heap and cancelled, the heap's Python ``__lt__``) against 81 of the watch's.
  Every frame the aiohttp middleware adds to a request: 2,215 -> 1,750 opcodes;
  instructions a request (callgrind, mock network): aiohttp middleware 368k -> 340k,
  httpx async 1,908k -> 1,878k. Under trio, or outside a task, anyio's cancel scope
  (:class:`_Scope`).
- sync: a blocked ``recv`` cannot be cancelled from its own thread. One watchdog
  thread per process keeps the armed deadlines; when one passes, it shuts
  down the socket of that attempt (``socket.shutdown`` is safe from another
  thread), the blocked read returns at once, and the transport reports a timeout.
  The attempt is armed as it goes out, and its socket looked up only when it
  is past its time (``_sockets.cut_attempt``): its response's once the
  headers came (httpcore's ``network_stream`` extension, or a front-end's),
  before that the one httpx's own transport's pool gives its request
  (``_sockets.cut_request``), so a server that trickles its *headers* a byte at
  a time is cut at the deadline too. With another inner transport (the requests
  adapter's) the headers are bounded per read, by its own timeouts capped at
  the attempt's remaining time. Connecting, and waiting for a connection, are
  bounded by httpx's own timeouts, capped alike. httpcore's ``trace`` extension
  would tell the socket too, but makes httpcore call back a dozen times per
  request on the happy path.

Both raise the library's own timeout naming the limit, so an exceeded deadline is
classified like any other timeout: the one of the phase the cut found the attempt in
(``Exchange.timed_out``), which the cancellation's frames tell for an async attempt
(``_sockets.cut_phase``: a connect cut on a busy loop before httpx's own timeout fired is
a ``ConnectTimeout``, which sent nothing); the sync watchdog cuts only a connected socket:
a write or a read.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeAlias

from ._fork import call_in_child, renew_in_child
from ._sockets import cut_attempt

if TYPE_CHECKING:
    from types import TracebackType

    from ._looplag import LagMeter
    from ._values import Attempt

__all__ = ["GRACE", "arm", "async_limit", "call_at", "cancel_unshielded", "disarm", "watchdog", "when_unshielded"]

logger = logging.getLogger("pytest_failover")

# An async attempt's guard, which spans the connect, fires this long after the attempt's
# time: httpx's own timeouts, set to the same time, mostly go first and name the phase
# (``connect_timeout``, ``read_timeout``; a connect that timed out was not sent), and the
# guard stops what they cannot, such as a body trickled a byte at a time. On a busy loop
# it may still fire first: the phase is then read from where its cancellation landed. The sync
# watchdog guards only the body, where no phase is left to name: it fires at the time
# itself.
GRACE = 0.02


def async_limit(seconds: float) -> AbstractContextManager[object]:
    """A context manager that cancels its body after ``seconds`` and raises ``TimeoutError``:
    the running asyncio loop's :class:`_LoopWatch`, else (trio, or outside a task) anyio's
    cancel scope (:class:`_Scope`). A plain ``with``: nothing awaits between the body's end
    and the disarm. Either way the ``TimeoutError``'s cause is the cancellation that cut the
    body, whose frames say where it landed (``_sockets.cut_phase``)."""
    watch = watch_here()
    if watch is None:  # no asyncio loop: trio
        return _Scope(seconds)
    loop = watch.loop
    task = _task_of(loop)
    if task is None:  # not in a task
        return _Scope(seconds)
    # Armed here, slot by slot: an ``__init__`` would run from C, a frame the interpreter
    # cannot run inline as it does this function's.
    at = loop.time() + seconds
    limit = _Limit()
    limit.armed = watch.armed
    limit.task = task
    limit.at = at
    limit.cancelling = task.cancelling()  # the cancellations already asked for (from outside)
    watch.armed.add(limit)
    if at < watch.wakes_at:
        watch.wake(at)
    return limit


def watch_here() -> _LoopWatch | None:
    """The deadline watch of the asyncio loop running in this thread (None: none runs, as
    under trio).

    The watch looked up last (``_latest``: a process mostly runs one loop) when its loop
    is asyncio's own and runs in this thread now, which its ``_thread_id`` says (asyncio
    sets it for the loop's run, and only one loop runs in a thread at a time); else asyncio's
    running loop's. Not ``asyncio._get_running_loop()`` first: it asks the kernel for the
    process id on every call (so that a fork's child never sees its parent's loop), a
    ``getpid`` system call an attempt (strace, 3,700 aiohttp requests: 3,733 calls, 34
    since). This look-up takes 88 ns where that one took 187 (a loop of 500,000, warm);
    the loopback ratios did not move beyond their noise, but a system call costs more
    where they are intercepted (gVisor, seccomp filters). A fork's child forgets the
    watch at hand instead (:func:`_forget`)."""
    watch = _latest()
    if watch is not None and watch.running._thread_id == _thread():
        return watch
    loop = _running_loop()
    if loop is None:
        return None
    return watch if watch is not None and watch.loop is loop else _watch_of(loop)


def _watch_of(loop: asyncio.AbstractEventLoop) -> _LoopWatch:
    """``loop``'s deadline watch: the one it has, or a new one; kept at hand (``_latest``)
    for the next attempt's limit, which then skips the registry's look-up (a Python call of
    its own, ``WeakKeyDictionary.get``)."""
    global _latest  # a weak cache of the registry's last answer, set only here (and reset in a fork's child)
    ref = _watches.get(loop)
    watch = None if ref is None else ref()
    if watch is None:
        watch = _LoopWatch(loop)
    _latest = weakref.ref(watch)
    return watch


# The running asyncio loop (None: none, as under trio) and its running task (None: not in
# a task: anyio's limit then), both C calls: Python 3.11's ``asyncio.current_task`` is a
# Python function (13 opcodes, a frame of its own) over the dict its C tasks keep current.
_running_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio._get_running_loop
_thread = threading.get_ident
_task_of: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]
if sys.version_info >= (3, 12):
    _task_of = asyncio.current_task  # C
else:
    _task_of = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]  # asyncio.current_task's own dict, untyped


class _Limit:
    """One armed async attempt (:func:`async_limit` arms it): a context manager that disarms it
    on the way out and turns the watch's cancellation into ``TimeoutError``, as
    ``asyncio.timeout`` does."""

    # Set by async_limit. No ``__init__``: ``_Limit()`` then runs in C alone, cheaper than
    # ``object.__new__(_Limit)`` (whose wrapper slices its arguments into a new tuple).
    __slots__ = ("armed", "at", "cancelling", "task")

    armed: set[_Limit]  # its watch's
    task: asyncio.Task[Any]
    at: float  # the loop's time
    cancelling: int  # the cancellations already asked for (from outside) when armed

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            self.armed.remove(self)
        except KeyError:  # the watch took it out: it cancelled the task at ``at``
            # Ours is the only cancellation when, once it is taken back, no more are left
            # than before the attempt: an outer one (the caller's, or a hedge that won)
            # stays a CancelledError and is never a timeout.
            if self.task.uncancel() <= self.cancelling and kind is not None and issubclass(kind, asyncio.CancelledError):
                raise TimeoutError from exc


class _Scope:
    """anyio's ``fail_after`` (trio; asyncio outside a task), keeping the cancellation that
    cut the body as its ``TimeoutError``'s cause, as ``asyncio.timeout`` and :class:`_Limit`
    do. ``fail_after`` raises its ``TimeoutError`` after its scope swallowed the
    cancellation, which leaves nothing to tell where the cut landed."""

    __slots__ = ("scope",)

    def __init__(self, seconds: float) -> None:
        import anyio  # httpx's own dependency

        self.scope = anyio.CancelScope(deadline=anyio.current_time() + seconds)

    def __enter__(self) -> None:
        self.scope.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        import anyio

        scope = self.scope
        swallowed = bool(scope.__exit__(kind, exc, tb))
        # fail_after's rule: the scope took its own cancellation, and its deadline had come
        if swallowed and scope.cancelled_caught and anyio.current_time() >= scope.deadline:
            raise TimeoutError from exc
        return swallowed


class _LoopWatch:
    """The deadlines of one event loop's async attempts, on one loop timer.

    The sync side's :class:`_Watchdog`, for a loop: arming adds the attempt's
    :class:`_Limit` to a set, and disarming removes it. The one timer is set to the
    earliest deadline, and moved only for an attempt whose deadline comes before it:
    attempts of one time arm in the order of their deadlines, so the timer stays where
    the first one set it, and when it fires (mostly for an attempt long answered) it
    cuts what is due and moves to the earliest deadline still armed. A busy client wakes
    it about once an attempt's time, not once an attempt. Cutting is taking the attempt
    out and cancelling its task, which :class:`_Limit` turns into ``TimeoutError``.

    Only the loop holds the watch (its timer, and the attempts' frames through their
    limits); the registry holds it weakly, so a closed loop, with whatever was left
    armed on it, leaves nothing behind. The watch holds its timer weakly too: the
    timer's callback holds the watch, and a loop closed with the timer set (its heap
    cleared) would otherwise leave the two, and the loop through the watch, to the
    cyclic collector. A watch whose timer found nothing armed is dropped, and the
    loop's next attempt makes a new one.
    """

    __slots__ = ("__weakref__", "_handle", "_lag", "armed", "loop", "running", "wakes_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # what tells whether the loop runs in this thread (:func:`watch_here`): asyncio's own
        # loop; another's (uvloop's) never says, and is asked for each time
        self.running: Any = loop if isinstance(loop, asyncio.BaseEventLoop) else _Untold
        self.armed: set[_Limit] = set()
        self._handle: Callable[[], asyncio.TimerHandle | None] | None = None  # (see _weakly)
        self.wakes_at = math.inf  # when the timer fires (inf: no timer)
        self._lag: weakref.ref[LagMeter] | None = None  # (see lag)
        _watches[loop] = weakref.ref(self)

    @property
    def lag(self) -> LagMeter | None:
        """How late the loop runs, while slow-call verdicts ask (``_looplag``). Held weakly:
        the meter's timer holds it while it runs, and it holds this watch then (a loop
        closed with both timers set leaves neither to the cyclic collector)."""
        return None if self._lag is None else self._lag()

    @lag.setter
    def lag(self, meter: LagMeter | None) -> None:
        self._lag = None if meter is None else weakref.ref(meter)

    def wake(self, at: float) -> None:
        """Look at ``at`` (the loop's time) instead of when the timer fires now."""
        handle = None if self._handle is None else self._handle()
        if handle is not None:
            handle.cancel()
        self.wakes_at = at
        self._handle = _weakly(self.loop.call_at(at, self._fire))

    def _fire(self) -> None:
        self._handle = None
        # The loop ran this timer, so every deadline up to it is due (it may run a timer
        # up to its clock's resolution early).
        due = max(self.loop.time(), self.wakes_at)
        armed = self.armed
        held = False
        for guard in [guard for guard in armed if guard.at <= due]:
            if due < guard.at + _SHIELD_WAIT and _shielded(guard.task):
                held = True  # cut once the shielded section is over (a few turns of the loop)
                continue
            armed.remove(guard)
            try:
                guard.task.cancel()
            except Exception:  # a bug there must not stop every later deadline of the loop
                logger.exception("failover: cutting an attempt at its deadline failed")
        if armed:
            earliest = min(guard.at for guard in armed)
            self.wake(max(earliest, due + _RECHECK) if held else earliest)
        else:
            self.wakes_at = math.inf  # nothing armed: the watch may go


def _weakly(handle: asyncio.TimerHandle) -> Callable[[], asyncio.TimerHandle | None]:
    """A weak reference to ``handle`` (the loop's heap holds it while it is set), or, for a
    loop whose handles take none, a strong one: that loop's watch is left to the cyclic
    collector when the loop closes with its timer set, as it was on every loop before."""
    try:
        return weakref.ref(handle)
    except TypeError:
        return lambda: handle


# An attempt past its time in a section anyio shields (see :func:`_shielded`) is cut once
# the section is over, looked at again this often, and at most this long after its time
# (a caller's own shield around the whole request, say; then as ``asyncio.timeout`` would).
_RECHECK = 0.002
_SHIELD_WAIT = 1.0


def when_unshielded(
    task: asyncio.Task[Any], act: Callable[[], object], wanted: Callable[[], bool], since: float | None = None
) -> None:
    """``act()`` once ``task`` is out of any section anyio shields (:func:`_shielded`), looked
    at again every :data:`_RECHECK` seconds, and at most :data:`_SHIELD_WAIT` after ``since``
    (the loop's time of the first look: now, when not given); nothing once ``wanted()`` says
    it is no longer wanted (the task ended, say)."""
    if not wanted():
        return
    loop = task.get_loop()
    now = loop.time()
    since = now if since is None else since
    if now < since + _SHIELD_WAIT and _shielded(task):
        loop.call_later(_RECHECK, when_unshielded, task, act, wanted, since)
        return
    act()


def cancel_unshielded(task: asyncio.Task[Any]) -> None:
    """``task.cancel()``, once ``task`` is out of any section anyio shields (:func:`when_unshielded`)."""
    when_unshielded(task, task.cancel, lambda: not task.done())


def _shielded(task: asyncio.Task[Any]) -> bool:
    """Is ``task`` in a cancel scope of anyio's that shields it? httpcore hands a connection
    back in one (``AsyncShieldCancellation``: closing a response, cleaning up after a failed
    request), which anyio's cancellations wait for and a task's ``cancel()`` does not: cut
    there, the cleanup stops half-way and its pool keeps the request and the connection busy
    for good. Read from anyio's own record of the task's scopes (its asyncio backend's, not
    public: none when anyio has not run in this loop)."""
    backend = sys.modules.get("anyio._backends._asyncio")
    states = getattr(backend, "_task_states", None)
    state = None if states is None else states.get(task)
    scope = getattr(state, "cancel_scope", None)
    while scope is not None:
        if getattr(scope, "_shield", False):
            return True
        scope = getattr(scope, "_parent_scope", None)
    return False


# The running loop's watch, weakly on both sides: an entry goes with its loop, and its
# watch with the loop's timer and the attempts it keeps.
_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.ref[_LoopWatch]] = (
    weakref.WeakKeyDictionary()
)


def _gone() -> None:
    return None


# The watch :func:`_watch_of` found last, weakly (``_gone`` before any).
_latest: Callable[[], _LoopWatch | None] = _gone


class _Untold:
    """``_LoopWatch.running`` of a loop that does not say which thread runs it."""

    _thread_id = None


def _forget() -> None:
    """In a fork's child: no watch at hand. The parent's loop, copied, still says it runs
    in the thread that forked, which is the child's (:func:`watch_here`)."""
    global _latest  # the cache of _watch_of
    _latest = _gone


call_in_child(_forget)


class _Timed:
    """A callable armed to be called at its time (``_Watchdog.call_at``): its ticket, one
    object per arm."""

    __slots__ = ("action",)
    action: Callable[[], object]  # set by call_at (no ``__init__``: made in C alone, see new_attempt)


# What the watchdog watches, each its own ticket: a sync attempt, or a callable's _Timed.
Ticket: TypeAlias = "Attempt | _Timed"


class _Watchdog:
    """One thread that cuts the sockets of attempts past their time.

    Arming is a dict insert and disarming a dict pop (atomic under the GIL), and
    the ticket is what was armed (the attempt; a callable's :class:`_Timed`), kept
    by its deadline: the happy path pays under a microsecond, where a heap under a
    condition variable cost nine (cProfile of 5,000 in-process requests, side by
    side) and a guard object per attempt another 11,000 instructions (callgrind,
    loopback). A ticket counter's int and a ``(deadline, target)`` tuple for each
    arm cost a request about 0.5 µs of CPU more, between httpx.Client's own work
    (paired, in process, both staging orders).

    The thread sleeps until the earliest armed deadline (at most ``MAX_SLEEP``,
    and for ever while nothing is armed). An attempt armed with a deadline before
    the thread's next wake-up wakes it, which only an attempt with very little
    time left does, so a busy client wakes it a few times a second rather than at
    every tick: each wake-up takes the GIL from the threads doing requests.
    """

    MAX_SLEEP = 0.25
    IDLE_AFTER = 1.0  # seconds without an arm() before the thread sleeps until the next one

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # ticket (the attempt whose socket to cut, or the callable to call) -> when
        self._armed: dict[Ticket, float] = {}
        self._cut: set[Ticket] = set()  # tickets whose socket was shut down
        # Attempts to cut at the thread's next look, whatever their time (:meth:`hurry`).
        self._hurried: set[Attempt] = set()
        self._hurry_lock = threading.Lock()
        # Held while the thread takes a due attempt's ticket and shuts its socket down: a
        # disarm that finds its ticket taken waits for it (see :meth:`disarm`).
        self._cutting = threading.Lock()
        # Set by each arm(), cleared by the thread as it looks: was anything armed since?
        self._busy = False
        self._wake = threading.Event()
        self._wakes_at = float("inf")  # when the thread looks next (inf: never, or not started)
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.looks = 0  # how often the thread has looked at the armed attempts
        renew_in_child(self, _Watchdog._forked)

    def _forked(self) -> None:
        """In a fork's child (``_fork``): no thread yet, nothing armed. What the parent
        armed was its threads' attempts, on its sockets, which a cut here would shut down
        under the parent too; a pending ticket of the thread that forked disarms as not cut."""
        self._armed.clear()
        self._cut.clear()
        self._hurried = set()
        self._hurry_lock = threading.Lock()
        self._cutting = threading.Lock()
        self._wake = threading.Event()
        self._wakes_at = float("inf")
        self._start_lock = threading.Lock()
        self._thread = None

    def arm(self, at: float, attempt: Ticket) -> Ticket:
        """Cut the socket of ``attempt``, a sync attempt not armed already, at ``at``
        (monotonic seconds) unless disarmed first; the ticket to disarm with (the attempt
        itself). The socket is looked up only when the time has passed
        (``_sockets.cut_attempt``), which almost no attempt lets happen: looking it up at
        every arm was 330 of the 800 ns an arm and disarm cost (timeit). An attempt with
        none to cut (an in-process transport's) is never cut. A :class:`_Timed` is called
        then instead (:meth:`call_at`)."""
        self._armed[attempt] = at
        self._busy = True
        if at >= self._wakes_at:
            return attempt  # the thread looks before it is due
        if self._thread is None:
            self._start()
        # Woken, the thread looks at once, so by ``at``: an attempt armed before it runs, due
        # no sooner, need not wake it again. Else every arm() until then set the event (a
        # condition's lock and notify, 2,000 instructions), and a thread that slept for good
        # (``IDLE_AFTER``) ran late behind a burst that held the GIL: each request of it paid.
        self._wakes_at = at
        self._wake.set()
        return attempt

    def call_at(self, at: float, action: Callable[[], object]) -> Ticket:
        """Call ``action`` from the watchdog's thread at ``at`` unless disarmed first (a
        sync hedge that is due: ``action`` only hands it to a sending thread, as nothing may
        hold this thread up); the ticket to disarm with, a :class:`_Timed` of its own (two
        bound methods of one object are equal: armed twice, they would be one key)."""
        timed = _Timed()
        timed.action = action
        return self.arm(at, timed)

    def disarm(self, ticket: Ticket) -> bool:
        """Stop watching; True if the attempt's socket was cut (it ran out of time).

        A ticket the thread took already returns once its cut is over, so that the caller
        hands the attempt's connection back to its pool (closes the response's stream)
        only then. Else the thread could shut a socket down that the pool had given to
        another request by then, failing that request and blaming its domain: the thread
        takes the ticket, then finds the socket, and the caller, whose body came in
        meanwhile, has gone on. The wait is the rare path: the common one pops the ticket
        itself, and takes no lock."""
        if self._armed.pop(ticket, None) is not None:
            return False
        with self._cutting:  # (a forked child's is a new one: see _forked)
            pass
        cut = ticket in self._cut
        self._cut.discard(ticket)
        return cut

    def hurry(self, attempts: Iterable[Attempt]) -> None:
        """Cut ``attempts`` now, as if their time had come (those still armed: an attempt
        disarmed meanwhile has ended). The thread takes their tickets itself at its next
        look, so a disarm racing with it waits for the cut as at a deadline; only that
        thread ever takes a ticket. A hedge's losers still reading an answer nobody wants
        when their transport closes (``ThreadRace.close``)."""
        with self._hurry_lock:
            self._hurried.update(attempts)
        if self._thread is None:
            self._start()
        self._wake.set()

    def _take(self, ticket: Ticket) -> bool:
        """Take a due ticket from the armed ones (False: disarmed in time after all). It is
        marked before the pop, so that a disarm that finds it gone knows it was taken."""
        self._cut.add(ticket)
        if self._armed.pop(ticket, None) is None:
            self._cut.discard(ticket)
            return False
        return True

    @staticmethod
    def _cut_down(attempt: Attempt) -> bool:
        """Shut down the socket of ``attempt``, past its time; False when it has none."""
        try:
            return cut_attempt(attempt)
        except Exception:  # a bug there must not stop every deadline either
            logger.exception("failover: cutting an attempt past its time failed")
            return False

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="failover-deadlines", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        busy_at = self._clock()
        while True:
            self.looks += 1
            now = self._clock()
            if self._busy:  # armed since the last look
                self._busy = False
                busy_at = now
            with self._hurry_lock:
                hurried, self._hurried = self._hurried, set()
            earliest = float("inf")
            for ticket, at in list(self._armed.items()):
                if at > now and ticket not in hurried:
                    earliest = min(earliest, at)
                    continue
                if isinstance(ticket, _Timed):
                    if self._take(ticket):
                        try:
                            ticket.action()
                        except Exception:  # a bug there must not stop every deadline
                            logger.exception("failover: a timed action failed")
                    continue
                with self._cutting:  # the ticket taken and its socket cut, as one step to disarm()
                    if self._take(ticket) and not self._cut_down(ticket):
                        self._cut.discard(ticket)  # nothing to cut: it runs its course
            # Nothing armed: keep looking every MAX_SLEEP for a while (a client that
            # arms and disarms in turn would otherwise wake the thread every time).
            idle = earliest == float("inf") and now - busy_at > self.IDLE_AFTER
            sleep = None if idle else min(earliest - now, self.MAX_SLEEP)
            # Publish the wake-up before clearing the event: an arm() racing with this
            # either sees the new time or sets the event after the clear.
            self._wakes_at = float("inf") if sleep is None else now + sleep
            self._wake.clear()
            if self._armed and min(list(self._armed.values())) < self._wakes_at:
                continue  # armed while we looked: look again
            self._wake.wait(sleep)


watchdog = _Watchdog()
# Its methods as the request path calls them, bound once: CPython 3.11 compiles
# ``watchdog.arm(...)``, on a name imported from another module, as a module's attribute
# look-up (``LOAD_ATTR``, never specialised for a method), which makes a bound method at
# every call; a name bound here is one global's look-up.
arm, call_at, disarm = watchdog.arm, watchdog.call_at, watchdog.disarm
