"""ControlDocument: signing, verification, validation and the check against local pools."""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pytest_failover._control import (
    MAX_DOCUMENT_BYTES,
    ControlDocument,
    ControlError,
    _sign_payload,
)
from pytest_failover._pool import Pool

from .conftest import HMAC_KEY, NOW, POOLS, PRIVATE_KEY, PUBLIC_KEY, Signer


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def envelope(raw: bytes) -> dict[str, str]:
    return json.loads(raw)  # type: ignore[no-any-return]  # test helper


def reencode(env: dict[str, Any]) -> bytes:
    return json.dumps(env, separators=(",", ":")).encode()


def signed_payload(payload: Any, **keys: Any) -> bytes:
    """``payload`` (any JSON value) signed with the HMAC test key, bypassing validation."""
    keys = keys or {"hmac_key": HMAC_KEY}
    return _sign_payload(json.dumps(payload).encode(), **keys)


def good_payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "version": 2,
        "issued_at": NOW,
        "expires_at": NOW + 60,
        "pools": {"api": {"disabled": ["https://api.example.com"]}},
    }
    payload.update(changes)
    return payload


def rejected(raw: bytes, reason: str, **kwargs: Any) -> ControlError:
    kwargs.setdefault("hmac_key", HMAC_KEY)
    kwargs.setdefault("now", NOW)
    with pytest.raises(ControlError) as info:
        ControlDocument.parse(raw, **kwargs)
    assert info.value.reason == reason, str(info.value)
    return info.value


# ------------------------------------------------------------------ round trips


def test_round_trip(signer: Signer) -> None:
    """A signed document parses back to the same version, times and disabled domains."""
    raw = signer.sign(
        version=7, pools={"api": ["https://api.example.com"], "pay": []}, expires_in=90
    )
    doc = signer.parse(raw, now=NOW + 10)
    assert doc.version == 7
    assert doc.issued_at == NOW
    assert doc.expires_at == NOW + 90
    assert dict(doc.disabled) == {"api": frozenset({"https://api.example.com"}), "pay": frozenset()}


def test_envelope_is_compact_json_with_the_documented_fields(signer: Signer) -> None:
    """The wire form is one compact JSON object: alg, kid, base64url payload, base64url sig."""
    raw = signer.sign(version=1, pools={}, kid="2026-11")
    env = envelope(raw)
    assert list(env) == ["alg", "kid", "payload", "sig"]
    assert env["alg"] == {"hmac": "hmac-sha256", "ed25519": "ed25519"}[signer.name]
    assert env["kid"] == "2026-11"
    assert b" " not in raw
    assert b"=" not in raw
    payload = json.loads(base64.urlsafe_b64decode(env["payload"] + "=="))
    assert payload == {"version": 1, "issued_at": NOW, "expires_at": NOW + 60, "pools": {}}


def test_domains_are_normalised() -> None:
    """Any spelling of a base URL is stored as the pool's normalised form."""
    raw = ControlDocument.sign(
        version=1,
        pools={"api": ["HTTPS://API.Example.com:443/"]},
        expires_in=60,
        hmac_key=HMAC_KEY,
        now=NOW,
    )
    doc = ControlDocument.parse(raw, hmac_key=HMAC_KEY, now=NOW)
    assert doc.disabled["api"] == frozenset({"https://api.example.com"})
    assert doc.is_disabled("api", "https://api.example.com:443")
    assert not doc.is_disabled("api", "https://api2.example.com")
    assert not doc.is_disabled("other", "https://api.example.com")


@pytest.mark.parametrize(
    ("private", "public"),
    [
        pytest.param(
            PRIVATE_KEY.private_bytes_raw(), PUBLIC_KEY.public_bytes_raw(), id="raw-bytes"
        ),
        pytest.param(
            PRIVATE_KEY.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            PUBLIC_KEY.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            id="pem",
        ),
    ],
)
def test_ed25519_keys_as_bytes(private: bytes, public: bytes) -> None:
    """Ed25519 keys may be given as 32 raw bytes or PEM as well as key objects."""
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, private_key=private, now=NOW)
    assert ControlDocument.parse(raw, public_key=public, now=NOW).version == 1
    assert ControlDocument.parse(raw, public_key=PUBLIC_KEY, now=NOW).version == 1


