"""Builds and signs the control document clients poll.

Rules, in order:

1. A domain is down automatically: on an agent, when its last ``disable_after``
   pinned probes all failed (:func:`decide_disabled`); on the quorum publisher
   (``failover-agent control quorum``, :mod:`failover_agent.quorum`), when at least
   ``control.quorum.min_locations`` locations saw it fail for ``for_seconds``.
2. The operator override file wins: ``disable`` forces a domain off, ``enable``
   forces it on, whatever the probes say.
2b. A domain draining for a maintenance window (:mod:`failover_agent.maintenance`) is disabled
   as an automatic decision is: the override's ``enable`` wins over it, and rule 3 drops it.
3. Never every domain of a pool (the library's rule,
   :func:`pytest_failover.control.check_disabled`, which clients apply too): if the
   result breaks it, the automatic decisions are dropped and only the operator's
   remain; if the operator disabled all of them too, the pool's first domain stays
   enabled (and the error is logged).

Rules 2 and 3 are :func:`apply_rules`, shared by both.

The override file is TOML (or JSON when it ends in ``.json``)::

    [pools.api]
    disable = ["https://api.example.com"]
    enable = ["https://api2.example.com"]

The signing key is ``control.signing_key_file``: a JWK with its private half (an
Ed25519 key for ``EdDSA`` or an ``oct`` secret for ``HS256``), read by
``pytest_failover.control.load_key``, the same loader clients use for their copy
(``failover-agent control keygen`` writes both). ``control.key_id``, when set, must
agree with the key's own ``kid``, or names a key that has none.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
import tomllib
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_failover import Domain
from pytest_failover.control import (
    CONTENT_TYPE,
    MAX_DOCUMENT_BYTES,
    ControlDocument,
    ControlError,
    ControlKey,
    Quorum,
    check_disabled,
    load_key,
    verify_document,
)

from .config import ControlConfig, PoolConfig
from .listener import Response, json_response
from .state import AgentState

__all__ = ["ControlWriter", "Override", "apply_rules", "decide_disabled", "document_response", "load_override",
           "signing_key"]

log = logging.getLogger("failover_agent.control")


@dataclass(frozen=True, slots=True)
class Override:
    disable: Mapping[str, frozenset[str]]
    enable: Mapping[str, frozenset[str]]


EMPTY_OVERRIDE = Override({}, {})


def load_override(path: Path) -> Override:
    """Parse the operator override file (raises ValueError with the reason)."""
    raw = path.read_bytes()
    try:
        data: Any = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    if not isinstance(data, dict) or set(data) - {"pools"}:
        raise ValueError(f"{path}: expected only a 'pools' table")
    disable: dict[str, frozenset[str]] = {}
    enable: dict[str, frozenset[str]] = {}
    for name, entry in (data.get("pools") or {}).items():
        if not isinstance(entry, dict) or set(entry) - {"disable", "enable"}:
            raise ValueError(f"{path}: pools.{name}: expected 'disable' and/or 'enable' lists")
        for key, target in (("disable", disable), ("enable", enable)):
            urls = entry.get(key, [])
            if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
                raise ValueError(f"{path}: pools.{name}.{key}: expected a list of URLs")
            try:
                target[name] = frozenset(Domain.parse(u).url for u in urls)
            except ValueError as exc:
                raise ValueError(f"{path}: pools.{name}.{key}: {exc}") from None
    return Override(disable, enable)


def _breaks_the_pool_rule(pool: PoolConfig, disabled: Set[str]) -> bool:
    try:
        check_disabled([pool.to_pool()], {pool.name: disabled})
    except ControlError as exc:
        if exc.reason != "all_disabled":
            raise
        return True
    return False


def apply_rules(
    pools: Sequence[PoolConfig], auto: Mapping[str, Set[str]], override: Override
) -> dict[str, frozenset[str]]:
    """Rules 2 and 3: the disabled domains per pool, from the automatic ones (``auto``) and the override."""
    out: dict[str, frozenset[str]] = {}
    for pool in pools:
        domains = list(pool.domains)
        forced_off = set(override.disable.get(pool.name, frozenset())) & set(domains)
        forced_on = set(override.enable.get(pool.name, frozenset()))
        disabled = ((set(auto.get(pool.name, ())) & set(domains)) - forced_on) | forced_off
        if _breaks_the_pool_rule(pool, disabled):
            disabled = forced_off
            if _breaks_the_pool_rule(pool, disabled):
                log.error("override disables every domain of pool %r; keeping %s enabled",
                          pool.name, domains[0])
                disabled = disabled - {domains[0]}
            else:
                log.warning("every domain of pool %r looks down; not disabling any automatically",
                            pool.name)
        out[pool.name] = frozenset(disabled)
    return out


def decide_disabled(
    pools: Sequence[PoolConfig],
    state: AgentState,
    disable_after: int,
    override: Override,
    drained: Mapping[str, Set[str]] | None = None,
) -> dict[str, frozenset[str]]:
    """The disabled domains per pool from this agent's own probes and the domains ``drained``
    for maintenance, following the module's rules."""
    auto = {
        pool.name: {
            url for url in pool.domains
            if (d := state.domains.get((pool.name, url))) is not None
            and d.consecutive_failures >= disable_after
        }
        for pool in pools
    }
    return apply_rules(pools, with_drained(auto, drained or {}), override)


