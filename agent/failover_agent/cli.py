"""``failover-agent``: ``run``, ``demo``, ``check-config``, ``rules`` and ``control``.

Conventions: ``--version``; a bad option value is a usage error on one line
(``Error: ... (see 'failover-agent run --help')``, exit 2, no traceback); ``run`` needs a
configuration (``failover-agent run agent.toml`` or ``--config agent.toml``); the demo is
``failover-agent demo``. The console script enters through :mod:`failover_agent.__main__`,
which turns a missing ``[agent]`` extra into an install hint.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pytest_failover import __version__

from .config import AgentConfig, ConfigError, _check_listen, load_config
from .control_commands import control
from .maintenance_commands import maintenance

if TYPE_CHECKING:
    from .demo import Step

__all__ = ["LOG_LEVELS", "main"]

log = logging.getLogger("failover_agent")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_F = TypeVar("_F", bound=Callable[..., Any])


class _OneLineUsage(click.ClickException):
    """A usage error shown as ClickException shows its message: ``Error: ...`` on one line."""

    exit_code = 2


class _Cli(click.Group):
    """The command group: usage errors of any subcommand on one line, and an install hint
    when a lazily imported dependency of the ``[agent]`` extra is missing."""

    @staticmethod
    def _one_line(exc: click.UsageError) -> click.ClickException:
        if isinstance(exc, click.exceptions.NoArgsIsHelpError):
            return exc  # the help text itself, as click shows it
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return _OneLineUsage(exc.format_message() + where)

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise self._one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise self._one_line(exc) from None
        except ModuleNotFoundError as exc:  # a lazily imported module of the [agent] extra
            from .__main__ import missing_module_hint

            hint = missing_module_hint(exc)
            if hint is None:
                raise
            raise click.ClickException(hint) from None


def _listen(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``HOST:PORT`` with a port from 0 to 65535: the rule of ``exporters.prometheus.listen``."""
    if value is None:
        return None
    try:
        return _check_listen(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: {exc}") from None


def _outage_at(ctx: click.Context, param: click.Parameter, value: float | None) -> tuple[Step, ...]:
    """The demo's timeline, its outage moved to ``value`` seconds in (None: as scripted)."""
    from .demo import demo_timeline  # imported here: the other commands need none of the demo

    try:
        return demo_timeline(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_LISTEN_HELP = "HOST:PORT of the listener (/metrics, /healthz, the status page); port 0: any free one."


def _log_level() -> Callable[[_F], _F]:
    return click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="INFO",
                        show_default=True, help="Lowest level of the log lines shown.")


def _plain() -> Callable[[_F], _F]:
    return click.option("--plain", is_flag=True, help="Plain log lines even on a terminal.")


def _exit(start: Callable[[], int]) -> None:
    """Run the agent (or the demo) and exit with its code: an OTEL_* variable the agent cannot
    honour is a usage error (2), an address that cannot be listened on a failed start (1)."""
    from .telemetry import OtelEnvironmentError

    try:
        code = start()
    except OtelEnvironmentError as exc:
        click.echo(f"Error: {exc}", err=True)
        code = 2
    except OSError as exc:  # the listener's address is taken, unknown or not ours
        log.error("cannot start: %s", exc)
        code = 1
    sys.exit(code)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="failover-agent",
                      message="%(prog)s %(version)s")
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


def _config_file(ctx: click.Context, file: Path | None, config_option: Path | None, example: str) -> Path:
    """FILE or ``--config FILE`` (one of them, or both the same)."""
    if file is not None and config_option is not None and file != config_option:
        raise click.UsageError(f"two configurations given ({file} and --config {config_option}): give one", ctx)
    config_file = file or config_option
    if config_file is None:
        raise click.UsageError(f"missing the configuration: failover-agent {ctx.info_name} agent.toml "
                               f"(or --config agent.toml){example}", ctx)
    return config_file