def test_key_rotation_selects_the_key_by_kid() -> None:
    """With a mapping of keys, the document's kid picks the key; an unknown kid is refused."""
    old_key, new_key = b"o" * 32, b"n" * 32
    keys = {"old": old_key, "new": new_key}
    raw_old = ControlDocument.sign(
        version=1, pools={}, expires_in=60, hmac_key=old_key, kid="old", now=NOW
    )
    raw_new = ControlDocument.sign(
        version=2, pools={}, expires_in=60, hmac_key=new_key, kid="new", now=NOW
    )
    assert ControlDocument.parse(raw_old, hmac_key=keys, now=NOW).version == 1
    assert ControlDocument.parse(raw_new, hmac_key=keys, now=NOW).version == 2
    other = ControlDocument.sign(
        version=3, pools={}, expires_in=60, hmac_key=new_key, kid="gone", now=NOW
    )
    error = rejected(other, "no_key", hmac_key=keys)
    assert "'gone'" in str(error)
    lying = ControlDocument.sign(
        version=3, pools={}, expires_in=60, hmac_key=new_key, kid="old", now=NOW
    )
    rejected(lying, "bad_signature", hmac_key=keys)


def test_both_kinds_of_key_configured_accept_both() -> None:
    """A reader holding a shared key and a public key accepts documents signed with either."""
    keys: dict[str, Any] = {"hmac_key": HMAC_KEY, "public_key": PUBLIC_KEY, "now": NOW}
    signers: list[dict[str, Any]] = [{"hmac_key": HMAC_KEY}, {"private_key": PRIVATE_KEY}]
    for sign_with in signers:
        raw = ControlDocument.sign(version=4, pools={}, expires_in=60, now=NOW, **sign_with)
        assert ControlDocument.parse(raw, **keys).version == 4


# ------------------------------------------------------------------ signatures


def test_wrong_key_is_a_bad_signature(signer: Signer) -> None:
    """A document signed with another key is refused."""
    raw = signer.sign(version=1, pools={})
    if signer.name == "hmac":
        rejected(raw, "bad_signature", hmac_key=b"x" * 32)
    else:
        rejected(
            raw,
            "bad_signature",
            hmac_key=None,
            public_key=Ed25519PrivateKey.generate().public_key(),
        )


def test_tampered_payload_is_a_bad_signature(signer: Signer) -> None:
    """Re-enabling a domain by editing the payload (and re-encoding it) breaks the signature."""
    raw = signer.sign(version=1, pools={"api": ["https://api.example.com"]})
    env = envelope(raw)
    payload = json.loads(base64.urlsafe_b64decode(env["payload"] + "=="))
    payload["pools"]["api"]["disabled"] = []
    env["payload"] = b64(json.dumps(payload).encode())
    with pytest.raises(ControlError, match="bad signature") as info:
        signer.parse(reencode(env))
    assert info.value.reason == "bad_signature"


def test_kid_is_covered_by_the_signature(signer: Signer) -> None:
    """Changing the key id alone invalidates the document."""
    env = envelope(signer.sign(version=1, pools={}, kid="a"))
    env["kid"] = "b"
    with pytest.raises(ControlError) as info:
        signer.parse(reencode(env))
    assert info.value.reason == "bad_signature"


@pytest.mark.parametrize("alg", ["none", "HS256", "", "rsa"])
def test_unknown_algorithm(alg: str) -> None:
    """Only ed25519 and hmac-sha256 are accepted; alg "none" is not a way around the signature."""
    env = envelope(
        ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY, now=NOW)
    )
    env["alg"], env["sig"] = alg, ""
    error = rejected(reencode(env), "unknown_alg")
    assert repr(alg) in str(error)


def test_algorithm_swap_is_rejected() -> None:
    """An Ed25519 document relabelled as HMAC (or the reverse) does not verify."""
    env = envelope(
        ControlDocument.sign(version=1, pools={}, expires_in=60, private_key=PRIVATE_KEY, now=NOW)
    )
    env["alg"] = "hmac-sha256"
    rejected(reencode(env), "bad_signature", public_key=PUBLIC_KEY)
    env = envelope(
        ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY, now=NOW)
    )
    env["alg"] = "ed25519"
    rejected(reencode(env), "bad_signature", public_key=PUBLIC_KEY)


