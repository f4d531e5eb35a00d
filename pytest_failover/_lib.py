"""The HTTP library a front-end speaks: httpx or httpx2, one namespace each.

The request path below the front-ends (exchange, race, stale cache, classification,
pools) names no HTTP library at run time: a front-end hands its :class:`HTTPLib` to
each exchange, which builds requests, responses, body streams and errors of that
library only. httpx2 is Pydantic's fork of httpx: the same API under another import
name (``httpcore2`` underneath), so one namespace of the classes the path uses covers
both. A ``sharing`` group may mix front-ends of both libraries (and the requests and
aiohttp ones, which speak httpx inside): the library is the front-end's, not the
state's.

Each instance is built once, by the front-end module that imports its library
(``pytest_failover._httpx``, ``pytest_failover.httpx2``): importing this module imports
neither library. For type checking, :data:`Request`, :data:`Response` and :data:`URL`
are the unions of both libraries' classes (their APIs are the same).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import httpx
    import httpx2

__all__ = ["URL", "HTTPLib", "Headers", "Request", "Response", "client_library"]

Headers: TypeAlias = "httpx.Headers | httpx2.Headers"
Request: TypeAlias = "httpx.Request | httpx2.Request"
Response: TypeAlias = "httpx.Response | httpx2.Response"
URL: TypeAlias = "httpx.URL | httpx2.URL"


class _Wrapped:
    """A body stream over the library's ``inner`` one, closed through it (the library's own
    stream classes are added per library: its transports check
    ``isinstance(request.stream, SyncByteStream)``)."""

    _sync: type[Any]  # the library's SyncByteStream
    _async: type[Any]  # and AsyncByteStream
    inner: Any

    def close(self) -> None:
        if isinstance(self.inner, self._sync):
            self.inner.close()

    async def aclose(self) -> None:
        if isinstance(self.inner, self._async):
            await self.inner.aclose()


class Tracked(_Wrapped):
    """A request body that cannot be replayed, watched to know whether any of it was read."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.started = False

    def __iter__(self) -> Iterator[bytes]:
        self.started = True
        if not isinstance(self.inner, self._sync):
            raise RuntimeError("this request body can only be sent by an async transport")
        yield from self.inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.started = True
        if not isinstance(self.inner, self._async):
            raise RuntimeError("this request body can only be sent by a sync transport")
        async for chunk in self.inner:
            yield chunk


class Continued(_Wrapped):
    """A body whose first chunks were already read: those, then the rest, untouched
    (``rest`` iterates ``inner``, the body as the inner transport gave it)."""

    def __init__(self, prefix: list[bytes], rest: Any, inner: Any) -> None:
        self._prefix = prefix
        self._rest = rest
        self.inner = inner

    def __iter__(self) -> Iterator[bytes]:
        yield from self._prefix
        yield from self._rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._prefix:
            yield chunk
        async for chunk in self._rest:
            yield chunk


class BodyEnd(_Wrapped):
    """An answer's body as the inner transport gave it, untouched, which calls ``ended()``
    as it is closed, before its inner stream: the exchange notes that the body is in and,
    for a call that looks slow, asks the kernel about the connection while it is still
    the attempt's (``Exchange.reads``)."""

    def __init__(self, inner: Any, ended: Callable[[], object]) -> None:
        self.inner = inner
        self.ended = ended

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.inner)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.inner.__aiter__()  # type: ignore[no-any-return]  # the library's stream, typed Any here

    def close(self) -> None:
        self.ended()
        super().close()

    async def aclose(self) -> None:
        self.ended()
        await super().aclose()


class InMemory:
    """Marks the raw bytes of a body the transport read (the library's ``ByteStream``
    is added per library; see ``Exchange.read_whole``)."""


class HTTPLib:
    """The run-time classes of one HTTP library that the request path uses.

    Attributes are the library's own classes (``Request``, ``Response``, ``ByteStream``,
    ``TransportError``, ``ReadTimeout``, the default transports, ...), the three failover
    errors of that library (subclasses of its ``TransportError``) and the body streams
    of this package made of its stream classes. ``core`` is the name of the library's
    connection package (``httpcore`` or ``httpcore2``), the one :mod:`._sockets` reaches
    into.
    """

    __slots__ = (
        "AllDomainsFailed",
        "AsyncByteStream",
        "AsyncHTTPTransport",
        "BodyEnd",
        "ByteStream",
        "CircuitOpenError",
        "Continued",
        "FailoverError",
        "HTTPTransport",
        "InMemory",
        "ReadTimeout",
        "Request",
        "Response",
        "SyncByteStream",
        "Tracked",
        "TransportError",
        "core",
        "module",
        "name",
    )

    def __init__(self, module: ModuleType, core: str, errors: tuple[type[Any], type[Any], type[Any]]) -> None:
        self.name = module.__name__
        self.module = module
        self.core = core
        self.Request: type[Any] = module.Request
        self.Response: type[Any] = module.Response
        self.ByteStream: type[Any] = module.ByteStream
        self.SyncByteStream: type[Any] = module.SyncByteStream
        self.AsyncByteStream: type[Any] = module.AsyncByteStream
        self.TransportError: type[Any] = module.TransportError
        self.ReadTimeout: type[Any] = module.ReadTimeout
        self.HTTPTransport: type[Any] = module.HTTPTransport
        self.AsyncHTTPTransport: type[Any] = module.AsyncHTTPTransport
        self.FailoverError, self.AllDomainsFailed, self.CircuitOpenError = errors
        streams = {"_sync": module.SyncByteStream, "_async": module.AsyncByteStream, "__module__": __name__}
        both = (module.SyncByteStream, module.AsyncByteStream)
        self.Tracked: type[Any] = type("Tracked", (Tracked, *both), dict(streams))
        self.Continued: type[Any] = type("Continued", (Continued, *both), dict(streams))
        self.BodyEnd: type[Any] = type("BodyEnd", (BodyEnd, *both), dict(streams))
        self.InMemory: type[Any] = type("InMemory", (InMemory, module.ByteStream), {"__module__": __name__})

    def core_module(self) -> ModuleType:
        """The library's connection package (imported by the library with its transports)."""
        return importlib.import_module(self.core)

    def __repr__(self) -> str:
        return f"<HTTPLib {self.name}>"


def client_library() -> ModuleType:
    """The library the package's own HTTP clients use (a resolver's DoH and HTTPDNS
    queries, the control poller): httpx when it is installed, else httpx2, whose API is
    the same. Neither is a dependency of the package: a process that has only httpx2
    (the OpenAI and Anthropic SDKs bring no other) resolves and polls with it. Raises
    ImportError, saying what to install, when neither is there."""
    for name in ("httpx", "httpx2"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        "pytest_failover needs an HTTP library for its own requests (resolvers, the control "
        "poller): pip install 'pytest-failover[httpx]' (or 'pytest-failover[httpx2]')"
    )
