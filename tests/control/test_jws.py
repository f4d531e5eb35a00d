"""The wire form: JWS compact serialization, verified strictly and with an algorithm allow-list."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from pytest_failover.control import (
    MAX_DOCUMENT_BYTES,
    TYP,
    ControlDocument,
    ControlError,
    ControlKey,
    generate_key,
    sign_document,
    verify_document,
)

from .conftest import ED_KEY, ED_PUBLIC, HMAC_KEY, HMAC_SECRET, NOW, Signer, claims, jose_sign


def b64(data: bytes) -> str:
    """Unpadded base64url of ``data``."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str | bytes) -> bytes:
    """The bytes of unpadded base64url ``text``."""
    raw = text.encode() if isinstance(text, str) else text
    return base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))


def parts(raw: bytes) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """The decoded header, payload and signature of a compact JWS."""
    header, payload, signature = raw.split(b".")
    return json.loads(unb64(header)), json.loads(unb64(payload)), unb64(signature)


def hs256(header: dict[str, Any], payload: bytes, secret: bytes = HMAC_SECRET) -> bytes:
    """A compact JWS made by hand with HMAC-SHA256: any header, no library."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(payload)}".encode()
    return signing_input + b"." + b64(hmac.new(secret, signing_input, hashlib.sha256).digest()).encode()


def rejected(raw: bytes, reason: str, key: Any = HMAC_KEY, **kwargs: Any) -> str:
    """The message of the ControlError verification raises, checking its reason."""
    kwargs.setdefault("now", NOW)
    with pytest.raises(ControlError) as info:
        verify_document(raw, key, **kwargs)
    assert info.value.reason == reason, str(info.value)
    return str(info.value)


GOOD = json.dumps(claims()).encode()


# ------------------------------------------------------------------ the wire form


def test_compact_form_with_the_documented_header(signer: Signer) -> None:
    """A document is header.payload.signature with alg, kid and typ, and the claims as payload."""
    raw = signer.sign(version=1, pools={})
    assert raw.count(b".") == 2
    assert raw.isascii() and b"=" not in raw and b" " not in raw
    header, payload, signature = parts(raw)
    assert header == {"alg": signer.signing.alg, "kid": signer.signing.kid, "typ": TYP}
    assert payload == {"version": 1, "iat": NOW, "exp": NOW + 60, "pools": {}}
    assert len(signature) == {"HS256": 32, "EdDSA": 64}[signer.signing.alg]


def test_a_key_without_kid_signs_without_kid() -> None:
    """The kid header is present exactly when the signing key has a kid."""
    raw = sign_document(ControlDocument.from_claims(claims()), ED_KEY.with_kid(None))
    assert parts(raw)[0] == {"alg": "EdDSA", "typ": TYP}
    assert verify_document(raw, ED_PUBLIC, now=NOW).version == 2


def test_a_hand_made_document_is_accepted() -> None:
    """Other producers may write the format with any JSON spacing and member order."""
    payload = b'{ "pools": {"api": {"disabled": ["https://api.example.com"]}}, "version": 2, "iat": %d, "exp": %d }' % (
        NOW,
        NOW + 60,
    )
    doc = verify_document(hs256({"typ": TYP, "alg": "HS256"}, payload), HMAC_KEY, now=NOW)
    assert doc.disabled["api"] == frozenset({"https://api.example.com"})


def test_the_rfc_9864_name_of_eddsa_verifies() -> None:
    """A document signed as alg Ed25519 (RFC 9864) verifies with the same Ed25519 key."""
    raw = jose_sign(GOOD, key=ED_KEY, header={"alg": "Ed25519", "typ": TYP})
    assert verify_document(raw, ED_PUBLIC, now=NOW).version == 2


def test_typ_may_carry_the_application_prefix() -> None:
    """``typ`` compares as a media type: case-insensitive, the application/ prefix optional."""
    raw = hs256({"alg": "HS256", "typ": "Application/Failover-Control+JWT"}, GOOD)
    assert verify_document(raw, HMAC_KEY, now=NOW).version == 2


def test_signing_refuses_a_document_readers_would_refuse() -> None:
    """A document too large for readers is an error at signing, not at every client."""
    many = {f"p{i}": [f"https://h{i}-{j}.example.com" for j in range(40)] for i in range(80)}
    doc = ControlDocument(version=1, issued_at=NOW, expires_at=NOW + 60, disabled=many)
    with pytest.raises(ValueError, match="readers refuse more than"):
        sign_document(doc, HMAC_KEY)


# ------------------------------------------------------------------ strict reading


@pytest.mark.parametrize(
    ("mangle", "words"),
    [
        (lambda raw: raw + b"\n", "trailing newline"),
        (lambda raw: b" " + raw, "whitespace"),
        (lambda raw: b"", "empty"),
        (lambda raw: raw.rsplit(b".", 1)[0], "got 2 part(s)"),
        (lambda raw: raw + b".", "got 4 part(s)"),
        (lambda raw: b'{"alg":"HS256","payload":"e30","sig":""}', "looks like JSON"),
        (lambda raw: raw.replace(b".", b"=.", 1), "header part is not base64url"),
        (lambda raw: raw + b"=", "signature part is not base64url"),
        (lambda raw: b"AAAAA" + raw[raw.index(b".") :], "header part is not base64url (impossible length)"),
        (lambda raw: raw.split(b".")[0] + b"." + b"e30=" + b"." + raw.split(b".")[2], "payload part"),
        (lambda raw: b64(b"[1]").encode() + raw[raw.index(b".") :], "header must be a JSON object"),
        (lambda raw: b64(b"\xff").encode() + raw[raw.index(b".") :], "header is not UTF-8"),
        (lambda raw: b64(b'{"alg":"HS256","alg":"none","typ":"x"}').encode() + raw[raw.index(b".") :], "twice"),
    ],
)
def test_malformed_texts(mangle: Any, words: str) -> None:
    """Each text that is not exactly a compact JWS is refused, saying what is wrong."""
    raw = HMAC_KEY_SIGNED
    reason = "wrong_type" if "JSON object" in words else "malformed"
    assert words in rejected(mangle(raw), reason)


HMAC_KEY_SIGNED = ControlDocument.sign(version=1, pools={}, expires_in=60, key=HMAC_KEY, now=NOW)


def test_spare_bits_in_the_signature_are_refused() -> None:
    """Two texts for one signature would make the document malleable: the non-canonical one is refused."""
    head, _, sig = HMAC_KEY_SIGNED.rpartition(b".")
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    spare = bytes([alphabet[alphabet.index(sig[-1:]) ^ 1]])  # 32 bytes: the last character has 2 spare bits
    assert "spare bits" in rejected(head + b"." + sig[:-1] + spare, "malformed")


@pytest.mark.parametrize("key", [HMAC_KEY, ED_KEY], ids=["HS256", "EdDSA"])
def test_a_document_just_under_the_limit_signs_and_verifies(key: Any) -> None:
    """A document of nearly ``MAX_DOCUMENT_BYTES`` is a document like any other, whichever
    joserfc is installed (before 1.7 joserfc refused a payload over 8,000 bytes of its own,
    and such a document was refused as malformed)."""
    pools = {f"pool-{i:04d}": {"disabled": [f"https://d{i}.example.com"]} for i in range(900)}
    doc = ControlDocument.from_claims(claims(pools=pools))
    raw = sign_document(doc, key)
    assert 8_000 * 4 / 3 < len(raw) <= MAX_DOCUMENT_BYTES  # (base64 makes a payload a third longer)
    assert verify_document(raw, key.public() if key is ED_KEY else key, now=NOW) == doc


def test_too_large() -> None:
    """Anything over MAX_DOCUMENT_BYTES is refused before it is read."""
    assert "bytes" in rejected(b"a" * (MAX_DOCUMENT_BYTES + 1), "too_large")


@pytest.mark.parametrize(
    ("header", "reason", "words"),
    [
        ({"typ": TYP}, "missing_field", "'alg'"),
        ({"alg": "HS256"}, "missing_field", "'typ'"),
        ({"alg": "HS256", "typ": TYP, "crit": ["exp"]}, "extra_field", "'crit'"),
        ({"alg": "HS256", "typ": TYP, "jku": "https://evil.example/keys"}, "extra_field", "'jku'"),
        ({"alg": "HS256", "typ": TYP, "jwk": {"kty": "oct", "k": "AAAA"}}, "extra_field", "'jwk'"),
        ({"alg": 1, "typ": TYP}, "wrong_type", "header 'alg' must be a string"),
        ({"alg": "HS256", "typ": TYP, "kid": 7}, "wrong_type", "header 'kid'"),
        ({"alg": "HS256", "typ": TYP, "kid": "k" * 129}, "out_of_range", "longer than 128"),
        ({"alg": "none", "typ": TYP}, "unknown_alg", "'none'"),
        ({"alg": "RS256", "typ": TYP}, "unknown_alg", "'RS256'"),
        ({"alg": "HS512", "typ": TYP}, "unknown_alg", "'HS512'"),
        ({"alg": "HS256", "typ": "JWT"}, "wrong_typ", "not a control document"),
    ],
)
def test_header_rules(header: dict[str, Any], reason: str, words: str) -> None:
    """The header holds alg, typ and maybe kid, all strings; anything else is refused before the signature."""
    assert words in rejected(hs256(header, GOOD), reason)


def test_unsigned_documents_never_verify() -> None:
    """alg none with an empty signature is refused whatever key the reader holds."""
    token = f"{b64(json.dumps({'alg': 'none', 'typ': TYP}).encode())}.{b64(GOOD)}.".encode()
    for key in (HMAC_KEY, ED_PUBLIC):
        rejected(token, "unknown_alg", key)


# ------------------------------------------------------------------ keys and the allow-list


def test_algorithm_confusion_is_refused() -> None:
    """An HS256 document keyed with the Ed25519 public key's bytes finds no key: the key decides the algorithm."""
    for secret in (ED_PUBLIC.public_bytes, ED_PUBLIC.to_json().encode()):
        forged = hs256({"alg": "HS256", "typ": TYP, "kid": "ed-1"}, GOOD, secret=secret)
        assert "configured: EdDSA public key kid 'ed-1'" in rejected(forged, "no_key", ED_PUBLIC)


