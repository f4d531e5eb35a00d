"""Remote control: a signed document that disables domains of the local pools.

Rules and theory of operation
-----------------------------
An operator publishes, at a URL independent of the pools it controls, a small
signed *control document*: "in pool ``api``, domain ``https://api.example.com``
is disabled".  Clients poll it (``ControlPoller``) and apply it to their
transport (``transport.apply_control(doc)``).

The document on the wire is a compact JSON *envelope*, exactly as
``ControlDocument.sign`` produced it (no added whitespace)::

    {"alg":"ed25519","kid":"k1","payload":"<base64url JSON>","sig":"<base64url>"}

``alg`` is ``ed25519`` (public-key) or ``hmac-sha256`` (shared key). The
signature covers ``SIGNING_CONTEXT + alg + "\\n" + kid + "\\n" + payload``, that
is the exact base64url text of the payload, so nothing of the payload is parsed
before the signature has been verified (constant-time for HMAC). The payload is
the JSON object::

    {"version": 7, "issued_at": 1764400000, "expires_at": 1764403600,
     "pools": {"api": {"disabled": ["https://api.example.com"]}}}

A document is the complete desired state of the pools it names: a domain of a
named pool that is not listed is enabled. Pools the document does not name are
left as they are.

Rejected, with a ``ControlError`` whose ``reason`` names the rule (and nothing
is changed), are, in the order they are checked:

============== ==========================================================
reason         when
============== ==========================================================
too_large      more than ``MAX_DOCUMENT_BYTES`` bytes
malformed      not UTF-8 JSON, not an object, bad base64url, not canonical
missing_field  a field of the envelope or payload is absent
extra_field    a field nobody defined is present
wrong_type     a field has the wrong JSON type or an impossible value
unknown_alg    ``alg`` is neither ``ed25519`` nor ``hmac-sha256``
no_key         no key is configured for the document's ``alg`` or ``kid``
bad_signature  the signature does not verify
future         ``issued_at`` is later than now plus ``max_skew``
expired        ``expires_at`` is now or in the past
stale_version  ``version`` is not greater than the version in force
unknown_pool   a pool the client does not have
unknown_domain a domain that is not in that pool
all_disabled   every domain of a pool would be disabled
============== ==========================================================

The first ten are checked by ``ControlDocument.parse``; the last four need
the local pools and the version in force and are checked by
``ControlDocument.check``, which the transport calls before applying.

``expires_at`` bounds how long a signed document may be *accepted* (so an old
document cannot be replayed forever); once applied, a document stays in force
until a newer one is applied.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import httpx

from ._pool import Domain, Pool

if TYPE_CHECKING:
    import ssl

    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "ControlDocument",
    "ControlError",
    "ControlPoller",
    "ControlTarget",
]

logger = logging.getLogger("pytest_failover")

MAX_DOCUMENT_BYTES = 64 * 1024
"""Documents (and HTTP bodies the poller reads) larger than this are rejected."""

SIGNING_CONTEXT = b"pytest-failover control v1\n"
"""Prefix of every signed message, so a signature made for anything else never fits."""

ALG_ED25519 = "ed25519"
ALG_HMAC = "hmac-sha256"
_SIG_SIZES = {ALG_ED25519: 64, ALG_HMAC: 32}
_ENVELOPE_FIELDS = ("alg", "kid", "payload", "sig")
_PAYLOAD_FIELDS = ("expires_at", "issued_at", "pools", "version")
_POOL_FIELDS = ("disabled",)
_MAX_VERSION = 2**63 - 1
_MIN_HMAC_KEY = 16
_INSTALL_HINT = "pip install pytest-failover[control]"

if TYPE_CHECKING:
    PrivateKeyInput: TypeAlias = "Ed25519PrivateKey | bytes"
    PublicKeyInput: TypeAlias = "Ed25519PublicKey | bytes"
else:
    PrivateKeyInput = Any
    PublicKeyInput = Any

HmacKeys: TypeAlias = "bytes | Mapping[str, bytes]"
PublicKeys: TypeAlias = "PublicKeyInput | Mapping[str, PublicKeyInput]"


class ControlError(ValueError):
    """A control document was rejected; nothing was changed.

    ``reason`` is a short stable code (``bad_signature``, ``expired``, ...; see
    the module docstring), the message says what did not fit.
    """

    def __init__(self, message: str, *, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------- keys


def _ed25519() -> Any:
    """The ``cryptography`` Ed25519 module, imported on first use."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise ImportError(
            f"Ed25519 control documents need the 'cryptography' package: {_INSTALL_HINT}"
        ) from exc
    return ed25519


