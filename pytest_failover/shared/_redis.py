"""The two Redis shells of :class:`~pytest_failover.shared._fleet.Fleet`: threads and tasks.

Each shell runs a *listener* (subscribe to the events channel, read the keys of the
local domains once, then apply every message and forget expired leases; on any
failure: local-only, then reconnect with redis-py's jittered exponential backoff) and
a *publisher* (drains the queue of commands the transport's events became, one
pipeline each, dropped while disconnected). ``RedisHealth`` runs them on two daemon
threads, and serves front-ends of every kind (sync, asyncio, trio; any thread and
event loop, at once); ``AsyncRedisHealth`` runs them as two asyncio tasks started by
its transport's first request, in that request's loop, and so serves that one
front-end. Both take the probe lease with a small synchronous client whose every
operation is bounded by ``timeout`` (50 ms): the one Redis call on a request's path,
made once per due domain and cooldown, never while disconnected.

What an event loop running a front-end over ``RedisHealth`` waits for: ``post`` (a
``SimpleQueue.put``), the probe lease (as with ``AsyncRedisHealth``), and a pool's
lock while the listener thread applies a message under it (a breaker update, no I/O).
Everything else (reading, decoding, publishing, reconnecting) is on the threads; the
loop's ``aclose`` stops them from a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

from .._fork import renew_in_child
from ..semconv import SHARED_CONNECTED
from ._fleet import CLOSED, Command, Fleet

__all__ = ["AsyncRedisHealth", "RedisHealth"]

logger = logging.getLogger("pytest_failover")

# The listener wakes this often (s) to forget expired leases and to notice close().
_TICK = 0.25


def _shown(url: str) -> str:
    """``url`` without its password (for logs and ``transport.state()``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" if user else f"***@{host}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class _RedisShell(Fleet):
    """Construction and the probe lease, common to both shells."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "failover",
        timeout: float = 0.05,
        io_timeout: float = 1.0,
        max_backoff: float = 5.0,
    ) -> None:
        if not isinstance(url, str):
            raise TypeError(f"{type(self).__name__}: url must be a str such as 'redis://127.0.0.1:6379/0'")
        try:
            parse_url(url)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        except ValueError as exc:
            raise ValueError(f"{type(self).__name__}({_shown(url)!r}): {exc}") from None
        if not isinstance(prefix, str) or not prefix or any(c.isspace() for c in prefix):
            raise ValueError(f"{type(self).__name__}: prefix must be a non-empty str without spaces, got {prefix!r}")
        super().__init__(shown_url=_shown(url), prefix=prefix)
        self.url = url
        self.timeout = _seconds("timeout", timeout)
        self.io_timeout = _seconds("io_timeout", io_timeout)
        self.max_backoff = _seconds("max_backoff", max_backoff)
        self._backoff = ExponentialWithJitterBackoff(base=min(0.1, self.max_backoff), cap=self.max_backoff)
        self._lease_client: redis.Redis | None = None
        self._init_shell()

    def _init_shell(self) -> None:
        """The shell's own state (its queue, threads or tasks)."""

    def _resume(self) -> None:
        """Start the shell's own work (:class:`RedisHealth`: its threads, once bound; the
        async shell's tasks start with its transport's first request instead)."""

    def abandon(self) -> None:
        """Its state was garbage-collected, every front-end of it unclosed: stop, without
        waiting and without taking a lock (a collection runs in any thread, which may hold
        any lock). The threads or tasks hold the shell, so nothing else would ever stop
        them; each closes its connections as it ends."""

    def bind(self, core: Any, **kwargs: Any) -> None:
        super().bind(core, **kwargs)
        renew_in_child(self, _RedisShell._forked)

    def _forked(self) -> None:
        """In a fork's child (``_fork``): a process of its own to the fleet
        (:meth:`forked_state`), with threads or tasks and connections of its own, unless it
        was closed. The parent's connections are left alone (closing one would shut its
        socket down under the parent; redis-py makes new ones in a child)."""
        self.forked_state()
        self._lease_client = None
        if self.state != CLOSED:
            self._init_shell()
            self._resume()

    def _options(self, timeout: float) -> dict[str, Any]:
        return {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "health_check_interval": max(1, math.ceil(2 * self.io_timeout)),
            "client_name": f"pytest-failover:{self.sender}".replace(" ", "_"),
        }

    def _quick(self) -> redis.Redis:
        """The client whose every operation is bounded by ``timeout``."""
        client = self._lease_client
        if client is None:
            client = self._lease_client = redis.Redis.from_url(
                self.url, retry=Retry(NoBackoff(), 0), **self._options(self.timeout)
            )
        return client

    def take(self, key: str, ttl_ms: int) -> int | None:
        pipe = self._quick().pipeline(transaction=False)
        pipe.set(key, self.sender, nx=True, px=ttl_ms)
        pipe.pttl(key)
        taken, remaining = pipe.execute()
        return None if taken else int(remaining)

    def _close_lease_client(self) -> None:
        client, self._lease_client = self._lease_client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


class RedisHealth(_RedisShell):
    """Shared domain health for any front-end (:class:`~pytest_failover.FailoverTransport`,
    :class:`~pytest_failover.AsyncFailoverTransport`, the requests adapter, the aiohttp
    middleware, and every front-end sharing their state), through the Redis at ``url``:
    breaker openings and closings, the pool's serving domain, one probe per fleet, the
    control version. Its two threads start with the transport built with it and stop
    when the last front-end using it is closed.

    ``prefix`` names every key and the channel (one per fleet); ``timeout`` bounds the
    probe lease, the only Redis call a request may make; ``io_timeout`` bounds the
    background connection's operations; ``max_backoff`` caps the wait between
    reconnections. Redis must be access-controlled (ACL and password, ``rediss://``):
    whoever can write there can open the breakers of your domains."""

    asynchronous = False
    started = True  # its threads start when a transport binds it

    def _init_shell(self) -> None:
        self._queue: queue.SimpleQueue[list[Command] | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def bind(self, core: Any, **kwargs: Any) -> None:
        super().bind(core, **kwargs)
        self._resume()

    def _resume(self) -> None:
        for name, target in (("listener", self._listen), ("publisher", self._publish)):
            thread = threading.Thread(target=target, name=f"pytest-failover shared {name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def post(self, commands: list[Command]) -> None:
        self._queue.put(commands)

    def start(self) -> None:
        """Nothing to start: the threads run from the moment a transport binds it."""

    def close(self) -> None:
        """Stop the threads and close the connections (closing the last front-end that
        uses it does it). Waits for the threads: at most ``io_timeout`` + 1 s each,
        typically one listener tick (0.25 s)."""
        self._stop.set()
        self._queue.put(None)
        for thread in self._threads:
            thread.join(self.io_timeout + 1.0)
        self._close_lease_client()
        self.close_state()

    async def aclose(self) -> None:
        """:meth:`close` in a worker thread (asyncio or trio): the loop never waits for
        the threads to stop."""
        import anyio  # httpx's own dependency

        await anyio.to_thread.run_sync(self.close)

    def _client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, retry=Retry(NoBackoff(), 0), **self._options(self.io_timeout))

    def _listen(self) -> None:
        failures = 0
        while not self._stop.is_set():
            client = self._client()
            pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]  # redis-py before 8.2 leaves it unannotated
            with self._failing(pubsub, client):
                pubsub.subscribe(self.keys.channel)
                self.catch_up(client.mget(self.catch_up_keys()))
                self._quick().ping()  # connected means quick enough for the lease
                self.connected()
                failures = 0
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=_TICK)
                    if message is not None and message.get("type") == "message":
                        self.apply(message["data"])
                        # a buffered message is returned without releasing the GIL: hand it
                        # to the other threads (an event loop's) between messages, or a flood
                        # holds them off for the interpreter's switch interval (5 ms) each time
                        time.sleep(0)
                    self.sweep(every=_TICK)
                    if self.state != SHARED_CONNECTED:  # the lease found Redis slow: is it back?
                        self._quick().ping()
                        self.connected()
            failures += 1
            self._stop.wait(self._backoff.compute(failures))

    def _publish(self) -> None:
        client = self._client()
        while (commands := self._queue.get()) is not None:
            if self.state != SHARED_CONNECTED:
                continue  # local-only: the fleet hears nothing from us meanwhile
            with self._failing():
                pipe = client.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                pipe.execute()
        with self._failing(client):
            pass
        self._stop.set()  # (close() set it already; abandon() leaves it to this thread)
        self._close_lease_client()

    def abandon(self) -> None:
        self._queue.put(None)  # (``SimpleQueue.put`` may be called from a finalizer)

    @contextlib.contextmanager
    def _failing(self, *closing: Any) -> Iterator[None]:
        """Any Redis failure in the block means local-only; then close ``closing``."""
        try:
            yield
        except (redis.RedisError, OSError) as exc:
            self.lost(exc)
        finally:
            for resource in closing:
                with contextlib.suppress(Exception):
                    resource.close()


