"""Load shapes: async tasks and threads, each side sharing ONE client, bounded in count and time.

- :class:`Burst`: every request fired at once (``asyncio.gather`` of ``tasks`` one-shot
  coroutines; ``threads`` threads released together by an event).
- :class:`Sustained`: ``tasks`` coroutines and ``threads`` threads, each sending GETs one
  after another (with a short random pause, and one before its first) until ``seconds``
  have passed.

The client decides the library of each side (``Client.sync_side`` and ``async_side``,
see ``_sides``); this module only drives them. Both sides start at the same instant.
Each logical request becomes a :class:`Sample`: its start and end (monotonic clock),
the final status or the exception (its class, and ``FailoverError.reason``), and the
attempts the client reported. Anything raised that is not an error of the side's own
library (``httpx.HTTPError``, ``requests.RequestException``, ``aiohttp.ClientError``) is
kept with its ``repr``: a client must never let one escape. A request still running
``grace`` seconds after the load's end is abandoned and counted as ``hung``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_failover import AttemptRecord, FailoverError

from ._clients import Client
from ._sides import RID, Answer, Calls

__all__ = ["Burst", "Drive", "Load", "Sample", "Sustained", "drive"]

FINAL_RETRYABLE = frozenset({500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Burst:
    """Fire ``tasks`` async requests and ``threads`` threaded requests at once."""

    tasks: int = 0
    threads: int = 0


@dataclass(frozen=True, slots=True)
class Sustained:
    """Keep ``tasks`` coroutines and ``threads`` threads busy for ``seconds``.

    Each worker starts with a pause drawn like the pauses between its requests, so the
    load begins at the random phases it runs at, not as one burst: 500 flapping workers
    started at once took 2 to 3.4 s to be served on 2 cores, each attempt then met the
    timeline a flip late, and in one run of ten the burst's failed retries drained the
    retry budget (131 requests, a 3.2 % gap). Every request at once is ``Burst``'s job.
    """

    tasks: int
    threads: int
    seconds: float
    think: float = 0.02  # mean pause between one worker's requests (uniform 0..2x)
    max_per_worker: int = 100_000


Load = Burst | Sustained


@dataclass(frozen=True, slots=True)
class Sample:
    """One logical request, as its caller saw it."""

    rid: str
    side: str  # "async" or "thread"
    start: float
    end: float
    status: int | None = None
    served_by: str | None = None  # host that gave the final answer
    error: str | None = None  # exception class
    reason: str | None = None  # FailoverError.reason
    own_error: bool = True  # False: something that is not an error of the client's library escaped
    attempts: tuple[str, ...] | None = None  # hosts of the attempts the client reported
    detail: str = ""

    @property
    def latency(self) -> float:
        return self.end - self.start

    @property
    def failed(self) -> bool:
        """An exception, or a final answer that is a failure of the domain."""
        return self.error is not None or self.status in FINAL_RETRYABLE


def _host(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]


def _attempts(records: Sequence[AttemptRecord]) -> tuple[str, ...]:
    """The hosts of the attempts that reached the network (a hedge cut before it was
    handed over is reported, ``sent=False``, but never left)."""
    return tuple(_host(r.domain) for r in records if r.sent or r.race != "cancelled")


def _from_answer(rid: str, side: str, start: float, end: float, answer: Answer) -> Sample:
    result = answer.result
    if result is None:
        return Sample(rid, side, start, end, status=answer.status, served_by=answer.host)
    return Sample(
        rid, side, start, end,
        status=answer.status,
        served_by=_host(result.domain) if result.domain else None,
        attempts=_attempts(result.attempts),
    )  # fmt: skip


def _from_error(
    rid: str, side: str, start: float, end: float, exc: BaseException, errors: tuple[type[BaseException], ...]
) -> Sample:
    own = isinstance(exc, errors)
    return Sample(
        rid, side, start, end,
        error=type(exc).__name__,
        reason=exc.reason if isinstance(exc, FailoverError) else None,
        own_error=own,
        attempts=_attempts(exc.attempts) if isinstance(exc, FailoverError) else None,
        detail="" if own else repr(exc)[:300],
    )  # fmt: skip


@dataclass
class Drive:
    """What one load produced."""

    samples: list[Sample]
    hung: int
    started: float
    ended: float


def drive(
    load: Load,
    client: Client,
    urls: Sequence[str],
    url: str,
    calls: Calls,
    *,
    tag: str,
    shards: int,
    grace: float,
    clock: Callable[[], float] = time.monotonic,
    seed: int = 0,
    on_start: Callable[[], object] = lambda: None,
) -> Drive:
    """Run ``load`` against ``url`` through ``client``; every wait bounded by the load plus ``grace``.

    ``on_start`` is called once both sides are built, just before the first request
    (the timeline starts there, so building clients does not eat into its first phase).
    """
    samples: list[Sample] = []
    lock = threading.Lock()
    go = threading.Event()
    seconds = load.seconds if isinstance(load, Sustained) else 0.0
    threads_n = load.threads
    tasks_n = load.tasks
    started = [0.0]

    def keep(sample: Sample) -> None:
        with lock:
            samples.append(sample)

    sync_side = client.sync_side(urls, calls)

    def one_sync(rid: str) -> None:
        start = clock()
        try:
            answer = sync_side.get(url, {RID: rid})
        except BaseException as exc:  # every escape is counted; foreign ones must be 0
            keep(_from_error(rid, "thread", start, clock(), exc, sync_side.errors))
        else:
            keep(_from_answer(rid, "thread", start, clock(), answer))

    def thread_main(n: int) -> None:
        go.wait(60.0)
        rng = random.Random(seed * 7919 + n)
        if isinstance(load, Burst):
            one_sync(f"{tag}/t{n}-0")
            return
        stop_at = started[0] + seconds
        time.sleep(rng.uniform(0, 2 * load.think))  # a random phase (see Sustained)
        for i in range(load.max_per_worker):
            if clock() >= stop_at:
                return
            one_sync(f"{tag}/t{n}-{i}")
            time.sleep(rng.uniform(0, 2 * load.think))

    threads = [
        threading.Thread(target=thread_main, args=(n,), name=f"scenario load {n}", daemon=True)
        for n in range(threads_n)
    ]
    for thread in threads:
        thread.start()

    async def main() -> int:
        async with client.async_side(urls, calls, shards=shards) as side:

            async def one_async(rid: str) -> None:
                start = clock()
                try:
                    answer = await side.get(url, {RID: rid})
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # every escape is counted; foreign ones must be 0
                    keep(_from_error(rid, "async", start, clock(), exc, side.errors))
                else:
                    keep(_from_answer(rid, "async", start, clock(), answer))

            async def task_main(n: int) -> None:
                rng = random.Random(seed * 104729 + n)
                if isinstance(load, Burst):
                    await one_async(f"{tag}/a{n}-0")
                    return
                stop_at = started[0] + seconds
                await asyncio.sleep(rng.uniform(0, 2 * load.think))  # a random phase (see Sustained)
                for i in range(load.max_per_worker):
                    if clock() >= stop_at:
                        return
                    await one_async(f"{tag}/a{n}-{i}")
                    await asyncio.sleep(rng.uniform(0, 2 * load.think))

            try:
                on_start()
            finally:  # the threads must not wait for a start that failed
                started[0] = clock()
                go.set()
            tasks = [asyncio.ensure_future(task_main(n)) for n in range(tasks_n)]
            hung = 0
            if tasks:
                _done, pending = await asyncio.wait(tasks, timeout=seconds + grace)
                hung = len(pending)
                for task in pending:
                    task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait(pending, timeout=5.0)
            return hung

    hung = asyncio.run(main())
    end_by = started[0] + seconds + grace
    for thread in threads:
        thread.join(max(0.1, end_by - clock()))
        hung += thread.is_alive()
    ended = clock()
    if not any(t.is_alive() for t in threads):
        sync_side.close()
    with lock:
        return Drive(sorted(samples, key=lambda s: s.start), hung, started[0], ended)
