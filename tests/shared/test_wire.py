"""The messages of the events channel: what is written, and the strict reading of what is found."""

from __future__ import annotations

import pytest

from pytest_failover.shared import _wire
from pytest_failover.shared._wire import Word, decode, encode


@pytest.mark.parametrize(
    "word",
    [
        Word(sender="h:1:ab", kind=_wire.OPEN, pool="api", domain="https://a.example", until=1.7e9),
        Word(sender="h:1:ab", kind=_wire.CLOSE, pool="api", domain="https://a.example"),
        Word(sender="h:1:ab", kind=_wire.SUSPECT, pool="api", domain="https://a.example", again=True),
        Word(sender="h:1:ab", kind=_wire.FREE, pool="api", domain="https://a.example"),
        Word(sender="h:1:ab", kind=_wire.CONTROL, version=7),
    ],
)
def test_every_word_reads_back_as_written(word: Word) -> None:
    """encode and decode are inverses for every kind."""
    assert decode(encode(word)) == word


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"v": 2, "from": "x", "kind": "close", "pool": "api", "domain": "https://a"}',
        b'{"v": 1, "kind": "close", "pool": "api", "domain": "https://a"}',
        b'{"v": 1, "from": "x", "kind": "reboot", "pool": "api", "domain": "https://a"}',
        b'{"v": 1, "from": "x", "kind": "close", "pool": 3, "domain": "https://a"}',
        b'{"v": 1, "from": "x", "kind": "close", "pool": "", "domain": "https://a"}',
        b'{"v": 1, "from": "x", "kind": "open", "pool": "api", "domain": "https://a"}',
        b'{"v": 1, "from": "x", "kind": "open", "pool": "api", "domain": "https://a", "until": true}',
        b'{"v": 1, "from": "x", "kind": "open", "pool": "api", "domain": "https://a", "until": -1}',
        b'{"v": 1, "from": "x", "kind": "open", "pool": "api", "domain": "https://a", "until": 1e999}',
        b'{"v": 1, "from": "x", "kind": "suspect", "pool": "api", "domain": "https://a", "again": 1}',
        b'{"v": 1, "from": "x", "kind": "control", "version": "7"}',
        b'{"v": 1, "from": "x", "kind": "control", "version": -1}',
        b'{"v": 1, "from": "x", "kind": "close", "pool": "api", "domain": "' + b"a" * 3000 + b'"}',
    ],
)
def test_anything_else_is_dropped_whole(raw: bytes) -> None:
    """Malformed, oversized, another version, a wrong type: None, never an exception."""
    assert decode(raw) is None


def test_a_word_of_an_unknown_kind_cannot_be_built() -> None:
    """Building a Word checks its kind and names the ones that exist."""
    with pytest.raises(ValueError, match=r"Word\.kind must be one of"):
        Word(sender="x", kind="reboot")


def test_without_redis_py_the_import_says_what_to_install() -> None:
    """Importing pytest_failover.shared without redis-py names the extra to install."""
    import subprocess
    import sys

    code = "import sys; sys.modules['redis'] = None\ntry:\n import pytest_failover.shared\nexcept ImportError as e:\n print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'pytest-failover[redis]'" in out.stdout
