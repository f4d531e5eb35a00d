"""How a healthy fake domain answers: the default JSON, a callable, or an ASGI app."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, TypeVar
from urllib.parse import urlsplit

from ._record import RecordedRequest

__all__ = [
    "CoroutineRunner",
    "Handler",
    "Response",
    "ResponseSpec",
    "RunCoroutine",
    "answer",
    "to_response",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Response:
    """What a handler may return for full control: status, body and headers."""

    status: int = 200
    body: bytes | str = b""
    headers: Mapping[str, str] | tuple[tuple[str, str], ...] = ()


#: A handler's return value: a ``Response``, a JSON-able ``dict``/``list`` (200, JSON),
#: ``str``/``bytes`` (200, text / octet-stream) or a bare status code.
ResponseSpec: TypeAlias = Response | Mapping[str, Any] | list[Any] | str | bytes | int

#: ``handler(request) -> ResponseSpec`` (sync or ``async def``), or an ASGI 3 application.
Handler: TypeAlias = Callable[..., Any]


def default_handler(request: RecordedRequest) -> ResponseSpec:
    """200 with a small JSON body naming the domain, so a test sees who answered."""
    return {
        "ok": True,
        "domain": request.host,
        "method": request.method,
        "path": urlsplit(request.path).path,
    }


def to_response(spec: object) -> tuple[int, list[tuple[str, str]], bytes]:
    """Normalise a handler's return value to ``(status, headers, body)``."""
    match spec:
        case Response(status=status, body=body, headers=headers):
            pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
            raw = body.encode() if isinstance(body, str) else bytes(body)
            return status, pairs, raw
        case bool():
            pass
        case int():
            return spec, [], b""
        case str():
            return 200, [("content-type", "text/plain; charset=utf-8")], spec.encode()
        case bytes():
            return 200, [("content-type", "application/octet-stream")], spec
        case Mapping() | list():
            return 200, [("content-type", "application/json")], json.dumps(spec).encode()
    raise TypeError(
        f"a fake domain's handler returned {spec!r}; return a simulator.Response, a dict or "
        "list (JSON), str, bytes or an int status code"
    )


def _is_async(handler: Handler) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        type(handler).__call__
    )


def is_asgi(handler: Handler) -> bool:
    """An ASGI app is ``async (scope, receive, send)``; a handler takes one request."""
    if not _is_async(handler):
        return False
    try:
        return len(inspect.signature(handler).parameters) == 3
    except (TypeError, ValueError):  # no signature to read: treat it as a handler
        return False


class RunCoroutine(Protocol):
    """Runs a coroutine to completion somewhere and returns its result."""

    def __call__(self, coroutine: Coroutine[Any, Any, T], /) -> T: ...


def answer(
    handler: Handler, request: RecordedRequest, server: tuple[str, int], run: RunCoroutine
) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run ``handler`` for ``request`` and normalise the answer.

    A plain callable runs in the calling thread (the connection's own, so it may block
    or even call another fake domain); ``async def`` handlers and ASGI apps are passed
    to ``run`` (``CoroutineRunner.run``).
    """
    if is_asgi(handler):
        return run(_asgi(handler, request, server))
    if _is_async(handler):
        return to_response(run(handler(request)))
    return to_response(handler(request))


class CoroutineRunner:
    """An asyncio loop in a daemon thread for async handlers and ASGI apps, started on first use.

    One loop serves every request, so an app's loop-bound state (locks, clients)
    keeps working from one request to the next.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result (from any other thread)."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="pytest-failover handlers", daemon=True
                )
                self._thread.start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    def close(self) -> None:
        """Cancel what still runs (its callers see ``CancelledError``) and stop the loop."""
        with self._lock:
            loop, thread, self._loop = self._loop, self._thread, None
        if loop is None or thread is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(5.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5.0)
        if not thread.is_alive():
            loop.close()


async def _asgi(
    app: Callable[..., Awaitable[None]], request: RecordedRequest, server: tuple[str, int]
) -> tuple[int, list[tuple[str, str]], bytes]:
    target = urlsplit(request.path)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": target.path or "/",
        "raw_path": (target.path or "/").encode(),
        "query_string": target.query.encode(),
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in request.headers.items()],
        "server": server,
        "client": ("127.0.0.1", 0),
        "state": {},
    }
    sent_request = False
    status = 500
    headers: list[tuple[str, str]] = []
    body = bytearray()
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await never.wait()  # the whole body was delivered; nothing more comes
        return {"type": "http.disconnect"}  # pragma: no cover - the wait above never ends

    async def send(message: Mapping[str, Any]) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers = [
                (bytes(k).decode(), bytes(v).decode()) for k, v in message.get("headers", [])
            ]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    await app(scope, receive, send)
    headers = [
        (k, v) for k, v in headers if k.lower() not in ("content-length", "transfer-encoding")
    ]
    return status, headers, bytes(body)
