"""The HTTP side of DoH and HTTPDNS: a client of the resolver's own, reaching its server by IP.

A resolver that needed DNS to find its own server would fail exactly when DNS does, so the
server's address may be given (``bootstrap``). The request then goes to that IP while TLS and
HTTP stay bound to the server's name: SNI (httpx's ``sni_hostname`` extension), the
certificate check (made against the SNI name) and the ``Host`` header. With several bootstrap
addresses, a connect failure tries the next one.

httpx's exceptions are mapped in one place (``_map_error``), most specific first.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .._lib import client_library
from ._base import ResolveError, ResolverUnavailable, ResolveTimeout

if TYPE_CHECKING:
    import httpx
else:
    httpx = client_library()  # httpx, or httpx2 (the same API) when only it is installed

__all__ = ["Endpoint", "Reply"]

#: What a resolver gets back: status, the content type's media type, body.
Reply = tuple[int, str, bytes]


class Endpoint:
    """One resolver server, reached at its bootstrap addresses (or by name without them)."""

    def __init__(
        self,
        url: str,
        *,
        bootstrap: str | Sequence[str] | None,
        timeout: float,
        verify: ssl.SSLContext | str | bool,
        source: str,
        label: str,
    ) -> None:
        self.url = httpx.URL(url)
        if self.url.scheme not in ("http", "https") or not self.url.host:
            raise ValueError(f"a resolver's URL is http(s)://host/..., got {url!r}")
        if not 0 < timeout < float("inf"):
            raise ValueError(f"a resolver's timeout is seconds > 0, got {timeout!r}")
        self.name = self.url.host
        self.source = source
        self.label = label
        self.timeout = timeout
        addresses = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap or ())
        for address in addresses:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(
                    f"bootstrap takes the IP addresses of {self.name!r}, got {address!r}"
                ) from None
        self.bootstrap: tuple[str, ...] = tuple(addresses)
        self._verify = verify
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        via = f" via {', '.join(self.bootstrap)}" if self.bootstrap else ""
        return f"{self.url}{via}"

    # -- requests

    def requests(
        self, method: str, url: httpx.URL, headers: dict[str, str], content: bytes | None
    ) -> Iterator[httpx.Request]:
        """``url``'s request, once per bootstrap address (or once, by name). Each carries
        the endpoint's timeout itself: a client applies its own default only to a request
        it builds (and, from httpx 0.28, to one it is given), so on httpx 0.27 a query to
        a server that never answers waited for ever."""
        timeout = {"timeout": httpx.Timeout(self.timeout).as_dict()}
        if not self.bootstrap:
            yield httpx.Request(method, url, headers=headers, content=content, extensions=timeout)
            return
        host = url.netloc.decode("ascii")
        for address in self.bootstrap:
            yield httpx.Request(
                method,
                url.copy_with(host=address),
                headers={**headers, "Host": host},
                content=content,
                extensions={**timeout, "sni_hostname": self.name},
            )

    def send(
        self, method: str, url: httpx.URL, headers: dict[str, str], content: bytes | None, *, host: str
    ) -> Reply:
        if self._client is None:
            self._client = httpx.Client(verify=self._verify, timeout=self.timeout, trust_env=False)
        error: httpx.HTTPError | None = None
        for request in self.requests(method, url, headers, content):
            try:
                return _reply(self._client.send(request))
            except httpx.HTTPError as exc:
                error = self._next_address(exc, host)
        assert error is not None  # requests() yields at least one
        try:
            raise self._map_error(error, host) from error
        finally:  # its traceback holds this frame: no local may hold it (a cycle for the collector)
            del error

    async def asend(
        self, method: str, url: httpx.URL, headers: dict[str, str], content: bytes | None, *, host: str
    ) -> Reply:
        client = self._async_client()
        error: httpx.HTTPError | None = None
        for request in self.requests(method, url, headers, content):
            try:
                return _reply(await client.send(request))
            except httpx.HTTPError as exc:
                error = self._next_address(exc, host)
        assert error is not None  # requests() yields at least one
        try:
            raise self._map_error(error, host) from error
        finally:  # its traceback holds this frame: no local may hold it (a cycle for the collector)
            del error

    def _next_address(self, exc: httpx.HTTPError, host: str) -> httpx.HTTPError:
        """A connect failure lets the next bootstrap address be tried; anything else is final."""
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return exc
        raise self._map_error(exc, host) from exc

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        if self._aclient is not None:
            client, self._aclient = self._aclient, None
            await client.aclose()

    def _async_client(self) -> httpx.AsyncClient:
        """One async client per event loop: a client's connections belong to the loop that made them."""
        with contextlib.suppress(RuntimeError):  # not asyncio (trio): one client, as made
            loop = asyncio.get_running_loop()
            if self._aclient is not None and self._aloop is not loop:
                self._aclient = None  # its loop is gone or elsewhere; its sockets go with it
            self._aloop = loop
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(verify=self._verify, timeout=self.timeout, trust_env=False)
        return self._aclient

    def _map_error(self, exc: httpx.HTTPError, host: str) -> ResolveError:
        where = f"{self.label} {self}"
        if isinstance(exc, httpx.TimeoutException):
            return ResolveTimeout(
                f"{where} did not answer for {host!r} within {self.timeout} s ({type(exc).__name__})",
                host=host,
                source=self.source,
            )
        return ResolverUnavailable(
            f"{where} failed for {host!r}: {type(exc).__name__}: {exc}", host=host, source=self.source
        )


def _reply(response: httpx.Response) -> Reply:
    media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return response.status_code, media, response.content