def _serialization() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError as exc:
        raise ImportError(
            f"Ed25519 control documents need the 'cryptography' package: {_INSTALL_HINT}"
        ) from exc
    return serialization


def _load_private_key(key: PrivateKeyInput) -> Ed25519PrivateKey:
    ed25519 = _ed25519()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key  # type: ignore[no-any-return]  # cryptography is imported untyped here
    if isinstance(key, bytes | bytearray):
        raw = bytes(key)
        if raw.lstrip().startswith(b"-----BEGIN"):
            loaded = _serialization().load_pem_private_key(raw, password=None)
            if not isinstance(loaded, ed25519.Ed25519PrivateKey):
                raise TypeError("private_key: the PEM key is not an Ed25519 private key")
            return loaded  # type: ignore[no-any-return]  # see above
        if len(raw) == 32:
            return ed25519.Ed25519PrivateKey.from_private_bytes(raw)  # type: ignore[no-any-return]
        raise ValueError("private_key: expected 32 raw bytes or a PEM Ed25519 private key")
    raise TypeError(
        f"private_key: expected an Ed25519PrivateKey or bytes, got {type(key).__name__}"
    )


def _load_public_key(key: PublicKeyInput) -> Ed25519PublicKey:
    ed25519 = _ed25519()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key  # type: ignore[no-any-return]  # cryptography is imported untyped here
    if isinstance(key, bytes | bytearray):
        raw = bytes(key)
        if raw.lstrip().startswith(b"-----BEGIN"):
            loaded = _serialization().load_pem_public_key(raw)
            if not isinstance(loaded, ed25519.Ed25519PublicKey):
                raise TypeError("public_key: the PEM key is not an Ed25519 public key")
            return loaded  # type: ignore[no-any-return]  # see above
        if len(raw) == 32:
            return ed25519.Ed25519PublicKey.from_public_bytes(raw)  # type: ignore[no-any-return]
        raise ValueError("public_key: expected 32 raw bytes or a PEM Ed25519 public key")
    raise TypeError(f"public_key: expected an Ed25519PublicKey or bytes, got {type(key).__name__}")


def _check_hmac_key(key: object, what: str = "hmac_key") -> bytes:
    if not isinstance(key, bytes | bytearray):
        raise TypeError(f"{what}: expected bytes, got {type(key).__name__}")
    if len(key) < _MIN_HMAC_KEY:
        raise ValueError(
            f"{what}: must be at least {_MIN_HMAC_KEY} bytes (use secrets.token_bytes(32))"
        )
    return bytes(key)


