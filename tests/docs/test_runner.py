"""The docs runner itself: it finds every block and its directives, and it catches wrong ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._markdown import Block, blocks
from ._shell import check_shell, commands
from .test_examples import _check_text, _check_toml, _run_python, is_test_file, run_test_file

PAGE = """\
# A page

<!-- no-run: needs a real collector -->
```sh
otelcol-contrib --config collector.yaml
```

1. A step:

    ```python
    print("indented")
    ```

<!-- file: agent.toml -->
```toml
location = "x"
```
"""


def _block(tmp_path: Path, lang: str, source: str) -> Block:
    return Block(page=tmp_path / "page.md", line=1, lang=lang, source=source)


def test_blocks_carry_language_line_and_directives(tmp_path: Path) -> None:
    """Each fence becomes a Block with its first code line, its dedented source and its directives."""
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    found = blocks(page)
    assert [(b.lang, b.line, b.no_run, b.file) for b in found] == [
        ("sh", 5, "needs a real collector", None),
        ("python", 11, None, None),
        ("toml", 16, None, "agent.toml"),
    ]
    assert found[1].source == 'print("indented")\n'
    assert found[1].padded().splitlines()[10] == 'print("indented")'


def test_an_unclosed_fence_is_an_error(tmp_path: Path) -> None:
    """A fence that never closes would swallow the rest of the page, so it fails loudly."""
    page = tmp_path / "page.md"
    page.write_text("```python\nprint(1)\n", encoding="utf-8")
    with pytest.raises(ValueError, match="never closed"):
        blocks(page)


def test_commands_split_a_shell_block() -> None:
    """Continuations join, comments and environment prefixes go, separators split commands."""
    source = "make demo &   # in the background\nA=1 docker compose \\\n  -f x.yaml up && promtool x\n"
    assert commands(source) == [
        ["make", "demo"],
        ["docker", "compose", "-f", "x.yaml", "up"],
        ["promtool", "x"],
    ]
    assert commands("$ make test\nok\n", console=True) == [["make", "test"]]


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("make no-such-target\n", "no target 'no-such-target'"),
        ("frobnicate --now\n", "unknown program 'frobnicate'"),
        ("pip install 'pytest-failover[nope]'\n", "no extra 'nope'"),
        ("pip install left-pad\n", "left-pad is not a dependency"),
        ("promtool check rules dashboards/missing.yml\n", "no such file or directory dashboards/missing.yml"),
        ("python dashboards/generate.py --frobnicate\n", "does not handle --frobnicate"),
        ("failover-agent no-such-command\n", "no command 'no-such-command'"),
        ("failover-agent run --no-such-option x\n", "has no option --no-such-option"),
        ("amtool silence add alertname=X\n", "talks to a running Alertmanager"),
        ("source venv/bin/activate\n", "only 'source .venv/bin/activate'"),
        ("amtool check-config dashboards/alertmanager/missing.yml\n", "no such file or directory"),
        ("amtool config routes test --config.file=dashboards/alertmanager/alertmanager.yml "
         "--verify.receivers=tickets severity=page\n", "Expected receivers did not match"),
    ],
)
def test_wrong_shell_commands_are_reported(tmp_path: Path, source: str, problem: str) -> None:
    """A command the project does not have is a problem, named in the report."""
    problems = check_shell(source, cwd=tmp_path)
    assert any(problem in p for p in problems), problems


def test_right_shell_commands_pass(tmp_path: Path) -> None:
    """The project's own commands, extras and files check out."""
    source = (
        "make test\nmake demo DEMO_ARGS=--plain\npip install 'pytest-failover[agent]'\n"
        "source .venv/bin/activate\npip install -e '.[simulator]'\n"
        "promtool check rules dashboards/alerts.yml\nfailover-agent --help\n"
        "amtool check-config dashboards/alertmanager/alertmanager.yml\n"
        "amtool config routes test --config.file=dashboards/alertmanager/alertmanager.yml "
        "--verify.receivers=oncall severity=page\n"
    )
    assert check_shell(source, cwd=tmp_path) == []


def test_a_failing_python_block_fails(tmp_path: Path) -> None:
    """A script that raises fails its test, with the page's line in the traceback."""
    block = Block(page=tmp_path / "page.md", line=3, lang="python", source="raise SystemExit('boom')\n")
    with pytest.raises(AssertionError, match="boom"):
        _run_python(block, tmp_path)


@pytest.mark.parametrize(
    "source",
    [
        "import httpx\n\nhttpx.get('https://api.example.com/v1/rooms')\n",
        "import socket\n\nsocket.create_connection(('192.0.2.1', 443), timeout=1)\n",
    ],
)
def test_a_python_block_that_goes_online_fails(tmp_path: Path, source: str) -> None:
    """Nothing fakes the docs' example hosts: a script without its own set-up fails, naming the host."""
    block = Block(page=tmp_path / "page.md", line=1, lang="python", source=source)
    with pytest.raises(AssertionError, match=r"hosts that are not loopback: .*(api\.example\.com|192\.0\.2\.1)"):
        _run_python(block, tmp_path)


def test_a_python_block_runs_with_only_its_own_set_up(tmp_path: Path) -> None:
    """A script that starts its own fake domains reaches them, and loopback stays open."""
    source = (
        "import httpx\nfrom pytest_failover.simulator import FakeDomains\n\n"
        "with FakeDomains() as fake:\n    fake.add('api.example.com')\n"
        "    assert httpx.get('https://api.example.com/').json()['domain'] == 'api.example.com'\n"
    )
    _run_python(Block(page=tmp_path / "page.md", line=1, lang="python", source=source), tmp_path)


def test_a_failing_test_file_block_fails(tmp_path: Path, downstream: pytest.Pytester) -> None:
    """A block with a failing test fails, and so do one whose tests skip and one that goes online."""
    block = _block(tmp_path, "python", "def test_fine():\n    pass\n\ndef test_wrong():\n    assert 1 == 2\n")
    assert is_test_file(block)
    with pytest.raises(AssertionError, match="as a test file"):
        run_test_file(block, downstream, tmp_path)
    skipped = _block(tmp_path, "python", "import pytest\n\ndef test_later():\n    pytest.skip('x')\n")
    with pytest.raises(AssertionError, match="as a test file"):
        run_test_file(skipped, downstream, tmp_path)
    online = _block(tmp_path, "python", "import httpx\n\ndef test_x():\n    httpx.get('https://example.org')\n")
    with pytest.raises(AssertionError, match="BlockedHostError"):
        run_test_file(online, downstream, tmp_path)


def test_a_wrong_class_tree_fails(tmp_path: Path) -> None:
    """A tree that puts a class under one it does not subclass is refused."""
    _check_text(_block(tmp_path, "text", "httpx.TransportError\n └── FailoverError\n"), tmp_path)
    with pytest.raises(AssertionError, match="is not a"):
        _check_text(_block(tmp_path, "text", "httpx.TransportError\n └── ValueError\n"), tmp_path)


def test_an_invalid_agent_config_fails(tmp_path: Path) -> None:
    """An agent TOML block goes through the agent's loader, which refuses unknown keys."""
    source = '[[pools]]\nname = "api"\ndomains = ["https://api.example.com"]\nintervall = 3\n'
    with pytest.raises(Exception, match="intervall"):
        _check_toml(_block(tmp_path, "toml", source), tmp_path)
