"""One transport shared by 500 async tasks and by 16 threads while domains go down and up."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import httpx

from benchmarks.scenarios._clients import ShardedTransport  # httpcore#1035: see its docstring
from pytest_failover import (
    AsyncFailoverTransport,
    ControlDocument,
    ExponentialBackoff,
    FailoverError,
    FailoverResult,
    FailoverTransport,
    Policy,
    Pool,
)
from pytest_failover._values import AttemptRecord

from .load import alongside
from .servers import Flapping, LoopbackServer

POLICY = Policy(
    schedule=ExponentialBackoff(base=0.001, cap=0.005, max_attempts=3),
    attempt_timeout=30.0,
    deadline=60.0,
    breaker_threshold=3,
    breaker_cooldown=0.02,
)


def check(records: list[AttemptRecord], posts: Counter[str], a: LoopbackServer, b: LoopbackServer) -> None:
    client_side = Counter(r.domain for r in records if r.sent)  # pre-send failures never arrive
    assert client_side[a.url()] == a.total, "attempts on a differ from what a saw"
    assert client_side[b.url()] == b.total, "attempts on b differ from what b saw"
    seen = Counter(body.decode() for server in (a, b) for (m, _, _, body) in server.seen if m == "POST")
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert not duplicates, f"POSTs without an idempotency key were sent twice: {duplicates}"
    assert set(seen) <= set(posts)


def test_500_tasks_share_one_async_transport(flapping: Flapping) -> None:
    a, b, _ = flapping
    transport = AsyncFailoverTransport([Pool("api", [a.url(), b.url()])], POLICY, ShardedTransport(10))
    records: list[AttemptRecord] = []
    posts: Counter[str] = Counter()
    completed = 0

    async def worker(client: httpx.AsyncClient, n: int) -> None:
        nonlocal completed
        for i in range(2):
            completed += 1
            body = f"task-{n}-{i}"
            try:
                if i % 2:
                    posts[body] += 1
                    response = await client.post(a.url() + "/orders", content=body.encode())
                else:
                    response = await client.get(a.url() + "/rooms")
            except FailoverError as exc:
                records.extend(exc.attempts)
                continue
            result = response.extensions["failover"]
            assert isinstance(result, FailoverResult)
            records.extend(result.attempts)

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, timeout=30) as client:
            await asyncio.gather(*(worker(client, n) for n in range(500)))

    asyncio.run(main())
    check(records, posts, a, b)
    assert completed == 1000 and records


def test_16_threads_share_one_sync_transport(flapping: Flapping) -> None:
    a, b, _ = flapping
    transport = FailoverTransport([Pool("api", [a.url(), b.url()])], POLICY)
    client = httpx.Client(transport=transport, timeout=30)
    records: list[AttemptRecord] = []
    posts: Counter[str] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(10):
                body = f"thread-{n}-{i}"
                try:
                    if i % 2:
                        with lock:
                            posts[body] += 1
                        response = client.post(a.url() + "/orders", content=body.encode())
                    else:
                        response = client.get(a.url() + "/rooms")
                except FailoverError as exc:
                    with lock:
                        records.extend(exc.attempts)
                    continue
                with lock:
                    records.extend(response.extensions["failover"].attempts)
        except BaseException as exc:  # anything else is a bug
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    client.close()
    assert not errors, errors
    check(records, posts, a, b)
    assert records


def test_a_control_document_applied_under_traffic_holds_for_every_later_attempt(
    servers: dict[str, LoopbackServer],
) -> None:
    """100 tasks and 8 threads on one state (``sharing``) while a signed document
    disables the primary, then enables it again: no attempt of a request that began
    after the first ``apply_control`` returned reaches the primary until the second one,
    no request fails (the backups answer), and traffic returns to the primary after."""
    a, b, c = servers["a"], servers["b"], servers["c"]
    key = b"k" * 32
    pools = [Pool("api", [a.url(), b.url(), c.url()])]
    async_transport = AsyncFailoverTransport(pools, POLICY, ShardedTransport(10))
    sync_transport = FailoverTransport.sharing(async_transport)
    # (began, ended, domains attempted), per request; the phases' bounds, once known
    seen: list[tuple[float, float, tuple[str, ...]]] = []
    failures: list[BaseException] = []
    bounds: dict[str, float] = {}
    # The workers stop 0.6 s after the primary is enabled again (whenever a loaded machine
    # gets there), and in any case after 30 s.
    cap = time.monotonic() + 30.0

    def running() -> bool:
        now = time.monotonic()
        enabled = bounds.get("enabled")
        return now < cap and (enabled is None or now < enabled + 0.6)

    def doc(version: int, disabled: list[str]) -> ControlDocument:
        signed = ControlDocument.sign(version=version, pools={"api": disabled}, expires_in=60, hmac_key=key)
        return ControlDocument.parse(signed, hmac_key=key)

    def control() -> None:
        time.sleep(0.4)
        sync_transport.apply_control(doc(1, [a.url()]))
        bounds["disabled"] = time.monotonic()
        time.sleep(0.5)
        bounds["enabling"] = time.monotonic()
        async_transport.apply_control(doc(2, []))
        bounds["enabled"] = time.monotonic()

    def note(began: float, result: FailoverResult) -> None:
        seen.append((began, time.monotonic(), tuple(r.domain for r in result.attempts)))

    # One client for every thread: closing a client closes its transport, even under
    # another thread's request (a client per thread, closed as each finished, cut the
    # sockets of the others: EBADF)
    sync_client = httpx.Client(transport=sync_transport, timeout=30)

    def thread_worker() -> None:
        while running():
            began = time.monotonic()
            try:
                note(began, sync_client.get(a.url() + "/rooms").extensions["failover"])
            except BaseException as exc:  # every domain stays healthy: nothing may fail
                failures.append(exc)

    async def task_worker(client: httpx.AsyncClient) -> None:
        while running():
            began = time.monotonic()
            try:
                note(began, (await client.get(a.url() + "/rooms")).extensions["failover"])
            except Exception as exc:
                failures.append(exc)
            await asyncio.sleep(0.005)

    async def tasks() -> None:
        async with httpx.AsyncClient(transport=async_transport, timeout=30) as client:
            await asyncio.gather(*(task_worker(client) for _ in range(100)))

    threads = [threading.Thread(target=thread_worker) for _ in range(8)]
    alongside([*threads, threading.Thread(target=control)], tasks)
    sync_client.close()
    assert not failures, failures[:3]
    while_disabled = [s for s in seen if bounds["disabled"] < s[0] and s[1] < bounds["enabling"]]
    leaked = [s for s in while_disabled if a.url() in s[2]]
    assert while_disabled and not leaked, f"{len(leaked)} of {len(while_disabled)} reached the disabled primary"
    after = [s for s in seen if s[0] > bounds["enabled"] + 0.1]
    on_primary = sum(s[2] == (a.url(),) for s in after)
    assert after and on_primary == len(after), f"{on_primary} of {len(after)} back on the primary"
