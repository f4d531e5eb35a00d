"""docs/simulator.md's table of what each client raises is the one the client tests verify."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from .test_clients import EXPECTED

DOC = Path(__file__).parents[2] / "docs" / "simulator.md"
COLUMNS = ["httpx", "httpx-async", "requests", "urllib3", "urllib", "aiohttp"]


def test_the_documented_exceptions_are_the_tested_ones() -> None:
    text = DOC.read_text()
    table = text[text.index("## What each client sees") :].split("\n## ")[0]
    documented: dict[str, dict[str, str]] = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 1 + len(COLUMNS) or not cells[0].startswith("`"):
            continue
        names = [_named(cell) for cell in cells[1:]]
        for fault in re.findall(r"`(\w+)`", cells[0]):
            documented[fault] = dict(zip(COLUMNS, names, strict=True))
    tested = {
        fault: {client: error.__qualname__ for client, (error, _) in by_client.items() if client in COLUMNS}
        for fault, by_client in EXPECTED.items()
    }
    documented = {
        fault: {client: name.rsplit(".", 1)[-1] for client, name in row.items()}
        for fault, row in documented.items()
    }
    assert documented == tested


def _named(cell: str) -> str:
    """The exception a cell of the table names for the running Python: its first, or the one it
    names for Python 3.13 (``(Python 3.13: `ReadError`)``) on 3.13 and later."""
    later = re.search(r"3\.13: `([\w.]+)`", cell)
    if later is not None and sys.version_info >= (3, 13):
        return later.group(1)
    first = re.search(r"`([\w.]+)`", cell)
    assert first is not None, cell
    return first.group(1)


def test_httpx2_raises_what_httpx_raises_as_the_docs_say() -> None:
    """The table leaves httpx2 out, saying it raises httpx's exceptions under its own names:
    the client tests verify exactly that."""
    assert "httpx2's clients, sync and async, raise the same as httpx's" in DOC.read_text()
    for by_client in EXPECTED.values():
        for httpx_kind, httpx2_kind in (("httpx", "httpx2"), ("httpx-async", "httpx2-async")):
            (ours, _), (theirs, _) = by_client[httpx_kind], by_client[httpx2_kind]
            assert (theirs.__module__, theirs.__name__) == ("httpx2", ours.__name__)


def test_the_first_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The quick start in docs/simulator.md is real code with the output it claims."""
    text = DOC.read_text()
    example = text[text.index("```python\n") + len("```python\n") :].split("```")[0]
    exec(compile(example, str(DOC), "exec"), {})
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "{'ok': True, 'domain': 'api2.example.com', 'method': 'GET', 'path': '/v1/rooms'}",
        "[Errno -2] Name or service not known",
    ]
