"""``failover-agent maintenance start|end|list``: windows started at run time, in the signed
file ``control.maintenance_file`` (:mod:`failover_agent.maintenance_file`).

Every command reads and verifies the file first; a bad option, an unknown pool or domain, or a
file that does not verify is an error (exit 2) and the file is left as it was."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path
from typing import NoReturn

import click

from .config import AgentConfig, ConfigError, load_config
from .control_writer import _atomic_write, signing_key
from .durations import seconds
from .maintenance import Window
from .maintenance_file import read_windows, sign_windows

__all__ = ["maintenance"]


def _fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


def _load(file: Path) -> tuple[AgentConfig, Path, list[Window], int]:
    """The configuration, the file's path, its windows and version (none yet: ``[]``, 0)."""
    try:
        config = load_config(file)  # verifies an existing maintenance file too
    except ConfigError as exc:
        click.echo(f"{exc}\nnothing changed", err=True)
        sys.exit(2)
    control = config.control
    if control is None or control.maintenance_file is None:
        _fail(f"{file} sets no control.maintenance_file: the run-time windows live in that signed file "
              '(add maintenance_file = "maintenance.jws" to [control])')
    path = control.maintenance_file
    if not path.exists():
        return config, path, [], 0
    try:
        version, windows = read_windows(path.read_bytes(), signing_key(control))
    except (OSError, ValueError) as exc:
        _fail(f"{path}: {exc}; nothing changed (move the file aside to start afresh)")
    return config, path, windows, version


def _save(config: AgentConfig, path: Path, windows: list[Window], version: int) -> None:
    assert config.control is not None
    now_version = max(version + 1, int(time.time() * 1000))
    _atomic_write(path, sign_windows(windows, now_version, signing_key(config.control)))


def _seconds(option: str, text: str) -> float:
    try:
        return float(seconds(text, option))
    except ValueError as exc:  # the message names the option
        raise click.BadParameter(str(exc)) from None


def _instant(option: str, text: str) -> float:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an RFC 3339 time such as 2026-12-05T02:00:00Z",
                                 param_hint=option) from None
    if at.utcoffset() is None:
        raise click.BadParameter(f"{text!r} has no UTC offset: add one, such as {text}Z", param_hint=option)
    return at.timestamp()


@click.group("maintenance")
def maintenance() -> None:
    """Maintenance windows started and ended at run time (a signed file the agent verifies)."""


_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))


@maintenance.command()
@_FILE
@click.option("--pool", required=True, help="The pool.")
@click.option("--domain", "domains", multiple=True, help="A domain of the pool (repeat; default: all of them).")
@click.option("--for", "length", required=True, metavar="DURATION", help="How long: 90s, 30m, 2h, 1h30m.")
@click.option("--in", "delay", default=None, metavar="DURATION",
              help="Start this long from now (default: now; or --at).")
@click.option("--at", "at", default=None, metavar="TIME", help="Start at this RFC 3339 time, with its offset.")
@click.option("--drain", default=None, metavar="DURATION", help="Disable the domains this long before the start.")
@click.option("--reason", default="", help="Shown on the status page.")
def start(file: Path, pool: str, domains: tuple[str, ...], length: str, delay: str | None, at: str | None,
          drain: str | None, reason: str) -> None:
    """Start (or plan) a maintenance window for domains of a pool of FILE (agent.toml); prints its id."""
    now = time.time()
    if at is not None and delay is not None:
        raise click.BadParameter("give --in or --at, not both", param_hint="--in")
    begin = _instant("--at", at) if at is not None else now + (0.0 if delay is None else _seconds("--in", delay))
    end = begin + _seconds("--for", length)
    drain_s = 0.0 if drain is None else _seconds("--drain", drain)
    config, path, windows, version = _load(file)
    try:
        urls = config.maintenance_domains(pool, domains, "--pool/--domain")
    except ValueError as exc:
        _fail(str(exc).replace("--pool/--domain.pool: ", "--pool: ").replace("--pool/--domain.domains: ", "--domain: "))
    if end <= now:
        _fail("the window would have ended already: check --at and --for")
    ident = f"m-{int(now)}-{len(windows) + 1}"
    window = Window(pool=pool, domains=urls, start=begin, end=end, drain=drain_s, reason=reason, source=ident)
    kept = [w for w in windows if w.end > now]  # ended windows are dropped from the file
    _save(config, path, [*kept, window], version)
    click.echo(ident)


@maintenance.command()
@_FILE
@click.argument("window_id", metavar="ID")
def end(file: Path, window_id: str) -> None:
    """End the run-time window ID now (one not started yet is cancelled)."""
    now = time.time()
    config, path, windows, version = _load(file)
    found = [w for w in windows if w.source == window_id]
    if not found:
        ids = ", ".join(w.source for w in windows if w.end > now) or "none"
        _fail(f"no run-time window {window_id!r} in {path} (open ones: {ids})")
    kept = [w for w in windows if w.source != window_id and w.end > now]
    _save(config, path, kept, version)
    click.echo(f"{window_id} ended")


@maintenance.command("list")
@_FILE
def list_windows(file: Path) -> None:
    """List the run-time windows not ended yet (id, pool, start, end, domains, reason)."""
    now = time.time()
    _config, _path, windows, _version = _load(file)
    for w in windows:
        if w.end > now:
            stamp = "%Y-%m-%dT%H:%M:%SZ"
            click.echo(f"{w.source}\t{w.pool}\t{time.strftime(stamp, time.gmtime(w.start))}\t"
                       f"{time.strftime(stamp, time.gmtime(w.end))}\t{' '.join(sorted(w.domains))}\t{w.reason}")
