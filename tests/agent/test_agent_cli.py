"""``failover-agent``'s conventions: --version, one-line usage errors, ``run`` needs a
configuration (positional or --config), an install hint when the agent extra is missing."""

from __future__ import annotations

import asyncio
import importlib
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from failover_agent.__main__ import missing_module_hint
from failover_agent.cli import main
from failover_agent.listener import Listener

from pytest_failover import __version__

ROOT = Path(__file__).resolve().parents[2]
HINT = "pip install 'pytest-failover[agent]'"


def _entry_point() -> tuple[str, str]:
    """The console script's module and attribute, as pyproject.toml declares them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    module, _, attr = project["scripts"]["failover-agent"].partition(":")
    return module, attr


def _invoke(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, list(args), prog_name="failover-agent")
    return result.exit_code, result.output.splitlines()


def test_version() -> None:
    """``--version`` (and ``-V``) print the package version and exit 0."""
    for flag in ("--version", "-V"):
        assert _invoke(flag) == (0, [f"failover-agent {__version__}"])


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["run", "--listen", "nonsense", "agent.toml"],
         "Error: Invalid value for '--listen': 'nonsense': expected HOST:PORT such as '127.0.0.1:9464' "
         "(see 'failover-agent run --help')"),
        (["run", "--listen", "127.0.0.1:99999", "agent.toml"],
         "Error: Invalid value for '--listen': '127.0.0.1:99999': port 99999 out of range (0 to 65535) "
         "(see 'failover-agent run --help')"),
        (["run", "--log-level", "LOUD", "agent.toml"],
         "Error: Invalid value for '--log-level': 'LOUD' is not one of 'debug', 'info', 'warning', 'error', "
         "'critical'. (see 'failover-agent run --help')"),
        (["demo", "--duration", "0"],
         "Error: Invalid value for '--duration': 0.0 is not in the range x>0. (see 'failover-agent demo --help')"),
        (["demo", "--listen", ":9464"],
         "Error: Invalid value for '--listen': ':9464': expected HOST:PORT such as '127.0.0.1:9464' "
         "(see 'failover-agent demo --help')"),
        (["run"],
         "Error: missing the configuration: failover-agent run agent.toml (or --config agent.toml); "
         "the demo is 'failover-agent demo' (see 'failover-agent run --help')"),
        (["rules"],
         "Error: missing the configuration: failover-agent rules agent.toml (or --config agent.toml) "
         "(see 'failover-agent rules --help')"),
        (["run", "a.toml", "--config", "b.toml"],
         "Error: two configurations given (a.toml and --config b.toml): give one (see 'failover-agent run --help')"),
        (["run", "--frobnicate"],  # click's own words, which click 8.4 changed
         f"Error: {click.exceptions.NoSuchOption('--frobnicate').format_message()} (see 'failover-agent run --help')"),
        (["frobnicate"], "Error: No such command 'frobnicate'. (see 'failover-agent --help')"),
        (["control", "keygen", "--alg", "RSA"],
         "Error: Invalid value for '--alg': 'RSA' is not one of 'EdDSA', 'HS256'. "
         "(see 'failover-agent control keygen --help')"),
    ],
    ids=["listen-nonsense", "port-99999", "log-level", "duration", "listen-no-host", "run-no-config",
         "rules-no-config", "two-configs", "unknown-option", "unknown-command", "nested-group"],
)
def test_usage_errors_are_one_line_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               args: list[str], line: str) -> None:
    """A bad option value, a missing or doubled configuration: one line, exit 2, no traceback."""
    monkeypatch.chdir(tmp_path)
    assert _invoke(*args) == (2, [line])


def test_run_takes_the_file_positionally_like_check_config(tmp_path: Path) -> None:
    """``run FILE`` and ``run --config FILE`` read the same file: a broken one gives the same errors."""
    bad = tmp_path / "agent.toml"
    bad.write_text('[[pools]]\nname = "a"\ndomains = ["ftp://x"]\n')
    positional = CliRunner().invoke(main, ["run", str(bad)])
    option = CliRunner().invoke(main, ["run", "--config", str(bad)])
    assert positional.exit_code == option.exit_code == 2
    assert positional.output == option.output
    assert "  pools[0].domains[0]: unsupported scheme 'ftp' (expected http or https, e.g. " \
           "'https://api.example.com')" in positional.output.splitlines()


def test_run_with_a_positional_file_starts_and_stops(tmp_path: Path) -> None:
    """``failover-agent run agent.toml`` starts the agent with that file and exits 0 on SIGINT."""
    cfg = tmp_path / "agent.toml"
    cfg.write_text('location = "cli-test"\n[[pools]]\nname = "api"\ndomains = ["http://127.0.0.1:9"]\n'
                   '[exporters.prometheus]\nlisten = "127.0.0.1:0"\n')
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "failover_agent", "run", str(cfg), "--plain"],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 30
            while "agent started" not in log.read_text() and time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert "agent started at location 'cli-test'" in text
    assert "Traceback" not in text


_STOP_AT_START = """
import asyncio, logging, os, signal, sys
from failover_agent.config import parse_config
from failover_agent.console import LogReporter
from failover_agent.service import serve

