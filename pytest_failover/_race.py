"""Hedged attempts: the race between an attempt and its hedges.

:class:`Race` holds everything the sync and async transports share (no I/O):
when a hedge is due, what an arrival means, which answer stands, and who is
cut off once one wins. The two loops below only wait and send:

- asyncio (:func:`async_race`): the attempt goes out from the request's own task,
  as an unhedged one does, with one loop timer (``loop.call_later``) for its first
  hedge; the race (:class:`_AsyncHedges`), and a lane's exchange, are built only
  when that timer fires, and it starts each hedge as a task when due. An answer
  that wins ends the race: a hedge that wins interrupts the request's task the way
  ``asyncio.timeout`` does (``cancel``, then ``uncancel``), and the attempt that
  wins cancels the hedges. A loser's ``_send`` closes whatever it received, so its
  connection goes back closed, never half-read. The exchange's loop and the lane
  (``AsyncLoop._raced``) both send through it. Building the race up front cost a
  hedging pool's happy-path GET 1,560 of the library's opcodes against 1,010 (an
  unhedged lane's: 842). Spawning a task for the attempt and waiting on a channel
  instead (the trio path below) cost 650,000 instructions a request, 28 % of a bare
  httpx loopback GET, against 74,000 for the race built up front (callgrind, side by
  side). The timer on the loop's deadline watch instead (``_deadline._LoopWatch``,
  one loop timer for all) did not pay: 1,965,600 instructions a request against
  1,954,100 with ``loop.call_later`` (httpcore's mock network, ``Hedging(delay=1.0)``
  never due, the two measured one after the other; both costs move with the wall
  time a run takes, as timers fall due).
- trio (:func:`anyio_race`, which :func:`async_race` hands a trio request to, a lane's
  with its exchange built at once): each attempt is a task in an anyio task group;
  the loop waits on a memory channel for the first arrival or the hedge delay,
  whichever comes first; once an answer wins, the group is cancelled.
- sync (:class:`ThreadRace`): the attempt goes out from the calling thread, the
  watchdog's thread says when a hedge is due, and a small bounded pool
  (``Hedging.threads`` per transport) sends it; the attempt that loses is cut by
  shutting its socket down from the winner's thread. When every thread of the
  pool is busy, the hedge waits another delay.

The plan (``RequestPlan.hedge``) decides whether a hedge may go and where; the
breaker counts nothing for a cancelled attempt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import math
import threading
import time
from collections.abc import Awaitable, Callable
from contextvars import copy_context
from functools import partial
from typing import TYPE_CHECKING, TypeAlias

from ._deadline import (
    GRACE,
    _task_of,
    call_at,
    cancel_unshielded,
    disarm,
    watch_here,
    watchdog,
    when_unshielded,
)
from ._exchange import Exchange
from ._fork import renew_in_child
from ._sockets import cut_request, cuttable

if TYPE_CHECKING:
    from ._deadline import Ticket
    from ._exchange import Lane
    from ._lib import Response
    from ._values import Attempt

__all__ = ["AsyncSend", "Race", "Send", "ThreadRace", "anyio_race", "async_race"]

# How a front-end puts one attempt on the wire and reads what the exchange needs of its
# body, within the attempt's time: its response, or it raises the attempt's
# ``TransportError`` of its library (``exchange.lib``). The drivers below call nothing
# else of the front-end.
Send: TypeAlias = "Callable[[Lane, Attempt], Response]"
AsyncSend: TypeAlias = "Callable[[Lane, Attempt], Awaitable[Response]]"


class Race:
    """One attempt and its hedges, until one answers or all have failed."""

    __slots__ = ("_clock", "_last_sent", "answer", "exchange", "failure", "flying")

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self._clock = exchange.clock
        self.flying: list[Attempt] = []
        self.answer: Response | None = None  # the latest answer (a retryable one, until one wins)
        self.failure: BaseException | None = None  # the first error of the caller's own stack (see arrived)
        self._last_sent = 0.0

    def launch(self, attempt: Attempt) -> Attempt:
        return self.adopt(self.exchange.prepare(attempt))

    def adopt(self, flight: Attempt) -> Attempt:
        """``flight``, already on the wire (the sync race begins once its hedge is due)."""
        self.flying.append(flight)
        self._last_sent = flight.sent_at
        return flight

    @property
    def over(self) -> bool:
        """An answer won, or every attempt ended."""
        return self.exchange.done or not self.flying

    def wait(self) -> float | None:
        """How long the loop may wait for an arrival before a hedge is due (None: no
        hedge will come; wait for the attempts in flight)."""
        delay = self.exchange.hedge_delay()
        if delay is None:
            return None
        return max(0.0, self._last_sent + delay - self._clock())

    def hedge(self) -> Attempt | None:
        """The hedge due now, if the plan lets one go; else the next try is one delay later."""
        attempt = self.exchange.hedge_now()
        if attempt is None:
            self.postpone()
        return attempt

    def postpone(self) -> None:
        """No hedge now: the next one is due a whole delay from now."""
        self._last_sent = self._clock()

    def arrived(
        self, flight: Attempt, response: Response | None, error: BaseException | None
    ) -> Response | None:
        """An attempt ended: report it. Returns an answer for the loop to close: an
        earlier one it supersedes, or its own when another had won meanwhile (between
        that win and the cut of the losers): the race is over, so it is cut too, and
        the winner's answer stays the request's; or its own when the caller left.

        An attempt that ended with an error of the caller's own stack (not its library's
        ``TransportError``: an inner transport's or middleware's bug or refusal) says
        nothing about its domain: it is cut, as a loser is, and the error is kept
        (:attr:`unanswered`). A hedge never fails a request another attempt answers. In a
        thread or a task of the race's own, that is any exception but the task's
        cancellation; in the caller's, only an ``Exception``: any other is the caller
        leaving the race (``_Hedges.left``, ``_AsyncHedges.left``)."""
        self.flying.remove(flight)
        foreign = error is not None and not isinstance(error, self.exchange.lib.TransportError)
        if self.exchange.done or foreign:
            # Another won meanwhile: it is cut as a loser. Or the caller left, and its
            # exchange let go of every attempt (``give_up``): nothing is left to cut there.
            if flight in self.exchange.flying:
                self.exchange.cut(flight)
            if foreign and self.failure is None:
                self.failure = error
            return response
        self.exchange.arrived(flight, response, error)
        superseded, self.answer = self.answer, response
        return superseded

    @property
    def unanswered(self) -> BaseException | None:
        """Once the race is over, the error the request raises instead of going on: one of
        the caller's own stack that an attempt ended with, when no attempt won (unhedged, the
        request would have gone on to that attempt's domain and raised it there). Its
        answer, a retryable one if any, is then the driver's to close."""
        return self.failure if self.failure is not None and not self.exchange.done else None

    def cut_losers(self) -> list[Attempt]:
        """The race is over: the attempts still on the wire are cancelled."""
        losers, self.flying = self.flying, []
        for flight in losers:
            self.exchange.cut(flight)
        return losers


