"""The code blocks of the documentation pages, with the directives written before them.

A directive is an HTML comment on the last non-blank line before a fence, so readers
never see it (GitHub and MkDocs both hide comments):

``<!-- no-run: REASON -->``
    the block is not run; the test suite counts and lists these, and keeps them few.
``<!-- file: NAME -->``
    the block is the content of the file ``NAME``: it is checked like any block of its
    language, and written into the working directory of every block of the same page, so
    a later ``failover-agent check-config NAME`` or ``load_config("NAME")`` reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Block", "blocks", "pages"]

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*(?P<key>no-run|file)\s*:\s*(?P<value>.*?)\s*-->\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the first line of code (the one after the opening fence)
    lang: str
    source: str
    no_run: str | None = None
    file: str | None = None

    @property
    def where(self) -> str:
        """``docs/client.md:12``: the page relative to the repository, and the line."""
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"

    def padded(self) -> str:
        """The source preceded by blank lines, so its line numbers are the page's."""
        return "\n" * (self.line - 1) + self.source


def pages() -> list[Path]:
    """Every page whose code blocks are run: the README and the MkDocs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, in order; an unclosed fence is an error."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        info = opening["info"].strip().split()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{page}:{i + 1}: the code block is never closed")
        directives = _directives(lines, i)
        found.append(
            Block(
                page=page,
                line=i + 2,
                lang=info[0].lower() if info else "",
                source="\n".join(body) + "\n",
                no_run=directives.get("no-run"),
                file=directives.get("file"),
            )
        )
        i = j + 1
    return found


def _directives(lines: list[str], fence: int) -> dict[str, str]:
    """The directives in the comments just above the fence at index ``fence``."""
    out: dict[str, str] = {}
    k = fence - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    while k >= 0 and (match := _DIRECTIVE.match(lines[k])) is not None:
        out[match["key"]] = match["value"]
        k -= 1
    return out
