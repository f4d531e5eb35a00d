"""Property tests: no change to a signed document survives, no input escapes ControlError, and a bad document changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pytest_failover.control import ControlDocument, ControlError, ControlPoller, verify_document

from .conftest import HMAC_KEY, NOW, SIGNERS, Clock, Served, Signer, Target, jose_sign, run_server

DOMAINS = [
    "https://api.example.com",
    "https://api2.example.com",
    "https://api-cn.example.com",
    "https://pay.example.com",
    "https://pay2.example.com",
    "http://api-cn.example.com:8080",
    "https://[::1]:8443",
]

pools = st.dictionaries(
    st.sampled_from(["api", "pay", "search", "x"]) | st.text(min_size=1, max_size=8),
    st.lists(st.sampled_from(DOMAINS), unique=True, max_size=len(DOMAINS)),
    max_size=3,
)
versions = st.integers(min_value=0, max_value=2**63 - 1)


@st.composite
def signed_documents(draw: st.DrawFn) -> tuple[Signer, bytes]:
    """A valid document signed by one of the test signers."""
    signer = draw(st.sampled_from(SIGNERS))
    return signer, signer.sign(version=draw(versions), pools=draw(pools), expires_in=3600)


@st.composite
def mutations(draw: st.DrawFn, raw: bytes) -> bytes:
    """``raw`` changed by flipping bits of a byte, deleting a slice, inserting bytes, truncating or replacing."""
    kind = draw(st.sampled_from(["flip", "delete", "insert", "truncate", "replace"]))
    if kind == "flip":
        i = draw(st.integers(0, len(raw) - 1))
        return raw[:i] + bytes([raw[i] ^ draw(st.integers(1, 255))]) + raw[i + 1 :]
    if kind == "delete":
        i = draw(st.integers(0, len(raw) - 1))
        return raw[:i] + raw[draw(st.integers(i + 1, len(raw))) :]
    if kind == "insert":
        i = draw(st.integers(0, len(raw)))
        extra = draw(st.binary(min_size=1, max_size=8) | st.sampled_from([b" ", b"\n", b"=", b"A", b"."]))
        return raw[:i] + extra + raw[i:]
    if kind == "truncate":
        return raw[: draw(st.integers(0, len(raw) - 1))]
    i = draw(st.integers(0, len(raw) - 1))
    replacement = draw(st.binary(min_size=1, max_size=4).filter(lambda b: b != raw[i : i + len(b)]))
    return raw[:i] + replacement + raw[i + len(replacement) :]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_mutation_of_a_signed_document_is_rejected(data: st.DataObject) -> None:
    """Whatever bytes of a signed document change, verification raises ControlError (and nothing else)."""
    signer, raw = data.draw(signed_documents())
    assert signer.parse(raw).version >= 0
    mutated = data.draw(mutations(raw))
    assert mutated != raw
    with pytest.raises(ControlError):
        signer.parse(mutated)


@settings(deadline=None)  # signing and verifying: slow on a busy machine, not a bug
@given(signed=signed_documents())
def test_signed_documents_round_trip(signed: tuple[Signer, bytes]) -> None:
    """Every document sign produces parses back, and re-signing its claims gives the same document."""
    signer, raw = signed
    doc = signer.parse(raw)
    again = ControlDocument.sign(
        version=doc.version,
        pools=doc.disabled,
        expires_in=doc.expires_at - doc.issued_at,
        now=doc.issued_at,
        key=HMAC_KEY,
    )
    assert ControlDocument.parse(again, key=HMAC_KEY, now=NOW) == doc


@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_arbitrary_bytes_raise_only_control_error(raw: bytes) -> None:
    """Random bytes are refused with ControlError, never another exception."""
    with pytest.raises(ControlError):
        ControlDocument.parse(raw, key=HMAC_KEY, now=NOW)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**19, max_value=10**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
valid_pools = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.fixed_dictionaries({"disabled": st.lists(st.sampled_from(DOMAINS), unique=True)}),
    max_size=3,
)


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A valid payload, then zero to two corruptions: a member replaced, deleted or added."""
    payload: dict[str, Any] = {
        "version": draw(st.integers(-(2**64), 2**64)),
        "iat": draw(st.integers(-10, NOW + 31)),
        "exp": draw(st.integers(NOW - 1, 2**40)),
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
                json_values | st.fixed_dictionaries({"disabled": json_values | st.lists(st.text(max_size=30))})
            )
    return payload