def test_no_key_for_the_documents_algorithm() -> None:
    """A shared-key document read by a reader holding only a public key is refused, and vice versa."""
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY, now=NOW)
    assert "no hmac_key" in str(rejected(raw, "no_key", hmac_key=None, public_key=PUBLIC_KEY))
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, private_key=PRIVATE_KEY, now=NOW)
    assert "no public_key" in str(rejected(raw, "no_key"))


def test_the_payload_is_not_read_before_the_signature_is_verified() -> None:
    """A payload that is not even JSON reports a bad signature, not a parse error, without the key."""
    raw = _sign_payload(b"\xff not json", hmac_key=b"z" * 32)
    rejected(raw, "bad_signature")
    assert rejected(_sign_payload(b"\xff not json", hmac_key=HMAC_KEY), "malformed")


def test_parse_needs_a_key() -> None:
    """Unsigned reading is not a mode: parse without any key is a usage error."""
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY, now=NOW)
    with pytest.raises(ValueError, match="pass hmac_key or public_key"):
        ControlDocument.parse(raw)


# ------------------------------------------------------------------ envelope shape


@pytest.mark.parametrize(
    ("raw", "reason", "words"),
    [
        (b"", "malformed", "not JSON"),
        (b"not json", "malformed", "not JSON"),
        (b"\xff\xfe{}", "malformed", "not UTF-8"),
        (b"[]", "wrong_type", "must be a JSON object, got array"),
        (b'"x"', "wrong_type", "got string"),
        (b"NaN", "malformed", "NaN"),
        (b'{"alg":"hmac-sha256","kid":"","payload":"e30"}', "missing_field", "'sig'"),
        (b'{"alg":"hmac-sha256","kid":"","payload":"e30","sig":"","x":1}', "extra_field", "'x'"),
        (
            b'{"alg":"hmac-sha256","kid":null,"payload":"e30","sig":""}',
            "wrong_type",
            "'kid' must be a string",
        ),
        (b'{"alg":1,"kid":"","payload":"e30","sig":""}', "wrong_type", "'alg' must be a string"),
        (b'{"alg":"a","alg":"b","kid":"","payload":"e30","sig":""}', "malformed", "appears twice"),
        (b'{"alg": "hmac-sha256","kid":"","payload":"e30","sig":""}', "malformed", "canonical"),
        (b'{"kid":"","alg":"hmac-sha256","payload":"e30","sig":""}', "malformed", "canonical"),
        (b'{"alg":"hmac-sha256","kid":"","payload":"e30","sig":"!!"}', "malformed", "base64url"),
        (
            b'{"alg":"hmac-sha256","kid":"","payload":"e30","sig":"AAAA"}',
            "bad_signature",
            "32 bytes",
        ),
        (b"{" + b" " * MAX_DOCUMENT_BYTES + b"}", "too_large", "bytes"),
    ],
)
def test_malformed_envelopes(raw: bytes, reason: str, words: str) -> None:
    """Each malformed envelope is refused with the rule it broke."""
    assert words in str(rejected(raw, reason))


def test_trailing_newline_is_not_the_signed_document() -> None:
    """The document must be served byte for byte; even an added newline is refused."""
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY, now=NOW)
    rejected(raw + b"\n", "malformed")


