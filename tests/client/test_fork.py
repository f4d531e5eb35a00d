"""A transport made before a fork, used in the child (``pytest_failover._fork``).

A pre-fork server (gunicorn ``--preload``), Celery's prefork pool and ``multiprocessing``
on Linux fork a process that has used its transport already: the child has none of the
parent's threads (the deadline watchdog, the hedge pool) and none of the locks another
thread held then. Each test uses a transport in the parent, forks, and has the child
report what it saw through a pipe; the parent bounds the child's time and kills one that
hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import requests

from pytest_failover import (
    AsyncFailoverTransport,
    FailoverError,
    FailoverResult,
    FailoverTransport,
    Hedging,
    Policy,
    Pool,
)
from pytest_failover._deadline import async_limit
from pytest_failover._fork import renew_in_child
from pytest_failover._sticky import StickyFile
from pytest_failover.integrations.requests import FailoverAdapter
from pytest_failover.resolve import Answer, CachingResolver, SystemResolver

from .forking import WITHIN, in_child
from .test_deadline import HEADS, SlowOnAsk, Trickler


@pytest.fixture
def trickler() -> Iterator[str]:
    """A server that sends an answer's head, then its body (which ends at the close) a byte every 0.1 s."""
    server = Trickler(HEADS["body to the close"])
    yield server.url
    server.close()


@pytest.fixture
def slow_primary() -> Iterator[tuple[str, str]]:
    """A primary that trickles ``/slow`` and answers the rest at once; a backup that answers at once."""
    primary, backup = SlowOnAsk(HEADS["head"]), SlowOnAsk(b"")
    backup.slow = False
    yield primary.url, backup.url
    primary.close()
    backup.close()


POLICY = Policy(attempt_timeout=0.5, deadline=0.6, breaker_threshold=1_000, sticky=False)


def _timed(call: Callable[[], object]) -> str:
    """``call()``'s outcome (its error's attempts, or ``answered``) and how long it took."""
    started = time.monotonic()
    try:
        call()
        outcome = "answered"
    except FailoverError as exc:
        outcome = ",".join(str(a.error_type) for a in exc.attempts)
    return f"{outcome} in {time.monotonic() - started:.2f}"


@pytest.mark.parametrize("front", ["httpx", "requests"])
def test_a_sync_attempt_in_a_forks_child_is_cut_at_its_deadline(trickler: str, front: str) -> None:
    """The deadline watchdog runs in the parent when it forks: the child's attempt is cut at
    its deadline all the same, by a watchdog of its own (the parent's thread is not there)."""
    if front == "httpx":
        client = httpx.Client(transport=FailoverTransport([Pool("api", [trickler])], POLICY))
        call: Callable[[], object] = lambda: client.get(trickler + "/slow")  # noqa: E731  # one name, two kinds of call
    else:
        session = requests.Session()
        session.mount("http://", FailoverAdapter([Pool("api", [trickler])], POLICY))
        call = lambda: session.get(trickler + "/slow", timeout=5.0)  # noqa: E731  # (as above)
    parent = _timed(call)  # the watchdog's thread runs from here
    assert parent.startswith("read_timeout"), parent
    said = in_child(lambda: _timed(call))
    outcome, _, took = said.partition(" in ")
    assert outcome.startswith("read_timeout"), said
    assert float(took) <= 0.6 + 0.2, said


@pytest.mark.parametrize("front", ["httpx", "requests"])
def test_a_hedge_in_a_forks_child_goes_out_and_wins(slow_primary: tuple[str, str], front: str) -> None:
    """The hedge pool has threads in the parent when it forks: in the child, a hedge falls
    due and is sent (by a pool of the child's own), and the backup's answer wins."""
    primary, backup = slow_primary
    policy = Policy(hedging=Hedging(delay=0.1, max_ratio=1.0), attempt_timeout=3.0, sticky=False)
    pool = Pool("api", [primary, backup])
    with contextlib.ExitStack() as closing:  # (its kept-alive connections: the servers stop at once)
        if front == "httpx":
            client = closing.enter_context(httpx.Client(transport=FailoverTransport([pool], policy)))
            get: Callable[[str], FailoverResult] = lambda path: client.get(primary + path).extensions["failover"]  # noqa: E731  # one name, two kinds of call
        else:
            session = closing.enter_context(requests.Session())
            session.mount("http://", FailoverAdapter([pool], policy))
            get = lambda path: session.get(primary + path, timeout=5.0).failover  # type: ignore[attr-defined]  # noqa: E731  # its documented place

        def slow() -> str:
            started = time.monotonic()
            result = get("/slow")
            return f"{result.domain} in {time.monotonic() - started:.2f}"

        parent = slow()  # the pool's threads run from here
        assert parent.startswith(backup), parent
        assert float(parent.partition(" in ")[2]) <= 1.0, parent
        said = in_child(slow)
    domain, _, took = said.partition(" in ")
    assert domain == backup, said
    assert float(took) <= 1.0, said