@dataclass(frozen=True, slots=True)
class _Verifier:
    """The keys a reader accepts, by algorithm and key id (``None``: any key id)."""

    hmac_keys: Mapping[str | None, bytes]
    public_keys: Mapping[str | None, Ed25519PublicKey]

    @classmethod
    def build(cls, hmac_key: HmacKeys | None, public_key: PublicKeys | None) -> _Verifier:
        if hmac_key is None and public_key is None:
            raise ValueError(
                "a control document needs a key to verify it: pass hmac_key or public_key"
            )
        hmac_keys: dict[str | None, bytes] = {}
        if isinstance(hmac_key, Mapping):
            hmac_keys.update(
                {kid: _check_hmac_key(k, f"hmac_key[{kid!r}]") for kid, k in hmac_key.items()}
            )
        elif hmac_key is not None:
            hmac_keys[None] = _check_hmac_key(hmac_key)
        public_keys: dict[str | None, Ed25519PublicKey] = {}
        if isinstance(public_key, Mapping):
            public_keys.update({kid: _load_public_key(k) for kid, k in public_key.items()})
        elif public_key is not None:
            public_keys[None] = _load_public_key(public_key)
        return cls(MappingProxyType(hmac_keys), MappingProxyType(public_keys))

    def verify(self, alg: str, kid: str, message: bytes, sig: bytes) -> None:
        keys: Mapping[str | None, object] = self.hmac_keys if alg == ALG_HMAC else self.public_keys
        if not keys:
            raise ControlError(
                f"document is signed with {alg} but no {'hmac_key' if alg == ALG_HMAC else 'public_key'} is configured",
                reason="no_key",
            )
        if alg == ALG_HMAC:
            secret = self.hmac_keys.get(None, self.hmac_keys.get(kid))
            if secret is None:
                raise ControlError(
                    f"document is signed with unknown key id {kid!r} ({alg})", reason="no_key"
                )
            expected = hmac.new(secret, message, hashlib.sha256).digest()
            if not hmac.compare_digest(expected, sig):
                raise ControlError(
                    "bad signature: the document was not signed with this hmac_key",
                    reason="bad_signature",
                )
            return
        public = self.public_keys.get(None, self.public_keys.get(kid))
        if public is None:
            raise ControlError(
                f"document is signed with unknown key id {kid!r} ({alg})", reason="no_key"
            )
        from cryptography.exceptions import InvalidSignature

        try:
            public.verify(sig, message)
        except InvalidSignature:
            raise ControlError(
                "bad signature: the document was not signed by this public_key",
                reason="bad_signature",
            ) from None


# ----------------------------------------------------------------------- encoding


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    """Strict unpadded base64url: exactly one text encodes given bytes."""
    try:
        data = base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ControlError(
            f"malformed document: {what} is not base64url", reason="malformed"
        ) from None
    if _b64encode(data) != text:
        raise ControlError(
            f"malformed document: {what} is not canonical unpadded base64url", reason="malformed"
        )
    return data


def _signing_input(alg: str, kid: str, payload: str) -> bytes:
    return SIGNING_CONTEXT + f"{alg}\n{kid}\n{payload}".encode()


def _encode_envelope(alg: str, kid: str, payload: str, sig: str) -> bytes:
    envelope = {"alg": alg, "kid": kid, "payload": payload, "sig": sig}
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _sign_payload(
    payload: bytes,
    *,
    hmac_key: bytes | None = None,
    private_key: PrivateKeyInput | None = None,
    kid: str = "",
) -> bytes:
    """Wrap ``payload`` (any bytes) in a signed envelope; the low-level half of ``sign``."""
    if (hmac_key is None) == (private_key is None):
        raise ValueError("sign with exactly one of hmac_key or private_key")
    if not isinstance(kid, str):
        raise TypeError(f"kid: expected a string, got {type(kid).__name__}")
    payload_text = _b64encode(payload)
    if hmac_key is not None:
        alg = ALG_HMAC
        message = _signing_input(alg, kid, payload_text)
        sig = hmac.new(_check_hmac_key(hmac_key), message, hashlib.sha256).digest()
    else:
        alg = ALG_ED25519
        message = _signing_input(alg, kid, payload_text)
        assert private_key is not None
        sig = _load_private_key(private_key).sign(message)
    return _encode_envelope(alg, kid, payload_text, _b64encode(sig))


def _reject_constant(name: str) -> Any:
    raise ControlError(f"malformed document: {name} is not valid JSON", reason="malformed")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ControlError(f"malformed document: key {key!r} appears twice", reason="malformed")
        result[key] = value
    return result


def _load_json(data: bytes, what: str) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ControlError(
            f"malformed document: the {what} is not UTF-8", reason="malformed"
        ) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_object, parse_constant=_reject_constant)
    except RecursionError:
        raise ControlError(
            f"malformed document: the {what} is nested too deeply", reason="malformed"
        ) from None
    except json.JSONDecodeError as exc:
        raise ControlError(
            f"malformed document: the {what} is not JSON ({exc})", reason="malformed"
        ) from None


