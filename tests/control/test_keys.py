"""Key files: one JWK per file, read by the same loader on the signing and the reading side."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from pytest_failover.control import (
    ControlDocument,
    ControlKey,
    generate_key,
    load_key,
    parse_key,
    save_key,
)

from .conftest import ED_KEY, ED_PRIVATE, HMAC_SECRET, NOW


@pytest.mark.parametrize("alg", ["EdDSA", "HS256"])
def test_saved_keys_load_back(tmp_path: Path, alg: str) -> None:
    """A key written by save_key loads back equal, and signs what its reader verifies."""
    key = generate_key(alg, kid="2026-11")
    save_key(tmp_path / "control.key", key, private=True)
    loaded = load_key(tmp_path / "control.key")
    assert loaded == key
    assert stat.S_IMODE(os.stat(tmp_path / "control.key").st_mode) == 0o600
    reader = loaded
    if alg == "EdDSA":
        save_key(tmp_path / "control.pub.jwk", key.public(), private=False)
        reader = load_key(tmp_path / "control.pub.jwk")
        assert not reader.can_sign
        assert "d" not in json.loads((tmp_path / "control.pub.jwk").read_text())
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, key=loaded, now=NOW)
    assert ControlDocument.parse(raw, key=reader, now=NOW).version == 1


def test_the_file_format_is_a_plain_jwk() -> None:
    """The file is the RFC 7517 JWK: kty, crv, x (and d), alg, use, kid; HS256 is kty oct with k."""
    jwk = json.loads(ED_KEY.to_json(private=True))
    assert jwk == {
        "kty": "OKP",
        "crv": "Ed25519",
        "alg": "EdDSA",
        "use": "sig",
        "kid": "ed-1",
        "x": ED_KEY.to_jwk()["x"],
        "d": ED_KEY.to_jwk(private=True)["d"],
    }
    secret = ControlKey.from_secret(HMAC_SECRET)
    assert json.loads(secret.to_json(private=True))["kty"] == "oct"
    with pytest.raises(ValueError, match="no public JWK"):
        secret.to_jwk()
    with pytest.raises(ValueError, match="shared secret"):
        secret.public()


def test_whitespace_around_the_json_changes_nothing(tmp_path: Path) -> None:
    """The secret is the decoded k, never the file's bytes: a newline or indentation cannot split signer and reader."""
    key = generate_key("HS256")
    compact = json.dumps(key.to_jwk(private=True))
    variants = [compact, compact + "\n", "\n  " + compact + "\r\n\n", key.to_json(private=True)]
    for i, text in enumerate(variants):
        (tmp_path / f"k{i}").write_text(text)
    keys = [load_key(tmp_path / f"k{i}") for i in range(len(variants))]
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, key=keys[0], now=NOW)
    for reader in keys:
        assert reader == key
        assert ControlDocument.parse(raw, key=reader, now=NOW).version == 1


def test_file_contents_are_not_a_raw_secret(tmp_path: Path) -> None:
    """Handing a key file's bytes (or a line with its newline) to hmac_key is refused with the fix."""
    key = generate_key("HS256")
    save_key(tmp_path / "control.key", key, private=True)
    for contents in ((tmp_path / "control.key").read_bytes(), b"0123456789abcdef0123456789abcdef\n"):
        with pytest.raises(ValueError, match=r"load_key\(path\)"):
            ControlKey.from_secret(contents)
        with pytest.raises(ValueError, match=r"load_key\(path\)"):
            ControlDocument.parse(b"x.y.z", hmac_key=contents)


