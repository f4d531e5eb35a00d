"""Property tests: a signed document survives no change to its bytes, and no input escapes ControlError."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pytest_failover._control import ControlDocument, ControlError, _sign_payload

from .conftest import ED25519_SIGNER, HMAC_KEY, HMAC_SIGNER, NOW, Signer

SIGNERS = [HMAC_SIGNER, ED25519_SIGNER]
DOMAINS = [
    "https://api.example.com",
    "https://api2.example.com",
    "http://api-cn.example.com:8080",
    "https://[::1]:8443",
]

pools = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.lists(st.sampled_from(DOMAINS), unique=True, max_size=len(DOMAINS)),
    max_size=3,
)
versions = st.integers(min_value=1, max_value=2**63 - 1)
kids = st.text(max_size=6)


@st.composite
def signed_documents(draw: st.DrawFn) -> tuple[Signer, bytes]:
    signer = draw(st.sampled_from(SIGNERS))
    raw = signer.sign(version=draw(versions), pools=draw(pools), kid=draw(kids), expires_in=3600)
    return signer, raw


@st.composite
def mutations(draw: st.DrawFn, raw: bytes) -> bytes:
    """``raw`` changed by flipping bits of a byte, deleting a slice, inserting bytes or truncating."""
    kind = draw(st.sampled_from(["flip", "delete", "insert", "truncate", "replace"]))
    if kind == "flip":
        i = draw(st.integers(0, len(raw) - 1))
        mask = draw(st.integers(1, 255))
        return raw[:i] + bytes([raw[i] ^ mask]) + raw[i + 1 :]
    if kind == "delete":
        i = draw(st.integers(0, len(raw) - 1))
        j = draw(st.integers(i + 1, len(raw)))
        return raw[:i] + raw[j:]
    if kind == "insert":
        i = draw(st.integers(0, len(raw)))
        extra = draw(st.binary(min_size=1, max_size=8) | st.sampled_from([b" ", b"\n", b"=", b"A"]))
        return raw[:i] + extra + raw[i:]
    if kind == "truncate":
        return raw[: draw(st.integers(0, len(raw) - 1))]
    i = draw(st.integers(0, len(raw) - 1))
    replacement = draw(st.binary(min_size=1, max_size=4).filter(lambda b: b != raw[i : i + len(b)]))
    return raw[:i] + replacement + raw[i + len(replacement) :]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_mutation_of_a_signed_document_is_rejected(data: st.DataObject) -> None:
    """Whatever bytes of a signed document change, parsing raises ControlError (and nothing else)."""
    signer, raw = data.draw(signed_documents())
    assert signer.parse(raw).version >= 1
    mutated = data.draw(mutations(raw))
    assert mutated != raw
    with pytest.raises(ControlError):
        signer.parse(mutated)


@given(signed=signed_documents())
def test_signed_documents_round_trip(signed: tuple[Signer, bytes]) -> None:
    """Every document sign produces parses back, and re-signing its value gives the same payload."""
    signer, raw = signed
    doc = signer.parse(raw)
    again = ControlDocument.sign(
        version=doc.version,
        pools=doc.disabled,
        expires_in=doc.expires_at - doc.issued_at,
        now=doc.issued_at,
        hmac_key=HMAC_KEY,
    )
    assert ControlDocument.parse(again, hmac_key=HMAC_KEY, now=NOW) == doc


@given(raw=st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_control_error(raw: bytes) -> None:
    """Random bytes are refused with ControlError, never another exception."""
    with pytest.raises(ControlError):
        ControlDocument.parse(raw, hmac_key=HMAC_KEY, now=NOW)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
valid_pools = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.fixed_dictionaries({"disabled": st.lists(st.sampled_from(DOMAINS), unique=True)}),
    max_size=3,
)


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A valid payload, then zero to two corruptions: a field replaced, deleted or added."""
    payload: dict[str, Any] = {
        "version": draw(st.integers(1, 2**63 - 1)),
        "issued_at": draw(st.floats(0, NOW + 30)),
        "expires_at": draw(st.floats(NOW + 0.001, NOW * 2)),
        "pools": draw(valid_pools),
    }
    for _ in range(draw(st.integers(0, 2))):
        action = draw(st.sampled_from(["replace", "delete", "add", "pool"]))
        if action == "replace":
            payload[draw(st.sampled_from(sorted(payload)))] = draw(json_values)
        elif action == "delete" and payload:
            del payload[draw(st.sampled_from(sorted(payload)))]
        elif action == "add":
            payload[draw(st.text(max_size=10))] = draw(json_values)
        elif isinstance(payload.get("pools"), dict):
            payload["pools"][draw(st.text(max_size=5))] = draw(
                json_values
                | st.fixed_dictionaries({"disabled": json_values | st.lists(st.text(max_size=30))})
            )
    return payload


@settings(max_examples=300)
@given(payload=payloads() | json_values)
def test_any_signed_payload_is_a_document_or_a_control_error(payload: Any) -> None:
    """A correctly signed but arbitrary payload yields a valid document or ControlError, nothing else."""
    raw = _sign_payload(json.dumps(payload).encode(), hmac_key=HMAC_KEY)
    try:
        doc = ControlDocument.parse(raw, hmac_key=HMAC_KEY, now=NOW)
    except ControlError:
        return
    event("valid document")
    assert 1 <= doc.version == payload["version"]
    assert doc.issued_at <= NOW + 30
    assert doc.expires_at > NOW
    assert set(doc.disabled) == set(payload["pools"])