# -- async ----------------------------------------------------------------------------------

Arrival = tuple["Attempt", "Response | None", BaseException | None]
Raced = tuple["Exchange | None", "Response | None", BaseException | None]


async def async_race(
    send: AsyncSend, lane: Lane, flight: Attempt, delay: float, adopt: Callable[[Lane], Exchange] | None = None
) -> Raced:
    """Send ``flight`` (aimed) from this task, its first hedge due ``delay`` seconds after
    it went out, and each hedge as a task when due. ``lane``: the request's exchange, or
    its lane (``Lane.racing``), whose exchange (``adopt(lane)``: its plan, with ``flight``
    in flight) the first hedge's timer builds when it falls due (:meth:`_AsyncHedges.fell_due`).

    If the hedge fell due before ``flight`` ended: the race's exchange, with the answer
    that won (or the last retryable one, or None when every attempt failed). Else None,
    with ``flight``'s response or error, unreported (the caller reports it, or ends a
    lane's request with it): until its hedge is due a hedgeable attempt is an unhedged
    one plus one loop timer, with no race and no exchange. When the caller leaves
    (cancelled from outside, or any other exception), the hedges are cancelled and a
    lane's request is given up here (an exchange's loop gives up its own)."""
    watch = watch_here()  # asyncio's running loop's (without a system call)
    task = None if watch is None else _task_of(watch.loop)
    if watch is None or task is None:  # no asyncio loop (trio), or not in a task: anyio's race
        exchange = lane if isinstance(lane, Exchange) else _adopted(lane, adopt)
        try:
            return exchange, await anyio_race(send, exchange, flight), None
        except BaseException:
            if exchange is not lane:
                exchange.give_up()
            raise
    held: list[_AsyncHedges] = []  # the race, once the first hedge fell due
    timer = watch.loop.call_later(delay, _AsyncHedges.fell_due, held, send, lane, flight, task, adopt)
    try:
        flight.sending = True  # from here on it is sent, even if cut first (see _async_sent)
        response: Response | None = await send(lane, flight)
        error: BaseException | None = None
    except lane.lib.TransportError as exc:
        response, error = None, exc
    except asyncio.CancelledError:
        if not (held and held[0].interrupted) or task.uncancel() > 0:
            await _left(held, lane, adopt)
            raise  # cancelled from outside: the transport abandons the request
        response = error = None  # a hedge won (and was reported); this attempt is cut
    except Exception as exc:
        if not held:  # no race: an unhedged attempt's error, which ends the request
            await _left(held, lane, adopt)
            raise
        response, error = None, exc  # the caller's own stack's, in a race: it decides (Race.arrived)
    except BaseException:
        await _left(held, lane, adopt)
        raise
    finally:
        timer.cancel()
        if held:
            held[0].stop()
    try:
        if not held:  # no hedge fell due: an unhedged attempt after all
            return None, response, error
        hedges = held[0]
        try:
            answer = await hedges.finish(None if hedges.interrupted else (flight, response, error))
        except BaseException:
            if hedges.exchange is not lane:
                hedges.exchange.give_up()
            raise
        return hedges.exchange, answer, None
    finally:
        del error  # its traceback holds this frame (see _sent)


