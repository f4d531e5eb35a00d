"""``failover-agent``: ``run``, ``demo`` and ``check-config``."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import click

from .config import ConfigError, load_config
from .control_commands import control

__all__ = ["main"]

log = logging.getLogger("failover_agent")

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
    # imported here: check-config needs none of the scheduler, listener or exporters
    from .console import make_reporter
    from .logs import setup_logging
    from .service import serve

    reporter = make_reporter(force_plain=plain)
    setup_logging(log_level, reporter)
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


main.add_command(control)


if __name__ == "__main__":  # pragma: no cover
    main()
