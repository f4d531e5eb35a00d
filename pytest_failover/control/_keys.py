"""Keys of control documents, and the one key file format both sides read.

The key file format
-------------------
A key file holds exactly one JWK (RFC 7517): a UTF-8 JSON object, with any JSON
whitespace around it. Two key types are accepted, each bound to one algorithm:

================================== ========= ==========================================
JWK                                signs as  members
================================== ========= ==========================================
``"kty": "OKP", "crv": "Ed25519"`` ``EdDSA`` ``x`` (public key, 32 bytes), ``d`` (private
                                             key, 32 bytes; only in the signer's file)
``"kty": "oct"``                   ``HS256`` ``k`` (the shared secret, 32 bytes or more)
================================== ========= ==========================================

Binary members are unpadded base64url. ``kid`` (1 to 128 printable characters) names
the key; ``alg`` (``EdDSA``/``Ed25519`` or ``HS256``), ``use`` (``sig``) and
``key_ops`` (``sign``, ``verify``) are optional and checked when present; other
members are ignored, as RFC 7517 asks. Anything else (PEM, a raw secret, a JWK Set,
another key type or curve) is refused with a message that says what was found.

The signer (the agent) and every reader call the same ``load_key``, so the two sides
can never disagree about a file's key: the secret is the decoded ``k``, never the
file's bytes. ``failover-agent control keygen`` writes such files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ._base64 import b64decode, b64encode
from ._json import JSONError, json_type, loads

if TYPE_CHECKING:
    from joserfc.jwk import OctKey, OKPKey

__all__ = [
    "ALGORITHMS",
    "MIN_SECRET_BYTES",
    "ControlKey",
    "generate_key",
    "load_key",
    "parse_key",
    "save_key",
]

Algorithm = Literal["EdDSA", "HS256"]

ALGORITHMS: tuple[Algorithm, ...] = ("EdDSA", "HS256")
"""The algorithms a control key signs with (``keygen --alg``)."""

MIN_SECRET_BYTES = 32
"""An HS256 secret must be at least as long as the hash (RFC 7518, section 3.2)."""

MAX_KEY_FILE_BYTES = 16 * 1024
_KID = re.compile(r"[\x21-\x7e]([\x20-\x7e]{0,126}[\x21-\x7e])?")
_OPS = frozenset({"sign", "verify"})
_VERIFY_ALGS: dict[Algorithm, tuple[str, ...]] = {
    # RFC 9864 names EdDSA over Ed25519 "Ed25519"; both mean the same signature.
    "EdDSA": ("EdDSA", "Ed25519"),
    "HS256": ("HS256",),
}
_INSTALL_HINT = "pip install 'pytest-failover[control]'"


def _ed25519() -> Any:
    """The ``cryptography`` Ed25519 module, imported on first use."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise ImportError(f"Ed25519 control keys need the 'cryptography' package: {_INSTALL_HINT}") from exc
    return ed25519


def _check_kid(kid: object, where: str) -> str | None:
    if kid is None:
        return None
    if not isinstance(kid, str) or _KID.fullmatch(kid) is None:
        raise ValueError(
            f"{where}: kid must be 1 to 128 printable ASCII characters without surrounding spaces, got {kid!r}"
        )
    return kid


