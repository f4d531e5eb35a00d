"""The README is the assembly of docs/*.md and opens with the two commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_is_assembled_from_the_docs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "build_readme.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_readme_opens_with_the_two_commands_and_the_makefile_has_them() -> None:
    head = (ROOT / "README.md").read_text(encoding="utf-8")[:2500]
    assert "make demo" in head and "make test" in head
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\ndemo:" in makefile and "\ntest:" in makefile
