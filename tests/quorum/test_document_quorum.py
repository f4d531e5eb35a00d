"""The control document's ``quorum`` member and ``check_disabled``, the one home of the pool rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_failover._pool import Pool
from pytest_failover.control import (
    MAX_LOCATIONS,
    ControlDocument,
    ControlError,
    Quorum,
    check_disabled,
    generate_key,
)
from pytest_failover.control._document import _PAYLOAD_FIELDS, _members

NOW = 1_800_000_000
A, B = "https://api.example.com", "https://api2.example.com"
POOLS = (Pool("api", [A, B]), Pool("pay", ["https://pay.example.com"]))
KEY = generate_key("EdDSA", kid="q")
QUORUM = Quorum(min_locations=2, for_seconds=60, agreed={"api": {A: ["us-east", "eu-west"]}})


def _reason(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ControlError) as info:
        call(*args, **kwargs)
    return info.value.reason


def test_check_disabled_accepts_all_but_one() -> None:
    """Disabling every domain but one of a pool, and nothing of another, fits."""
    check_disabled(POOLS, {"api": [A], "pay": []})
    check_disabled({p.name: p for p in POOLS}, {"api": ["HTTPS://API2.example.com:443/"]})


@pytest.mark.parametrize(
    ("disabled", "reason"),
    [
        ({"api": [A, B]}, "all_disabled"),
        ({"pay": ["https://pay.example.com"]}, "all_disabled"),
        ({"web": []}, "unknown_pool"),
        ({"api": ["https://evil.example.com"]}, "unknown_domain"),
        ({"api": "https://api.example.com"}, "wrong_type"),
    ],
)
def test_check_disabled_refuses(disabled: dict[str, Any], reason: str) -> None:
    """Every domain of a pool, an unknown pool or domain, or a non-list is refused with its reason."""
    assert _reason(check_disabled, POOLS, disabled) == reason


def test_document_check_uses_the_same_rule() -> None:
    """``ControlDocument.check`` refuses what ``check_disabled`` refuses, with the same reason."""
    doc = ControlDocument(version=2, issued_at=NOW, expires_at=NOW + 5, disabled={"api": [A, B]})
    assert _reason(doc.check, POOLS, None) == _reason(check_disabled, POOLS, doc.disabled) == "all_disabled"


def test_a_quorum_document_round_trips_signed() -> None:
    """The quorum member is signed with the rest and parses back equal, locations sorted."""
    raw = ControlDocument.sign(version=5, pools={"api": [A]}, expires_in=60, key=KEY, now=NOW, quorum=QUORUM)
    doc = ControlDocument.parse(raw, key=KEY.public(), now=NOW + 1)
    assert doc.quorum == QUORUM
    assert doc.quorum is not None and doc.quorum.agreed["api"][A] == ("eu-west", "us-east")
    assert doc.claims()["quorum"] == {
        "agreed": {"api": {A: ["eu-west", "us-east"]}}, "for_seconds": 60, "min_locations": 2,
    }
    doc.check(POOLS, None)


def test_documents_without_quorum_keep_the_old_payload() -> None:
    """A document without a quorum has exactly the members every reader knows, and parses with quorum None."""
    doc = ControlDocument(version=1, issued_at=NOW, expires_at=NOW + 5, disabled={"api": [A]})
    assert sorted(json.loads(doc.payload())) == sorted(_PAYLOAD_FIELDS)
    assert ControlDocument.from_claims(json.loads(doc.payload())).quorum is None


def test_readers_before_quorum_refuse_a_quorum_document() -> None:
    """The payload rule of older readers (exactly exp, iat, pools, version) refuses the new member by name."""
    doc = ControlDocument(version=1, issued_at=NOW, expires_at=NOW + 5, disabled={"api": [A]}, quorum=QUORUM)
    with pytest.raises(ControlError, match="'quorum'") as info:
        _members(doc.claims(), "the payload", _PAYLOAD_FIELDS)
    assert info.value.reason == "extra_field"
    _members(ControlDocument(version=1, issued_at=NOW, expires_at=NOW + 5, disabled={}).claims(),
             "the payload", _PAYLOAD_FIELDS)


def _claims(quorum: Any) -> dict[str, Any]:
    return {"exp": NOW + 5, "iat": NOW, "pools": {}, "version": 1, "quorum": quorum}


@pytest.mark.parametrize(
    ("quorum", "reason"),
    [
        ([], "wrong_type"),
        ({"min_locations": 2, "for_seconds": 60}, "missing_field"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": {}, "who": 1}, "extra_field"),
        ({"min_locations": 0, "for_seconds": 60, "agreed": {}}, "out_of_range"),
        ({"min_locations": MAX_LOCATIONS + 1, "for_seconds": 60, "agreed": {}}, "out_of_range"),
        ({"min_locations": 2, "for_seconds": 0, "agreed": {}}, "out_of_range"),
        ({"min_locations": 2, "for_seconds": 1.5, "agreed": {}}, "wrong_type"),
        ({"min_locations": True, "for_seconds": 60, "agreed": {}}, "wrong_type"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": []}, "wrong_type"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": {"api": {A: ["eu"]}}}, "out_of_range"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": {"api": {A: ["eu", "eu"]}}}, "wrong_type"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": {"api": {A: ["eu", ""]}}}, "wrong_type"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": {"api": {A: "eu,us"}}}, "wrong_type"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": {"api": {"not a url": ["eu", "us"]}}}, "wrong_type"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": {"api": {A: ["eu", "us"], A + ":443": ["eu", "us"]}}},
         "wrong_type"),
        ({"min_locations": 2, "for_seconds": 60, "agreed": {"": {}}}, "wrong_type"),
    ],
)
def test_invalid_quorum_members(quorum: Any, reason: str) -> None:
    """A malformed quorum member is refused as a whole, with the rule it broke."""
    assert _reason(ControlDocument.from_claims, _claims(quorum)) == reason


def test_quorum_is_a_value() -> None:
    """Equal content is equal and hashes alike; the document compares its quorum too."""
    same = Quorum(min_locations=2, for_seconds=60, agreed={"api": {A + ":443": ("eu-west", "us-east")}})
    assert same == QUORUM and hash(same) == hash(QUORUM)
    plain = ControlDocument(version=1, issued_at=NOW, expires_at=NOW + 5, disabled={"api": [A]})
    marked = ControlDocument(version=1, issued_at=NOW, expires_at=NOW + 5, disabled={"api": [A]}, quorum=QUORUM)
    assert plain != marked and "quorum=Quorum(" in repr(marked)
    with pytest.raises(TypeError, match="quorum"):
        ControlDocument(version=1, issued_at=NOW, expires_at=NOW + 5, disabled={}, quorum={"x": 1})  # type: ignore[arg-type]  # the wrong type on purpose