async def _left(held: list[_AsyncHedges], lane: Lane, adopt: Callable[[Lane], Exchange] | None) -> None:
    """The caller left while its attempt was on the wire: its race is left
    (:meth:`_AsyncHedges.left`), or a lane's request is given up (its exchange built to
    give it up, when no hedge fell due)."""
    if held:
        await held[0].left()
    elif not isinstance(lane, Exchange):
        _adopted(lane, adopt).give_up()


def _adopted(lane: Lane, adopt: Callable[[Lane], Exchange] | None) -> Exchange:
    """The exchange ``adopt`` builds for ``lane``'s request (a lane's race takes one)."""
    assert adopt is not None, "a lane's race needs the front-end's Exchange.adopting"
    return adopt(lane)


class _AsyncHedges:
    """The hedges of one asyncio request, once the first is due (see :func:`async_race`):
    the attempt on the wire, sent from the request's task, is the first of a :class:`Race`;
    a loop timer (``loop.call_later``) starts each hedge as a task when it is due
    (:meth:`due`); a hedge that wins interrupts the request's task the way
    ``asyncio.timeout`` does (``cancel``, then ``uncancel``); and the request's task, once
    its attempt ended, joins the race (:meth:`finish`). A loser's ``_send`` closes whatever
    it received, so its connection goes back closed, never half-read.

    An object rather than two closures that arm each other: those were a reference
    cycle, which kept each hedgeable request's race, exchange, plan and timer (21
    objects) for the cyclic GC and sent some of them to its oldest generation. The
    timer refers to this object only while it is armed."""

    __slots__ = ("_handle", "_loop", "_send", "_task", "exchange", "interrupted", "race", "sending", "tasks")

    def __init__(self, send: AsyncSend, exchange: Exchange, first: Attempt, task: asyncio.Task[object]) -> None:
        self._send = send
        self.exchange = exchange
        self.race = Race(exchange)
        self.race.adopt(first)
        self._task = task  # the request's, sending ``first``
        self._loop = task.get_loop()
        self.tasks: dict[Attempt, asyncio.Task[None]] = {}  # the hedges'
        self.sending = True  # the request's task is inside the first attempt's send
        self.interrupted = False  # ... and a hedge that won cancelled it there
        self._handle: asyncio.TimerHandle | None = None

    @classmethod
    def fell_due(
        cls,
        held: list[_AsyncHedges],
        send: AsyncSend,
        lane: Lane,
        first: Attempt,
        task: asyncio.Task[object],
        adopt: Callable[[Lane], Exchange] | None,
    ) -> None:
        """The first hedge of ``first`` is due (its loop timer, armed by :func:`async_race`,
        in the caller's context): the race begins, with ``first`` in flight and ``lane``'s
        exchange (built now for a lane's request), into ``held``; the hedge goes out."""
        exchange = lane if isinstance(lane, Exchange) else _adopted(lane, adopt)
        hedges = cls(send, exchange, first, task)
        held.append(hedges)
        hedges.due()

    def due(self) -> None:
        """A hedge is due: sent as a task if the plan lets one go; the next one armed."""
        self._handle = None
        race = self.race
        if race.over:
            return
        attempt = race.hedge()
        if attempt is not None:
            hedge = race.launch(attempt)
            self.tasks[hedge] = self._loop.create_task(self._hedge(hedge))
        wait = race.wait()
        if wait is not None:
            self._handle = self._loop.call_later(wait, self.due)

    def stop(self) -> None:
        """The request's attempt ended: no hedge follows."""
        self.sending = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def cancel(self) -> None:
        """The hedges' tasks are cancelled: the losers, or all of them when the caller left
        (each once out of any cleanup anyio shields: ``cancel_unshielded``)."""
        for task in self.tasks.values():
            cancel_unshielded(task)

    async def _hedge(self, hedge: Attempt) -> None:
        """A hedge's task. It returns nothing: its arrival is the race's, and a task keeps
        its result (an error, and through its traceback the frames that hold this race)."""
        arrival = await _async_sent(self._send, self.exchange, hedge)
        race = self.race
        try:
            if hedge in race.flying:  # not cut off meanwhile
                await _arrive(race, arrival)
                if race.exchange.done:
                    when_unshielded(self._task, self._interrupt, self._sending_still)
            elif arrival[1] is not None:  # cut off while it ended (its task's cancel came late): nobody wants it
                await arrival[1].aclose()
        finally:
            # Its error's traceback holds _async_sent's frame, which holds this one on
            # Python 3.12 and 3.13 (a coroutine's frame, done, keeps its caller's).
            del arrival

    def _sending_still(self) -> bool:
        """Is the first attempt still on the wire, not interrupted yet?"""
        return self.sending and not self.interrupted

    def _interrupt(self) -> None:
        """A hedge won: the first attempt, still on the wire, lost; its task is interrupted (see
        asyncio.timeout), once: ``uncancel()`` in :func:`async_race` takes it back. Not in a
        section anyio shields (httpcore handing a connection back: cut there, its pool would
        keep the connection busy for good): ``when_unshielded`` waits for its end, and the
        attempt may end meanwhile, its answer then closed as a loser's (``Race.arrived``)."""
        self.interrupted = True
        self._task.cancel()

    async def finish(self, arrival: Arrival | None) -> Response | None:
        """In the request's task, once its attempt ended (``arrival``; None when a hedge won
        and interrupted it): report it, wait for the hedges in flight if it failed, and cut
        whatever lost. The answer that won (or the last retryable one), or None."""
        race = self.race
        try:
            if arrival is not None:
                await _arrive(race, arrival)
            while not race.over:  # the first attempt failed: the hedges in flight may still answer
                await asyncio.wait([self.tasks[f] for f in race.flying], return_when=asyncio.FIRST_COMPLETED)
            race.cut_losers()
        except BaseException:
            await self.left()
            raise
        finally:
            self.cancel()
        return await _async_settled(race)

    async def left(self) -> None:
        """The caller left the race (cancelled, or an exception of its own task's): the
        hedges are cancelled and the request given up first, so a hedge that answers
        meanwhile closes its own answer (``Race.arrived``); then the answer the race held (a
        hedge's retryable one, its body unread) is closed: dropped, it kept its connection
        busy in the inner pool for good."""
        self.cancel()
        self.exchange.give_up()
        await _close_held(self.race)


