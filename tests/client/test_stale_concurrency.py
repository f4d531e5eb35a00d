"""The stale fallback under concurrent traffic: 100 tasks and 12 threads, one shared cache.

Twenty users (each with their own bearer token) read a public and a private resource
through one failover state (an ``AsyncFailoverTransport`` and a ``FailoverTransport``
built with ``sharing``, so the event loop and the threads store into and read from the
same cache at once) while both domains flip between healthy and 503. Whatever the
interleaving, an answer names the user who asked, and a private one is never served
from the cache: the promise of issue #9 ("the stale fallback never leaks").
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from pytest_failover import (
    AsyncFailoverTransport,
    ExponentialBackoff,
    FailoverError,
    FailoverResult,
    FailoverTransport,
    Policy,
    Pool,
    faults,
)
from pytest_failover.simulator import FakeDomains, RecordedRequest, Response

from .load import alongside

HOSTS = ("api.stale.test", "api2.stale.test")
USERS = [f"token-{n}" for n in range(20)]
PATHS = {"/public": "public, max-age=60", "/private": "private, max-age=60"}
SECONDS = 1.5  # how long the domains flip and the workers run, at least ...
MOST = 30.0  # ... and at most, until the run means something (Tally.enough): a loaded machine answers fewer
POLICY = Policy(
    schedule=ExponentialBackoff(base=0.001, cap=0.005, max_attempts=2),
    stale_on_failure=True,
    breaker_cooldown=0.05,
    deadline=5.0,
)


def echo(request: RecordedRequest) -> Response:
    """The answer names the caller's token, so a leak shows in the body."""
    body = {"token": request.headers.get("authorization", ""), "path": request.path}
    return Response(200, json.dumps(body), {"Cache-Control": PATHS[request.path], "Content-Type": "application/json"})


@pytest.fixture
def flipping() -> Iterator[FakeDomains]:
    """Both domains up, then flipping between healthy and 503 (each on its own draw)."""
    with FakeDomains() as fake:
        for host in HOSTS:
            fake.add(host, echo)
        stop = threading.Event()

        def flip() -> None:
            draw = random.Random(9)
            deadline = time.monotonic() + MOST + 5.0  # flipping until the workers stop (at MOST)
            while not stop.wait(0.02) and time.monotonic() < deadline:
                for host in HOSTS:
                    if draw.random() < 0.6:
                        fake.fail(host, faults.status(503))
                    else:
                        fake.heal(host)
            for host in HOSTS:
                fake.heal(host)

        thread = threading.Thread(target=flip, daemon=True)
        thread.start()
        yield fake
        stop.set()
        thread.join(5)


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.leaks: list[str] = []

    def answer(self, token: str, path: str, response: httpx.Response) -> None:
        result = response.extensions["failover"]
        assert isinstance(result, FailoverResult)
        body = response.json() if response.status_code == 200 else {}
        with self.lock:
            if response.status_code != 200:
                self.outcomes[f"status {response.status_code}"] += 1
                return
            if body["token"] != f"Bearer {token}":
                self.leaks.append(f"{token} got {body['token']}'s {path} (stale={result.stale})")
            if result.stale and path == "/private":
                self.leaks.append(f"{token}'s private answer was served from the cache")
            self.outcomes["stale" if result.stale else "fresh"] += 1

    def error(self, exc: FailoverError) -> None:
        with self.lock:
            self.outcomes[type(exc).__name__] += 1

    def enough(self) -> bool:
        """The run means something: answers of both kinds, and stale copies served in outages."""
        return self.outcomes["fresh"] > 100 and self.outcomes["stale"] > 10


def test_no_user_ever_gets_another_users_answer_under_concurrency(flipping: FakeDomains) -> None:
    pool = Pool("api", [f"http://{host}" for host in HOSTS])
    async_transport = AsyncFailoverTransport([pool], POLICY)
    sync_transport = FailoverTransport.sharing(async_transport)  # one cache for both
    tally = Tally()
    errors: list[BaseException] = []
    started = time.monotonic()

    def running() -> bool:
        elapsed = time.monotonic() - started
        return elapsed < SECONDS or (elapsed < MOST and not tally.enough())

    def request_of(draw: random.Random) -> tuple[str, str, dict[str, str]]:
        token, path = draw.choice(USERS), draw.choice(sorted(PATHS))
        return token, path, {"Authorization": f"Bearer {token}"}

    sync_client = httpx.Client(transport=sync_transport)  # one for every thread: closing it closes the transport

    def thread_worker(n: int) -> None:
        draw = random.Random(n)
        try:
            while running():
                token, path, headers = request_of(draw)
                try:
                    tally.answer(token, path, sync_client.get(f"http://{HOSTS[0]}{path}", headers=headers))
                except FailoverError as exc:
                    tally.error(exc)
        except BaseException as exc:  # anything else is a bug
            errors.append(exc)

    async def task_worker(client: httpx.AsyncClient, n: int) -> None:
        draw = random.Random(1000 + n)
        while running():
            token, path, headers = request_of(draw)
            try:
                tally.answer(token, path, await client.get(f"http://{HOSTS[0]}{path}", headers=headers))
            except FailoverError as exc:
                tally.error(exc)
            await asyncio.sleep(draw.uniform(0, 0.01))

    async def tasks() -> None:
        async with httpx.AsyncClient(transport=async_transport) as client:
            await asyncio.gather(*(task_worker(client, n) for n in range(100)))

    alongside([threading.Thread(target=thread_worker, args=(n,)) for n in range(12)], tasks)
    sync_client.close()
    assert not errors, errors
    assert not tally.leaks, tally.leaks[:5]
    assert tally.enough(), tally.outcomes  # within MOST seconds
