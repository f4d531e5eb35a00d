"""``failover-agent control``: make keys, sign and verify control documents.

- ``keygen`` writes a key file (one JWK, see ``pytest_failover.control._keys``): the
  private key (mode 0600) and, for EdDSA, the public key clients are given;
- ``sign`` turns a document's JSON (the payload: ``version``, ``pools`` and
  optionally ``iat``/``exp``) into the JWS clients poll;
- ``verify`` checks a JWS against one or more keys and prints its payload, or says
  why it is refused (exit status 1);
- ``quorum`` runs the quorum publisher (:mod:`failover_agent.quorum`): the document
  decided from every location's probes in Prometheus; its help shows the PromQL.

The library is imported inside each command, so ``failover-agent --help`` stays fast.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import IO, Any

import click

__all__ = ["control"]


def _read(stream: IO[bytes], limit: int) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise click.ClickException(f"{stream.name}: more than {limit} bytes")
    return data


def _keys(paths: tuple[Path, ...]) -> list[Any]:
    from pytest_failover.control import load_key

    keys = []
    for path in paths:
        try:
            keys.append(load_key(path))
        except (OSError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
    return keys


@click.group("control")
def control() -> None:
    """Keys and signed control documents (JWS, EdDSA or HS256)."""


@control.command()
@click.option("--alg", type=click.Choice(["EdDSA", "HS256"]), default="EdDSA", show_default=True,
              help="EdDSA: an Ed25519 key pair (clients get the public key). HS256: a shared secret.")
@click.option("--kid", default=None, help="Key id in the JWK and in every document's header "
              "(default: the start of the key's RFC 7638 thumbprint).")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("control.key"), show_default=True,
              help="The private key file (a JWK, readable by its owner only).")
@click.option("--public-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="EdDSA: the public key file for clients (default: OUT with suffix .pub.jwk).")
@click.option("--force", is_flag=True, help="Overwrite existing key files.")
def keygen(alg: str, kid: str | None, out: Path, public_out: Path | None, force: bool) -> None:
    """Write a new key file; for EdDSA also the public key file, and print the public JWK."""
    from pytest_failover.control import generate_key, save_key

    public_path = (public_out or out.with_suffix(".pub.jwk")) if alg == "EdDSA" else None
    if not force:
        for path in (out, public_path):
            if path is not None and path.exists():
                raise click.ClickException(f"{path} exists; pass --force to replace it")
    try:
        key = generate_key(alg, kid=kid)
        save_key(out, key, private=True, overwrite=force)
        if public_path is not None:
            save_key(public_path, key.public(), private=False, overwrite=force)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if public_path is None:
        click.echo(f"wrote {out}: an HS256 secret (kid {key.kid!r}); the agent and every "
                   "client need this same file, keep it secret", err=True)
    else:
        click.echo(f"wrote {out} (private, for the agent) and {public_path} (public, for "
                   f"clients): EdDSA, kid {key.kid!r}", err=True)
        click.echo(key.public().to_json(), nl=False)


@control.command()
@click.argument("document", type=click.File("rb"))
@click.option("--key", "-k", "key_file", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The private key file (from keygen).")
@click.option("--expires-in", type=float, default=3600.0, show_default=True,
              help="Seconds of validity when the document has no 'exp'.")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the JWS to this file (the exact bytes to serve); default: standard output.")
def sign(document: IO[bytes], key_file: Path, expires_in: float, out: Path | None) -> None:
    """Sign DOCUMENT (JSON: version, pools, optionally iat and exp; '-' reads stdin) into a JWS.

    The JSON is the payload that `verify` prints, for example
    {"version": 8, "pools": {"api": {"disabled": ["https://api.example.com"]}}}.
    'iat' defaults to now and 'exp' to iat + --expires-in.
    """
    from pytest_failover.control import ControlDocument, ControlError, sign_document

    (key,) = _keys((key_file,))
    try:
        claims = json.loads(_read(document, 64 * 1024))
    except ValueError as exc:
        raise click.ClickException(f"{document.name}: not JSON ({exc})") from None
    if not isinstance(claims, dict):
        raise click.ClickException(f"{document.name}: expected a JSON object (version, pools)")
    if not (math.isfinite(expires_in) and expires_in > 0):
        raise click.BadParameter("must be a positive number of seconds", param_hint="--expires-in")
    claims = dict(claims)
    claims.setdefault("iat", math.floor(time.time()))
    if isinstance(claims["iat"], int) and not isinstance(claims["iat"], bool):
        claims.setdefault("exp", claims["iat"] + math.ceil(expires_in))
    try:
        token = sign_document(ControlDocument.from_claims(claims), key)
    except ControlError as exc:
        raise click.ClickException(f"{document.name}: {exc} (reason: {exc.reason})") from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if out is None:
        # a terminal gets a newline to read by; a pipe or redirect gets the exact bytes
        click.echo(token.decode("ascii"), nl=sys.stdout.isatty())
    else:
        out.write_bytes(token)
        click.echo(f"wrote {out} ({len(token)} bytes)", err=True)


@control.command()
@click.argument("document", type=click.File("rb"))
@click.option("--key", "-k", "key_files", required=True, multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A key file that may have signed it (repeat during a key rotation).")
@click.option("--now", type=float, default=None,
              help="Judge iat and exp at this unix time (default: now).")
@click.option("--max-skew", type=float, default=30.0, show_default=True,
              help="Seconds iat may be ahead of the clock.")
def verify(document: IO[bytes], key_files: tuple[Path, ...], now: float | None, max_skew: float) -> None:
    """Verify the JWS in DOCUMENT ('-' reads stdin); print its payload, or why it is refused (exit 1)."""
    from pytest_failover.control import MAX_DOCUMENT_BYTES, ControlError, verify_document

    keys = _keys(key_files)
    raw = document.read(MAX_DOCUMENT_BYTES + 1)  # a larger one is refused as too_large
    try:
        doc = verify_document(raw, keys, now=now, max_skew=max_skew)
    except ControlError as exc:
        raise click.ClickException(f"{document.name}: refused ({exc.reason}): {exc}") from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(doc.claims(), indent=2, sort_keys=True))


_QUORUM_HELP = """Publish the control document decided by a quorum of locations.

