"""Strict JSON for the signed control document and the key files.

Stricter than ``json.loads`` wherever a lax reading could let two parsers disagree
about a signed text, or let a hostile one cost time and memory:

- the text must be UTF-8;
- a member name may appear only once in an object;
- ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON and are refused;
- an integer longer than ``MAX_INT_DIGITS`` digits is never converted (Python refuses
  past 4,300 digits with a bare ``ValueError``, after quadratic work); it comes back as
  a ``HugeInt`` so that the document rules can refuse it by field name;
- nesting deeper than the interpreter can follow is refused.

Every failure raises ``JSONError`` (a ``ValueError``) with a message that says why;
callers turn it into their own error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_INT_DIGITS", "HugeInt", "JSONError", "json_type", "loads", "short"]

MAX_INT_DIGITS = 20
"""No integer field of a control document or key needs more digits (``2**63`` has 19)."""


class JSONError(ValueError):
    """The text is not the strict JSON this package reads."""


@dataclass(frozen=True, slots=True)
class HugeInt:
    """A JSON integer too long to convert: only its size is kept."""

    digits: int
    negative: bool


def _parse_int(text: str) -> int | HugeInt:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        return HugeInt(digits, text.startswith("-"))
    return int(text)


def _reject_constant(name: str) -> Any:
    raise JSONError(f"{name} is not JSON")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise JSONError(f"member {key!r} appears twice in an object")
        result[key] = value
    return result


def loads(data: bytes) -> Any:
    """The JSON value of ``data``, read strictly (see the module docstring)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise JSONError("not UTF-8") from None
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique,
            parse_int=_parse_int,
            parse_constant=_reject_constant,
        )
    except RecursionError:
        raise JSONError("nested too deeply") from None
    except JSONError:
        raise
    except ValueError as exc:  # json.JSONDecodeError and float conversion
        raise JSONError(f"not JSON ({exc})") from None


def json_type(value: object) -> str:
    """The JSON name of ``value``'s type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, HugeInt):
        return f"an integer of {value.digits} digits"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a fraction"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def short(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to about ``limit`` characters: error messages stay one line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"
