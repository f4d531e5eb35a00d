"""ControlDocument: the payload rules, the bounds of every number, the time window and the check against local pools."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest

from pytest_failover import ControlError as PublicControlError
from pytest_failover._exceptions import ControlError
from pytest_failover._pool import Pool
from pytest_failover.control import MAX_TIME, MAX_VERSION, ControlDocument

from .conftest import HMAC_KEY, NOW, POOLS, Signer, claims, jose_sign


def rejected_claims(payload: Any, reason: str) -> str:
    """The message of the ControlError ``from_claims`` raises for ``payload``, checking its reason."""
    with pytest.raises(ControlError) as info:
        ControlDocument.from_claims(payload)
    assert info.value.reason == reason, str(info.value)
    return str(info.value)


# ------------------------------------------------------------------ round trips


def test_round_trip(signer: Signer) -> None:
    """A signed document parses back to the same version, times and disabled domains."""
    raw = signer.sign(version=7, pools={"api": ["https://api.example.com"], "pay": []}, expires_in=90)
    doc = signer.parse(raw, now=NOW + 10)
    assert (doc.version, doc.issued_at, doc.expires_at) == (7, NOW, NOW + 90)
    assert dict(doc.disabled) == {"api": frozenset({"https://api.example.com"}), "pay": frozenset()}


def test_claims_are_the_documented_payload() -> None:
    """The payload is the JWT claims set: exp, iat, pools and version, as canonical JSON."""
    doc = ControlDocument(version=3, issued_at=NOW, expires_at=NOW + 5, disabled={"api": []})
    assert doc.claims() == {"exp": NOW + 5, "iat": NOW, "pools": {"api": {"disabled": []}}, "version": 3}
    assert doc.payload() == json.dumps(doc.claims(), separators=(",", ":"), sort_keys=True).encode()
    assert ControlDocument.from_claims(json.loads(doc.payload())) == doc


def test_create_rounds_the_window_outwards() -> None:
    """``iat`` is rounded down and ``exp`` up, so a document lives at least ``expires_in`` seconds."""
    doc = ControlDocument.create(version=1, pools={}, expires_in=0.2, now=NOW + 0.5)
    assert (doc.issued_at, doc.expires_at) == (NOW, NOW + 1)
    doc.check_time(NOW + 0.7)


def test_domains_are_normalised() -> None:
    """Any spelling of a base URL is stored as the pool's normalised form."""
    doc = ControlDocument(
        version=1, issued_at=NOW, expires_at=NOW + 1, disabled={"api": ["HTTPS://API.Example.com:443/"]}
    )
    assert doc.disabled["api"] == frozenset({"https://api.example.com"})
    assert doc.is_disabled("api", "https://api.example.com:443")
    assert not doc.is_disabled("api", "https://api2.example.com")
    assert not doc.is_disabled("other", "https://api.example.com")


# ------------------------------------------------------------------ payload rules


@pytest.mark.parametrize(
    ("payload", "reason", "words"),
    [
        ([], "wrong_type", "payload must be a JSON object"),
        ({k: v for k, v in claims().items() if k != "version"}, "missing_field", "'version'"),
        ({k: v for k, v in claims().items() if k != "exp"}, "missing_field", "'exp'"),
        (claims(enabled=[]), "extra_field", "'enabled'"),
        (claims(issued_at=NOW), "extra_field", "'issued_at'"),
        (claims(version="3"), "wrong_type", "version must be an integer, got a string"),
        (claims(version=True), "wrong_type", "got a boolean"),
        (claims(version=2.0), "wrong_type", "got a fraction"),
        (claims(version=None), "wrong_type", "got null"),
        (claims(iat="now"), "wrong_type", "iat (issued_at) must be an integer"),
        (claims(iat=float(NOW)), "wrong_type", "got a fraction"),
        (claims(exp=NOW), "out_of_range", "must be after iat"),
        (claims(pools=[]), "wrong_type", "pools must be an object"),
        (claims(pools={"api": []}), "wrong_type", "pool 'api' must be a JSON object"),
        (claims(pools={"api": {}}), "missing_field", "'disabled'"),
        (claims(pools={"api": {"disabled": [], "enabled": []}}), "extra_field", "'enabled'"),
        (claims(pools={"api": {"disabled": "https://api.example.com"}}), "wrong_type", "must be an array"),
        (claims(pools={"api": {"disabled": [1]}}), "wrong_type", "not a string"),
        (claims(pools={"api": {"disabled": ["ftp://api.example.com"]}}), "wrong_type", "scheme"),
        (claims(pools={"api": {"disabled": ["https://api.example.com/v1"]}}), "wrong_type", "only scheme"),
        (claims(pools={"": {"disabled": []}}), "wrong_type", "non-empty"),
        (
            claims(pools={"api": {"disabled": ["https://api.example.com", "https://API.example.com:443"]}}),
            "wrong_type",
            "twice",
        ),
    ],
)
def test_invalid_payloads(payload: Any, reason: str, words: str) -> None:
    """A payload that breaks a rule is refused with the rule's reason and a message that names it."""
    assert words in rejected_claims(payload, reason)