def test_padded_or_non_canonical_base64_is_refused() -> None:
    """Signature text with padding or spare bits set is not the canonical encoding."""
    env = envelope(
        ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY, now=NOW)
    )
    padded = dict(env, sig=env["sig"] + "=")
    rejected(reencode(padded), "malformed")
    # 32 bytes -> 43 characters, the last one carries 4 bits and 2 unused ones
    last = env["sig"][-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    spare = alphabet[alphabet.index(last) ^ 1]
    rejected(reencode(dict(env, sig=env["sig"][:-1] + spare)), "malformed")


# ------------------------------------------------------------------ payload validation


@pytest.mark.parametrize(
    ("payload", "reason", "words"),
    [
        ([], "wrong_type", "payload must be a JSON object"),
        ({k: v for k, v in good_payload().items() if k != "version"}, "missing_field", "'version'"),
        (
            {k: v for k, v in good_payload().items() if k != "expires_at"},
            "missing_field",
            "'expires_at'",
        ),
        (good_payload(enabled=[]), "extra_field", "'enabled'"),
        (good_payload(version="3"), "wrong_type", "version must be an integer"),
        (good_payload(version=True), "wrong_type", "version must be an integer"),
        (good_payload(version=2.0), "wrong_type", "version must be an integer"),
        (good_payload(version=0), "wrong_type", "between 1 and"),
        (good_payload(version=2**63), "wrong_type", "between 1 and"),
        (good_payload(issued_at="now"), "wrong_type", "issued_at must be a number"),
        (good_payload(issued_at=None), "wrong_type", "got null"),
        (good_payload(issued_at=-1), "wrong_type", "finite unix seconds"),
        (good_payload(expires_at=10**400), "wrong_type", "finite unix seconds"),
        (good_payload(expires_at=NOW), "wrong_type", "must be after issued_at"),
        (good_payload(pools=[]), "wrong_type", "pools must be an object"),
        (good_payload(pools={"api": []}), "wrong_type", "pool 'api' must be a JSON object"),
        (good_payload(pools={"api": {}}), "missing_field", "'disabled'"),
        (good_payload(pools={"api": {"disabled": [], "enabled": []}}), "extra_field", "'enabled'"),
        (
            good_payload(pools={"api": {"disabled": "https://api.example.com"}}),
            "wrong_type",
            "must be an array",
        ),
        (good_payload(pools={"api": {"disabled": [1]}}), "wrong_type", "not a string"),
        (
            good_payload(pools={"api": {"disabled": ["ftp://api.example.com"]}}),
            "wrong_type",
            "scheme",
        ),
        (
            good_payload(pools={"api": {"disabled": ["https://api.example.com/v1"]}}),
            "wrong_type",
            "only scheme",
        ),
        (good_payload(pools={"": {"disabled": []}}), "wrong_type", "non-empty"),
        (
            good_payload(
                pools={
                    "api": {"disabled": ["https://api.example.com", "https://API.example.com:443"]}
                }
            ),
            "wrong_type",
            "twice",
        ),
    ],
)
def test_invalid_payloads(payload: Any, reason: str, words: str) -> None:
    """A correctly signed payload that breaks a rule is refused and says which."""
    assert words in str(rejected(signed_payload(payload), reason))


def test_a_valid_hand_made_payload_is_accepted() -> None:
    """The payload format is what the docs say: other producers may write it with any spacing."""
    doc = ControlDocument.parse(signed_payload(good_payload()), hmac_key=HMAC_KEY, now=NOW)
    assert doc.version == 2
    assert doc.disabled["api"] == frozenset({"https://api.example.com"})


# ------------------------------------------------------------------ time


def test_expired(signer: Signer) -> None:
    """A document is accepted strictly before expires_at and refused from then on."""
    raw = signer.sign(version=1, pools={}, expires_in=60)
    assert signer.parse(raw, now=NOW + 59.999).version == 1
    with pytest.raises(ControlError, match="expired") as info:
        signer.parse(raw, now=NOW + 60)
    assert info.value.reason == "expired"


def test_issued_in_the_future(signer: Signer) -> None:
    """A document issued more than max_skew seconds ahead of the reader's clock is refused."""
    raw = signer.sign(version=1, pools={}, expires_in=600)
    assert signer.parse(raw, now=NOW - 30).version == 1
    with pytest.raises(ControlError, match="in the future") as info:
        signer.parse(raw, now=NOW - 30.5)
    assert info.value.reason == "future"
    assert signer.parse(raw, now=NOW - 100, max_skew=100).version == 1


def test_default_clock_is_the_wall_clock() -> None:
    """Without ``now``, signing and parsing use the current time."""
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY)
    assert ControlDocument.parse(raw, hmac_key=HMAC_KEY).version == 1
    old = ControlDocument.sign(
        version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY, now=time.time() - 3600
    )
    rejected(old, "expired", now=None)


# ------------------------------------------------------------------ check against pools


def doc(version: int = 2, **disabled: list[str]) -> ControlDocument:
    return ControlDocument(version=version, issued_at=NOW, expires_at=NOW + 60, disabled=disabled)


def check_rejects(document: ControlDocument, reason: str, current: int | None = None) -> str:
    with pytest.raises(ControlError) as info:
        document.check(POOLS, current)
    assert info.value.reason == reason, str(info.value)
    return str(info.value)