def test_a_document_for_the_other_algorithm_finds_no_key(signer: Signer) -> None:
    """An EdDSA reader refuses HS256 documents and an HS256 reader refuses EdDSA ones."""
    other = HMAC_KEY if signer.signing.alg == "EdDSA" else ED_PUBLIC
    rejected(signer.sign(version=1, pools={}), "no_key", other)


def test_bad_signature(signer: Signer) -> None:
    """A changed payload under the old signature, or another key of the same kind, does not verify."""
    raw = signer.sign(version=1, pools={})
    head, _, sig = raw.split(b".")
    forged_payload = b64(json.dumps(claims(version=9)).encode()).encode()
    rejected(head + b"." + forged_payload + b"." + sig, "bad_signature", signer.reading)
    stranger = generate_key(signer.signing.alg, kid=signer.signing.kid)
    if signer.signing.alg == "EdDSA":
        stranger = stranger.public()
    assert "bad signature" in rejected(raw, "bad_signature", stranger)


def test_the_payload_is_read_only_after_the_signature() -> None:
    """Garbage under a bad signature is a bad signature, not a payload error."""
    forged = hs256({"alg": "HS256", "typ": TYP}, b"not json at all", secret=b"x" * 32)
    rejected(forged, "bad_signature")


def test_kid_selects_among_several_keys() -> None:
    """During a rotation a reader holds several keys; kid picks one, and an unknown kid finds none."""
    old, new = generate_key("EdDSA", kid="2026-05"), generate_key("EdDSA", kid="2026-11")
    readers = [old.public(), new.public(), HMAC_KEY]
    for key in (old, new):
        raw = ControlDocument.sign(version=1, pools={}, expires_in=60, key=key, now=NOW)
        assert verify_document(raw, readers, now=NOW).version == 1
    lost = ControlDocument.sign(version=1, pools={}, expires_in=60, key=generate_key(kid="gone"), now=NOW)
    assert "kid 'gone'" in rejected(lost, "no_key", readers)
    # a key without kid accepts any kid, and a document without kid fits any key
    anonymous = old.public().with_kid(None)
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, key=old, now=NOW)
    assert verify_document(raw, anonymous, now=NOW).version == 1