# Every integer member, with its bounds: (member, lowest, highest).
NUMBERS = [("version", 0, MAX_VERSION), ("iat", 0, MAX_TIME - 1), ("exp", 1, MAX_TIME)]


def _at(member: str, value: Any) -> dict[str, Any]:
    """A valid payload whose ``member`` is ``value`` and whose other times still fit around it."""
    payload = claims(iat=0, exp=MAX_TIME)
    payload[member] = value
    return payload


@pytest.mark.parametrize(("member", "low", "high"), NUMBERS, ids=[n[0] for n in NUMBERS])
def test_every_number_is_bounded(member: str, low: int, high: int) -> None:
    """Each integer member accepts its bounds and refuses, as ControlError, everything past or beside them."""
    assert ControlDocument.from_claims(_at(member, low)).claims()[member] == low
    assert ControlDocument.from_claims(_at(member, high)).claims()[member] == high
    for value, reason in [
        (-1, "out_of_range"),
        (2**63, "out_of_range"),
        (10**30, "out_of_range"),
        (MAX_TIME + 1, "out_of_range" if member != "version" else None),
        (True, "wrong_type"),
        (False, "wrong_type"),
        (float(high), "wrong_type"),
        (0.5, "wrong_type"),
        ("1", "wrong_type"),
        (None, "wrong_type"),
        ([1], "wrong_type"),
    ]:
        if reason is None:
            continue
        rejected_claims(_at(member, value), reason)


@pytest.mark.parametrize("member", ["version", "iat", "exp"])
def test_a_forty_thousand_digit_number_is_a_control_error(member: str) -> None:
    """A validly signed payload with a 40,000-digit number is refused as out of range, quickly and by name."""
    text = json.dumps(claims()).replace(
        f'"{member}": {claims()[member]}', f'"{member}": {"9" * 40_000}'
    )
    assert "9" * 40_000 in text
    with pytest.raises(ControlError) as info:
        ControlDocument.parse(jose_sign(text.encode()), key=HMAC_KEY, now=NOW)
    assert info.value.reason == "out_of_range"
    assert f"{member}" in str(info.value)
    assert "40000 digits" in str(info.value)


def test_non_finite_numbers_are_not_json() -> None:
    """NaN and Infinity in a signed payload are malformed JSON, not numbers."""
    for token in ("NaN", "Infinity", "-Infinity"):
        text = json.dumps(claims()).replace('"version": 2', f'"version": {token}')
        with pytest.raises(ControlError) as info:
            ControlDocument.parse(jose_sign(text.encode()), key=HMAC_KEY, now=NOW)
        assert info.value.reason == "malformed"


def test_huge_fractions_are_refused_as_the_wrong_type() -> None:
    """1e999 reads as infinity and is refused where an integer belongs."""
    text = json.dumps(claims()).replace(f'"exp": {NOW + 60}', '"exp": 1e999')
    with pytest.raises(ControlError) as info:
        ControlDocument.parse(jose_sign(text.encode()), key=HMAC_KEY, now=NOW)
    assert info.value.reason == "wrong_type"


def test_duplicate_members_are_malformed() -> None:
    """A member named twice could be read two ways: it is refused."""
    text = f'{{"version": 2, "version": 3, "iat": {NOW}, "exp": {NOW + 60}, "pools": {{}}}}'
    with pytest.raises(ControlError, match="appears twice") as info:
        ControlDocument.parse(jose_sign(text.encode()), key=HMAC_KEY, now=NOW)
    assert info.value.reason == "malformed"