def test_a_pool_lock_held_at_the_fork_is_free_in_the_child(slow_primary: tuple[str, str]) -> None:
    """Another thread holds a pool's lock when the process forks (shared health applying
    the fleet's word, say): it never lets go in the child, whose requests go on all the same."""
    primary, backup = slow_primary
    transport = FailoverTransport([Pool("api", [primary, backup])], Policy(sticky=False))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transport._state.core.pools["api"].lock:
            held.set()
            release.wait(WITHIN)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(5.0)
    try:
        said = in_child(lambda: str(httpx.Client(transport=transport).get(primary + "/fast").extensions["failover"].domain))
    finally:
        release.set()
        holder.join(5.0)
    assert said == primary


def test_an_async_attempt_in_a_forks_child_is_cut_on_its_own_loop() -> None:
    """A child forked from a running loop (multiprocessing's default start) runs a loop of
    its own in the same thread: its attempts are cut there, not on the parent's loop, which
    the child's copy of it still says runs in that thread (``_deadline.watch_here``)."""

    async def cut_after(seconds: float) -> str:
        started = time.monotonic()
        with contextlib.suppress(TimeoutError), async_limit(seconds):
            await asyncio.sleep(5.0)
        return f"{time.monotonic() - started:.2f}"

    async def fork_while_running() -> str:
        with async_limit(1.0):  # the parent's watch is at hand, its timer set for a second on
            await asyncio.sleep(0)
        return in_child(lambda: asyncio.run(cut_after(0.05)))

    said = asyncio.run(fork_while_running())
    assert not said.startswith(("raised", "no answer")), said
    assert 0.05 <= float(said) <= 0.05 + 0.2, said



def test_a_system_lookup_in_a_forks_child_is_answered() -> None:
    """``SystemResolver`` looks names up on a pool of threads, which runs in the parent
    when it forks: the child's lookups run on a pool of its own, and are answered."""
    resolver = SystemResolver(timeout=2.0)
    assert resolver.resolve("localhost").addresses  # the pool's threads run from here
    said = in_child(lambda: ",".join(resolver.resolve("localhost").addresses))
    assert "127.0.0.1" in said.split(","), said


def test_a_cached_lookup_in_flight_at_the_fork_is_not_waited_for_in_the_child() -> None:
    """A thread of the parent is looking a name up through a ``CachingResolver`` when the
    process forks: the child does not wait for that lookup (its thread is not there), it
    makes its own."""
    started, release = threading.Event(), threading.Event()

    class Held:
        """Answers at once, but the parent's first lookup waits until released."""

        def resolve(self, host: str) -> Answer:
            if not started.is_set():
                started.set()
                release.wait(WITHIN)
            return Answer(host=host, addresses=("127.0.0.1",), ttl=0.0, source="system")

        async def aresolve(self, host: str) -> Answer:
            return self.resolve(host)

        def close(self) -> None:
            return None

        async def aclose(self) -> None:
            return None

    resolver = CachingResolver(Held(), wait=WITHIN)
    looking = threading.Thread(target=resolver.resolve, args=("api.test",), daemon=True)
    looking.start()
    assert started.wait(5.0)
    try:
        said = in_child(lambda: ",".join(resolver.resolve("api.test").addresses))
    finally:
        release.set()
        looking.join(5.0)
    assert said == "127.0.0.1"