@dataclass(frozen=True, slots=True, repr=False)
class ControlKey:
    """One key for control documents: Ed25519 (``EdDSA``) or an HS256 secret.

    Build one with ``load_key(path)``, ``parse_key(text)``, ``generate_key(alg)`` or
    ``ControlKey.from_secret(secret)``. ``public()`` is what readers of EdDSA
    documents need; a shared HS256 secret has no public half. The repr never
    shows secret material.
    """

    alg: Algorithm
    kid: str | None
    public_bytes: bytes  # x of an Ed25519 key; empty for HS256
    _secret: bytes | None = field(compare=True)  # d of an Ed25519 key, k of an HS256 key
    key_ops: frozenset[str] | None = None

    # -- construction

    @classmethod
    def from_secret(cls, secret: bytes, *, kid: str | None = None) -> ControlKey:
        """An HS256 key from the raw secret (32 bytes or more)."""
        return cls("HS256", _check_kid(kid, "HS256 key"), b"", _check_secret(secret, "secret"))

    @classmethod
    def from_ed25519(cls, key: Any, *, kid: str | None = None) -> ControlKey:
        """An EdDSA key from a ``cryptography`` Ed25519 private or public key object."""
        ed25519 = _ed25519()
        kid = _check_kid(kid, "Ed25519 key")
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return cls("EdDSA", kid, key.public_key().public_bytes_raw(), key.private_bytes_raw())
        if isinstance(key, ed25519.Ed25519PublicKey):
            return cls("EdDSA", kid, key.public_bytes_raw(), None)
        raise TypeError(
            f"expected an Ed25519PrivateKey or Ed25519PublicKey, got {type(key).__name__}"
        )

    # -- what it can do

    @property
    def can_sign(self) -> bool:
        """True if this key holds signing material (an Ed25519 private key, or any secret)."""
        return self._secret is not None and (self.key_ops is None or "sign" in self.key_ops)

    @property
    def can_verify(self) -> bool:
        """True unless ``key_ops`` leaves out ``verify``."""
        return self.key_ops is None or "verify" in self.key_ops

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The JWS ``alg`` values a document signed with this key may carry: the allow-list."""
        return _VERIFY_ALGS[self.alg]

    def public(self) -> ControlKey:
        """This key without its private half (EdDSA only): what readers are given."""
        if self.alg == "HS256":
            raise ValueError("an HS256 key is a shared secret: readers need the secret itself")
        ops = None if self.key_ops is None else frozenset({"verify"})
        return ControlKey("EdDSA", self.kid, self.public_bytes, None, ops)

    def with_kid(self, kid: str | None) -> ControlKey:
        """The same key material under another ``kid`` (``None``: none)."""
        return ControlKey(self.alg, _check_kid(kid, "key"), self.public_bytes, self._secret, self.key_ops)

    # -- export

    def to_jwk(self, *, private: bool = False) -> dict[str, Any]:
        """The JWK of this key; with ``private``, including the private member (``d``/``k``)."""
        if self.alg == "HS256":
            if not private:
                raise ValueError("an HS256 key is a shared secret: it has no public JWK")
            assert self._secret is not None
            jwk: dict[str, Any] = {"kty": "oct", "k": b64encode(self._secret), "alg": "HS256"}
        else:
            jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64encode(self.public_bytes), "alg": "EdDSA"}
            if private:
                if self._secret is None:
                    raise ValueError("this Ed25519 key is a public key: it has no private JWK")
                jwk["d"] = b64encode(self._secret)
        jwk["use"] = "sig"
        if self.kid is not None:
            jwk["kid"] = self.kid
        if self.key_ops is not None:
            jwk["key_ops"] = sorted(self.key_ops)
        return jwk

    def to_json(self, *, private: bool = False) -> str:
        """``to_jwk`` as the text of a key file (indented JSON and a final newline)."""
        return json.dumps(self.to_jwk(private=private), indent=2, sort_keys=True) + "\n"

    def thumbprint(self) -> str:
        """The RFC 7638 SHA-256 thumbprint of the key (of its public half for Ed25519)."""
        if self.alg == "HS256":
            assert self._secret is not None
            members: dict[str, str] = {"k": b64encode(self._secret), "kty": "oct"}
        else:
            members = {"crv": "Ed25519", "kty": "OKP", "x": b64encode(self.public_bytes)}
        text = json.dumps(members, separators=(",", ":"), sort_keys=True)
        return b64encode(hashlib.sha256(text.encode("ascii")).digest())

    def jose_key(self, *, private: bool) -> OKPKey | OctKey:
        """The ``joserfc`` key for signing (``private``) or verifying."""
        try:
            from joserfc.jwk import OctKey, OKPKey
        except ImportError as exc:
            raise ImportError(f"signed control documents need the 'joserfc' package: {_INSTALL_HINT}") from exc
        if self.alg == "HS256":
            assert self._secret is not None
            return OctKey.import_key({"kty": "oct", "k": b64encode(self._secret)})
        jwk: dict[str, str | list[str]] = {"kty": "OKP", "crv": "Ed25519", "x": b64encode(self.public_bytes)}
        if private:
            if self._secret is None:
                raise ValueError("an Ed25519 public key cannot sign: load the private key file")
            jwk["d"] = b64encode(self._secret)
        return OKPKey.import_key(jwk)

    def jws_registry(self) -> Any:
        """The ``joserfc`` JWS registry that allows exactly this key's algorithm (and no
        other), for signing or verifying compact JWS of one's own ``typ`` with this key."""
        from ._jws import _registry  # the one home of that rule

        return _registry(self.alg)

    def describe(self) -> str:
        """``EdDSA key 'kid'`` and whether it is private: for messages, never secret."""
        kind = "public" if self._secret is None else "private" if self.alg == "EdDSA" else "secret"
        named = "without kid" if self.kid is None else f"kid {self.kid!r}"
        return f"{self.alg} {kind} key {named}"

    def __repr__(self) -> str:
        return f"<ControlKey {self.describe()}>"


