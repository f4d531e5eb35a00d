"""Unpadded base64url (RFC 7515 section 2), read strictly: one text for given bytes."""

from __future__ import annotations

import base64
import binascii
import re

__all__ = ["b64decode", "b64encode"]

_ALPHABET = re.compile(rb"[A-Za-z0-9_-]*")


def b64encode(data: bytes) -> str:
    """``data`` as base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64decode(text: str | bytes) -> bytes:
    """The bytes of unpadded base64url ``text``; ``ValueError`` unless it is the canonical form.

    Padding, whitespace, characters outside the alphabet, an impossible length and
    spare bits set in the last character are all refused, so a signed text cannot
    be altered without changing its bytes.
    """
    raw = text.encode("ascii", "replace") if isinstance(text, str) else bytes(text)
    if _ALPHABET.fullmatch(raw) is None:
        raise ValueError("not base64url (only A-Z a-z 0-9 - _ and no padding)")
    if len(raw) % 4 == 1:
        raise ValueError("not base64url (impossible length)")
    try:
        data = base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))
    except binascii.Error as exc:  # pragma: no cover - the checks above leave nothing
        raise ValueError(f"not base64url ({exc})") from None
    if b64encode(data).encode("ascii") != raw:
        raise ValueError("not canonical base64url (spare bits are set)")
    return data