def _config_options(func: _F) -> _F:
    func = click.option("--config", "-c", "config_option", type=click.Path(dir_okay=False, path_type=Path),
                        default=None, help="agent.toml, the same as FILE.")(func)
    return click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))(func)


def _load_or_exit(config_file: Path, *, check_files: bool = True) -> AgentConfig:
    """The configuration, or its errors on stderr and exit 2."""
    try:
        return load_config(config_file, check_files=check_files)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)


@main.command()
@_config_options
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the rules to FILE (default: standard output).")
@click.pass_context
def rules(ctx: click.Context, file: Path | None, config_option: Path | None, output: Path | None) -> None:
    """Write Prometheus recording and alerting rules for the [[slo]] tables of FILE (agent.toml).

    Multiwindow, multi-burn-rate alerts (SRE Workbook, chapter 5) labelled severity=page or
    severity=ticket. Check them with 'promtool check rules'."""
    config_file = _config_file(ctx, file, config_option, "")
    config = _load_or_exit(config_file, check_files=False)  # the rules need none of its files
    if not config.slo:
        click.echo(f"Error: {config_file} has no [[slo]] table (such as pool = \"api\", objective = 99.9, "
                   'window = "30d"): no rules to write', err=True)
        sys.exit(2)
    from .slo import render, rule_groups

    groups = rule_groups(config)
    text = render(groups, source=config_file.name)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(f"{output}: {len(config.slo)} SLO(s), {sum(len(g.rules) for g in groups)} rules",
               err=True)


@main.command()
@_config_options
@click.option("--listen", default=None, callback=_listen, metavar="HOST:PORT",
              help=f"{_LISTEN_HELP} Overrides exporters.prometheus.listen.")
@_plain()
@click.option("--watch", is_flag=True, help="Also reload when the config file changes (polled every second).")
@_log_level()
@click.pass_context
def run(ctx: click.Context, file: Path | None, config_option: Path | None, listen: str | None, plain: bool,
        watch: bool, log_level: str) -> None:
    """Run the agent with the configuration FILE (agent.toml); SIGHUP reloads it.

    The demo, with fake domains and nothing to configure, is 'failover-agent demo'."""
    config_file = _config_file(ctx, file, config_option, "; the demo is 'failover-agent demo'")
    config = _load_or_exit(config_file)
    if config.control is not None and config.control.quorum is not None:
        raise click.UsageError(f"{config_file} has [control.quorum]: that is the quorum publisher's "
                               f"configuration; run it with 'failover-agent control quorum {config_file}'", ctx)
    # imported here: check-config needs none of the scheduler, listener or exporters
    from .console import make_reporter
    from .logs import setup_logging
    from .service import serve

    reporter = make_reporter(force_plain=plain)
    setup_logging(log_level, reporter)
    _exit(lambda: asyncio.run(serve(config, config_path=config_file, reporter=reporter, listen=listen,
                                    watch=watch)))


@main.command()
@click.option("--listen", default="127.0.0.1:9464", show_default=True, callback=_listen, metavar="HOST:PORT",
              help=_LISTEN_HELP)
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after SECONDS (default: until Ctrl-C).")
@click.option("--outage-at", "timeline", type=float, callback=_outage_at, metavar="SECONDS",
              help="Bring the outage (the primary's DNS failure, the backup's expiring certificate) "
                   "to SECONDS into each minute, both at once, between the timeline's first step "
                   "and the primary's recovery (default: as scripted).")
@_plain()
@_log_level()
def demo(listen: str, duration: float | None, timeline: tuple[Step, ...], plain: bool, log_level: str) -> None:
    """Probe fake domains with a scripted outage: failover, breakers and metrics in a minute.

    OTEL_EXPORTER_OTLP_ENDPOINT (and the other OTEL_* variables) send its spans and metrics
    to a collector as well."""
    from .demo import run_demo

    _exit(lambda: run_demo(listen=listen, duration=duration, plain=plain, log_level=log_level, timeline=timeline))


main.add_command(control)
main.add_command(maintenance)


if __name__ == "__main__":  # pragma: no cover - run as a script
    main()
