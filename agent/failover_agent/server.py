"""The agent's one HTTP listener (:mod:`failover_agent.listener`): ``/metrics``, ``/healthz``,
the control document, ``/status.json`` and the status page at ``/`` (:mod:`failover_agent.status`)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from .control_writer import document_response
from .listener import Handler, Listener, Request, Response, json_response, split_listen
from .prometheus_text import PROMETHEUS_CONTENT_TYPE, release_freed_memory
from .status import Recorder, asset, status_document
from .status.page import ASSETS

if TYPE_CHECKING:
    from .runner import Agent, ResultListener
    from .telemetry import Telemetry

__all__ = ["AgentServer", "prometheus_response", "start_server"]

JSON = "application/json; charset=utf-8"
NO_STORE = {"Cache-Control": "no-store"}
NO_CACHE = {"Cache-Control": "no-cache"}


class AgentServer:
    """The listener with the agent's routes, and the status page's recorder it feeds;
    :func:`start_server` starts one, :meth:`cleanup` stops it."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        maintenance = getattr(agent, "maintenance", None)  # the stand-in of tests/control has none
        self.recorder = Recorder(lambda: agent.state, lambda: agent.config, in_maintenance=(
            (lambda key, at: maintenance(at).is_active(*key)) if maintenance is not None
            else lambda _key, _at: False))
        # Only an agent that runs checks has results to hear (tests/control serves a control
        # document from a stand-in that has the config and the state, and nothing else).
        self._listeners: list[ResultListener] | None = getattr(agent, "result_listeners", None)
        routes: dict[str, Handler] = {
            "/metrics": self.metrics, "/healthz": self.healthz, "/status.json": self.status_json,
            "/": self.index,
        }
        if agent.config.control is not None:
            routes[agent.config.control.path] = self.control
        self.listener = Listener(routes, {"/assets/": self.static})

    async def start(self, listen: str) -> tuple[str, int]:
        await self.recorder.start()  # the file is restored before the first result arrives
        if self._listeners is not None:
            self._listeners.append(self.recorder.on_result)
        try:
            return await self.listener.start(*split_listen(listen))
        except BaseException:
            await self._stop_recording()
            raise

    async def cleanup(self) -> None:
        """Stop serving, then stop recording (pending history rows are written)."""
        await self.listener.aclose()
        await self._stop_recording()

    async def _stop_recording(self) -> None:
        if self._listeners is not None and self.recorder.on_result in self._listeners:
            self._listeners.remove(self.recorder.on_result)
        await self.recorder.aclose()

    # --- routes ---------------------------------------------------------------------------

    async def metrics(self, _: Request) -> Response:
        return await prometheus_response(self.agent.telemetry)

    async def healthz(self, _: Request) -> Response:
        ok = self.agent.healthy()
        return json_response({"status": "ok" if ok else "stopping", "uptime": round(self.agent.uptime, 3),
                              "location": self.agent.config.location}, 200 if ok else 503)

    async def control(self, _: Request) -> Response:
        return document_response(self.agent.control_document())

    async def status_json(self, _: Request) -> Response:
        agent = self.agent
        maintenance = getattr(agent, "maintenance", None)
        finish = status_document(agent.state, agent.config, self.recorder,  # the snapshot, on the loop
                                 maintenance=None if maintenance is None else maintenance())
        # Formatting and encoding in a thread: at 1,000 domains about 0.5 s and a 0.9 MB body;
        # the heap it took goes back to the OS once the body is sent (~10 MiB of RSS otherwise).
        body = await asyncio.to_thread(lambda: json.dumps(finish(), default=str).encode())
        return Response(200, [body], JSON, NO_STORE, after=release_freed_memory, compress=True)

    async def index(self, _: Request) -> Response:
        return Response(200, asset("index.html"), "text/html; charset=utf-8", NO_CACHE, compress=True)

    async def static(self, request: Request) -> Response:
        name = request.path.removeprefix("/assets/")
        if name not in ASSETS or name == "index.html":
            return Response(404, b"404: Not Found", "text/plain; charset=utf-8")
        return Response(200, asset(name), f"{ASSETS[name]}; charset=utf-8", NO_CACHE, compress=True)


async def start_server(agent: Agent, listen: str) -> tuple[AgentServer, tuple[str, int]]:
    """Start the listener on ``HOST:PORT`` (port 0 picks a free one); return it and its address."""
    server = AgentServer(agent)
    address = await server.start(listen)
    return server, address


async def prometheus_response(telemetry: Telemetry) -> Response:
    """``/metrics`` of an agent or a quorum publisher: rendered in a thread and sent piece by
    piece (each piece is dropped once written, or once compressed when the scraper asks for
    gzip, as Prometheus does); the heap the render took goes back to the OS once the body is
    sent."""
    chunks = await asyncio.to_thread(telemetry.prometheus_chunks)
    return Response(200, chunks, PROMETHEUS_CONTENT_TYPE, after=release_freed_memory, compress=True)