async def _async_settled(race: Race) -> Response | None:
    """The answer of a race that is over (the one that won, or the last retryable one; None
    when every attempt failed), or raise its :attr:`Race.unanswered` error."""
    failure = race.unanswered
    if failure is None:
        return race.answer
    race.failure = None  # raised now: kept, by the race or a local, a cycle (see _settled)
    if race.answer is not None:
        await race.answer.aclose()
    try:
        raise failure
    finally:
        del failure


async def _close_held(race: Race) -> None:
    """The caller left: the answer the race held (a retryable one, its body unread) is
    closed, so its connection goes back to the inner transport's pool."""
    answer, race.answer = race.answer, None
    if answer is not None:
        import anyio  # httpx's own dependency

        with anyio.CancelScope(shield=True):
            await answer.aclose()


async def _arrive(race: Race, arrival: Arrival) -> None:
    """The arrival of the async drivers: report it, and close the answer it replaces
    (or its own, when another won meanwhile: see :meth:`Race.arrived`)."""
    superseded = race.arrived(*arrival)
    if superseded is not None:
        await superseded.aclose()


async def _async_sent(
    send: AsyncSend, exchange: Exchange, flight: Attempt, cancelled: type[BaseException] = asyncio.CancelledError
) -> Arrival:
    """Send ``flight``: it, with its response or the error it ended with (its library's
    transport error, or one of the caller's own stack, which :meth:`Race.arrived` keeps
    apart: a race's task never ends with an error nobody reads). Raised instead: its task's
    ``cancelled`` (its event loop's), and what the event loop itself lets out of a task
    (``KeyboardInterrupt``, ``SystemExit``).

    It is marked as sending first (``Attempt.sending``: a cut then reports it sent, as
    bytes may have left): nothing awaits between here and the inner transport's call, so
    no cut falls in between. The race marks its attempts; an unhedged one is never cut."""
    try:
        flight.sending = True
        return flight, await send(exchange, flight), None
    except (cancelled, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        return flight, None, exc


async def anyio_race(send: AsyncSend, exchange: Exchange, first: Attempt) -> Response | None:
    """Run ``first`` (aimed, in the exchange's plan) and its hedges as tasks of a task
    group (any event loop anyio runs); the answer that won (or the last retryable one),
    or None when every attempt failed."""
    import anyio  # httpx's own dependency; imported only when a request may hedge

    race = Race(exchange)
    # The arrivals not read yet, and the event that says one came. (A memory stream's
    # receive() under move_on_after lost the arrival its timeout cut, handed over as the
    # hedge fell due: its answer was never closed, and its connection stayed busy.)
    arrived: list[Arrival] = []
    came = anyio.Event()

    cancelled = anyio.get_cancelled_exc_class()

    async def run(flight: Attempt) -> None:
        arrived.append(await _async_sent(send, exchange, flight, cancelled))
        came.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run, race.adopt(first))
            while not race.over:
                if not arrived:
                    wait = race.wait()
                    with anyio.move_on_after(math.inf if wait is None else wait):
                        await came.wait()
                    came = anyio.Event()  # (nothing awaits between its wait and here)
                if arrived:
                    await _arrive(race, arrived.pop(0))
                    continue
                hedge = race.hedge()
                if hedge is not None:
                    group.start_soon(run, race.launch(hedge))
            race.cut_losers()
            group.cancel_scope.cancel()
    except BaseException:  # (every attempt's task has ended with the group)
        await _close_held(race)
        raise
    finally:  # the answers of attempts that ended after the race did: losers, closed
        with anyio.CancelScope(shield=True):
            for _, response, _ in arrived:
                if response is not None:
                    await response.aclose()
    return await _async_settled(race)