# ---------------------------------------------------------------- reading JWKs


def _check_secret(secret: object, where: str) -> bytes:
    if not isinstance(secret, bytes | bytearray):
        raise TypeError(f"{where}: expected bytes, got {type(secret).__name__}")
    secret = bytes(secret)
    text = secret.rstrip(b"\r\n")
    if (
        secret.startswith(b"-----BEGIN")
        or (secret.lstrip().startswith(b"{") and b'"kty"' in secret)
        or (text != secret and text.isascii() and text.decode("ascii").isprintable())
    ):
        raise ValueError(
            f"{where}: this looks like the contents of a file (a JWK, PEM, or a line of text "
            "with its newline), not a raw secret: read key files with load_key(path)"
        )
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"{where}: an HS256 secret needs at least {MIN_SECRET_BYTES} bytes, got {len(secret)} "
            "(make one with `failover-agent control keygen --alg HS256`)"
        )
    return secret


def _member(jwk: Mapping[str, Any], name: str, where: str, *, required: bool) -> str | None:
    value = jwk.get(name)
    if value is None:
        if required or name in jwk:
            raise ValueError(f"{where}: the JWK needs a string member {name!r}")
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}: JWK member {name!r} must be a string, got {json_type(value)}")
    return value


def _binary(jwk: Mapping[str, Any], name: str, where: str, *, required: bool) -> bytes | None:
    text = _member(jwk, name, where, required=required)
    if text is None:
        return None
    try:
        return b64decode(text)
    except ValueError as exc:
        raise ValueError(f"{where}: JWK member {name!r}: {exc}") from None


def _from_jwk(jwk: Mapping[str, Any], where: str) -> ControlKey:
    kty = _member(jwk, "kty", where, required=True)
    kid = _check_kid(jwk.get("kid"), where)
    alg = _member(jwk, "alg", where, required=False)
    use = _member(jwk, "use", where, required=False)
    if use not in (None, "sig"):
        raise ValueError(f"{where}: JWK 'use' is {use!r}; a control key signs ('sig')")
    ops: frozenset[str] | None = None
    if "key_ops" in jwk:
        raw_ops = jwk["key_ops"]
        if not isinstance(raw_ops, list) or not all(isinstance(o, str) for o in raw_ops):
            raise ValueError(f"{where}: JWK 'key_ops' must be an array of strings")
        ops = frozenset(raw_ops)
        if not ops or ops - _OPS:
            raise ValueError(
                f"{where}: JWK 'key_ops' {sorted(ops)} must hold 'sign' and/or 'verify' only"
            )
    if kty == "OKP":
        crv = _member(jwk, "crv", where, required=True)
        if crv != "Ed25519":
            raise ValueError(f"{where}: an OKP control key must be on curve Ed25519, got {crv!r}")
        if alg not in (None, "EdDSA", "Ed25519"):
            raise ValueError(f"{where}: an Ed25519 key signs as EdDSA, but its JWK says alg {alg!r}")
        x = _binary(jwk, "x", where, required=True)
        d = _binary(jwk, "d", where, required=False)
        assert x is not None
        if len(x) != 32:
            raise ValueError(f"{where}: JWK 'x' of an Ed25519 key has 32 bytes, got {len(x)}")
        if d is not None:
            if len(d) != 32:
                raise ValueError(f"{where}: JWK 'd' of an Ed25519 key has 32 bytes, got {len(d)}")
            derived = _ed25519().Ed25519PrivateKey.from_private_bytes(d).public_key().public_bytes_raw()
            if derived != x:
                raise ValueError(f"{where}: JWK 'x' is not the public key of its 'd'")
        return ControlKey("EdDSA", kid, x, d, ops)
    if kty == "oct":
        if alg not in (None, "HS256"):
            raise ValueError(f"{where}: an oct control key signs as HS256, but its JWK says alg {alg!r}")
        k = _binary(jwk, "k", where, required=True)
        assert k is not None
        if len(k) < MIN_SECRET_BYTES:
            raise ValueError(
                f"{where}: an HS256 secret needs at least {MIN_SECRET_BYTES} bytes, JWK 'k' has {len(k)}"
            )
        return ControlKey("HS256", kid, b"", k, ops)
    raise ValueError(
        f"{where}: JWK kty {kty!r} is not a control key: use OKP (Ed25519, EdDSA) or oct (HS256)"
    )