FILE is an agent.toml with [control] and [control.quorum] (prometheus_url, min_locations,
for_seconds, timeout, headers); its pools name the domains the document may disable. Every
control.interval the publisher asks the Prometheus HTTP API (/api/v1/query; Thanos and Mimir
serve the same API) which locations have seen each domain fail for for_seconds, and disables a
domain only when at least min_locations distinct locations agree; it is enabled again as soon
as fewer do. The override file and the rule that keeps one domain of every pool enabled still
apply, and the document's "quorum" member lists who agreed. While Prometheus is unreachable or
answers nonsense, nothing is signed: the last document stays in force (gauge
{quorum_up} = 0, one log line per change). It serves the document at
control.path, /metrics and /healthz on exporters.prometheus.listen (or --listen).

\b
The query it runs, for for_seconds = {for_seconds} (--print-query prints FILE's):
{votes}

\b
The same decision for a Grafana panel (1: disabled), min_locations = {min_locations}:
{decision}
"""


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


class _QuorumCommand(click.Command):
    """Its help shows the PromQL, built only when help is asked for (``--help`` stays fast)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from pytest_failover import semconv

        from .quorum.promql import location_votes, quorum_decision

        self.help = _QUORUM_HELP.format(
            for_seconds=60, min_locations=2,
            quorum_up=semconv.METRICS[semconv.FAILOVER_CONTROL_QUORUM_UP].prometheus,
            votes=_indent(location_votes(60)), decision=_indent(quorum_decision(60, 2)),
        )
        super().format_help_text(ctx, formatter)


@control.command("quorum", cls=_QuorumCommand,
                 short_help="Publish the document decided by a quorum of locations (Prometheus).")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="HOST:PORT of the listener (the document, /metrics, /healthz); port 0: any free "
                   "one. Overrides exporters.prometheus.listen.")
@click.option("--print-query", is_flag=True, help="Print the PromQL for FILE's settings and exit.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              default="INFO", show_default=True, help="Lowest level of the log lines shown.")
def quorum(file: Path, listen: str | None, print_query: bool, log_level: str) -> None:
    import asyncio
    import logging

    from .config import ConfigError, _check_listen, load_config

    if listen is not None:
        try:
            _check_listen(listen)
        except ValueError as exc:
            raise click.BadParameter(f"{listen!r}: {exc}", param_hint="--listen") from None
    try:
        config = load_config(file)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    if config.control is None or config.control.quorum is None:
        click.echo(f"{file}: no [control.quorum] section: the quorum publisher needs prometheus_url "
                   "(and optionally min_locations, for_seconds)", err=True)
        sys.exit(2)
    settings = config.control.quorum
    if print_query:
        from .quorum.promql import location_votes, quorum_decision

        click.echo(f"# the votes (one series per location that saw the domain fail for {settings.for_seconds} s)")
        click.echo(location_votes(settings.for_seconds))
        click.echo(f"# the decision (1: at least {settings.min_locations} locations agree)")
        click.echo(quorum_decision(settings.for_seconds, settings.min_locations))
        return
    from .quorum.publisher import serve_quorum

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per query
    try:
        code = asyncio.run(serve_quorum(config, listen=listen))
    except OSError as exc:
        logging.getLogger("failover_agent.publisher").error("cannot start: %s", exc)
        code = 1
    sys.exit(code)