# -- sync -----------------------------------------------------------------------------------


class ThreadRace:
    """The sync transport's hedging: the calling thread sends the attempt, the
    watchdog's thread says when a hedge is due, a small bounded pool sends it.

    A blocked ``recv`` cannot be left from its own thread, so when a hedge wins
    the attempt it raced is cut from outside: its socket is shut down
    (:func:`cut_request`), and its ``_send`` fails at once. Sending every attempt
    of a hedgeable request from the pool instead, while the calling thread
    waited, cost 27-35 % of the median loopback request in the tail benchmark
    (a thread hand-off each). The race itself (:class:`_Hedges`) is built only
    when the first hedge is due: a request that answers before, the common case,
    costs one watchdog ticket armed and disarmed, and no lock. Building the race up
    front cost 62,000 instructions a request, as much again as the whole unhedged
    transport (callgrind, real loopback GET, side by side: bare httpx 1,486,900,
    unhedged +78,000, hedging configured +140,400); a small object and a lock
    taken to tell "ended alone" from "due" cost 120 Python opcodes a request
    (``python -m benchmarks opcodes``). A request in the lane (``Lane.racing``) is sent
    the same way (:meth:`sent`), with no exchange at all until the hedge falls due: the
    race builds it then (:meth:`_join`).
    """

    def __init__(self, threads: int, inner: object, adopt: Callable[[Lane], Exchange]) -> None:
        self.threads = threads
        self.inner = inner  # the transport the front-end's ``send`` sends with
        self.cuts = cuttable(inner)  # a property of the transport: asked once, not per request
        self._adopt = adopt  # a lane's exchange (the front-end's ``Exchange.adopting``)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._busy = 0  # threads sending a hedge (or about to)
        self._joining: dict[Attempt, _Hedges] = {}  # races one side has joined (see _join)
        self._lost: set[Attempt] = set()  # the pool's losers still sending (see close)
        renew_in_child(self, ThreadRace._forked)

    def _forked(self) -> None:
        """In a fork's child (``_fork``): a pool of no threads yet, none busy, no race
        joined (those were the parent's threads'). The parent's pool object would take work
        that no thread of the child ever runs."""
        self._executor = None
        self._lock = threading.Lock()
        self._busy = 0
        self._joining = {}
        self._lost = set()

    def race(self, send: Send, exchange: Exchange, first: Attempt, delay: float) -> Response | None:
        """Send ``first`` from this thread and its hedges from the pool when due (the
        first ``delay`` seconds after it went out), each through ``send``; the losers'
        sockets are cut in :attr:`inner`. The answer that won (or the last retryable
        one), or None when every attempt failed.

        Until the first hedge is due this is an unhedged attempt plus one watchdog
        ticket: whether the hedge fell due before the attempt ended is settled by the
        watchdog's own pop of the ticket (``disarm`` returns True once its action was
        taken), so the common case takes no lock and builds no race; the two sides
        that learn the hedge fell due (the watchdog's thread, this one) meet in
        :meth:`_join`."""
        if not self.cuts:
            return self._pooled(send, exchange, first)
        flight = exchange.prepare(first)
        hedges, response, error = self.sent(send, exchange, flight, delay)
        try:
            if hedges is not None:  # a hedge fell due meanwhile: the race decides
                return hedges.finish(flight, response, error)
            return exchange.arrived(flight, response, error)  # no hedge was due: an unhedged attempt after all
        finally:
            del error  # see _sent: a cycle through this frame

    def sent(
        self, send: Send, lane: Lane, flight: Attempt, delay: float
    ) -> tuple[_Hedges | None, Response | None, BaseException | None]:
        """Send ``flight`` (aimed) from this thread, its first hedge due ``delay`` seconds
        after it went out: its race if that hedge fell due before it ended (begun, the
        attempt in it, not reported), else None; with its response or its error (the
        caller reports it, or hands it to the race). ``lane``: the request's exchange, or
        its lane (``Lane.racing``), whose exchange the race builds if the hedge falls due
        (:meth:`_join`).

        Until the hedge is due this is an unhedged attempt plus one watchdog ticket:
        whether it fell due before the attempt ended is settled by the watchdog's own pop
        of the ticket (``disarm`` returns True once its action was taken), so the common
        case takes no lock and builds no race. When the caller leaves (any other
        exception), a lane's request is given up here (an exchange's loop gives up its own)."""
        # Due ``delay`` from now, as it goes out; run in the caller's context (its spans
        # and baggage), which the hedges' threads copy.
        ticket = call_at(time.monotonic() + delay, partial(copy_context().run, self._due, send, lane, flight))
        try:
            flight.sending = True  # from here on it is sent, even if cut first (see _async_sent)
            response = send(lane, flight)
        except lane.lib.TransportError as exc:
            return self._met(ticket, send, lane, flight), None, exc
        except BaseException as exc:
            hedges = self._met(ticket, send, lane, flight)  # met, so the watchdog's side frees it
            if hedges is not None and isinstance(exc, Exception):  # the caller's own stack's, in a race
                return hedges, None, exc  # it decides (Race.arrived)
            if hedges is not None:  # the caller left a race: whatever a hedge answered is closed
                hedges.left()
            elif not isinstance(lane, Exchange):  # nobody else holds the exchange of a lane's request
                self._adopt(lane).give_up()
            raise
        # (_met's test, written out: its frame cost a hedgeable request 9 opcodes)
        return (self._join(send, lane, flight) if disarm(ticket) else None), response, None

    def _met(self, ticket: Ticket, send: Send, lane: Lane, flight: Attempt) -> _Hedges | None:
        """The race of ``flight`` if its first hedge fell due (the watchdog took the
        ticket's action), else None (the ticket is disarmed)."""
        return self._join(send, lane, flight) if disarm(ticket) else None

    def _due(self, send: Send, lane: Lane, first: Attempt) -> None:
        """The first hedge of a request is due (in the watchdog's thread, in the caller's context)."""
        self._join(send, lane, first).due()

    def _join(self, send: Send, lane: Lane, first: Attempt) -> _Hedges:
        """The race of ``first``, whose first hedge fell due: built by whichever of the
        two sides that learn it (the watchdog's thread, the calling thread) comes
        first, and let go of by the second. A lane's request gets its exchange here, once
        (``Exchange.adopting``: its plan, with ``first`` in flight)."""
        with self._lock:
            hedges = self._joining.pop(first, None)
            if hedges is None:
                exchange = lane if isinstance(lane, Exchange) else self._adopt(lane)
                hedges = self._joining[first] = _Hedges(self, send, exchange, first, copy_context())
        return hedges

    def _reserve(self, count: int = 1) -> bool:
        with self._lock:
            if self._busy + count > self.threads:
                return False
            self._busy += count
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    self.threads, thread_name_prefix="failover-hedge"
                )
            return True

    def _release(self) -> None:
        with self._lock:
            self._busy -= 1

    def _pooled(self, send: Send, exchange: Exchange, first: Attempt) -> Response | None:
        """Run ``first`` and its hedges from the pool while this thread waits (for inner
        transports whose sockets :func:`cut_request` cannot find); the answer that won (or
        the last retryable one), or None when every attempt failed."""
        if not self._reserve(2):  # no room for the attempt and a hedge: send it from here
            alone = exchange.prepare(first)
            answer, failure = _sent(send, exchange, alone)
            try:
                return exchange.arrived(alone, answer, failure)
            finally:
                del failure  # see _sent: a cycle through this frame
        race = Race(exchange)
        futures: dict[concurrent.futures.Future[Response], Attempt] = {}

        def launch(attempt: Attempt) -> None:  # on a thread reserved for it
            flight = race.launch(attempt)
            flight.sending = True  # its thread sends it even if it is cut first (see Exchange.cancel)
            futures[self._submit(send, exchange, flight)] = flight

        spare = True  # the second thread reserved above, for the first hedge
        try:
            launch(first)
            while not race.over:
                wait = race.wait()
                done, _ = concurrent.futures.wait(futures, timeout=wait, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    flight = futures.pop(future)
                    # A transport error, or the caller's stack's, any exception of the
                    # attempt's thread (Race.arrived): read, not raised, as a raise here
                    # would add this frame to its traceback, a cycle with the race through
                    # the future and this frame's locals.
                    error = future.exception()
                    response: Response | None = None if error is not None else future.result()
                    superseded = race.arrived(flight, response, error)
                    if superseded is not None:
                        superseded.close()
                if done or race.over:
                    continue
                if not spare and not self._reserve(1):
                    race.postpone()  # every thread is busy: no further hedge now
                    continue
                hedge = race.hedge()
                if hedge is None:
                    if not spare:
                        self._release()
                    continue
                launch(hedge)
                spare = False
        except BaseException:  # the caller left: the answer held closed (the losers' below)
            answer, race.answer = race.answer, None
            if answer is not None:
                answer.close()
            raise
        finally:
            if spare:
                self._release()
            race.cut_losers()
            for future, flight in futures.items():  # losers: close what they get, whenever they get it
                self._lost.add(flight)
                future.add_done_callback(partial(self._loser_ended, flight))
        return _settled(race)

    def _loser_ended(self, flight: Attempt, future: concurrent.futures.Future[Response]) -> None:
        """A loser's send ended (in its thread): nothing to cut at close, its answer closed."""
        self._lost.discard(flight)
        _close_result(future)

    def _submit(self, send: Send, exchange: Exchange, flight: Attempt) -> concurrent.futures.Future[Response]:
        assert self._executor is not None
        context = contextvars.copy_context()  # the caller's spans and baggage, in the thread

        def run() -> Response:
            try:
                return context.run(send, exchange, flight)
            finally:
                self._release()

        return self._executor.submit(run)

    def close(self) -> None:
        """Wait for the pool's threads: the attempts of requests still racing go on to
        their end. The losers of races already decided, whose answers nobody wants, are cut
        now (the watchdog, as at their time): a loser the inner transport cannot cut at the
        race's end (the requests adapter's, reading its body) held the close for as long as
        its body took, up to the attempt's time."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            lost = list(self._lost)
            if lost:
                watchdog.hurry(lost)
            executor.shutdown(wait=True, cancel_futures=False)


class _Hedges:
    """The hedges of one sync request, once the first is due (see :meth:`ThreadRace.race`):
    the attempt on the wire is the first of a :class:`Race`, :meth:`due` (in the
    watchdog's thread) hands each hedge to the pool, and the calling thread, once its
    attempt has ended, joins the race (:meth:`finish`). ``lock`` guards the race: the
    exchange is shared by the calling thread and the hedges'."""

    __slots__ = ("context", "exchange", "inner", "lock", "owner", "race", "send", "timer", "waiting")

    def __init__(
        self, owner: ThreadRace, send: Send, exchange: Exchange, first: Attempt, context: contextvars.Context
    ) -> None:
        self.owner = owner
        self.send = send
        self.inner = owner.inner  # the transport whose sockets carry the attempts
        self.exchange = exchange
        self.race = Race(exchange)
        self.race.adopt(first)
        self.lock = threading.Lock()
        self.timer: list[Ticket] = []  # the armed tickets of the hedges after the first
        self.waiting: list[threading.Event] = []  # the calling thread's, once it waits for the hedges
        self.context = context  # the caller's spans and baggage, in the hedge's thread

    def due(self) -> None:  # in the watchdog's thread: hand the hedge to the pool
        with self.lock:
            if self.race.over:
                return  # the attempt ended and the calling thread settled the race first
        if self.owner._reserve():
            assert self.owner._executor is not None
            self.owner._executor.submit(self.context.run, self.send_hedge)
        else:
            with self.lock:
                self.race.postpone()  # every thread is busy: try again a delay later
                self.arm()

    def arm(self) -> None:
        """Arm the timer of the next hedge, if another may follow (under ``lock``)."""
        if self.race.over:
            return  # nothing to hedge (the plan may have a retry in flight by now)
        wait = self.race.wait()
        if wait is not None:
            self.timer.append(call_at(time.monotonic() + wait, self.due))

    def send_hedge(self) -> None:  # on a thread of the pool
        race, exchange, inner = self.race, self.exchange, self.inner
        try:
            with self.lock:
                attempt = None if race.over else race.hedge()
                hedge = None if attempt is None else race.launch(attempt)
                if hedge is not None:
                    # From here on it is sent, even if cut first: said under the race's
                    # lock, which the cut takes, so the cut reports it sent (marked in
                    # _send, a cut in between reported sent=False for an attempt the
                    # network then saw).
                    hedge.sending = True
                self.arm()  # the next hedge, if another may follow
            if hedge is None:
                return
            try:
                response, error = _sent(self.send, exchange, hedge)
            except BaseException as exc:  # the caller's own stack's, in a thread of the race's
                response, error = None, exc  # the race keeps it (Race.arrived)
            with self.lock:
                wanted = hedge in race.flying  # else it was cut off meanwhile: nobody wants it
                superseded = race.arrived(hedge, response, error) if wanted else response
                del error  # see _sent: a cycle through this frame
                won = wanted and exchange.done
                losers = race.flying if won else []
            if superseded is not None:
                superseded.close()
            if not wanted:
                return
            for loser in losers:
                _cut(inner, loser)
            with self.lock:
                for event in self.waiting:
                    event.set()
        finally:
            self.owner._release()

    def finish(
        self, flight: Attempt, response: Response | None, error: BaseException | None
    ) -> Response | None:
        """In the calling thread, once its attempt ended with the race begun: report it,
        wait for the hedges in flight if it failed, and cut whatever lost."""
        try:
            return self._finish(flight, response, error)
        except BaseException:  # the caller left (a KeyboardInterrupt in a wait for the hedges)
            self.left()
            raise

    def left(self) -> None:
        """The caller left the race (an exception of its own thread's, while its attempt
        was on the wire or as it waited for the hedges): the request is given up under the
        race's lock, so a hedge that answers later closes its own answer (``Race.arrived``),
        and the answer the race held (a hedge's retryable one, its body unread) is closed
        here: dropped, it kept its connection busy in the inner pool for good."""
        with self.lock:
            for ticket in self.timer:
                disarm(ticket)
            self.timer.clear()
            self.exchange.give_up()
            answer, self.race.answer = self.race.answer, None
        if answer is not None:
            answer.close()

    def _finish(
        self, flight: Attempt, response: Response | None, error: BaseException | None
    ) -> Response | None:
        race, exchange = self.race, self.exchange
        with self.lock:
            for ticket in self.timer:
                disarm(ticket)
            self.timer.clear()
            if flight in race.flying and not exchange.done:
                superseded = race.arrived(flight, response, error)
            else:  # a hedge won while this attempt was on the wire; it was cut
                superseded = response
        if superseded is not None:
            superseded.close()
        while True:  # the attempt failed: the hedges in flight may still answer
            with self.lock:
                # past every attempt's time (and the watchdog's grace), nothing will answer
                late = bool(race.flying) and exchange.clock() > max(f.sent_at + f.timeout for f in race.flying) + 2 * GRACE
                if race.over or late:
                    losers = race.cut_losers()
                    for ticket in self.timer:
                        disarm(ticket)
                    break
                event = threading.Event()
                self.waiting[:] = [event]
                deadline = max(f.sent_at + f.timeout for f in race.flying) + 2 * GRACE
            event.wait(max(0.0, deadline - exchange.clock()) + GRACE)
        for loser in losers:
            _cut(self.inner, loser)
        return _settled(race)


def _sent(send: Send, exchange: Exchange, flight: Attempt) -> tuple[Response | None, BaseException | None]:
    """Send ``flight``: its response, or the transport error it ended with.

    The error's traceback holds this frame, and through it its caller's: a caller that
    keeps the error in a local makes a cycle, which left every hedged sync request
    (its exchange, plan, race and hedges) to the cyclic GC. Callers ``del`` it."""
    try:
        return send(exchange, flight), None
    except exchange.lib.TransportError as exc:
        return None, exc


def _settled(race: Race) -> Response | None:
    """:func:`_async_settled`, for the sync races."""
    failure = race.unanswered
    if failure is None:
        return race.answer
    # Raised now, and neither the race nor this frame keeps it: its traceback holds the
    # frames it passes, this one and those holding the race, a cycle with the request's
    # race and exchange.
    race.failure = None
    if race.answer is not None:
        race.answer.close()
    try:
        raise failure
    finally:
        del failure


def _close_result(future: concurrent.futures.Future[Response]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def _cut(transport: object, flight: Attempt) -> None:
    """Shut the socket of an attempt that lost, so its thread stops waiting now."""
    cut_request(transport, flight.request)
