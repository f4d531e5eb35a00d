"""The README is a short front page: the two commands, the install lines, links that resolve."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the agent extra brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_BYTES = 15_000

_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page, as GitHub and MkDocs both spell them."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors = set()
    for title in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        plain = re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).strip()
        anchors.add(re.sub(r"[ -]+", "-", plain))
    return anchors


def test_readme_is_a_front_page_of_at_most_15_kb() -> None:
    """The README stays small: the reference lives in docs/."""
    size = README.stat().st_size
    assert size <= MAX_BYTES, f"README.md is {size} bytes; move detail into docs/ (limit {MAX_BYTES})"


def test_readme_opens_with_the_two_commands_and_the_makefile_has_them() -> None:
    """`make demo` and `make test` come first, and are real Makefile targets."""
    head = README.read_text(encoding="utf-8")[:2500]
    assert "make demo" in head and "make test" in head
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\ndemo:" in makefile and "\ntest:" in makefile


def test_readme_links_resolve() -> None:
    """Every relative link names an existing file, and every #anchor a heading of it."""
    text = _FENCE.sub("", README.read_text(encoding="utf-8"))
    targets = [m["target"] for m in _LINK.finditer(text)]
    assert any(t.startswith("docs/") for t in targets), "the README links into docs/"
    broken = []
    for target in targets:
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path if path else README
        if not page.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in _anchors(page):
            broken.append(f"{target}: no heading #{anchor} in {path or 'README.md'}")
    assert not broken, "broken links in README.md:\n" + "\n".join(broken)


def test_readme_install_lines_name_every_extra() -> None:
    """Each optional extra of pyproject.toml (but dev) has its install line, and no other."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    documented = set(re.findall(r"pip install 'pytest-failover\[(\w+)\]'", README.read_text(encoding="utf-8")))
    assert documented == set(extras) - {"dev"}
