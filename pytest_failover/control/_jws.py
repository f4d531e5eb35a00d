"""Signing and verifying control documents: JWS (RFC 7515) compact serialization.

Rules and theory of operation
-----------------------------
On the wire a control document is a JWT (RFC 7519): three unpadded base64url parts
joined by dots, ``header.payload.signature``, and nothing else (no whitespace)::

    eyJhbGciOiJFZERTQSIsImtpZCI6IjIwMjYtMTEiLCJ0eXAiOiJmYWlsb3Zlci1jb250cm9sK2p3dCJ9.eyJleHAiOj...

The protected header holds exactly ``alg``, ``typ`` and, if the key has one, ``kid``::

    {"alg": "EdDSA", "kid": "2026-11", "typ": "failover-control+jwt"}

``alg`` is ``EdDSA`` (RFC 8037, an Ed25519 key; ``Ed25519``, its RFC 9864 name, is
accepted too) or ``HS256`` (a shared secret). ``typ`` is explicit typing (RFC 8725,
section 3.11), so that no other JWT made with the same key passes for a control
document. The payload is the claims set of ``_document``.

Verification follows the allow-list rule that defeats algorithm confusion: the
*key* decides the algorithm. Each configured key names the ``alg`` values it
verifies (``ControlKey.algorithms``); a document whose header asks for anything
else finds no key, whatever its header says, and ``none`` never verifies. The
signature itself is checked by ``joserfc``. Before that, the text is taken apart
here, strictly (canonical base64url, strict JSON, known header members only), so a
document that two readers might read differently is refused; after it, the payload
is read and judged by the document rules. Everything refused is a ``ControlError``;
the reasons, in the order they are checked, are in ``pytest_failover.control``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._exceptions import ControlError
from ._base64 import b64decode
from ._document import ControlDocument
from ._json import JSONError, json_type, loads, short
from ._keys import ControlKey, verifying_keys

if TYPE_CHECKING:
    from joserfc.jws import JWSRegistry

__all__ = ["CONTENT_TYPE", "MAX_DOCUMENT_BYTES", "TYP", "sign_document", "verify_document"]

MAX_DOCUMENT_BYTES = 64 * 1024
"""Documents (and HTTP bodies the poller reads) larger than this are refused."""

TYP = "failover-control+jwt"
"""The ``typ`` header of every control document."""

CONTENT_TYPE = "application/jose"
"""The media type of a served document: RFC 7515 registers it for the JWS compact
serialization (the body is not JSON, so ``application/json`` would be wrong)."""

_HEADER_FIELDS = frozenset({"alg", "kid", "typ"})
_KNOWN_ALGS = ("EdDSA", "Ed25519", "HS256")


@functools.cache
def _registry(alg: str) -> JWSRegistry:
    """A ``joserfc`` registry that allows exactly ``alg``.

    joserfc warns on every use of ``EdDSA`` since RFC 9864 named a successor; the
    name is still the one every JOSE library verifies, so this registry allows it
    without the warning (and allows nothing else).
    """
    from joserfc.errors import UnsupportedAlgorithmError
    from joserfc.jwa import JWSAlgModel
    from joserfc.jws import JWSRegistry

    class _AllowOne(JWSRegistry):
        # joserfc's own bound on a payload, made this package's: 8,000 bytes before joserfc
        # 1.7 (a valid document of 10 KB was refused as malformed), 128,000 since
        max_payload_length = MAX_DOCUMENT_BYTES

        def get_alg(self, name: str) -> JWSAlgModel:
            if name != alg or name not in self.algorithms:
                raise UnsupportedAlgorithmError(f"algorithm {name!r} is not allowed here")
            return self.algorithms[name]

    return _AllowOne(algorithms=[alg])


def sign_document(doc: ControlDocument, key: ControlKey) -> bytes:
    """The JWS compact serialization of ``doc`` signed with ``key`` (ASCII bytes)."""
    from joserfc import jws

    if not isinstance(doc, ControlDocument):
        raise TypeError(f"doc: expected a ControlDocument, got {type(doc).__name__}")
    if not isinstance(key, ControlKey):
        raise TypeError(f"key: expected a ControlKey (see load_key), got {type(key).__name__}")
    if not key.can_sign:
        raise ValueError(f"{key.describe()} cannot sign: load the private key file")
    header: dict[str, Any] = {"alg": key.alg, "typ": TYP}
    if key.kid is not None:
        header["kid"] = key.kid
    token = jws.serialize_compact(
        header, doc.payload(), key.jose_key(private=True), registry=_registry(key.alg)
    ).encode("ascii")
    if len(token) > MAX_DOCUMENT_BYTES:
        raise ValueError(
            f"the signed document is {len(token)} bytes; readers refuse more than {MAX_DOCUMENT_BYTES}"
        )
    return token


def _malformed(message: str) -> ControlError:
    return ControlError(f"malformed document: {message}", reason="malformed")


def _part(text: bytes, name: str) -> bytes:
    try:
        return b64decode(text)
    except ValueError as exc:
        raise _malformed(f"the {name} part is {exc}") from None


def _header(raw: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """The decoded protected header and the three parts of the compact text."""
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ControlError(
            f"document is {len(raw)} bytes, more than the {MAX_DOCUMENT_BYTES} allowed",
            reason="too_large",
        )
    if not raw:
        raise _malformed("it is empty")
    if raw != raw.strip():
        raise _malformed(
            "whitespace around the JWS (a trailing newline?): serve the exact bytes that were signed"
        )
    parts = raw.split(b".")
    if len(parts) != 3:
        looks = " (it looks like JSON: control documents are JWS compact, not JSON)" if raw[:1] == b"{" else ""
        raise _malformed(
            f"a JWS compact serialization is three base64url parts joined by '.', "
            f"got {len(parts)} part(s){looks}"
        )
    try:
        header = loads(_part(parts[0], "header"))
    except JSONError as exc:
        raise _malformed(f"the header is {exc}") from None
    if not isinstance(header, dict):
        raise ControlError(
            f"wrong type: the header must be a JSON object, got {json_type(header)}",
            reason="wrong_type",
        )
    for name in ("alg", "typ"):
        if name not in header:
            raise ControlError(f"missing field: the header has no {name!r}", reason="missing_field")
    extra = sorted(set(header) - _HEADER_FIELDS)
    if extra:
        raise ControlError(
            f"extra field: the header has {', '.join(map(repr, extra))}; only alg, kid and typ are allowed",
            reason="extra_field",
        )
    for name in sorted(header):
        if not isinstance(header[name], str):
            raise ControlError(
                f"wrong type: header {name!r} must be a string, got {json_type(header[name])}",
                reason="wrong_type",
            )
    if len(header.get("kid", "")) > 128:
        raise ControlError("out of range: header 'kid' is longer than 128 characters", reason="out_of_range")
    return header, parts


def verify_document(
    raw: bytes,
    keys: ControlKey | Iterable[ControlKey],
    *,
    now: float | None = None,
    max_skew: float = 30.0,
) -> ControlDocument:
    """Verify the JWS ``raw`` with one of ``keys``, then return the document it carries.

    Raises ``ControlError`` (its ``reason`` says which rule) for anything that is not
    a valid, correctly signed, currently valid control document. ``now`` defaults to
    the wall clock; ``iat`` may be up to ``max_skew`` seconds ahead of it.
    """
    from joserfc import jws
    from joserfc.errors import BadSignatureError, JoseError

    accepted = verifying_keys(keys, None)
    if isinstance(max_skew, bool) or not (isinstance(max_skew, int | float) and math.isfinite(max_skew) and max_skew >= 0):
        raise ValueError(f"max_skew must be a non-negative number of seconds, got {max_skew!r}")
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise TypeError(f"raw: expected bytes, got {type(raw).__name__}")
    raw = bytes(raw)
    header, parts = _header(raw)
    alg, kid = header["alg"], header.get("kid")
    if alg not in _KNOWN_ALGS:
        raise ControlError(
            f"unknown algorithm {short(alg)}: control documents are signed with EdDSA or HS256",
            reason="unknown_alg",
        )
    typ = header["typ"].lower()
    if typ.removeprefix("application/") != TYP:
        raise ControlError(
            f"wrong typ {short(header['typ'])}: this JWS is not a control document (typ must be {TYP!r})",
            reason="wrong_typ",
        )
    candidates = [
        k
        for k in accepted
        if alg in k.algorithms and k.can_verify and (kid is None or k.kid is None or k.kid == kid)
    ]
    if not candidates:
        named = "" if kid is None else f" with kid {kid!r}"
        raise ControlError(
            f"no configured key verifies a document signed with {alg}{named} "
            f"(configured: {', '.join(k.describe() for k in accepted)})",
            reason="no_key",
        )
    _part(parts[2], "signature")
    payload_bytes = _part(parts[1], "payload")
    for key in candidates:
        try:
            jws.deserialize_compact(raw, key.jose_key(private=False), registry=_registry(alg))
        except BadSignatureError:
            continue
        except (JoseError, ValueError, TypeError) as exc:
            raise _malformed(f"{type(exc).__name__}: {exc}") from None
        break
    else:
        raise ControlError(
            f"bad signature: the document was not signed by {' or '.join(k.describe() for k in candidates)}",
            reason="bad_signature",
        )
    # Only now, with the signature checked, is the payload read.
    try:
        claims = loads(payload_bytes)
    except JSONError as exc:
        raise _malformed(f"the payload is {exc}") from None
    doc = ControlDocument.from_claims(claims)
    doc.check_time(time.time() if now is None else now, max_skew)
    return doc