def test_a_child_sends_through_a_pool_of_its_own_over_the_parents_state(slow_primary: tuple[str, str]) -> None:
    """The way docs/client.md gives a child a pool of connections of its own: a transport
    sharing the parent's state. The breakers are the parent's at the fork: the primary the
    parent found dead is not tried again in the child."""
    _, backup = slow_primary
    with socket.socket() as probe:  # a port that refuses: bound, never listening
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
        transport = FailoverTransport([Pool("api", [dead, backup])], Policy(breaker_threshold=1, sticky=False))
        parent = httpx.Client(transport=transport)  # (closed last: it closes the transport)
        assert parent.get(dead + "/fast").extensions["failover"].domain == backup  # the primary is open

        def child() -> str:
            with httpx.Client(transport=FailoverTransport.sharing(transport)) as own:
                result = own.get(dead + "/fast").extensions["failover"]
            return ",".join(a.domain for a in result.attempts)

        said = in_child(child)
        parent.close()
    assert said == backup


def test_a_sticky_write_pending_at_the_fork_is_written_by_the_child(tmp_path: Path) -> None:
    """A background write of the sticky file was pending when the process forked (the
    parent's writer thread waiting for the file): the child writes it, and its ``flush``
    does not wait in vain."""
    sticky = StickyFile(tmp_path / "sticky.json")
    writing, release = threading.Event(), threading.Event()

    def hold() -> None:  # another write in progress: the writer thread waits for it
        with sticky._io:
            writing.set()
            release.wait(WITHIN)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert writing.wait(5.0)
    sticky.save({"api": "https://b.example"}, wait=False)  # pending: the writer thread waits
    try:
        said = in_child(lambda: f"{sticky.flush(5.0)} {StickyFile(sticky.path).load()}")
    finally:
        release.set()
        holder.join(5.0)
    assert said == "True {'api': 'https://b.example'}"


def test_a_renewal_that_fails_leaves_the_others_to_run(caplog: pytest.LogCaptureFixture) -> None:
    """A bug in one object's renewal is logged in the child; the objects after it are
    renewed all the same."""

    class Owner:
        renewed = False

    def fail(owner: Owner) -> None:
        raise RuntimeError("a bug")

    def mark(owner: Owner) -> None:
        owner.renewed = True

    first, second = Owner(), Owner()
    renew_in_child(first, fail)
    renew_in_child(second, mark)
    said = in_child(lambda: f"{second.renewed} {'a bug' in caplog.text}")
    assert said == "True True"
    assert not second.renewed  # (the parent's is the parent's)


class Counting(SlowOnAsk):
    """:class:`SlowOnAsk` (every request answered at once), counting the connections it accepts."""

    slow = False

    def __init__(self) -> None:
        self.accepted = 0
        super().__init__(b"")

    def serve(self, conn: socket.socket) -> None:
        self.accepted += 1
        super().serve(conn)


@pytest.mark.parametrize("front", ["httpx", "httpx async", "requests"])
def test_a_forks_child_sends_on_connections_of_its_own(front: str) -> None:
    """The inner transport the failover transport built keeps a connection alive in the
    parent: the child opens its own (one connection carrying both processes' requests
    would mix their answers), and the parent's stays the parent's."""
    server = Counting()
    pool = [Pool("api", [server.url])]
    closing: list[Callable[[], object]] = []
    if front == "httpx async":
        async_transport = AsyncFailoverTransport(pool, Policy(sticky=False))
        loop = asyncio.new_event_loop()  # the parent's: its connections belong to it
        closing += [lambda: loop.run_until_complete(async_transport.aclose()), loop.close]
        parent_pid = os.getpid()

        def get() -> int:
            async def once() -> int:
                response = await async_transport.handle_async_request(httpx.Request("GET", server.url + "/a"))
                return response.status_code

            return loop.run_until_complete(once()) if os.getpid() == parent_pid else asyncio.run(once())
    elif front == "httpx":
        sync_transport = FailoverTransport(pool, Policy(sticky=False))
        closing.append(sync_transport.close)

        def get() -> int:
            return sync_transport.handle_request(httpx.Request("GET", server.url + "/a")).status_code
    else:
        session = requests.Session()
        session.mount("http://", FailoverAdapter(pool, Policy(sticky=False)))
        closing.append(session.close)

        def get() -> int:
            return session.get(server.url + "/a", timeout=5.0).status_code

    try:
        assert get() == 200  # the parent's connection, kept alive
        said = in_child(lambda: f"{get()} {server.accepted}")
        assert said == "200 1"  # (the child's copy of the count: the server counts in the parent)
        assert server.accepted == 2  # the child's own connection
        assert get() == 200 and server.accepted == 2  # the parent's, alive and its own
    finally:
        for close in closing:  # (its kept-alive connection: the server stops at once)
            close()
        server.close()
