"""What the shell blocks of the docs may say, checked against the project.

A shell block is never run as a whole (``make demo`` runs forever, ``make test`` is this
suite). Each command in it is checked instead:

* ``make TARGET [VAR=...]``: the Makefile has the target and uses the variable;
* ``failover-agent SUB [--opt ...]``: the installed script starts, the subcommand exists
  and its ``--help`` lists every option used; ``check-config FILE`` and ``control keygen``
  (in a scratch directory) are run for real, in this process through click's runner, and
  must succeed;
* ``python -m MODULE ...``: a project module whose ``--help`` lists every option and
  positional word used; ``python SCRIPT ...``: the script exists and handles every option;
* ``pip install``: every extra exists in pyproject.toml and every other package is one of
  its dependencies;
* ``source .venv/bin/activate``: the virtual environment is the one the Makefile makes;
* ``amtool``: the offline subcommands (``check-config``, ``config routes [test]``) are run
  for real (Debian's ``prometheus-alertmanager`` puts amtool on PATH) and must succeed, so
  ``config routes test --verify.receivers=R`` checks the documented route; any other
  subcommand talks to a running Alertmanager, so its block must be marked no-run;
* other tools (``prometheus``, ``promtool``, ``docker``, ...): named in ``EXTERNAL``;
  every repository path they are given exists.
"""

from __future__ import annotations

import functools
import glob
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import click
import click.testing

from ._markdown import ROOT

__all__ = ["EXTERNAL", "agent_cli", "check_shell", "commands", "invoke_agent"]

BIN = Path(sys.executable).parent

#: Programs from outside the project that the docs tell people to run.
EXTERNAL = frozenset({"apt-get", "docker", "otelcol-contrib", "prometheus", "promtool"})

_PATHLIKE = re.compile(r"^[\w.*-]+(/[\w.*-]+)+/?$")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&"})


def commands(source: str, *, console: bool = False) -> list[list[str]]:
    """The commands of a shell block: continuations joined, comments and env prefixes dropped."""
    text = source.replace("\\\n", " ")
    lines = text.splitlines()
    if console:
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    out: list[list[str]] = []
    for line in lines:
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in [*words, ";"]:
            if word in _SEPARATORS:
                while current and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", current[0]):
                    current.pop(0)
                if current:
                    out.append(current)
                current = []
            else:
                current.append(word)
    return out


def check_shell(source: str, *, cwd: Path, console: bool = False) -> list[str]:
    """Every problem found in the block's commands (an empty list: the block is right)."""
    found = commands(source, console=console)
    if not found:
        return ["the block has no command"]
    problems: list[str] = []
    for words in found:
        problems += [f"{shlex.join(words)}: {p}" for p in _check(words, cwd)]
    return problems


def _check(words: list[str], cwd: Path) -> list[str]:
    program = Path(words[0]).name if words[0].startswith(".venv/bin/") else words[0]
    args = words[1:]
    if program == "make":
        return _check_make(args)
    if program == "failover-agent":
        return _check_agent(args, cwd)
    if program in {"python", "python3"}:
        return _check_python(args)
    if program == "pip":
        return _check_pip(args)
    if program == "pytest":
        return _paths_exist(args, cwd)
    if program == "amtool":
        return _check_amtool(args, cwd)
    if program in {"source", "."}:
        return _check_activate(args)
    if program in EXTERNAL:
        return _paths_exist(args, cwd)
    return [f"unknown program {program!r}: teach tests/docs/_shell.py about it, or mark the block no-run"]


