"""One run: fresh domains, a timeline, a load through one client, and what everybody saw.

Servers are the project's outage simulator (``FakeDomains``, plain http on loopback):
every fake name resolves only inside this process and every connect goes to
``127.0.0.1``; ``block_unknown_hosts`` makes any other destination an error. Each run
starts from ``fd.reset()`` (fresh records, every domain healthy and registered again),
so the servers' records belong to that run alone.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pytest_failover.simulator import FakeDomains

from ._clients import Client
from ._load import Drive, Load, Sustained, drive
from ._metrics import Outcome, Seen, summarize
from ._sides import RID, Call, Calls
from ._timeline import Driver, Record, Timeline

RECORD_LIMIT = 100_000  # the simulator's (pytest_failover.simulator._record.RECORD_LIMIT)

__all__ = ["DEFAULT_DEADLINE", "Env", "Run", "fake_domains", "quiet", "servers"]

#: The bound used for the availability gap when a client has none of its own (httpx-retries).
DEFAULT_DEADLINE = 20.0
PATH = "/v1/rooms"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Keep the clients' retry logging (its cost stays, its output goes)."""
    saved = []
    for name in ("pytest_failover", "httpx_retries", "urllib3"):
        log = logging.getLogger(name)
        null = logging.NullHandler()
        saved.append((log, log.propagate, null))
        log.addHandler(null)
        log.propagate = False
    try:
        yield
    finally:
        for log, propagate, null in saved:
            log.removeHandler(null)
            log.propagate = propagate


def fake_domains() -> FakeDomains:
    """Started fake domains that, while intercepting, never let a request off loopback."""
    return FakeDomains(block_unknown_hosts=True).start()


@contextlib.contextmanager
def servers() -> Iterator[FakeDomains]:
    """Fake domains intercepting for the whole block (the benchmark's way)."""
    fd = fake_domains()
    try:
        with fd.intercept():
            yield fd
    finally:
        fd.close()


@dataclass
class Run:
    """Everything one run produced, and its figures."""

    client: Client
    drive: Drive
    calls: list[Call]
    seen: dict[str, Seen]
    record: Record
    outcome: Outcome
    wall_offset: float  # time.time() - time.monotonic() during the run

    def server_time(self, wall: float) -> float:
        """A server record's wall-clock time on the run's monotonic clock."""
        return wall - self.wall_offset


class Env:
    """A ``FakeDomains`` (intercepting) and the runs made on it, one after another."""

    def __init__(self, fd: FakeDomains, *, tasks_per_shard: int = 20, grace: float = 120.0) -> None:
        self.fd = fd
        self.tasks_per_shard = tasks_per_shard
        self.grace = grace
        self._runs = 0

    def execute(
        self,
        client: Client,
        timeline: Timeline,
        load: Load,
        *,
        deadline: float | None = None,
        seed: int = 0,
    ) -> Run:
        """Reset the domains, play ``timeline`` while ``load`` runs through ``client``."""
        self._runs += 1
        tag = f"r{self._runs}"
        hosts = timeline.hosts
        fd = self.fd
        fd.reset()
        for host in hosts:
            fd.add(host)
        urls = [f"http://{host}" for host in hosts]
        calls = Calls()
        if isinstance(load, Sustained) and load.seconds != timeline.seconds:
            raise ValueError("a sustained load lasts as long as its timeline")
        wall_offset = time.time() - time.monotonic()
        driver = Driver(fd, timeline)
        try:
            with quiet():
                result = drive(
                    load, client, urls, urls[0] + PATH, calls,
                    tag=tag,
                    shards=max(1, load.tasks // self.tasks_per_shard),
                    grace=self.grace,
                    seed=seed,
                    on_start=driver.start,
                )
        finally:
            record = driver.stop()
        prefix = tag + "/"
        seen = {
            host: Seen(
                requests=[r for r in fd.requests(host) if r.headers.get(RID, "").startswith(prefix)],
                early=[e for e in fd.events(host) if e.stage != "respond"],
            )
            for host in hosts
        }
        truncated = any(
            len(fd.requests(host)) >= RECORD_LIMIT or len(fd.events(host)) >= RECORD_LIMIT for host in hosts
        )
        own_calls = [c for c in calls.items if c.rid.startswith(prefix)]
        bound = deadline if deadline is not None else client.deadline
        outcome = summarize(
            client.label, result, own_calls, seen, record,
            deadline=bound if bound is not None else DEFAULT_DEADLINE,
            reports_attempts=client.reports_attempts,
        )
        if truncated:  # the simulator keeps the newest RECORD_LIMIT: server counts are short
            outcome.extra["server records truncated"] = True
        return Run(client, result, own_calls, seen, record, outcome, wall_offset)
