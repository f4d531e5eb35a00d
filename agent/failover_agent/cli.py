"""``failover-agent``: ``run``, ``demo`` and ``check-config``."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from .config import AgentConfig, ConfigError, load_config
from .console import Reporter, make_reporter

__all__ = ["main"]

log = logging.getLogger("agent")


def _setup_logging(level: str, reporter: Reporter) -> None:
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    from .console import LiveReporter

    handler: logging.Handler
    if isinstance(reporter, LiveReporter):
        from rich.logging import RichHandler

        rich_handler = RichHandler(console=reporter._console, show_path=False, markup=False)
        rich_handler.setFormatter(logging.Formatter("%(message)s"))
        handler = rich_handler
    else:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s"))
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("apscheduler", "aiohttp.access", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The exporters log every failed batch; agent.telemetry says it once per outage instead.
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)


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
    on_started: object = None,
    telemetry: Any = None,
    watch: bool = False,
) -> int:
    """Run an agent until SIGTERM/SIGINT (or ``duration``); SIGHUP reloads ``config_path``."""
    from .runner import Agent

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

    await agent.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop, sig.name)
    if hasattr(signal, "SIGHUP"):
        loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(reload()))
    watcher = None
    if watch and config_path is not None:
        watcher = loop.create_task(watch_file(config_path, reload))
    if callable(on_started):
        await on_started(agent)
    try:
        if duration is not None:
            try:
                await asyncio.wait_for(stop.wait(), duration)
            except asyncio.TimeoutError:
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Synthetic monitoring of failover pools, exported as OpenTelemetry."""


@main.command("check-config")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def check_config(file: Path) -> None:
    """Validate FILE (agent.toml) and print every error with its path; exit 2 on errors."""
    try:
        config = load_config(file)
    except ConfigError as exc:
        click.echo(f"{exc.source}: {len(exc.errors)} error(s)", err=True)
        for path, message in exc.errors:
            click.echo(f"{path}: {message}" if path else message, err=True)
        sys.exit(2)
    domains = sum(len(p.domains) for p in config.pools)
    click.echo(f"{file}: OK ({len(config.pools)} pool(s), {domains} domain(s), location {config.location!r})")


@main.command()
@click.option("--config", "-c", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="agent.toml; without it, the embedded demo runs.")
@click.option("--listen", default=None, help="HOST:PORT for /metrics etc. (overrides the config).")
@click.option("--plain", is_flag=True, help="Plain log lines even on a terminal.")
@click.option("--watch", is_flag=True, help="Also reload when the config file changes (polled every second).")
@click.option("--log-level", default="INFO", show_default=True)
def run(config_file: Path | None, listen: str | None, plain: bool, watch: bool, log_level: str) -> None:
    """Run the agent with --config FILE (SIGHUP reloads it); without a config, run the demo."""
    if config_file is None:
        from .demo import run_demo

        sys.exit(run_demo(listen=listen or "127.0.0.1:9464", duration=None, plain=plain,
                          log_level=log_level))
    try:
        config = load_config(config_file)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    reporter = make_reporter(force_plain=plain)
    _setup_logging(log_level, reporter)
    try:
        code = asyncio.run(serve(config, config_path=config_file, reporter=reporter, listen=listen,
                                 watch=watch))
    except OSError as exc:  # the listener's address is taken or not ours
        log.error("cannot start: %s", exc)
        code = 1
    sys.exit(code)


@main.command()
@click.option("--listen", default="127.0.0.1:9464", show_default=True, help="HOST:PORT of the listener.")
@click.option("--duration", type=float, default=None, help="Stop after SECONDS (default: until Ctrl-C).")
@click.option("--plain", is_flag=True, help="Plain log lines even on a terminal.")
@click.option("--log-level", default="INFO", show_default=True)
def demo(listen: str, duration: float | None, plain: bool, log_level: str) -> None:
    """Probe fake domains with a scripted outage: failover, breakers and metrics in a minute."""
    from .demo import run_demo

    sys.exit(run_demo(listen=listen, duration=duration, plain=plain, log_level=log_level))


if __name__ == "__main__":  # pragma: no cover
    main()