def _check_make(args: list[str]) -> list[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    problems = []
    for arg in args:
        name, eq, _ = arg.partition("=")
        if eq:
            if f"$({name})" not in makefile:
                problems.append(f"the Makefile does not use {name}")
        elif not re.search(rf"^{re.escape(arg)}:", makefile, re.M):
            problems.append(f"the Makefile has no target {arg!r}")
    return problems


def _check_activate(args: list[str]) -> list[str]:
    """``source .venv/bin/activate``: the virtual environment the Makefile makes, and this one's script."""
    venv = re.search(r"^VENV +\?= *(\S+)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    expected = f"{venv[1] if venv else '?'}/bin/activate"
    if args != [expected]:
        return [f"only 'source {expected}' (the Makefile's virtual environment) is documented"]
    if not (BIN / "activate").is_file():
        return [f"{BIN / 'activate'} does not exist"]
    return []


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@functools.cache
def _help(argv: tuple[str, ...]) -> tuple[int, str]:
    """Exit code and output of ``argv + ("--help",)``, asked once per process."""
    result = _run([*argv, "--help"], ROOT)
    return result.returncode, result.stdout + result.stderr


def agent_cli() -> click.Group:
    """The ``failover-agent`` command group, found through pyproject's entry point."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    module, _, attr = project["scripts"]["failover-agent"].partition(":")
    group = getattr(importlib.import_module(module), attr)
    assert isinstance(group, click.Group)
    return group


def invoke_agent(args: list[str], cwd: Path) -> click.testing.Result:
    """Run ``failover-agent ARGS`` in this process (much faster than a new one), in ``cwd``."""
    before = Path.cwd()
    os.chdir(cwd)
    try:
        return click.testing.CliRunner().invoke(agent_cli(), args, prog_name="failover-agent")
    finally:
        os.chdir(before)


def _check_agent(args: list[str], cwd: Path) -> list[str]:
    # The installed script must start (once per process); the rest runs in this process.
    code, output = _help((str(BIN / "failover-agent"),))
    if code != 0:
        return [f"failover-agent --help: exit {code}: {output}"]
    words = [a for a in args if not a.startswith("-")]
    # Nested groups (``failover-agent control keygen``): take words while they are commands.
    path: list[str] = []
    command: click.Command = agent_cli()
    for word in words:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
        path.append(word)
    if words and not path:
        return [f"failover-agent has no command {words[0]!r}"]
    helptext = invoke_agent([*path, "--help"], cwd).output
    problems = [
        f"failover-agent {' '.join(path)} has no option {opt}"
        for opt in (a.split("=", 1)[0] for a in args if a.startswith("--"))
        if opt != "--help" and opt not in helptext
    ]
    if problems:
        return problems
    if path == ["check-config"]:
        result = invoke_agent(args, cwd)
    elif path == ["control", "keygen"]:  # writes key files: into a directory of its own
        with tempfile.TemporaryDirectory() as scratch:
            result = invoke_agent(args, Path(scratch))
    else:
        return problems
    if result.exit_code != 0:
        problems.append(f"exit {result.exit_code}:\n{result.output}")
    return problems


def _check_python(args: list[str]) -> list[str]:
    if args[:1] == ["-m"] and len(args) > 1:
        module, rest = args[1], args[2:]
        if not (ROOT / module).is_dir() and not (ROOT / f"{module}.py").is_file():
            return [f"{module} is not a module of the repository"]
        code, output = _help((sys.executable, "-m", module))
        if code != 0:
            return [f"python -m {module} --help: exit {code}: {output}"]
        # Options, and the bare names among the arguments (benchmark names), must be listed.
        named = [w for w in rest if w.startswith("--") or re.fullmatch(r"[a-z_]+", w)]
        return [f"python -m {module} --help does not mention {w!r}" for w in named if w not in output]
    script = ROOT / args[0]
    if not script.is_file():
        return [f"no such script {args[0]}"]
    text = script.read_text(encoding="utf-8")
    return [f"{args[0]} does not handle {opt}" for opt in args[1:] if opt.startswith("-") and opt not in text]


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _check_pip(args: list[str]) -> list[str]:
    if args[:1] != ["install"]:
        return ["only pip install is documented"]
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    extras: dict[str, list[str]] = project["optional-dependencies"]
    requirements = [*project["dependencies"], *(r for reqs in extras.values() for r in reqs)]
    known = {re.split(r"[\[<>=;~! ]", r, maxsplit=1)[0].lower() for r in requirements}
    problems = []
    for spec in args[1:]:
        if spec.startswith("-"):
            continue
        name, _, rest = spec.partition("[")
        if name in {project["name"], "."}:
            for extra in filter(None, rest.rstrip("]").split(",")):
                if extra.strip() not in extras:
                    problems.append(f"pyproject.toml has no extra {extra.strip()!r}")
        elif re.split(r"[<>=~!]", name, maxsplit=1)[0].lower() not in known:
            problems.append(f"{name} is not a dependency in pyproject.toml")
    return problems


#: amtool's subcommands that need no running Alertmanager (they read the configuration file).
AMTOOL_OFFLINE = (("check-config",), ("config", "routes", "test"), ("config", "routes"))


def _check_amtool(args: list[str], cwd: Path) -> list[str]:
    words = tuple(a for a in args if not a.startswith("-"))
    if not any(words[: len(sub)] == sub for sub in AMTOOL_OFFLINE):
        return [f"amtool {' '.join(words[:2])} talks to a running Alertmanager: mark the block no-run"]
    problems = _paths_exist(args, cwd)
    if problems:
        return problems
    exe = shutil.which("amtool")
    if exe is None:
        return ["amtool is not on PATH (Debian: apt-get install prometheus-alertmanager)"]
    result = _run([exe, *args], ROOT)  # the docs give repository paths
    if result.returncode != 0:
        return [f"exit {result.returncode}:\n{result.stdout}{result.stderr}"]
    return []


def _paths_exist(args: list[str], cwd: Path) -> list[str]:
    problems = []
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if "://" in value or value.startswith("/") or not _PATHLIKE.match(value):
            continue
        if not any(glob.glob(str(base / value)) for base in (ROOT, cwd)):
            problems.append(f"no such file or directory {value}")
    return problems