def _pem() -> bytes:
    return ED_PRIVATE.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _jwk(**changes: Any) -> str:
    jwk: dict[str, Any] = ED_KEY.to_jwk(private=True)
    jwk.update(changes)
    return json.dumps({k: v for k, v in jwk.items() if v is not None})


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (_pem(), "this is a PEM file, not a JWK"),
        (b"0123456789abcdef0123456789abcdef", "a raw secret is not accepted"),
        (b"1234", "the file holds an integer"),
        (b"", "not a JWK"),
        (b'{"keys": []}', "JWK Set"),
        (b'{"kty": "oct", "k": "AAAA", "k": "BBBB"}', "appears twice"),
        (_jwk(kty="RSA"), "kty 'RSA' is not a control key"),
        (_jwk(kty=None), "needs a string member 'kty'"),
        (_jwk(crv="Ed448"), "curve Ed25519"),
        (_jwk(crv="X25519"), "curve Ed25519"),
        (_jwk(alg="ES256"), "signs as EdDSA"),
        (_jwk(use="enc"), "'use' is 'enc'"),
        (_jwk(kid=""), "kid must be 1 to 128"),
        (_jwk(kid=" padded "), "kid must be 1 to 128"),
        (_jwk(kid="k" * 129), "kid must be 1 to 128"),
        (_jwk(kid=5), "kid must be"),
        (_jwk(x="AAAA"), "'x' of an Ed25519 key has 32 bytes"),
        (_jwk(x=ED_KEY.to_jwk()["x"] + "="), "'x': not base64url"),
        (_jwk(d="AAAA"), "'d' of an Ed25519 key has 32 bytes"),
        (_jwk(x=generate_key().to_jwk()["x"]), "not the public key of its 'd'"),
        (_jwk(key_ops=["encrypt"]), "'key_ops'"),
        (_jwk(key_ops="sign"), "'key_ops' must be an array"),
        (b'{"kty": "oct", "k": "c2hvcnQ"}', "at least 32 bytes"),
        (b'{"kty": "oct", "k": 12}', "must be a string, got an integer"),
        (json.dumps({"kty": "oct", "k": "A" * 43, "alg": "HS512"}), "signs as HS256"),
        (b"\xff\xfe", "not UTF-8"),
        (b" " * 20_000, "too large"),
    ],
)
def test_anything_else_is_refused_clearly(text: str | bytes, words: str) -> None:
    """Each thing that is not a control JWK is refused with a message naming what was found."""
    with pytest.raises(ValueError, match=r"^control\.key: ") as info:
        parse_key(text, source="control.key")
    assert words in str(info.value)


def test_unknown_members_are_ignored_as_rfc_7517_asks() -> None:
    """A JWK exported by another tool (WebCrypto's ext, key_ops) loads."""
    key = parse_key(_jwk(ext=True, key_ops=["sign"], x5t="whatever"))
    assert key.can_sign and not key.can_verify
    assert key.public().can_verify


def test_load_key_names_the_file(tmp_path: Path) -> None:
    """Errors from load_key start with the file's path; a missing file is an OSError."""
    (tmp_path / "k").write_bytes(_pem())
    with pytest.raises(ValueError, match=str(tmp_path / "k")):
        load_key(tmp_path / "k")
    with pytest.raises(FileNotFoundError):
        load_key(tmp_path / "missing")


def test_save_key_does_not_overwrite_by_default(tmp_path: Path) -> None:
    """An existing key file is kept unless overwrite is asked for."""
    first, second = generate_key(), generate_key()
    save_key(tmp_path / "k", first, private=True)
    with pytest.raises(FileExistsError):
        save_key(tmp_path / "k", second, private=True)
    save_key(tmp_path / "k", second, private=True, overwrite=True)
    assert load_key(tmp_path / "k") == second


def test_generated_keys() -> None:
    """generate_key makes distinct keys with a thumbprint kid, and refuses other algorithms."""
    a, b = generate_key("EdDSA"), generate_key("EdDSA")
    assert a != b
    assert a.kid == a.thumbprint()[:16]
    assert generate_key("HS256", kid="mine").kid == "mine"
    with pytest.raises(ValueError, match="EdDSA, HS256"):
        generate_key("RS256")


def test_rfc_7638_thumbprint() -> None:
    """The thumbprint is RFC 7638 SHA-256, matching the Ed25519 example of RFC 8037 appendix A.3."""
    # RFC 8037, appendix A.3: the thumbprint of the A.1 public key
    key = parse_key('{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}')
    assert key.thumbprint() == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_repr_never_shows_secrets() -> None:
    """The repr names algorithm, kind and kid only."""
    secret = ControlKey.from_secret(HMAC_SECRET, kid="s")
    assert repr(secret) == "<ControlKey HS256 secret key kid 's'>"
    assert HMAC_SECRET.decode() not in repr(secret)
    assert repr(ED_KEY.public()) == "<ControlKey EdDSA public key kid 'ed-1'>"


def test_short_secrets_are_refused() -> None:
    """An HS256 secret shorter than the hash (32 bytes) is refused, as RFC 7518 requires."""
    with pytest.raises(ValueError, match="at least 32 bytes"):
        ControlKey.from_secret(b"k" * 31)
    with pytest.raises(TypeError, match="bytes"):
        ControlKey.from_secret("k" * 32)  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(TypeError, match="Ed25519PrivateKey"):
        ControlKey.from_ed25519(b"k" * 32)


def test_importing_the_package_loads_no_crypto() -> None:
    """joserfc, cryptography and anyio are imported only when a key or a poll needs them (those
    that httpx itself imports, as httpx 0.27 does anyio, are httpx's)."""
    script = (
        "import sys, httpx; httpx_s = set(sys.modules);"
        "import pytest_failover.control, pytest_failover;"
        "pytest_failover.ControlDocument; pytest_failover.ControlPoller;"
        "print(sorted({'joserfc', 'cryptography', 'anyio'} & {m.split('.')[0] for m in set(sys.modules) - httpx_s}))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
