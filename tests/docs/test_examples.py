"""Every code block of README.md and docs/*.md is run or checked, by its language.

* ``python``: a block with ``test_`` functions is a test file, run through ``pytester`` as
  a downstream suite with the plugin (``--failover-block-unknown-hosts``), every test of
  it passing; any other block is a script, run as written in a new process, with nothing
  faked around it and every host but loopback out of reach (``_bootstrap.py``);
* ``sh`` / ``bash`` / ``console``: every command is checked against the project, and the
  safe ones are run (``_shell.py``);
* ``toml``: parsed; an agent configuration is loaded by the agent's config loader, an
  override file by the control writer's;
* ``json`` / ``yaml``: parsed;
* ``text``: a class tree (``└──``), whose every name must exist and subclass its parent.

A block marked ``<!-- no-run: reason -->`` is only listed, as a warning in the run's summary
(``test_no_run_blocks_are_few``); see ``_markdown.py`` for the directives.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from ._markdown import ROOT, Block, blocks, pages
from ._shell import check_shell, invoke_agent

#: At most this many blocks may be left unrun.
NO_RUN_BUDGET = 3

ALL = [block for page in pages() for block in blocks(page)]
RUN = [block for block in ALL if block.no_run is None]
NO_RUN = [block for block in ALL if block.no_run is not None]


def _agent_module(name: str) -> Any:
    """The agent's module ``name``, wherever the agent's package lives now."""
    for package in ("failover_agent", "agent"):
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(f"no agent package has a module {name!r}")


@pytest.fixture
def page_dir(tmp_path: Path, block: Block) -> Path:
    """A working directory holding the page's ``file:`` blocks and a control signing key."""
    for other in blocks(block.page):
        if other.file is not None:
            (tmp_path / other.file).write_text(other.source, encoding="utf-8")
    # The signing key agent.md has the reader make, made the same way.
    if not (tmp_path / "control.key").exists():
        result = invoke_agent(["control", "keygen"], tmp_path)
        assert result.exit_code == 0, result.output
    return tmp_path


def is_test_file(block: Block) -> bool:
    """Whether a Python block defines tests (then it is run by pytest, not as a script)."""
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        for node in ast.parse(block.source).body
    )


def _run_python(block: Block, cwd: Path) -> None:
    script = cwd / f"block_{block.line}.py"
    script.write_text(block.padded(), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("_bootstrap.py")), str(block.page), str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{block.where} failed:\n{result.stdout}{result.stderr}"


def run_test_file(block: Block, pytester: pytest.Pytester, cwd: Path) -> None:
    """Run the block as a downstream suite's test file: every test in it must pass."""
    for page_file in cwd.iterdir():
        if page_file.is_file() and page_file.parent != pytester.path:
            shutil.copyfile(page_file, pytester.path / page_file.name)
    name = f"test_{block.page.stem.lower().replace('-', '_')}_{block.line}.py"
    (pytester.path / name).write_text(block.padded(), encoding="utf-8")
    result = pytester.runpytest("-p", "no:cacheprovider", "--failover-block-unknown-hosts", name)
    outcomes = result.parseoutcomes()
    output = f"{block.where} as a test file: {outcomes}\n" + "\n".join(result.outlines)
    assert outcomes.get("passed", 0) > 0, output
    assert set(outcomes) <= {"passed", "warning", "warnings"}, output
    assert result.ret == pytest.ExitCode.OK, output


def _check_toml(block: Block, cwd: Path) -> None:
    data = tomllib.loads(block.source)
    path = cwd / (block.file or "block.toml")
    path.write_text(block.source, encoding="utf-8")
    pools = data.get("pools")
    if isinstance(pools, list):
        _agent_module("config").load_config(path)  # raises ConfigError listing every error
    elif isinstance(pools, dict):
        _agent_module("control_writer").load_override(path)
    else:
        pytest.fail(f"{block.where}: a TOML block that is neither an agent config nor an override file")


def _resolve(name: str) -> Any:
    if "." in name:
        module, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(module), attr)
    return getattr(importlib.import_module("pytest_failover"), name, None) or getattr(builtins, name)


def _check_text(block: Block, cwd: Path) -> None:
    """A text block is a class tree: each name subclasses the nearest less indented name."""
    stack: list[tuple[int, type]] = []
    lines = [line for line in block.source.splitlines() if line.strip()]
    assert any("──" in line for line in lines), f"{block.where}: a text block that is not a class tree"
    for line in lines:
        match = re.search(r"[A-Za-z_][\w.]*", line)
        assert match is not None, line
        depth, cls = match.start(), _resolve(match.group())
        assert isinstance(cls, type), f"{block.where}: {match.group()} is not a class"
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parent = stack[-1][1]
            assert issubclass(cls, parent), f"{block.where}: {cls.__name__} is not a {parent.__name__}"
        stack.append((depth, cls))


def _check_shell(block: Block, cwd: Path) -> None:
    problems = check_shell(block.source, cwd=cwd, console=block.lang == "console")
    assert not problems, f"{block.where}:\n" + "\n".join(problems)


CHECKS: dict[str, Callable[[Block, Path], None]] = {
    "python": _run_python,
    "py": _run_python,
    "sh": _check_shell,
    "bash": _check_shell,
    "shell": _check_shell,
    "console": _check_shell,
    "toml": _check_toml,
    "json": lambda block, cwd: json.loads(block.source),
    "yaml": lambda block, cwd: yaml.safe_load(block.source),
    "yml": lambda block, cwd: yaml.safe_load(block.source),
    "text": _check_text,
}


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_code_block(block: Block, page_dir: Path, request: pytest.FixtureRequest) -> None:
    """The block runs (or, for shell and data, checks out) as the page presents it."""
    if block.lang in {"python", "py"} and is_test_file(block):
        run_test_file(block, request.getfixturevalue("downstream"), page_dir)
        return
    check = CHECKS.get(block.lang)
    assert check is not None, (
        f"{block.where}: a block in {block.lang or 'no language'!r}: give it one of "
        f"{', '.join(sorted(CHECKS))}, or mark it <!-- no-run: reason -->"
    )
    check(block, page_dir)


def test_no_run_blocks_are_few() -> None:
    """Blocks left unrun each say why, there are at most NO_RUN_BUDGET, and the run lists them."""
    listing = "\n".join(f"  {b.where} ({b.lang}): {b.no_run}" for b in NO_RUN)
    assert all(b.no_run for b in NO_RUN), f"a no-run marker without a reason:\n{listing}"
    assert len(NO_RUN) <= NO_RUN_BUDGET, f"{len(NO_RUN)} blocks not run (budget {NO_RUN_BUDGET}):\n{listing}"
    if NO_RUN:  # a warning reaches the summary of every run, with or without xdist
        warnings.warn(f"{len(NO_RUN)} docs code block(s) not run:\n{listing}", UserWarning, stacklevel=1)


def test_every_page_is_scanned() -> None:
    """The runner sees the README and every page of the MkDocs nav."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    in_nav = set(re.findall(r"([\w-]+\.md)", nav))
    assert in_nav <= {page.name for page in pages()}
    assert ALL, "no code block found"
