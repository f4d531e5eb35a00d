"""The agent's one HTTP listener (aiohttp): ``/metrics``, ``/healthz``, the control
document, ``/status.json`` and the status page at ``/`` (:mod:`failover_agent.status`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp import web

from .prometheus_text import release_freed_memory
from .status import Recorder, asset, status_document
from .status.page import ASSETS

if TYPE_CHECKING:
    from .runner import Agent, ResultListener

__all__ = ["start_server"]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _app(agent: Agent) -> web.Application:
    async def metrics(request: web.Request) -> web.StreamResponse:
        # Rendered in a thread, sent piece by piece: at 1,000 domains the text is ~20 MB,
        # and each piece is dropped once written, so the body is never held twice.
        chunks = await asyncio.to_thread(agent.telemetry.prometheus_chunks)
        response = web.StreamResponse(headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})
        response.content_length = sum(len(c) for c in chunks)
        await response.prepare(request)
        chunks.reverse()
        while chunks:
            await response.write(chunks.pop())
        await response.write_eof()
        release_freed_memory()
        return response

    async def healthz(_: web.Request) -> web.Response:
        ok = agent.healthy()
        return web.json_response(
            {"status": "ok" if ok else "stopping", "uptime": round(agent.uptime, 3),
             "location": agent.config.location},
            status=200 if ok else 503,
        )

    async def control(_: web.Request) -> web.Response:
        doc = agent.control_document()
        if doc is None:
            return web.json_response({"error": "no control document yet"}, status=503)
        return web.Response(body=doc, content_type="application/json",
                            headers={"Cache-Control": "no-store"})

    recorder = Recorder(lambda: agent.state, lambda: agent.config)

    async def status_json(request: web.Request) -> web.StreamResponse:
        finish = status_document(agent.state, agent.config, recorder)  # the snapshot, on the loop
        # Formatting and encoding in a thread: at 1,000 domains about 0.5 s and a 0.9 MB body;
        # the heap it took goes back to the OS once the body is sent (~10 MiB of RSS otherwise).
        body = await asyncio.to_thread(lambda: json.dumps(finish(), default=str).encode())
        response = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8",
                                               "Cache-Control": "no-store"})
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        del body
        release_freed_memory()
        return response

    async def index(_: web.Request) -> web.Response:
        return web.Response(body=asset("index.html"), content_type="text/html", charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in ASSETS or name == "index.html":
            raise web.HTTPNotFound()
        return web.Response(body=asset(name), content_type=ASSETS[name], charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    async def history(app: web.Application) -> AsyncIterator[None]:
        await recorder.start()  # the file is restored before the first result arrives
        # Only an agent that runs checks has results to hear (tests/control serves a control
        # document from a stand-in that has the config and the state, and nothing else).
        listeners: list[ResultListener] | None = getattr(agent, "result_listeners", None)
        if listeners is not None:
            listeners.append(recorder.on_result)
        yield
        if listeners is not None:
            listeners.remove(recorder.on_result)
        await recorder.aclose()

    app = web.Application()
    app.cleanup_ctx.append(history)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/status.json", status_json)
    if agent.config.control is not None:
        app.router.add_get(agent.config.control.path, control)
    app.router.add_get("/", index)
    app.router.add_get("/assets/{name}", static)
    return app


async def start_server(agent: Agent, listen: str) -> tuple[web.AppRunner, tuple[str, int]]:
    """Start the listener on ``HOST:PORT`` (port 0 picks a free one); return it and its address."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    runner = web.AppRunner(_app(agent), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, int(port), reuse_address=True)
    await site.start()
    bound = runner.addresses[0] if runner.addresses else (host, int(port))  # getsockname() of each socket
    return runner, (str(bound[0]), int(bound[1]))
