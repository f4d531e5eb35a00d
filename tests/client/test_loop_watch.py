"""The async deadline watch: one timer per event loop cuts each armed attempt at its time.

``async_limit`` is what ``AsyncLoop._send`` runs every async attempt in: under asyncio it
arms the running loop's ``_LoopWatch``, which cancels the attempt's task once its time
has passed, and the limit turns that cancellation into ``TimeoutError``, never one that
came from outside (the caller's, or a hedge race cutting a loser).
"""

from __future__ import annotations

import asyncio
import gc
import math
import socket
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import httpx
import pytest
import uvloop

from pytest_failover import AsyncFailoverTransport, FailoverError, Policy, Pool, _deadline
from pytest_failover._deadline import _LoopWatch, async_limit

# How much later than a bare loop timer due at the same time a deadline may end its body
# (the watch's timer, then the cancelled task's step and its cleanup). Each test measures
# the loop's own lag beside it (:func:`_lag`): on a loaded machine every timer is late,
# and only what the watch adds on top is the watch's.
LATE = 0.1
EARLY = 0.001  # how early it may seem to: uvloop's clock counts milliseconds


Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Runs a test's body on a new loop: asyncio's own, or uvloop's."""
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def run(main: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(main)

    return run


def _watch() -> _LoopWatch:
    """The running loop's watch: there is one while anything is armed on it (once nothing
    is, only what holds it keeps it)."""
    ref = _deadline._watches.get(asyncio.get_running_loop())
    watch = None if ref is None else ref()
    assert watch is not None
    return watch


async def _never() -> None:
    """An awaitable that never completes."""
    await asyncio.Event().wait()


async def _cut_after(seconds: float) -> float:
    """Wait for ever inside a limit of ``seconds``; how long it took to raise TimeoutError."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError), async_limit(seconds):
        await _never()
    return loop.time() - started


async def _lag(seconds: float) -> float:
    """How late a task sleeping ``seconds`` (a bare loop timer) resumes: the loop's own lag
    over that span, which a deadline due at the same time cannot beat."""
    loop = asyncio.get_running_loop()
    due = loop.time() + seconds
    await asyncio.sleep(seconds)
    return max(0.0, loop.time() - due)


def _beside(seconds: float) -> asyncio.Future[float]:
    """:func:`_lag` as a task started now, beside the deadline under test."""
    return asyncio.ensure_future(_lag(seconds))


async def _timed_cut(seconds: float) -> tuple[float, float]:
    """:func:`_cut_after` beside a bare timer of the same time: (how long it took, the lag)."""
    lag = _beside(seconds)
    elapsed = await _cut_after(seconds)
    return elapsed, await lag


def _on_time(elapsed: float, seconds: float, lag: float) -> bool:
    """Ended at ``seconds``: never early, and late by at most LATE more than the loop's lag."""
    return seconds - EARLY <= elapsed <= seconds + lag + LATE


@pytest.fixture
def silent() -> Iterator[socket.socket]:
    """A loopback server that accepts connections (its backlog does) and never sends a byte."""
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


@pytest.fixture
def trickling() -> Iterator[str]:
    """A loopback server that sends its headers at once, then its body a byte every 0.1 s."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n")
                for _ in range(20):  # bounded: 2 s at most
                    if stop.wait(0.1):
                        break
                    try:
                        conn.sendall(b"x")
                    except OSError:  # the client cut it
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    server.close()


def test_a_trickled_body_is_cut_at_the_attempts_time(run: Run, trickling: str) -> None:
    """Through the async transport, a body trickled a byte at a time ends at the attempt's
    time (plus the guard's grace) as a read timeout, on either loop."""

    async def main() -> None:
        transport = AsyncFailoverTransport([Pool("api", [trickling])], Policy(deadline=0.4, attempt_timeout=0.4))
        async with httpx.AsyncClient(transport=transport) as client:
            started = time.monotonic()
            lag = _beside(0.4 + _deadline.GRACE)
            with pytest.raises(FailoverError) as caught:
                await client.get(trickling + "/slow")
            elapsed = time.monotonic() - started
        assert caught.value.attempts[0].error_type == "read_timeout"
        # uncut, the body takes 2 s
        assert _on_time(elapsed, 0.4, await lag), (elapsed, await lag)

    run(main())


def test_a_deadline_cuts_a_read_from_a_silent_server(run: Run, silent: socket.socket) -> None:
    """A read from a real server that never answers ends in TimeoutError at the limit."""

    async def main() -> None:
        reader, writer = await asyncio.open_connection(*silent.getsockname()[:2])
        loop = asyncio.get_running_loop()
        watches: list[_LoopWatch] = []

        async def read() -> bytes:
            with async_limit(0.2):
                watches.append(_watch())
                return await reader.read(1)

        started = loop.time()
        lag = _beside(0.2)
        try:
            with pytest.raises(TimeoutError):
                await read()
        finally:
            writer.close()
        assert _on_time(loop.time() - started, 0.2, await lag), (loop.time() - started, await lag)
        assert not watches[0].armed

    run(main())


def test_an_awaitable_that_never_completes_is_cut_at_its_time(run: Run) -> None:
    """The body is cancelled at the limit, the task is not left cancelling, and the
    task goes on to await normally."""

    async def main() -> None:
        elapsed, lag = await _timed_cut(0.1)
        assert _on_time(elapsed, 0.1, lag), (elapsed, lag)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0)  # not cancelled again

    run(main())


def test_a_body_that_ends_in_time_is_disarmed(run: Run) -> None:
    """A body that ends before its time is neither cancelled nor kept by the watch."""

    async def main() -> None:
        with async_limit(0.05):
            watch = _watch()
            await asyncio.sleep(0)
        assert not watch.armed
        await asyncio.sleep(0.1)  # past the time it had: nothing cancels this task now

    run(main())


def test_an_error_in_the_body_passes_through_and_disarms(run: Run) -> None:
    """An exception raised in time is the body's own, unchanged."""

    async def main() -> None:
        watches: list[_LoopWatch] = []

        async def fail() -> None:
            with async_limit(5.0):
                watches.append(_watch())
                await asyncio.sleep(0)
                raise ConnectionResetError("reset")

        with pytest.raises(ConnectionResetError, match=r"^reset$"):
            await fail()
        assert not watches[0].armed

    run(main())


def test_an_outer_cancel_of_an_armed_attempt_stays_a_cancellation(run: Run) -> None:
    """The caller's cancel during an armed attempt is a CancelledError, not a timeout."""

    async def main() -> None:
        armed = asyncio.Event()

        async def attempt() -> None:
            with async_limit(5.0):
                armed.set()
                await _never()

        task = asyncio.create_task(attempt())
        await armed.wait()
        watch = _watch()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not watch.armed

    run(main())


@pytest.mark.parametrize("outer_first", [True, False], ids=["outer-cancel-first", "deadline-first"])
def test_a_cancel_racing_the_deadline_stays_a_cancellation(run: Run, outer_first: bool) -> None:
    """An outer cancel and the deadline falling due in the same turn of the loop, in either
    order: the task still ends cancelled, never with a timeout, and its count of
    cancellations is the outer one's alone."""

    async def main() -> None:
        seen: list[str] = []
        watches: list[_LoopWatch] = []

        async def attempt() -> None:
            loop = asyncio.get_running_loop()
            task = asyncio.current_task()
            assert task is not None
            with async_limit(0.05):
                watches.append(_watch())
                # the outer cancel's timer goes just before or after the watch's
                loop.call_later(0.05 + (-0.01 if outer_first else 0.01), task.cancel)
                time.sleep(0.1)  # noqa: ASYNC251 - blocks the loop on purpose: both timers are due when it runs next
                try:
                    await _never()
                except asyncio.CancelledError:
                    seen.append(f"cancelling={task.cancelling()}")
                    raise

        task = asyncio.create_task(attempt())
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["cancelling=2"]  # both cancelled it; the limit took its own back
        assert not watches[0].armed

    run(main())


def test_a_limit_inside_a_cancelled_task_does_not_swallow_the_earlier_cancel(run: Run) -> None:
    """A limit armed after its task was already asked to cancel (a cleanup that sends)
    turns only its own cancellation into a timeout, and leaves the earlier one standing."""

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            assert task.cancelling() == 1
            assert await _cut_after(0.05) >= 0.05 - EARLY  # its own deadline: a timeout
            assert task.cancelling() == 1  # the earlier cancel is still asked for
            task.uncancel()

    run(main())


def test_hundreds_of_concurrent_deadlines_each_fire_on_time(run: Run) -> None:
    """300 tasks, each with its own time, are each cut at theirs (and those that end first
    are not), on the one loop timer."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        results: dict[int, tuple[str, float]] = {}
        watches: set[_LoopWatch] = set()

        async def attempt(i: int) -> None:
            # every third ends well in time (a loaded machine may take a while to start 300 tasks)
            limit = 10.0 if i % 3 == 0 else 0.05 + (i % 30) * 0.01  # 0.05 .. 0.34 s
            started = loop.time()
            try:
                with async_limit(limit):
                    watches.add(_watch())
                    await asyncio.sleep(0.01 if i % 3 == 0 else 10.0)
                results[i] = ("done", loop.time() - started - limit)
            except TimeoutError:
                results[i] = ("cut", loop.time() - started - limit)

        lags = [_beside(0.05 + k * 0.01) for k in range(30)]  # a bare timer at each of their times
        async with asyncio.timeout(5.0):  # bounded: the whole run
            await asyncio.gather(*(attempt(i) for i in range(300)))
        lag = max(await asyncio.gather(*lags))
        assert {i for i, (how, _) in results.items() if how == "done"} == set(range(0, 300, 3))
        lateness = [late for how, late in results.values() if how == "cut"]
        assert len(lateness) == 200
        assert min(lateness) >= -EARLY, "a deadline fired early"
        assert max(lateness) <= lag + LATE, f"a deadline fired {max(lateness) * 1000:.0f} ms late ({lag * 1000:.0f} ms lag)"
        (watch,) = watches  # one watch for them all
        assert not watch.armed

    run(main())


def test_a_later_attempt_with_an_earlier_deadline_is_cut_on_time(run: Run) -> None:
    """The timer waits for the earliest deadline; a shorter one armed later moves it up."""

    async def main() -> None:
        first = asyncio.create_task(_cut_after(2.0))
        await asyncio.sleep(0.01)
        elapsed, lag = await _timed_cut(0.05)
        assert _on_time(elapsed, 0.05, lag), (elapsed, lag)  # not when the first one is cut
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first

    run(main())


async def _watched(seconds: float) -> tuple[bool, _LoopWatch]:
    """Whether a limit of ``seconds`` cut its body on time (:func:`_on_time`), and the watch that cut it."""
    ended = asyncio.create_task(_timed_cut(seconds))
    await asyncio.sleep(0)  # it arms
    watch = _watch()
    elapsed, lag = await ended
    return _on_time(elapsed, seconds, lag), watch


def test_loops_used_in_turn_each_have_their_own_watch() -> None:
    """A loop used again after another (as pytest-asyncio runs a loop per test) cuts on
    time, each with its own watch; a watch that went quiet is dropped and made again."""
    a, b = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        on_time, watch_a = a.run_until_complete(_watched(0.05))
        assert on_time
        on_time, watch_b = b.run_until_complete(_watched(0.05))
        assert on_time
        assert watch_a is not watch_b
        quiet = weakref.ref(watch_a)
        del watch_a, watch_b
        a.run_until_complete(asyncio.sleep(0.01))  # the watch's last timer has run
        gc.collect()
        assert quiet() is None  # the loop is not idle for ever holding a watch
        on_time, again = a.run_until_complete(_watched(0.05))
        assert on_time
        assert again is not None
    finally:
        a.close()
        b.close()


def test_loops_running_at_once_in_two_threads_each_cut_on_time() -> None:
    """Two threads, each running a loop, arm and are cut in turn: each attempt is cut by
    its own loop's watch, whichever watch was looked up last."""
    seen: dict[str, list[tuple[bool, _LoopWatch]]] = {"a": [], "b": []}

    def thread(name: str) -> None:
        async def main() -> None:
            for _ in range(5):
                seen[name].append(await _watched(0.03))

        asyncio.run(main())

    threads = [threading.Thread(target=thread, args=(name,)) for name in seen]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(len(runs) == 5 for runs in seen.values())
    assert all(on_time for runs in seen.values() for on_time, _ in runs)
    a, b = ({id(watch) for _, watch in runs} for runs in seen.values())
    assert a.isdisjoint(b)  # (a watch found its thread's loop, never the other's)


def test_the_running_loop_is_not_asked_for_while_its_watch_is_at_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a loop's watch is at hand, a limit finds the loop through it: asyncio's
    ``_get_running_loop()`` asks the kernel for the process id on every call (a system
    call an attempt). A second loop in the same thread is asked for again."""

    async def armed_twice() -> None:
        with async_limit(1.0):
            await asyncio.sleep(0)
        with monkeypatch.context() as patched:
            patched.setattr(_deadline, "_running_loop", _not_asked)
            with async_limit(1.0):
                await asyncio.sleep(0)
            on_time, _ = await _watched(0.03)  # and it still cuts
            assert on_time

    asyncio.run(armed_twice())
    asked: list[asyncio.AbstractEventLoop | None] = []

    def running_loop() -> asyncio.AbstractEventLoop | None:
        asked.append(asyncio._get_running_loop())
        return asked[-1]

    monkeypatch.setattr(_deadline, "_running_loop", running_loop)
    asyncio.run(_watched(0.03))  # another loop: the watch at hand is the first one's
    assert asked


def _not_asked() -> None:
    raise AssertionError("asyncio._get_running_loop() was asked while the watch was at hand")


def test_a_closed_loop_leaves_nothing_behind() -> None:
    """Neither the watch nor the registry keeps a closed loop alive, not even with an
    attempt still armed on it when it closed."""
    loop = asyncio.new_event_loop()
    destroyed: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: destroyed.append(context))

    async def stranded() -> None:
        with async_limit(30.0):
            await _never()

    async def main() -> None:
        asyncio.get_running_loop().create_task(stranded())
        await asyncio.sleep(0.01)
        assert len(_watch().armed) == 1
        with async_limit(1.0):
            await asyncio.sleep(0)

    loop.run_until_complete(main())
    loop.close()  # the stranded attempt is still armed
    gone = weakref.ref(loop)
    watch = _deadline._watches[loop]
    del loop
    gc.collect()
    assert gone() is None, "the closed loop is still alive"
    assert watch() is None
    assert len([m for m in destroyed if "pending" in m["message"]]) == 1  # asyncio's own warning


def test_a_loop_closed_with_its_watch_timer_set_goes_without_the_collector() -> None:
    """A loop closed while its watch's timer is still set (at its last attempt's time, the
    attempt long answered) goes with its watch once nothing else holds them: the watch holds
    its timer weakly (the loop's heap holds it), so the timer, whose callback holds the
    watch, makes no cycle with it for the cyclic collector to find."""
    from .garbage import left_for_the_collector

    def run() -> None:
        loop = asyncio.new_event_loop()

        async def answered() -> None:
            with async_limit(30.0):
                await asyncio.sleep(0)
            assert _watch().wakes_at < math.inf  # the timer is still set: it moves only earlier

        loop.run_until_complete(answered())
        loop.close()

    assert left_for_the_collector(run, (_LoopWatch, asyncio.AbstractEventLoop)) == []


class _Unkind:
    """A task whose cancel() fails (a bug below the watch)."""

    def cancelling(self) -> int:
        return 0

    def cancel(self) -> bool:
        raise RuntimeError("cannot cancel")


def test_a_failing_cut_leaves_the_later_deadlines_standing(
    run: Run, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt whose cut fails is logged, and the loop's later deadlines still fire."""

    async def main() -> None:
        later = asyncio.create_task(_timed_cut(0.1))
        await asyncio.sleep(0)  # it arms: the loop has its watch
        with monkeypatch.context() as patched:  # an attempt of a task whose cancel() fails, never left
            patched.setattr(_deadline, "_task_of", lambda loop: _Unkind())
            async_limit(0.02)
        async with asyncio.timeout(5.0):  # bounded: a watch stuck on the failed cut never cuts this one
            elapsed, lag = await later
        assert _on_time(elapsed, 0.1, lag), (elapsed, lag)

    run(main())
    assert "cutting an attempt at its deadline failed" in caplog.text