def test_check_accepts_disabling_all_but_one() -> None:
    """Disabling every domain but one, in any pools, fits."""
    doc(
        api=["https://api.example.com", "https://api2.example.com"],
        pay=["https://pay2.example.com"],
    ).check(POOLS, None)
    doc(api=[]).check({p.name: p for p in POOLS}, 1)


@pytest.mark.parametrize("current", [2, 3])
def test_check_version_must_increase(current: int) -> None:
    """The version in force or an older one is refused."""
    words = check_rejects(doc(2), "stale_version", current)
    assert f"version {current}" in words


def test_check_unknown_pool() -> None:
    """A pool the client does not have is refused, naming the local pools."""
    words = check_rejects(doc(search=[]), "unknown_pool")
    assert "'search'" in words
    assert "api, pay" in words


def test_check_unknown_domain() -> None:
    """A domain that is not in the named pool is refused, even if another pool has it."""
    words = check_rejects(doc(api=["https://pay.example.com"]), "unknown_domain")
    assert "https://pay.example.com" in words


def test_check_every_domain_disabled() -> None:
    """A document may never disable every domain of a pool."""
    words = check_rejects(
        doc(pay=["https://pay.example.com", "https://pay2.example.com"]), "all_disabled"
    )
    assert "'pay'" in words
    with pytest.raises(ControlError):
        doc(solo=["https://solo.example.com"]).check(
            [Pool("solo", ["https://solo.example.com"])], None
        )


# ------------------------------------------------------------------ the value


def test_document_is_an_immutable_value() -> None:
    """Documents are frozen, compare by value and hash."""
    a, b = doc(api=["https://api.example.com"]), doc(api=["HTTPS://api.example.com/"])
    assert a == b
    assert hash(a) == hash(b)
    assert a != doc(3, api=["https://api.example.com"])
    assert len({a, b, doc(api=[])}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.version = 9  # type: ignore[misc]  # the point of the test
    with pytest.raises(TypeError):
        a.disabled["api"] = frozenset()  # type: ignore[index]  # the point of the test
    assert "version=2" in repr(a)
    assert "https://api.example.com" in repr(a)


def test_sign_arguments_are_checked() -> None:
    """Signing needs exactly one strong key and a positive lifetime."""
    with pytest.raises(ValueError, match="exactly one"):
        ControlDocument.sign(version=1, pools={}, expires_in=60)
    with pytest.raises(ValueError, match="exactly one"):
        ControlDocument.sign(
            version=1, pools={}, expires_in=60, hmac_key=HMAC_KEY, private_key=PRIVATE_KEY
        )
    with pytest.raises(ValueError, match="at least 16 bytes"):
        ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=b"short")
    with pytest.raises(ValueError, match="positive"):
        ControlDocument.sign(version=1, pools={}, expires_in=0, hmac_key=HMAC_KEY)
    with pytest.raises(ControlError, match="version"):
        ControlDocument.sign(version=0, pools={}, expires_in=60, hmac_key=HMAC_KEY)
    with pytest.raises(TypeError, match="Ed25519PrivateKey"):
        ControlDocument.sign(version=1, pools={}, expires_in=60, private_key="secret")  # type: ignore[arg-type]  # the point
    with pytest.raises(ValueError, match="32 raw bytes"):
        ControlDocument.sign(version=1, pools={}, expires_in=60, private_key=b"abc")


# ------------------------------------------------------------------ optional dependency


def test_cryptography_is_optional() -> None:
    """The module imports, and HMAC works, without cryptography; Ed25519 then says how to install it."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["cryptography"] = None  # as if it were not installed
        from pytest_failover._control import ControlDocument
        key = b"k" * 32
        raw = ControlDocument.sign(version=1, pools={}, expires_in=60, hmac_key=key)
        assert ControlDocument.parse(raw, hmac_key=key).version == 1
        try:
            ControlDocument.sign(version=1, pools={}, expires_in=60, private_key=b"x" * 32)
        except ImportError as exc:
            print(exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install pytest-failover[control]" in result.stdout


def test_importing_the_module_does_not_import_cryptography() -> None:
    """cryptography is imported only when an Ed25519 key is used."""
    script = "import sys, pytest_failover._control; print('cryptography' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"