def test_deep_nesting_is_malformed() -> None:
    """A payload nested deeper than Python can follow is refused, not a RecursionError."""
    text = f'{{"version": 2, "iat": {NOW}, "exp": {NOW + 60}, "pools": {"[" * 40_000}}}'
    with pytest.raises(ControlError) as info:
        ControlDocument.parse(jose_sign(text.encode()), key=HMAC_KEY, now=NOW)
    assert info.value.reason == "malformed"


# ------------------------------------------------------------------ time


def test_expired(signer: Signer) -> None:
    """A document is accepted strictly before exp and refused from then on."""
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
    raw = ControlDocument.sign(version=1, pools={}, expires_in=60, key=HMAC_KEY)
    assert ControlDocument.parse(raw, key=HMAC_KEY).version == 1
    old = ControlDocument.sign(version=1, pools={}, expires_in=60, key=HMAC_KEY, now=time.time() - 3600)
    with pytest.raises(ControlError, match="expired"):
        ControlDocument.parse(old, key=HMAC_KEY)


# ------------------------------------------------------------------ check against pools


def doc(version: int = 2, **disabled: list[str]) -> ControlDocument:
    """A document at NOW disabling ``disabled``."""
    return ControlDocument(version=version, issued_at=NOW, expires_at=NOW + 60, disabled=disabled)


def check_rejects(document: ControlDocument, reason: str, current: int | None = None) -> str:
    """The message of the ControlError ``check`` raises, checking its reason."""
    with pytest.raises(ControlError) as info:
        document.check(POOLS, current)
    assert info.value.reason == reason, str(info.value)
    return str(info.value)


def test_check_accepts_disabling_all_but_one() -> None:
    """Disabling every domain but one, in any pools, fits; pools may be a mapping too."""
    doc(api=["https://api.example.com", "https://api2.example.com"], pay=["https://pay2.example.com"]).check(
        POOLS, None
    )
    doc(api=[]).check({p.name: p for p in POOLS}, 1)


@pytest.mark.parametrize("current", [2, 3])
def test_check_version_must_increase(current: int) -> None:
    """The version in force or a newer one is refused."""
    assert f"version {current}" in check_rejects(doc(2), "stale_version", current)


def test_version_zero_is_a_first_version() -> None:
    """Version 0 is allowed when nothing is in force, and refused once anything is."""
    doc(0).check(POOLS, None)
    check_rejects(doc(0), "stale_version", 0)


def test_check_unknown_pool() -> None:
    """A pool the client does not have is refused, naming the local pools."""
    words = check_rejects(doc(search=[]), "unknown_pool")
    assert "'search'" in words
    assert "api, pay" in words


def test_check_unknown_domain() -> None:
    """A domain that is not in the named pool is refused, even if another pool has it."""
    assert "https://pay.example.com" in check_rejects(doc(api=["https://pay.example.com"]), "unknown_domain")


def test_check_every_domain_disabled() -> None:
    """A document may never disable every domain of a pool."""
    assert "'pay'" in check_rejects(doc(pay=["https://pay.example.com", "https://pay2.example.com"]), "all_disabled")
    with pytest.raises(ControlError):
        doc(solo=["https://solo.example.com"]).check([Pool("solo", ["https://solo.example.com"])], None)


# ------------------------------------------------------------------ the value and the error


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


def test_control_error_is_a_value_error_of_the_exception_tree() -> None:
    """ControlError lives in _exceptions, is a ValueError, and is the one re-exported everywhere."""
    assert issubclass(ControlError, ValueError)
    assert PublicControlError is ControlError
    assert ControlError.__module__ == "pytest_failover._exceptions"
    assert ControlError("x", reason="malformed").reason == "malformed"


def test_create_checks_its_arguments() -> None:
    """A lifetime must be a positive number of seconds and ``now`` a finite time."""
    with pytest.raises(ValueError, match="positive"):
        ControlDocument.create(version=1, pools={}, expires_in=0)
    with pytest.raises(TypeError, match="expires_in"):
        ControlDocument.create(version=1, pools={}, expires_in=True)
    with pytest.raises(TypeError, match="now"):
        ControlDocument.create(version=1, pools={}, expires_in=1, now=float("nan"))
    with pytest.raises(ControlError, match="version"):
        ControlDocument.create(version=-1, pools={}, expires_in=60)