def test_a_verify_only_key_does_not_sign() -> None:
    """A public key, or a JWK whose key_ops leave out sign, cannot sign."""
    doc = ControlDocument.from_claims(claims())
    with pytest.raises(ValueError, match="cannot sign"):
        sign_document(doc, ED_PUBLIC)
    with pytest.raises(ValueError, match="cannot sign"):
        ControlDocument.sign(version=1, pools={}, expires_in=60, key=ED_PUBLIC)


def test_key_arguments_are_checked() -> None:
    """Signing needs exactly one key; reading needs at least one, of the right type."""
    with pytest.raises(ValueError, match="exactly one"):
        ControlDocument.sign(version=1, pools={}, expires_in=60)
    with pytest.raises(ValueError, match="exactly one"):
        ControlDocument.sign(version=1, pools={}, expires_in=60, key=HMAC_KEY, hmac_key=HMAC_SECRET)
    with pytest.raises(TypeError, match="ControlKey"):
        ControlDocument.sign(version=1, pools={}, expires_in=60, key=b"secret")  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(ValueError, match="needs a key"):
        ControlDocument.parse(HMAC_KEY_SIGNED)
    with pytest.raises(TypeError, match="ControlKey"):
        ControlDocument.parse(HMAC_KEY_SIGNED, key="control.key")  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(TypeError, match="raw"):
        verify_document("text", HMAC_KEY)  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(ValueError, match="max_skew"):
        verify_document(HMAC_KEY_SIGNED, HMAC_KEY, max_skew=-1)


def test_hmac_key_shorthand_is_the_raw_secret() -> None:
    """``hmac_key=`` bytes are the same key as ``ControlKey.from_secret`` of them."""
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=HMAC_SECRET, now=NOW)
    assert ControlDocument.parse(raw, key=ControlKey.from_secret(HMAC_SECRET), now=NOW).version == 1
    assert ControlDocument.parse(raw, hmac_key=HMAC_SECRET, now=NOW).version == 1