@settings(max_examples=300, deadline=None)
@given(payload=payloads() | json_values)
def test_any_signed_payload_is_a_document_or_a_control_error(payload: Any) -> None:
    """A correctly signed but arbitrary payload yields a valid, bounded document or ControlError, nothing else."""
    raw = jose_sign(json.dumps(payload).encode())
    try:
        doc = verify_document(raw, HMAC_KEY, now=NOW)
    except ControlError:
        return
    event("valid document")
    assert 0 <= doc.version == payload["version"] < 2**63
    assert 0 <= doc.issued_at <= NOW + 30
    assert NOW < doc.expires_at <= 253_402_300_799
    assert set(doc.disabled) == set(payload["pools"])


# ------------------------------------------------------------------ state never changes


@pytest.fixture(scope="module")
def module_server() -> Iterator[Served]:
    """One loopback server for every example of the state property."""
    with run_server() as state:
        yield state


@st.composite
def bad_answers(draw: st.DrawFn, signer: Signer) -> bytes:
    """Something a control URL might serve that must not be applied over version 10."""
    kind = draw(st.sampled_from(["mutated", "bytes", "stale", "misfit", "payload"]))
    good = signer.sign(version=20, pools={"api": ["https://api2.example.com"]})
    if kind == "mutated":
        return draw(mutations(good))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "stale":
        return signer.sign(version=draw(st.integers(0, 10)), pools=draw(pools))
    if kind == "misfit":  # newer, but names unknown pools/domains or disables a whole pool
        misfits: list[dict[str, list[str]]] = [
            {"search": []},
            {"api": ["https://evil.example.com"]},
            {"pay": ["https://pay.example.com", "https://pay2.example.com"]},
            {"api": ["https://pay.example.com"]},
        ]
        misfit = draw(st.sampled_from(misfits))
        return signer.sign(version=draw(st.integers(11, 2**63 - 1)), pools=misfit)
    return jose_sign(json.dumps(draw(payloads() | json_values)).encode(), key=signer.signing)


@settings(
    max_examples=150,
    deadline=None,  # a real HTTP exchange per example: its time is not the property
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_bad_document_never_changes_state(module_server: Served, data: st.DataObject) -> None:
    """Served through a real poller, any bad answer leaves target and poller as they were and is counted."""
    signer = data.draw(st.sampled_from(SIGNERS))
    target, clock = Target(), Clock()
    poller = ControlPoller(module_server.url, target, key=signer.reading, clock=clock, timeout=5.0)
    try:
        module_server.serve(signer.sign(version=10, pools={"api": ["https://api.example.com"]}))
        assert poller.poll_once() is True
        before = (target.snapshot(), poller.document)
        answer = data.draw(bad_answers(signer))
        try:
            doc = verify_document(answer, signer.reading, now=NOW)
            if (doc.version, doc.disabled) == (10, target.disabled):
                event("unchanged")  # the document in force, served again: not a failure
                return
            doc.check(target.pools, target.version)
        except ControlError as exc:
            event(exc.reason)
        else:
            event("valid")  # the rare payload that happens to be a fitting newer document
            return
        module_server.serve(answer)
        assert poller.poll_once() is False
        assert (target.snapshot(), poller.document) == before
        assert poller.consecutive_failures == 1 and poller.last_error
    finally:
        poller.stop()