def with_drained(auto: Mapping[str, Set[str]], drained: Mapping[str, Set[str]]) -> dict[str, set[str]]:
    """Rule 2b: the domains ``drained`` for maintenance join the automatic decisions ``auto``
    (an agent's probes, or the quorum's votes), per pool."""
    return {pool: set(auto.get(pool, ())) | set(drained.get(pool, ())) for pool in auto.keys() | drained.keys()}


def signing_key(cfg: ControlConfig) -> ControlKey:
    """The key the agent signs with; ``ValueError`` naming the file if it cannot sign."""
    path = cfg.signing_key_file
    key = load_key(path)
    if not key.can_sign:
        raise ValueError(
            f"{path}: this is a public key ({key.describe()}); the agent signs, so "
            "control.signing_key_file must be the private key file that keygen wrote"
        )
    if cfg.key_id:
        if key.kid is None:
            key = key.with_kid(cfg.key_id)
        elif key.kid != cfg.key_id:
            raise ValueError(
                f"{path}: the key's kid is {key.kid!r} but control.key_id is {cfg.key_id!r}; "
                "readers match documents to keys by kid, so the two must agree (or drop key_id)"
            )
    return key


def document_response(doc: bytes | None) -> Response:
    """The answer at ``control.path``: the latest signed document as ``application/jose``
    (RFC 7515's type for the compact serialization, which is not JSON), or 503 before the first.

    It may go gzip-encoded to a client that asks (:mod:`failover_agent.listener`): that changes
    nothing the signature covers, the JWS being the body, which the client decodes before it
    verifies (the library's poller asks for ``identity`` anyway)."""
    if doc is None:
        return json_response({"error": "no control document yet"}, 503)
    return Response(200, doc, CONTENT_TYPE, {"Cache-Control": "no-store"}, compress=True)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ControlWriter:
    """Signs a fresh document on every :meth:`update` and keeps the latest bytes."""

    def __init__(
        self, cfg: ControlConfig, pools: Sequence[PoolConfig], previous_version: int = 0, *, quorum: bool = False
    ) -> None:
        """``quorum=True`` is the quorum publisher's writer (``cfg.quorum`` set, decisions
        passed to :meth:`publish`); an agent's writer (:meth:`update`) refuses ``cfg.quorum``."""
        if cfg.quorum is not None and not quorum:
            raise ValueError(
                "control.quorum is set: this configuration is the quorum publisher's, which decides "
                "from Prometheus; run it with 'failover-agent control quorum FILE' (the agents in "
                "each location have no [control.quorum])"
            )
        if quorum and cfg.quorum is None:
            raise ValueError("the quorum publisher needs a [control.quorum] section")
        self.cfg = cfg
        self.pools = list(pools)
        self._key = signing_key(cfg)
        self._override = EMPTY_OVERRIDE
        self._override_mtime: float | None = None
        self.version = previous_version

    def _refresh_override(self) -> None:
        path = self.cfg.override_file
        if path is None:
            return
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            if self._override is not EMPTY_OVERRIDE:
                log.info("override file %s removed; no overrides", path)
            self._override, self._override_mtime = EMPTY_OVERRIDE, None
            return
        if mtime == self._override_mtime:
            return
        try:
            self._override = load_override(path)
            log.info("override file %s loaded", path)
        except (OSError, ValueError) as exc:
            log.error("override file ignored, previous overrides kept: %s", exc)
        self._override_mtime = mtime

    def restore(self, state: AgentState, now: float | None = None) -> ControlDocument | None:
        """Serve again the document a previous run left in ``output_file``, if it still holds.

        It must verify with this writer's key, be unexpired at ``now`` and fit the configured
        pools; otherwise nothing changes (the reason is logged). The quorum publisher calls
        this at start, so a restart while Prometheus is down keeps the last decision.
        """
        path = self.cfg.output_file
        if path is None or not path.is_file():
            return None
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_DOCUMENT_BYTES + 1)
            doc = verify_document(raw, [self._key], now=now)
            check_disabled([p.to_pool() for p in self.pools], doc.disabled)
        except (OSError, ControlError) as exc:
            log.info("previous document in %s not served again: %s", path, exc)
            return None
        from .state import ControlStatus

        self.version = max(self.version, doc.version)
        state.control = ControlStatus(version=doc.version, issued_at=float(doc.issued_at),
                                      disabled=dict(doc.disabled), document=raw)
        log.info("serving again document v%d from %s (issued %d)", doc.version, path, doc.issued_at)
        return doc

    def update(self, state: AgentState, now: float | None = None,
               drained: Mapping[str, Set[str]] | None = None) -> bytes:
        """Decide from the agent's own probes and the domains ``drained`` for maintenance (rule
        2b), sign, store in ``state.control`` and write ``output_file``; return the bytes."""
        self._refresh_override()
        disabled = decide_disabled(self.pools, state, self.cfg.disable_after, self._override, drained or {})
        return self._publish(state, disabled, now, None)

    def publish(
        self, state: AgentState, auto: Mapping[str, Set[str]], quorum: Quorum, now: float | None = None,
        drained: Mapping[str, Set[str]] | None = None,
    ) -> bytes:
        """The quorum publisher's :meth:`update`: ``auto`` are the domains the quorum saw down
        (rule 1), ``quorum`` records who agreed, ``drained`` the domains draining for maintenance
        (rule 2b); rules 2 and 3 apply as on an agent."""
        self._refresh_override()
        disabled = apply_rules(self.pools, with_drained(auto, drained or {}), self._override)
        return self._publish(state, disabled, now, quorum)

    def _publish(
        self, state: AgentState, disabled: dict[str, frozenset[str]], now: float | None, quorum: Quorum | None
    ) -> bytes:
        now = time.time() if now is None else now
        self.version = max(self.version + 1, int(now * 1000))
        document = ControlDocument.sign(
            version=self.version,
            pools=disabled,
            expires_in=self.cfg.expires_in,
            key=self._key,
            now=now,
            quorum=quorum,
        )
        control = state.control
        if control is None:
            from .state import ControlStatus

            control = state.control = ControlStatus()
        control.version = self.version
        control.issued_at = now
        control.disabled = disabled
        control.document = document
        control.error = None
        if self.cfg.output_file is not None:
            _atomic_write(self.cfg.output_file, document)
        return document
