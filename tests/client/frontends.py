"""One failover client of any front-end behind one blocking call surface, for shared test bodies.

``Harness(kind, pools, policy, ...)`` builds the client of ``kind`` (over the state of
the front-end ``share`` instead, if given: its ``sharing`` constructor):

- ``sync``: ``httpx.Client`` over ``FailoverTransport``;
- ``async``: ``httpx.AsyncClient`` over ``AsyncFailoverTransport`` (its own event loop);
- ``requests``: ``requests.Session`` with ``FailoverAdapter`` mounted on both schemes;
- ``aiohttp``: ``aiohttp.ClientSession`` with ``FailoverMiddleware`` (its own event loop,
  the threaded resolver, which the outage simulator reaches).

With a pool resolver (``Policy.resolver``), each client resolves through it the way its
users wire one: the httpx transports build their inner transport, the requests adapter
its own connections, and the aiohttp session gets ``FailoverMiddleware.connector()``.
``loop=`` runs the async clients on a loop of the caller's (kept open), so resolvers
whose async side the caller closes later share it.

``request()`` sends one request the way that client's users do (per-request failover
options as ``extensions`` for httpx, inside ``failover_options`` for the others),
reads the body, and returns a :class:`View`: status, headers, body and the
``FailoverResult`` from wherever that client keeps it. Errors are the client's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import requests
import trustme

from pytest_failover import AsyncFailoverTransport, FailoverResult, FailoverTransport, Policy, Pool
from pytest_failover.integrations import failover_options
from pytest_failover.integrations.aiohttp import FailoverMiddleware
from pytest_failover.integrations.requests import FailoverAdapter

KINDS = ("sync", "async", "requests", "aiohttp")


@dataclass(frozen=True)
class View:
    """A response as every test reads it, whatever the client."""

    status_code: int
    headers: Mapping[str, str]  # case-insensitive, as each client's own
    content: bytes
    failover: FailoverResult | None

    def json(self) -> Any:
        import json

        return json.loads(self.content)


class Harness:
    """One failover client of the given kind, with the same blocking call surface."""

    def __init__(
        self,
        kind: str,
        pools: list[Pool],
        policy: Policy | None,
        *,
        trust: trustme.CA | None = None,
        share: Any = None,
        loop: asyncio.AbstractEventLoop | None = None,
        **kwargs: Any,
    ) -> None:
        self.kind = kind
        self.loop: asyncio.AbstractEventLoop | None = None
        self._own_loop = loop is None
        resolving = getattr(policy, "resolver", None) is not None  # the front-end wires it itself
        self._closing: list[Any] = []
        self._closed = False
        self._verify: str | bool = True  # requests: per request, as REQUESTS_CA_BUNDLE would beat a session's
        context = None
        if trust is not None:
            context = ssl.create_default_context()
            trust.configure_trust(context)
        if kind == "sync":
            inner = None if resolving else httpx.HTTPTransport(verify=context or True)
            self.transport: Any = (
                FailoverTransport(pools, policy, inner, **kwargs)
                if share is None
                else FailoverTransport.sharing(share, inner)
            )
            self._client: Any = httpx.Client(transport=self.transport)
        elif kind == "async":
            self.loop = loop or asyncio.new_event_loop()
            ainner = None if resolving else httpx.AsyncHTTPTransport(verify=context or True)
            self.transport = (
                AsyncFailoverTransport(pools, policy, ainner, **kwargs)
                if share is None
                else AsyncFailoverTransport.sharing(share, ainner)
            )
            self._client = httpx.AsyncClient(transport=self.transport)
        elif kind == "requests":
            self.transport = FailoverAdapter(pools, policy, **kwargs) if share is None else FailoverAdapter.sharing(share)
            session = requests.Session()
            session.mount("http://", self.transport)
            session.mount("https://", self.transport)
            if trust is not None:
                folder = tempfile.TemporaryDirectory()
                self._closing.append(folder)
                bundle = Path(folder.name) / "ca.pem"
                trust.cert_pem.write_to_path(str(bundle))
                self._verify = str(bundle)
            self._client = session
        elif kind == "aiohttp":
            self.loop = loop or asyncio.new_event_loop()
            self.transport = (
                FailoverMiddleware(pools, policy, **kwargs) if share is None else FailoverMiddleware.sharing(share)
            )

            async def start() -> aiohttp.ClientSession:
                connector = (
                    self.transport.connector(ssl=context or True)
                    if resolving
                    else aiohttp.TCPConnector(resolver=aiohttp.ThreadedResolver(), ssl=context or True)
                )
                return aiohttp.ClientSession(connector=connector, middlewares=(self.transport,))

            self._client = self.loop.run_until_complete(start())
        else:
            raise ValueError(f"unknown client kind {kind!r}; expected one of {KINDS}")

    @property
    def transport_errors(self) -> tuple[type[Exception], ...]:
        """What this client raises when the network fails under it."""
        return {
            "requests": (requests.RequestException,),
            "aiohttp": (aiohttp.ClientError,),
        }.get(self.kind, (httpx.TransportError,))

    def stream_body(self, chunks: list[bytes]) -> Any:
        """A streamed request body, as this client's users write one (a generator, an
        async generator, an aiohttp ``StreamReader``): never replayable."""
        if self.kind in ("sync", "requests"):

            def sync() -> Iterator[bytes]:
                yield from chunks

            return sync()
        if self.kind == "async":

            async def agen() -> AsyncIterator[bytes]:
                for chunk in chunks:
                    yield chunk

            return agen()
        assert self.loop is not None

        async def reader() -> aiohttp.StreamReader:
            loop = asyncio.get_running_loop()
            stream = aiohttp.StreamReader(aiohttp.base_protocol.BaseProtocol(loop), 2**16, loop=loop)
            for chunk in chunks:
                stream.feed_data(chunk)
            stream.feed_eof()
            return stream

        return self.loop.run_until_complete(reader())

    def get(self, url: str) -> View:
        """``request("GET", url)``."""
        return self.request("GET", url)

    def request(
        self,
        method: str,
        url: str,
        *,
        content: Any = None,
        headers: Mapping[str, str] | None = None,
        extensions: Mapping[str, Any] | None = None,
    ) -> View:
        options = (extensions or {}).get("failover")
        if self.kind == "sync":
            r = self._client.request(method, url, content=content, headers=headers, extensions=extensions)
            return View(r.status_code, r.headers, r.content, r.extensions.get("failover"))
        if self.kind == "async":
            assert self.loop is not None

            async def send() -> httpx.Response:
                response: httpx.Response = await self._client.request(
                    method, url, content=content, headers=headers, extensions=extensions
                )
                return response

            r = self.loop.run_until_complete(send())
            return View(r.status_code, r.headers, r.content, r.extensions.get("failover"))
        with failover_options(options) if options is not None else contextlib.nullcontext():
            if self.kind == "requests":
                s = self._client.request(method, url, data=content, headers=headers, timeout=10, verify=self._verify)
                return View(s.status_code, s.headers, s.content, getattr(s, "failover", None))
            return self._aiohttp(method, url, content, headers)

    def _aiohttp(self, method: str, url: str, content: Any, headers: Mapping[str, str] | None) -> View:
        assert self.loop is not None

        async def send() -> View:
            async with self._client.request(method, url, data=content, headers=headers) as r:
                body = await r.read()
                return View(r.status, r.headers, body, getattr(r, "failover", None))

        return self.loop.run_until_complete(send())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.loop is not None:
            self.loop.run_until_complete(self._client.aclose() if self.kind == "async" else self._client.close())
            if self._own_loop:
                self.loop.close()
        else:
            self._client.close()
        for thing in self._closing:
            thing.cleanup()
