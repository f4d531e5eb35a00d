"""One agent run as a service: started, reloaded on SIGHUP (or a changed file), stopped on
SIGTERM/SIGINT or after a duration. ``failover-agent run`` and ``demo`` both end up here."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from .config import AgentConfig, ConfigError, load_config
from .console import Reporter
from .runner import Agent
from .telemetry import Telemetry

__all__ = ["OnStarted", "serve", "watch_file"]

log = logging.getLogger("failover_agent")

OnStarted = Callable[[Agent], Awaitable[None]]


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


async def watch_file(path: Path, on_change: Callable[[], Awaitable[None]], interval: float = 1.0) -> None:
    """Call ``on_change`` whenever ``path``'s modification time changes (polled; runs until cancelled)."""
    last = _mtime(path)
    while True:
        await asyncio.sleep(interval)
        now = _mtime(path)
        if now is not None and now != last:
            last = now
            log.info("%s changed: reloading", path)
            await on_change()


async def serve(
    config: AgentConfig,
    *,
    config_path: Path | None,
    reporter: Reporter,
    listen: str | None = None,
    duration: float | None = None,
    on_started: OnStarted | None = None,
    telemetry: Telemetry | None = None,
    watch: bool = False,
) -> int:
    """Run an agent until SIGTERM/SIGINT (or ``duration``); SIGHUP reloads ``config_path``.

    Returns the exit code (0)."""
    agent = Agent(config, reporter=reporter, listen=listen, telemetry=telemetry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def reload() -> None:
        if config_path is None:
            log.warning("SIGHUP: no configuration file to reload")
            return
        try:
            new = await asyncio.to_thread(load_config, config_path)
        except ConfigError as exc:
            log.error("reload rejected, the running configuration stays: %s", exc)
            return
        try:
            await agent.reload(new)
        except Exception:
            log.exception("reload failed, the running configuration stays")

    def on_stop(signame: str) -> None:
        log.info("%s received: stopping", signame)
        stop.set()

    reloads: set[asyncio.Task[None]] = set()  # referenced until done, as asyncio asks

    def on_hangup() -> None:
        task = loop.create_task(reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    # Before the start, which logs "agent started": a stop signal from then on (a
    # supervisor's, a test's) stops the agent cleanly. Installed after it, one that came
    # in between raised KeyboardInterrupt in the loop, and the threads the start had
    # begun kept the process from exiting.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop, sig.name)
    if hasattr(signal, "SIGHUP"):
        loop.add_signal_handler(signal.SIGHUP, on_hangup)
    await agent.start()
    watcher = None
    if watch and config_path is not None:
        watcher = loop.create_task(watch_file(config_path, reload))
    if on_started is not None:
        await on_started(agent)
    try:
        if duration is not None:
            try:
                await asyncio.wait_for(stop.wait(), duration)
            except TimeoutError:
                log.info("duration of %g s reached: stopping", duration)
        else:
            await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        for signame in ("SIGTERM", "SIGINT", "SIGHUP"):
            if hasattr(signal, signame):
                loop.remove_signal_handler(getattr(signal, signame))
        await agent.stop()
    return 0