def parse_key(data: bytes | str | Mapping[str, Any], *, source: str = "key") -> ControlKey:
    """The key of a key file's text (or an already decoded JWK); ``ValueError`` says what is wrong.

    ``source`` names the input in messages (``load_key`` passes the path).
    """
    if isinstance(data, Mapping):
        return _from_jwk(data, source)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    hint = "the key file format is one JWK (RFC 7517) JSON object; make one with `failover-agent control keygen`"
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise ValueError(f"{source}: {len(raw)} bytes is too large for a key file; {hint}")
    if raw.lstrip().startswith(b"-----BEGIN"):
        raise ValueError(f"{source}: this is a PEM file, not a JWK; {hint}")
    try:
        value = loads(raw)
    except JSONError as exc:
        raise ValueError(f"{source}: not a JWK ({exc}): a raw secret is not accepted; {hint}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{source}: not a JWK: the file holds {json_type(value)}; {hint}")
    if "keys" in value and "kty" not in value:
        raise ValueError(f"{source}: this is a JWK Set; a key file holds exactly one JWK")
    return _from_jwk(value, source)


def load_key(path: str | os.PathLike[str]) -> ControlKey:
    """The key in the key file at ``path`` (the format is in this module's docstring)."""
    path = Path(path)
    with path.open("rb") as fh:
        raw = fh.read(MAX_KEY_FILE_BYTES + 1)
    return parse_key(raw, source=str(path))


def generate_key(alg: str = "EdDSA", *, kid: str | None = None) -> ControlKey:
    """A new random key for ``alg`` (``EdDSA`` or ``HS256``).

    ``kid`` defaults to the first 16 characters of the key's RFC 7638 thumbprint.
    """
    if alg == "EdDSA":
        key = ControlKey.from_ed25519(_ed25519().Ed25519PrivateKey.generate())
    elif alg == "HS256":
        key = ControlKey.from_secret(secrets.token_bytes(MIN_SECRET_BYTES))
    else:
        raise ValueError(f"alg must be one of {', '.join(ALGORITHMS)}, got {alg!r}")
    return key.with_kid(key.thumbprint()[:16] if kid is None else kid)


def save_key(
    path: str | os.PathLike[str], key: ControlKey, *, private: bool, overwrite: bool = False
) -> Path:
    """Write ``key`` as a key file; private files are created readable by their owner only."""
    path = Path(path)
    text = key.to_json(private=private)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    fd = os.open(path, flags, 0o600 if private else 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    if private:
        os.chmod(path, 0o600)
    return path


# ---------------------------------------------------------------- what callers pass


def signing_key(key: object, hmac_key: bytes | None) -> ControlKey:
    """The one key to sign with, from ``key=`` (a ``ControlKey``) or ``hmac_key=`` (raw bytes)."""
    if (key is None) == (hmac_key is None):
        raise ValueError("sign with exactly one of key= (a ControlKey) or hmac_key= (raw bytes)")
    if hmac_key is not None:
        return ControlKey.from_secret(hmac_key)
    if not isinstance(key, ControlKey):
        raise TypeError(f"key: expected a ControlKey (see load_key), got {type(key).__name__}")
    if not key.can_sign:
        raise ValueError(f"{key.describe()} cannot sign: load the private key file")
    return key


def verifying_keys(key: object, hmac_key: bytes | None) -> tuple[ControlKey, ...]:
    """The keys a reader accepts, from ``key=`` (one or several) and/or ``hmac_key=``."""
    keys: list[ControlKey] = []
    if isinstance(key, ControlKey):
        keys.append(key)
    elif isinstance(key, Iterable) and not isinstance(key, str | bytes | Mapping):
        for k in key:
            if not isinstance(k, ControlKey):
                raise TypeError(f"key: expected ControlKey items, got {type(k).__name__}")
            keys.append(k)
    elif key is not None:
        raise TypeError(
            f"key: expected a ControlKey or a sequence of them (see load_key), got {type(key).__name__}"
        )
    if hmac_key is not None:
        keys.append(ControlKey.from_secret(hmac_key))
    if not keys:
        raise ValueError("a control document needs a key to verify it: pass key= or hmac_key=")
    return tuple(keys)
