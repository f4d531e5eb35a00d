"""What shared health writes to Redis, and the strict reading of what it finds there.

Keys (``{p}`` is the prefix, ``{pool}`` a local pool's name, ``{domain}`` its URL)::

    {p}:open:{pool}:{domain}    {"until": <unix s>}   the domain is open until then;
                                                     kept one cooldown past it (catch-up)
    {p}:lease:{pool}:{domain}   <sender>              the fleet's probe lease (SET NX PX)
    {p}:serving:{pool}          <domain URL>          the domain that last served the pool
    {p}:control                 <version>             the newest control version applied

and one pub/sub channel, ``{p}:events``, carrying :class:`Word` values as JSON.
Keys are only ever *built* from local names, never listed or parsed, so a key that
names a pool or domain this process does not have is never even read. A message is
read with :func:`decode`: anything malformed, oversized, of another version or with a
field of the wrong type is dropped whole (``None``); whether its pool and domain are
local is the receiver's check.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

__all__ = ["KINDS", "MAX_MESSAGE_BYTES", "Keys", "Word", "decode", "encode", "read_until"]

VERSION = 1
MAX_MESSAGE_BYTES = 2048
_MAX_NAME = 512  # a pool name, a domain URL or a sender id, in characters

# What another process says about a domain (see _breaker.py, "word from another process"):
OPEN = "open"  # it opened the domain until ``until``
CLOSE = "close"  # the domain answered its probe: healthy again
SUSPECT = "suspect"  # it moved off the (closed) domain; ``again``: its failback probe failed
FREE = "free"  # its probe was abandoned: the lease is free, nothing was learnt
FAILED = "failed"  # its attempt on the (closed) domain failed: one more failure
CONTROL = "control"  # it applied control document ``version``
KINDS = frozenset({OPEN, CLOSE, SUSPECT, FREE, FAILED, CONTROL})


@dataclass(frozen=True, slots=True, kw_only=True)
class Word:
    """One message of the events channel."""

    sender: str
    kind: str
    pool: str = ""
    domain: str = ""
    until: float = 0.0  # OPEN: Unix time
    again: bool = False  # SUSPECT
    version: int = 0  # CONTROL

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Word.kind must be one of {sorted(KINDS)}, got {self.kind!r}")


def encode(word: Word) -> bytes:
    data: dict[str, object] = {"v": VERSION, "from": word.sender, "kind": word.kind}
    if word.kind == CONTROL:
        data["version"] = word.version
    else:
        data["pool"], data["domain"] = word.pool, word.domain
    if word.kind == OPEN:
        data["until"] = word.until
    if word.kind == SUSPECT:
        data["again"] = word.again
    return json.dumps(data, separators=(",", ":")).encode()


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= _MAX_NAME else None


def decode(raw: bytes | str) -> Word | None:
    """The word a message carries, or None if it is not one (never raises)."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return None
    try:
        data = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        return None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        return None
    sender, kind = _name(data.get("from")), data.get("kind")
    if sender is None or kind not in KINDS:
        return None
    if kind == CONTROL:
        version = data.get("version")
        if type(version) is not int or version < 0:
            return None
        return Word(sender=sender, kind=kind, version=version)
    pool, domain = _name(data.get("pool")), _name(data.get("domain"))
    if pool is None or domain is None:
        return None
    until, again = 0.0, False
    if kind == OPEN:
        found = read_until(data.get("until"))
        if found is None:
            return None
        until = found
    if kind == SUSPECT:
        flag = data.get("again")
        if not isinstance(flag, bool):
            return None
        again = flag
    return Word(sender=sender, kind=kind, pool=pool, domain=domain, until=until, again=again)


def read_until(value: object) -> float | None:
    """A Unix time from Redis, or None: a finite, non-negative number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    until = float(value)
    return until if math.isfinite(until) and until >= 0 else None


class Keys:
    """The key and channel names under one prefix."""

    __slots__ = ("channel", "control", "prefix")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.channel = f"{prefix}:events"
        self.control = f"{prefix}:control"

    def open(self, pool: str, domain: str) -> str:
        return f"{self.prefix}:open:{pool}:{domain}"

    def lease(self, pool: str, domain: str) -> str:
        return f"{self.prefix}:lease:{pool}:{domain}"

    def serving(self, pool: str) -> str:
        return f"{self.prefix}:serving:{pool}"
