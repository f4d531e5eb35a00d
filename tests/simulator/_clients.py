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
from types import ModuleType

import aiohttp
import httpx
import httpx2
import requests
import urllib3

Get = Callable[[str, float, float], tuple[int, bytes]]


def _httpx_sync(http: ModuleType) -> Get:
    """httpx's (or httpx2's) sync client."""

    def get(url: str, connect: float, read: float) -> tuple[int, bytes]:
        with http.Client(timeout=http.Timeout(read, connect=connect)) as client:
            response = client.get(url)
            return response.status_code, response.content

    return get


def _httpx_async(http: ModuleType) -> Get:
    """httpx's (or httpx2's) async client."""

    def get(url: str, connect: float, read: float) -> tuple[int, bytes]:
        async def main() -> tuple[int, bytes]:
            async with http.AsyncClient(timeout=http.Timeout(read, connect=connect)) as client:
                response = await client.get(url)
                return response.status_code, response.content

        return asyncio.run(main())

    return get


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
    "httpx": _httpx_sync(httpx),
    "httpx-async": _httpx_async(httpx),
    "httpx2": _httpx_sync(httpx2),
    "httpx2-async": _httpx_async(httpx2),
    "requests": requests_get,
    "urllib3": urllib3_get,
    "urllib": urllib_get,
    "aiohttp": aiohttp_get,
}
