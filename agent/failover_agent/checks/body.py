"""The JSON check on an answer's body (``json_check = {field, equals}``)."""

from __future__ import annotations

import json
from typing import Any

from ..config import JsonCheck

__all__ = ["check_body", "json_field"]


def json_field(body: Any, dotted: str) -> Any:
    """The value at ``a.b.0.c`` in a parsed JSON document (KeyError if absent)."""
    current = body
    for part in dotted.split("."):
        if isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        elif isinstance(current, dict) and part in current:
            current = current[part]
        else:
            raise KeyError(dotted)
    return current


def check_body(content: bytes, check: JsonCheck | None) -> str | None:
    """None if the body passes ``check``, else a short reason."""
    if check is None:
        return None
    try:
        value = json_field(json.loads(content), check.field)
    except (ValueError, KeyError):
        return f"JSON field {check.field!r} missing"
    if isinstance(value, bool) != isinstance(check.equals, bool) or value != check.equals:
        return f"JSON field {check.field!r} is {value!r}, expected {check.equals!r}"
    return None
