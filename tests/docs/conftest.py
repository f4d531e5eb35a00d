"""The docs runner's report: the blocks it did not run, listed at the end of every run."""

from __future__ import annotations

import pytest

from ._markdown import blocks, pages


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    unrun = [block for page in pages() for block in blocks(page) if block.no_run is not None]
    if unrun:
        terminalreporter.section("docs: code blocks not run")
        for block in unrun:
            terminalreporter.write_line(f"{block.where} ({block.lang}): {block.no_run}")