class AsyncRedisHealth(_RedisShell):
    """The :class:`RedisHealth` twin for one :class:`~pytest_failover.AsyncFailoverTransport`
    (or aiohttp middleware), on redis-py's asyncio client. Its tasks start with the
    transport's first request, in that request's event loop (asyncio only: under trio
    the transport stays local-only, and says so once). Its queue and tasks belong to
    that loop, so a state bound to it cannot be shared with other front-ends: use
    :class:`RedisHealth` for that (any front-end, any thread and loop)."""

    asynchronous = True

    def _init_shell(self) -> None:
        self._queue: asyncio.Queue[list[Command]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = False

    def start(self) -> None:
        """Start the tasks in the running event loop (the transport's first request does)."""
        if self.started:
            return
        self.started = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            logger.warning("shared health %s: needs an asyncio event loop; local-only", self.shown_url)
            return
        self._loop = loop
        self._queue = asyncio.Queue()
        self._tasks = [loop.create_task(self._listen()), loop.create_task(self._publish())]

    def post(self, commands: list[Command]) -> None:
        if self._queue is not None:
            self._queue.put_nowait(commands)

    def close(self) -> None:
        """Stop from any thread without waiting: the tasks are cancelled in their loop
        (their connections close as they end); prefer ``aclose()`` in that loop."""
        self.abandon()
        self._close_lease_client()
        self.close_state()

    def abandon(self) -> None:
        tasks, self._tasks = self._tasks, []
        loop = self._loop
        for task in tasks:
            if loop is not None:
                with contextlib.suppress(RuntimeError):  # that loop is closed: its tasks are gone
                    loop.call_soon_threadsafe(task.cancel)

    async def aclose(self) -> None:
        """Cancel the tasks and close the connections (the transport's ``aclose()`` does it)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._close_lease_client()
        self.close_state()

    def _client(self) -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(
            self.url, retry=AsyncRetry(NoBackoff(), 0), **self._options(self.io_timeout)
        )

    async def _listen(self) -> None:
        failures = 0
        while True:
            client = self._client()
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.keys.channel)
                self.catch_up(await client.mget(self.catch_up_keys()))
                await asyncio.wait_for(client.ping(), self.timeout)  # quick enough for the lease
                self.connected()
                failures = 0
                while True:
                    message = await pubsub.get_message(timeout=_TICK)
                    if message is not None and message.get("type") == "message":
                        self.apply(message["data"])
                        # redis-py returns a buffered message without suspending: let the
                        # loop's other tasks run between messages (a flood must not starve them)
                        await asyncio.sleep(0)
                    self.sweep(every=_TICK)
                    if self.state != SHARED_CONNECTED:  # the lease found Redis slow: is it back?
                        await asyncio.wait_for(client.ping(), self.timeout)
                        self.connected()
            except (redis.RedisError, OSError) as exc:
                self.lost(exc)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # redis-py before 8.2 leaves it unannotated
                    await client.aclose()
            failures += 1
            await asyncio.sleep(self._backoff.compute(failures))

    async def _publish(self) -> None:
        assert self._queue is not None
        client = self._client()
        try:
            while True:
                commands = await self._queue.get()
                if self.state != SHARED_CONNECTED:
                    continue
                try:
                    pipe = client.pipeline(transaction=False)
                    for command in commands:
                        pipe.execute_command(*command)
                    await pipe.execute()
                except (redis.RedisError, OSError) as exc:
                    self.lost(exc)
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()