def _object(value: Any, what: str, fields: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ControlError(
            f"wrong type: {what} must be a JSON object, got {_json_type(value)}",
            reason="wrong_type",
        )
    missing = [f for f in fields if f not in value]
    if missing:
        raise ControlError(
            f"missing field: {what} has no {', '.join(map(repr, missing))}", reason="missing_field"
        )
    extra = sorted(set(value) - set(fields))
    if extra:
        raise ControlError(
            f"extra field: {what} has unknown {', '.join(map(repr, extra))}", reason="extra_field"
        )
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _timestamp(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ControlError(
            f"wrong type: {what} must be a number (unix seconds), got {_json_type(value)}",
            reason="wrong_type",
        )
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise ControlError(
            f"wrong type: {what} must be finite unix seconds, got {value!r}", reason="wrong_type"
        )
    return seconds


# ----------------------------------------------------------------------- document


def _normalise_disabled(disabled: Mapping[str, Iterable[str]]) -> Mapping[str, frozenset[str]]:
    if not isinstance(disabled, Mapping):
        raise ControlError(
            f"wrong type: pools must be an object, got {_json_type(disabled)}", reason="wrong_type"
        )
    result: dict[str, frozenset[str]] = {}
    for pool, urls in disabled.items():
        if not isinstance(pool, str) or not pool:
            raise ControlError(
                f"wrong type: pool name {pool!r} must be a non-empty string", reason="wrong_type"
            )
        if isinstance(urls, str | bytes) or not isinstance(urls, Iterable):
            raise ControlError(
                f"wrong type: pool {pool!r}: disabled must be a list of base URLs",
                reason="wrong_type",
            )
        seen: set[str] = set()
        for url in urls:
            if not isinstance(url, str):
                raise ControlError(
                    f"wrong type: pool {pool!r}: disabled domain {url!r} is not a string",
                    reason="wrong_type",
                )
            try:
                normal = Domain.parse(url).url
            except ValueError as exc:
                raise ControlError(
                    f"wrong type: pool {pool!r}: {exc}", reason="wrong_type"
                ) from None
            if normal in seen:
                raise ControlError(
                    f"wrong type: pool {pool!r} disables {normal} twice", reason="wrong_type"
                )
            seen.add(normal)
        result[pool] = frozenset(seen)
    return MappingProxyType(result)


@dataclass(frozen=True, slots=True, init=False)
class ControlDocument:
    """A verified control document: which domains of which pools are disabled.

    Obtain one with ``ControlDocument.parse(raw, hmac_key=...|public_key=...)``;
    produce the signed bytes with ``ControlDocument.sign(...)``. ``disabled``
    maps a pool name to the normalised base URLs of its disabled domains.
    """

    version: int
    issued_at: float
    expires_at: float
    disabled: Mapping[str, frozenset[str]]

    def __init__(
        self,
        *,
        version: int,
        issued_at: float,
        expires_at: float,
        disabled: Mapping[str, Iterable[str]],
    ) -> None:
        if isinstance(version, bool) or not isinstance(version, int):
            raise ControlError(
                f"wrong type: version must be an integer, got {version!r}", reason="wrong_type"
            )
        if not 1 <= version <= _MAX_VERSION:
            raise ControlError(
                f"wrong type: version must be between 1 and 2**63-1, got {version}",
                reason="wrong_type",
            )
        issued = _timestamp(issued_at, "issued_at")
        expires = _timestamp(expires_at, "expires_at")
        if expires <= issued:
            raise ControlError(
                f"wrong type: expires_at ({expires:.0f}) must be after issued_at ({issued:.0f})",
                reason="wrong_type",
            )
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "issued_at", issued)
        object.__setattr__(self, "expires_at", expires)
        object.__setattr__(self, "disabled", _normalise_disabled(disabled))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ControlDocument):
            return NotImplemented
        return (self.version, self.issued_at, self.expires_at, dict(self.disabled)) == (
            other.version,
            other.issued_at,
            other.expires_at,
            dict(other.disabled),
        )

    def __hash__(self) -> int:
        return hash(
            (self.version, self.issued_at, self.expires_at, frozenset(self.disabled.items()))
        )

    def __repr__(self) -> str:
        pools = {name: sorted(urls) for name, urls in sorted(self.disabled.items())}
        return (
            f"ControlDocument(version={self.version}, issued_at={self.issued_at}, "
            f"expires_at={self.expires_at}, disabled={pools})"
        )

    # -- writing

    def payload(self) -> bytes:
        """The canonical JSON payload of this document (what ``sign`` signs)."""
        body = {
            "expires_at": _number(self.expires_at),
            "issued_at": _number(self.issued_at),
            "pools": {
                name: {"disabled": sorted(urls)} for name, urls in sorted(self.disabled.items())
            },
            "version": self.version,
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def sign(
        cls,
        *,
        version: int,
        pools: Mapping[str, Iterable[str]],
        expires_in: float,
        hmac_key: bytes | None = None,
        private_key: PrivateKeyInput | None = None,
        kid: str = "",
        now: float | None = None,
    ) -> bytes:
        """The signed envelope disabling ``pools[name]`` domains, valid ``expires_in`` seconds.

        Give exactly one of ``hmac_key`` (shared secret, 16+ bytes) or
        ``private_key`` (Ed25519: a key object, its 32 raw bytes or PEM).
        ``kid`` names the key, so readers can hold several during a rotation.
        """
        if isinstance(expires_in, bool) or not isinstance(expires_in, int | float):
            raise TypeError(f"expires_in: expected seconds, got {type(expires_in).__name__}")
        if not (math.isfinite(expires_in) and expires_in > 0):
            raise ValueError(f"expires_in must be a positive number of seconds, got {expires_in!r}")
        issued = time.time() if now is None else now
        doc = cls(version=version, issued_at=issued, expires_at=issued + expires_in, disabled=pools)
        return _sign_payload(doc.payload(), hmac_key=hmac_key, private_key=private_key, kid=kid)

    # -- reading

    @classmethod
    def parse(
        cls,
        raw: bytes,
        *,
        hmac_key: HmacKeys | None = None,
        public_key: PublicKeys | None = None,
        now: float | None = None,
        max_skew: float = 30.0,
    ) -> ControlDocument:
        """Verify the signature of ``raw``, then validate and return the document.

        ``hmac_key`` / ``public_key`` may be a single key or a mapping from key
        id (``kid``) to key. ``now`` defaults to the wall clock; ``issued_at``
        may be at most ``max_skew`` seconds ahead of it. Raises ``ControlError``.
        """
        verifier = _Verifier.build(hmac_key, public_key)
        return cls._parse(raw, verifier, time.time() if now is None else now, max_skew)

    @classmethod
    def _parse(
        cls, raw: bytes, verifier: _Verifier, now: float, max_skew: float
    ) -> ControlDocument:
        if not isinstance(raw, bytes | bytearray | memoryview):
            raise TypeError(f"raw: expected bytes, got {type(raw).__name__}")
        raw = bytes(raw)
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise ControlError(
                f"document is {len(raw)} bytes, more than the {MAX_DOCUMENT_BYTES} allowed",
                reason="too_large",
            )
        envelope = _object(_load_json(raw, "envelope"), "the envelope", _ENVELOPE_FIELDS)
        for name in _ENVELOPE_FIELDS:
            if not isinstance(envelope[name], str):
                raise ControlError(
                    f"wrong type: envelope field {name!r} must be a string, got {_json_type(envelope[name])}",
                    reason="wrong_type",
                )
        alg, kid, payload_text, sig_text = (envelope[name] for name in _ENVELOPE_FIELDS)
        if raw != _encode_envelope(alg, kid, payload_text, sig_text):
            raise ControlError(
                "malformed document: the envelope is not in the canonical compact form "
                "(serve the exact bytes ControlDocument.sign produced)",
                reason="malformed",
            )
        if alg not in _SIG_SIZES:
            raise ControlError(
                f"unknown algorithm {alg!r}: expected {ALG_ED25519!r} or {ALG_HMAC!r}",
                reason="unknown_alg",
            )
        sig = _b64decode(sig_text, "sig")
        if len(sig) != _SIG_SIZES[alg]:
            raise ControlError(
                f"bad signature: an {alg} signature has {_SIG_SIZES[alg]} bytes, got {len(sig)}",
                reason="bad_signature",
            )
        # The signature covers the exact payload text: verify before reading it.
        verifier.verify(alg, kid, _signing_input(alg, kid, payload_text), sig)
        payload = _object(
            _load_json(_b64decode(payload_text, "payload"), "payload"),
            "the payload",
            _PAYLOAD_FIELDS,
        )
        pools = payload["pools"]
        if not isinstance(pools, dict):
            raise ControlError(
                f"wrong type: pools must be an object, got {_json_type(pools)}", reason="wrong_type"
            )
        disabled: dict[str, list[str]] = {}
        for name, entry in pools.items():
            entry = _object(entry, f"pool {name!r}", _POOL_FIELDS)
            if not isinstance(entry["disabled"], list):
                raise ControlError(
                    f"wrong type: pool {name!r}: disabled must be an array, got {_json_type(entry['disabled'])}",
                    reason="wrong_type",
                )
            disabled[name] = entry["disabled"]
        doc = cls(
            version=payload["version"],
            issued_at=payload["issued_at"],
            expires_at=payload["expires_at"],
            disabled=disabled,
        )
        if doc.issued_at > now + max_skew:
            raise ControlError(
                f"document version {doc.version} is issued {doc.issued_at - now:.0f} s in the future "
                f"(allowed clock skew: {max_skew:g} s)",
                reason="future",
            )
        if doc.expires_at <= now:
            raise ControlError(
                f"document version {doc.version} expired {now - doc.expires_at:.0f} s ago",
                reason="expired",
            )
        return doc

    def check(
        self, pools: Iterable[Pool] | Mapping[str, Pool], current_version: int | None
    ) -> None:
        """Raise ``ControlError`` unless this document may be applied to ``pools`` now.

        ``current_version`` is the version in force (``None``: none yet); this
        document's version must be greater. Every pool and domain it names must
        exist locally, and at least one domain of each pool must stay enabled.
        """
        if current_version is not None and self.version <= current_version:
            raise ControlError(
                f"document version {self.version} is not newer than version {current_version} in force",
                reason="stale_version",
            )
        listed: Iterable[Pool] = pools.values() if isinstance(pools, Mapping) else pools
        by_name = {p.name: p for p in listed}
        for name, urls in sorted(self.disabled.items()):
            pool = by_name.get(name)
            if pool is None:
                known = ", ".join(sorted(by_name)) or "none"
                raise ControlError(
                    f"unknown pool {name!r} (local pools: {known})", reason="unknown_pool"
                )
            local = {d.url for d in pool.domains}
            unknown = sorted(urls - local)
            if unknown:
                raise ControlError(
                    f"pool {name!r} has no domain {', '.join(unknown)} (its domains: {', '.join(d.url for d in pool.domains)})",
                    reason="unknown_domain",
                )
            if urls >= local:
                raise ControlError(
                    f"document disables every domain of pool {name!r}; at least one must stay enabled",
                    reason="all_disabled",
                )

    def is_disabled(self, pool: str, domain: str) -> bool:
        """True if this document disables ``domain`` (any spelling of the base URL) in ``pool``."""
        return Domain.parse(domain).url in self.disabled.get(pool, frozenset())


def _number(value: float) -> int | float:
    return int(value) if value.is_integer() else value


# ------------------------------------------------------------------------- poller


class ControlTarget(Protocol):
    """What a poller applies documents to (``FailoverTransport`` and its async twin)."""

    def apply_control(self, doc: ControlDocument) -> None: ...


def poll_delay(
    interval: float, consecutive_failures: int, max_backoff: float, jitter: float
) -> float:
    """Seconds until the next poll: ``interval``, doubled per consecutive failure, capped.

    ``jitter`` in [0, 1) spreads clients by up to a tenth of the delay, so many
    clients that failed together do not retry in lockstep.
    """
    cap = max(max_backoff, interval)
    delay = min(interval * 2.0 ** min(consecutive_failures, 32), cap)
    return delay * (1.0 - 0.1 * jitter)


def _redact(url: str) -> str:
    """``url`` without credentials, query or fragment, for log lines."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return "<invalid url>"
    return str(parsed.copy_with(userinfo=b"", query=None, fragment=None))


class ControlPoller:
    """Fetch a signed control document from ``url`` and apply new ones to ``target``.

    Uses its own small httpx client (never the failover transport). A document
    is applied when it verifies, is newer than the last one applied and the
    target accepts it. Anything else (network error, HTTP status other than
    200, bad signature, stale, expired, unknown pool ...) keeps the last good
    state, is logged at WARNING on logger ``pytest_failover`` and counted in
    ``failures`` / ``consecutive_failures``; polling then backs off (doubling
    ``interval`` up to ``max_backoff``).

    Sync: ``poll_once()`` or ``start()``/``stop()`` (a daemon thread; also a
    context manager). Async: ``await poll_once_async()`` or ``await run()``
    (until cancelled), then ``await aclose()``.
    """

    def __init__(
        self,
        url: str,
        target: ControlTarget,
        *,
        hmac_key: HmacKeys | None = None,
        public_key: PublicKeys | None = None,
        interval: float = 30.0,
        max_backoff: float = 300.0,
        timeout: float = 5.0,
        max_skew: float = 30.0,
        verify: ssl.SSLContext | str | bool = True,
        clock: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
    ) -> None:
        url_obj = httpx.URL(url)
        if url_obj.scheme not in ("http", "https"):
            raise ValueError(f"control url {url!r}: scheme must be http or https")
        if not callable(getattr(target, "apply_control", None)):
            raise TypeError("target must have an apply_control(doc) method")
        for name, value in (
            ("interval", interval),
            ("max_backoff", max_backoff),
            ("timeout", timeout),
        ):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if not (math.isfinite(max_skew) and max_skew >= 0):
            raise ValueError(f"max_skew must be a non-negative number of seconds, got {max_skew!r}")
        self.url = url
        self.target = target
        self.interval = float(interval)
        self.max_backoff = float(max_backoff)
        self.timeout = float(timeout)
        self.max_skew = float(max_skew)
        self._verifier = _Verifier.build(hmac_key, public_key)
        self._verify_tls = verify
        self._clock = clock
        self._rng = rng
        self._safe_url = _redact(url)
        self._lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._async_client: httpx.AsyncClient | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        #: the last document applied (``None`` until one is)
        self.document: ControlDocument | None = None
        #: polls that failed, in total and in a row
        self.failures = 0
        self.consecutive_failures = 0
        #: why the last poll failed (``None`` after a good poll)
        self.last_error: str | None = None

    @property
    def version(self) -> int | None:
        """The version of the last document applied."""
        return None if self.document is None else self.document.version

    def next_delay(self) -> float:
        """Seconds to wait before the next poll, given the failures so far."""
        return poll_delay(self.interval, self.consecutive_failures, self.max_backoff, self._rng())

    # -- the shared, I/O-free half: what to do with a fetched body

    def _accept(self, status: int | None, body: bytes | None, error: str | None) -> bool:
        with self._lock:
            try:
                if error is not None:
                    raise _PollFailure(error)
                if status != 200 or body is None:
                    raise _PollFailure(f"HTTP {status}")
                doc = ControlDocument._parse(body, self._verifier, self._clock(), self.max_skew)
                current = self.document
                if (
                    current is not None
                    and doc.version == current.version
                    and doc.disabled == current.disabled
                ):
                    self._succeeded()
                    return False
                if current is not None and doc.version <= current.version:
                    raise ControlError(
                        f"document version {doc.version} is not newer than version {current.version} in force",
                        reason="stale_version",
                    )
                self.target.apply_control(doc)
            except (ControlError, _PollFailure) as exc:
                self._failed(str(exc))
                return False
            except Exception as exc:  # a target bug must not kill the poller
                self._failed(f"{type(exc).__qualname__}: {exc}")
                return False
            self.document = doc
            self._succeeded()
            logger.info(
                "control document version %d from %s applied: %s",
                doc.version,
                self._safe_url,
                {name: sorted(urls) for name, urls in sorted(doc.disabled.items())}
                or "nothing disabled",
            )
            return True

    def _succeeded(self) -> None:
        self.consecutive_failures = 0
        self.last_error = None

    def _failed(self, why: str) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = why
        kept = "none" if self.document is None else str(self.document.version)
        logger.warning(
            "control document from %s rejected: %s; keeping version %s (%d failure(s) in a row)",
            self._safe_url,
            why,
            kept,
            self.consecutive_failures,
        )

    # -- sync

    def poll_once(self) -> bool:
        """Fetch and apply once; True if a new document was applied. Never raises on bad input."""
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(
                    timeout=self.timeout, verify=self._verify_tls, follow_redirects=False
                )
            client = self._client
        try:
            with client.stream("GET", self.url, headers={"Accept": "application/json"}) as response:
                body = _read_limited(response.iter_bytes())
                status = response.status_code
        except _PollFailure as exc:
            return self._accept(None, None, str(exc))
        except httpx.HTTPError as exc:
            return self._accept(None, None, f"fetch failed: {type(exc).__name__}: {exc}")
        return self._accept(status, body, None)

    def start(self) -> None:
        """Poll in a daemon thread now and then every ``next_delay()`` seconds until ``stop()``."""
        if self._thread is not None:
            raise RuntimeError("this ControlPoller is already started")
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._loop, name="pytest-failover-control", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.poll_once()
            self._stopping.wait(self.next_delay())

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread (waiting for a poll in flight, at most ``timeout`` + one HTTP timeout)."""
        thread, self._thread = self._thread, None
        self._stopping.set()
        if thread is not None:
            thread.join(self.timeout * 2 + 1 if timeout is None else timeout)
        if thread is None or not thread.is_alive():
            with self._client_lock:
                client, self._client = self._client, None
            if client is not None:
                client.close()

    def __enter__(self) -> ControlPoller:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- async

    async def poll_once_async(self) -> bool:
        """Async twin of ``poll_once``."""
        if self._async_client is None:
            self._async_client = httpx.AsyncClient(
                timeout=self.timeout, verify=self._verify_tls, follow_redirects=False
            )
        try:
            async with self._async_client.stream(
                "GET", self.url, headers={"Accept": "application/json"}
            ) as response:
                body = await _aread_limited(response.aiter_bytes())
                status = response.status_code
        except _PollFailure as exc:
            return self._accept(None, None, str(exc))
        except httpx.HTTPError as exc:
            return self._accept(None, None, f"fetch failed: {type(exc).__name__}: {exc}")
        return self._accept(status, body, None)

    async def run(self) -> None:
        """Poll now and then every ``next_delay()`` seconds until cancelled; closes its client."""
        try:
            while True:
                await self.poll_once_async()
                await asyncio.sleep(self.next_delay())
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the async HTTP client (a later poll opens a new one)."""
        client, self._async_client = self._async_client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> ControlPoller:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _PollFailure(Exception):
    """A poll failed before there was a document to judge."""


def _read_limited(chunks: Iterable[bytes]) -> bytes:
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > MAX_DOCUMENT_BYTES:
            raise _PollFailure(f"response is larger than {MAX_DOCUMENT_BYTES} bytes")
    return bytes(body)


async def _aread_limited(chunks: Any) -> bytes:
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > MAX_DOCUMENT_BYTES:
            raise _PollFailure(f"response is larger than {MAX_DOCUMENT_BYTES} bytes")
    return bytes(body)