class StopAtStart(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("agent started"):
            os.kill(os.getpid(), signal.SIGINT)  # the instant the agent says it started

logging.basicConfig(level=logging.INFO, stream=sys.stdout)
logging.getLogger("failover_agent").addHandler(StopAtStart())
config = parse_config({
    "location": "stop-at-start",
    "pools": [{"name": "api", "domains": ["http://127.0.0.1:9"]}],
    "exporters": {"prometheus": {"listen": "127.0.0.1:0"}},
})
print("exit", asyncio.run(serve(config, config_path=None, reporter=LogReporter())), flush=True)
"""


def test_a_stop_signal_right_after_the_start_stops_the_agent_cleanly(tmp_path: Path) -> None:
    """A SIGINT the moment "agent started" is logged (a supervisor's, a test's) stops it
    like any other: the handlers are in place before the start. Installed after it, such
    a signal raised KeyboardInterrupt, and the threads the start had begun could keep the
    process from exiting."""
    done = subprocess.run([sys.executable, "-c", _STOP_AT_START], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0 and "exit 0" in done.stdout, done.stdout + done.stderr
    assert "SIGINT received: stopping" in done.stdout and "Traceback" not in done.stderr


def test_the_entry_point_is_the_shim_and_the_shim_is_the_group() -> None:
    """pyproject's console script enters through failover_agent.__main__, whose ``main`` is the
    click group itself when the extra is installed."""
    module, attr = _entry_point()
    assert module == "failover_agent.__main__"
    assert getattr(importlib.import_module(module), attr) is main


_PROBE_IMPORTS = (
    "import sys, httpx, failover_agent.cli; "
    "print(sorted(m for m in ('rich', 'pygments', 'httpx._main') if sys.modules.get(m)), "
    "type(httpx.main).__name__)"
)


@pytest.mark.parametrize(
    ("first", "loaded", "cli_type"),
    [("failover_agent.__main__", "[]", "function"),  # httpx's stand-in for a missing CLI
     ("httpx", "['httpx._main', 'pygments', 'rich']", "Command")],  # the click command
    ids=["agent-process", "httpx-imported-first"],
)
def test_the_agent_process_skips_httpx_command_line(first: str, loaded: str, cli_type: str) -> None:
    """Entering through the console script's module, the agent never loads httpx's command
    line (nor rich and pygments, which only it needs with ``--plain``); a process that
    imported httpx before keeps httpx as it is."""
    out = subprocess.run([sys.executable, "-c", f"import {first}; " + _PROBE_IMPORTS],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert " ".join(out[:-1]) == loaded and out[-1] == cli_type


@pytest.mark.parametrize(
    ("blocked", "args"),
    [("click", ["--help"]), ("apscheduler", ["run", "agent.toml"]), ("yaml", ["rules", "agent.toml"])],
    ids=["click-at-start", "apscheduler-lazily", "yaml-lazily"],
)
def test_a_missing_extra_gives_the_install_hint(tmp_path: Path, blocked: str, args: list[str]) -> None:
    """The console script's entry point, run with a dependency of the extra unimportable:
    one line naming the module and the pip command, exit 1, no traceback."""
    (tmp_path / "agent.toml").write_text('[[pools]]\nname = "api"\ndomains = ["http://127.0.0.1:9"]\n'
                                         '[exporters.prometheus]\nlisten = "127.0.0.1:0"\n'
                                         '[[slo]]\npool = "api"\nobjective = 99.9\n')
    module, attr = _entry_point()
    script = (f"import sys; sys.modules[{blocked!r}] = None; sys.argv = ['failover-agent', *{args!r}]; "
              f"from {module} import {attr} as main; main()")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    expected = f"failover-agent needs the agent extra (missing module {blocked!r}): {HINT}"
    assert result.stderr.splitlines() == [expected if blocked == "click" else f"Error: {expected}"]


def test_our_own_missing_module_is_a_bug_not_a_hint() -> None:
    """A missing module of this project is not blamed on the extra."""
    assert missing_module_hint(ModuleNotFoundError("x", name="failover_agent.nope")) is None
    assert missing_module_hint(ModuleNotFoundError("x", name="pytest_failover._gone")) is None
    assert missing_module_hint(ModuleNotFoundError("x", name="rich.console")) == (
        f"failover-agent needs the agent extra (missing module 'rich'): {HINT}")


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every command under ``group``, the group itself first."""
    out = [path]
    for name, command in group.commands.items():
        out += _commands(command, (*path, name)) if isinstance(command, click.Group) else [(*path, name)]
    return out


@pytest.mark.parametrize("path", _commands(main), ids=lambda path: " ".join(path) or "failover-agent")
def test_help_shows_no_markup(path: tuple[str, ...]) -> None:
    """Every command's --help reads as plain text: no reST literals or roles from the docstrings."""
    code, lines = _invoke(*path, "--help")
    assert code == 0
    assert [line for line in lines if "``" in line or ":func:`" in line or ":class:`" in line] == []


async def test_an_address_that_does_not_resolve_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The listener's error names the address it could not resolve, with the resolver's reason."""
    real = socket.getaddrinfo

    def resolve(host: object, *args: object, **kwargs: object) -> object:
        if host == "nowhere.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]  # passed through as given

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    listener = Listener({}, {})
    with pytest.raises(OSError, match=r"^listen address nowhere\.invalid:9464: Name or service not known$"):
        await asyncio.wait_for(listener.start("nowhere.invalid", 9464), timeout=10)
    await listener.aclose()


def test_run_names_the_address_it_cannot_listen_on(tmp_path: Path) -> None:
    """`run --listen` on an address that is not this machine's: one log line naming it, exit 1."""
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[[pools]]\nname = "api"\ndomains = ["http://127.0.0.1:9"]\n')
    proc = subprocess.run([sys.executable, "-m", "failover_agent", "run", str(cfg), "--plain",
                           "--listen", "192.0.2.1:9464"],  # TEST-NET-1: never a local address
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                          timeout=60, check=False)
    assert proc.returncode == 1, proc.stdout
    # (asyncio's own words: from Python 3.13 it skips an address it cannot assign, then says so)
    reason = ("Cannot assign requested address" if sys.version_info < (3, 13)
              else "could not bind on any address out of [('192.0.2.1', 9464)]")
    assert proc.stdout.rstrip().endswith(f"ERROR   cannot start: listen address 192.0.2.1:9464: {reason}"), proc.stdout
    assert "Traceback" not in proc.stdout


SLO_CONFIG = ('[[pools]]\nname = "api"\ndomains = ["https://api.example.com"]\n'
              '[control]\nsigning_key_file = "absent.key"\n'
              '[[slo]]\npool = "api"\nobjective = 99.9\n')


def test_rules_writes_the_slo_rules_to_stdout_or_a_file(tmp_path: Path) -> None:
    """``rules FILE`` prints the rule file, ``-o`` writes it (same text) and says what it wrote; the
    files the configuration names (here a missing key) are not needed."""
    config = tmp_path / "agent.toml"
    config.write_text(SLO_CONFIG)
    printed = CliRunner().invoke(main, ["rules", str(config)])
    assert printed.exit_code == 0, printed.output
    assert printed.output.startswith("# Prometheus rules for the SLOs of agent.toml, written by 'failover-agent rules'.")
    out = tmp_path / "slo.yml"
    written = CliRunner().invoke(main, ["rules", "--config", str(config), "-o", str(out)])
    assert (written.exit_code, written.output) == (0, f"{out}: 1 SLO(s), 20 rules\n")
    assert out.read_text(encoding="utf-8") == printed.output


def test_rules_without_an_slo_or_with_a_bad_one_exits_2(tmp_path: Path) -> None:
    """No [[slo]]: one line saying so; a broken one: the configuration's errors; both exit 2."""
    config = tmp_path / "agent.toml"
    config.write_text('[[pools]]\nname = "api"\ndomains = ["https://api.example.com"]\n')
    assert _invoke("rules", str(config)) == (2, [
        f'Error: {config} has no [[slo]] table (such as pool = "api", objective = 99.9, window = "30d"): '
        "no rules to write"])
    config.write_text(SLO_CONFIG.replace("99.9", "100"))
    assert _invoke("rules", str(config)) == (2, [
        f"{config}: 1 error(s)", "  slo[0].objective: 100 is not a percentage strictly between 0 and 100, such as 99.9"])
