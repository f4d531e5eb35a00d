"""Benchmark: the requests and aiohttp front-ends on the happy path (a healthy primary, keep-alive).

Variants, all against the same fast loopback server in another process, each with its
own session (built once, outside the timing), interleaved round by round:

- bare ``requests.Session``;
- ``requests.Session`` with ``HTTPAdapter(max_retries=Retry(total=3, backoff_factor=0.5,
  status_forcelist=[500, 502, 503, 504]))`` mounted, the usual way to add retries;
- ``requests.Session`` with ``FailoverAdapter`` mounted (no OpenTelemetry SDK);
- bare ``aiohttp.ClientSession`` (one event loop for both aiohttp variants);
- ``aiohttp.ClientSession(middlewares=(FailoverMiddleware(...),))`` (no SDK).

Each figure is the median over rounds; the ratio is paired (variant / its bare client in
the same round). Target (issue 12): at most 1.05x the bare client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from benchmarks import _harness as h
from benchmarks._options import Options

NAME = "frontends"
BARE_REQUESTS = "bare requests.Session"
BARE_AIOHTTP = "bare aiohttp.ClientSession"


def run(opts: Options) -> h.Report:
    import aiohttp
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    from pytest_failover import Pool
    from pytest_failover.integrations.aiohttp import FailoverMiddleware
    from pytest_failover.integrations.requests import FailoverAdapter

    report = h.Report(NAME)
    started = time.monotonic()
    per_round = opts.pick(20, 20)
    rounds = opts.rounds_or(2000, 20000)
    max_seconds = opts.seconds_or(40, 300)
    loop = asyncio.new_event_loop()

    with h.server() as srv:
        url = srv.url() + "/v1/ping"
        pool = [srv.url(), f"http://127.0.0.1:{h.closed_port()}"]
        sessions: dict[str, requests.Session] = {name: requests.Session() for name in (
            BARE_REQUESTS, "requests + urllib3 Retry", "requests + FailoverAdapter")}  # fmt: skip
        retry = HTTPAdapter(max_retries=Retry(total=3, backoff_factor=0.5, status_forcelist=[500, 502, 503, 504]))
        sessions["requests + urllib3 Retry"].mount("http://", retry)
        sessions["requests + FailoverAdapter"].mount("http://", FailoverAdapter([Pool("bench", pool)]))

        async def open_sessions() -> dict[str, aiohttp.ClientSession]:
            middleware = FailoverMiddleware([Pool("bench", pool)])
            return {
                BARE_AIOHTTP: aiohttp.ClientSession(),
                "aiohttp + FailoverMiddleware": aiohttp.ClientSession(middlewares=(middleware,)),
            }

        asessions = loop.run_until_complete(open_sessions())

        def sync_runner(session: requests.Session) -> Callable[[int], None]:
            def go(n: int) -> None:
                get = session.get
                for _ in range(n):
                    if get(url).status_code != 200:
                        raise RuntimeError("not 200")

            return go

        def async_runner(session: aiohttp.ClientSession) -> Callable[[int], None]:
            async def many(n: int) -> None:
                for _ in range(n):
                    async with session.get(url) as response:
                        await response.read()
                        if response.status != 200:
                            raise RuntimeError("not 200")

            def go(n: int) -> None:
                loop.run_until_complete(many(n))

            return go

        variants: dict[str, Callable[[int], None]] = {k: sync_runner(s) for k, s in sessions.items()}
        variants.update({k: async_runner(s) for k, s in asessions.items()})
        timings = h.interleave(variants, rounds=rounds, per_round=per_round, max_seconds=max_seconds)
        for session in sessions.values():
            session.close()

        async def close() -> None:
            for s in asessions.values():
                await s.close()

        loop.run_until_complete(close())
    loop.close()

    table = h.Table(
        "Front-ends on the happy path: cost per request (keep-alive GET, loopback server in another process)",
        ["variant", "wall per request (median)", "**wall ratio vs its bare client** (paired: median, p25 - p75)",
         "client CPU per request (median)", "CPU ratio vs its bare client (paired)"],
    )
    data: dict[str, Any] = {"per_round": per_round, "rounds": len(timings.wall[BARE_REQUESTS])}
    for name in variants:
        bare = BARE_AIOHTTP if "aiohttp" in name else BARE_REQUESTS
        wall, cpu = h.Stats.of(timings.wall[name]), h.Stats.of(timings.cpu[name])
        ratio = h.paired_ratios(timings.wall[name], timings.wall[bare])
        cpu_ratio = h.paired_ratios(timings.cpu[name], timings.cpu[bare])
        table.rows.append([name, h.us(wall.median), f"**{ratio.median:.3f}x** ({ratio.p25:.2f} - {ratio.p75:.2f})",
                           h.us(cpu.median), f"{cpu_ratio.median:.3f}x"])  # fmt: skip
        data[name] = {"wall_median_s": wall.median, "wall_paired_ratio": ratio.median, "wall_paired_p25": ratio.p25,
                      "wall_paired_p75": ratio.p75, "cpu_median_s": cpu.median, "cpu_paired_ratio": cpu_ratio.median}  # fmt: skip
    table.notes.append(
        f"{data['rounds']} interleaved rounds of {per_round} GETs per variant (rotated order); the paired ratio is the "
        "median over rounds of (variant / its bare client in the same round). No OpenTelemetry SDK: the API's no-op "
        "providers, as in an application that does not export."
    )
    table.notes.append("Target (issue 12): FailoverAdapter and FailoverMiddleware <= 1.05x their bare client.")
    report.tables.append(table)
    report.data = data
    report.seconds = time.monotonic() - started
    return report
