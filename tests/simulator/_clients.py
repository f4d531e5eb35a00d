"""The clients the simulator must reach, each behind one call.

``get(url, connect, read) -> (status, body)``: a fresh client (so it picks up the
trusted test CA like application code would), the given connect and read
timeouts, no retries.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Callable

import aiohttp
import httpx
import requests
import urllib3

Get = Callable[[str, float, float], tuple[int, bytes]]


def httpx_sync(url: str, connect: float, read: float) -> tuple[int, bytes]:
    with httpx.Client(timeout=httpx.Timeout(read, connect=connect)) as client:
        response = client.get(url)
        return response.status_code, response.content


def httpx_async(url: str, connect: float, read: float) -> tuple[int, bytes]:
    async def main() -> tuple[int, bytes]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(read, connect=connect)) as client:
            response = await client.get(url)
            return response.status_code, response.content

    return asyncio.run(main())


def requests_get(url: str, connect: float, read: float) -> tuple[int, bytes]:
    with requests.Session() as session:
        response = session.get(url, timeout=(connect, read))
        return response.status_code, response.content


def urllib3_get(url: str, connect: float, read: float) -> tuple[int, bytes]:
    with urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=connect, read=read), retries=False
    ) as pool:
        response = pool.request("GET", url)
        return response.status, response.data


def urllib_get(url: str, connect: float, read: float) -> tuple[int, bytes]:
    # urllib has one timeout for connecting and reading
    try:
        with urllib.request.urlopen(url, timeout=connect if connect < read else read) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:  # a status >= 400 is an answer here, not a failure
        return error.code, error.read()


def aiohttp_get(url: str, connect: float, read: float) -> tuple[int, bytes]:
    async def main() -> tuple[int, bytes]:
        client_timeout = aiohttp.ClientTimeout(sock_connect=connect, sock_read=read)
        connector = aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver())
        async with (
            aiohttp.ClientSession(timeout=client_timeout, connector=connector) as session,
            session.get(url) as response,
        ):
            return response.status, await response.read()

    return asyncio.run(main())


CLIENTS: dict[str, Get] = {
    "httpx": httpx_sync,
    "httpx-async": httpx_async,
    "requests": requests_get,
    "urllib3": urllib3_get,
    "urllib": urllib_get,
    "aiohttp": aiohttp_get,
}
