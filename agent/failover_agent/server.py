"""The agent's one HTTP listener (aiohttp): ``/metrics``, ``/healthz``, the control
document, ``/status.json`` and a small HTML status page at ``/``."""

from __future__ import annotations

import asyncio
import html
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .prometheus_text import release_freed_memory

if TYPE_CHECKING:
    from .runner import Agent

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

    async def status_json(_: web.Request) -> web.Response:
        return web.Response(text=json.dumps(agent.state.as_dict(), default=str),
                            content_type="application/json")

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=_page(agent), content_type="text/html")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/status.json", status_json)
    if agent.config.control is not None:
        app.router.add_get(agent.config.control.path, control)
    app.router.add_get("/", index)
    return app


def _page(agent: Agent) -> str:
    state: dict[str, Any] = agent.state.as_dict()
    esc = html.escape
    rows = []
    for name, pool in state["pools"].items():
        last = pool["last"]
        pstate = "pending" if last is None else ("available" if last["success"] else "UNAVAILABLE")
        via = "" if last is None or not last["success"] else f"via {last['served_by']} ({last['attempts']} attempts)"
        rows.append(f"<tr class='pool'><td>{esc(name)}</td><td>pool</td><td class='{pstate}'>{pstate}</td>"
                    f"<td>{esc(via or (last or {}).get('error_type') or '')}</td><td></td><td></td></tr>")
        for url, d in pool["domains"].items():
            r = d["last"]
            dstate = "pending" if r is None else ("up" if r["success"] else "down")
            what = "" if r is None else (str(r["status"]) if r["success"] else str(r["error_type"]))
            ms = "" if r is None else f"{r['duration'] * 1000:.0f} ms"
            ready = d["readiness"]
            rtext = "" if ready is None else ("ready" if ready["ready"] else "not ready: " + ", ".join(
                f"{k} ({v['detail']})" for k, v in ready["checks"].items() if not v["ready"]))
            rows.append(f"<tr><td></td><td>{esc(url)}</td><td class='{dstate}'>{dstate}</td>"
                        f"<td>{esc(what)} {ms}</td><td>{esc(d['breaker'])}</td><td>{esc(rtext)}</td></tr>")
    control = state["control"]
    ctext = "no control document" if not control else (
        f"control document v{control['version']}, issued {time.strftime('%H:%M:%S', time.gmtime(control['issued_at']))} UTC,"
        f" disabled: {esc(json.dumps(control['disabled']))}")
    return f"""<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>failover-agent</title><style>
body{{font-family:system-ui,sans-serif;margin:2em}} td,th{{padding:.2em .8em;text-align:left}}
.up,.available{{color:#187a18}} .down,.UNAVAILABLE{{color:#b00;font-weight:bold}} .pool td{{border-top:1px solid #ccc}}
</style></head><body><h1>failover-agent @ {esc(state['location'])}</h1>
<table><tr><th>pool</th><th>target</th><th>state</th><th>last</th><th>breaker</th><th>readiness</th></tr>
{''.join(rows)}</table><p>{ctext}</p>
<p><a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a> · <a href="/status.json">/status.json</a></p>
</body></html>"""


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
