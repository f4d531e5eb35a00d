"""``failover-agent maintenance start|end|list``: the signed file, what the agent takes from it,
and errors that change nothing."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from failover_agent.cli import main
from failover_agent.maintenance import Window, decide
from failover_agent.maintenance_file import MaintenanceFile, read_windows, sign_windows

from pytest_failover.control import ControlDocument, generate_key, load_key, save_key

A, B = "https://api.example.com", "https://api2.example.com"


@pytest.fixture
def agent_toml(tmp_path: Path) -> Path:
    save_key(tmp_path / "control.key", generate_key("EdDSA", kid="k1"), private=True)
    path = tmp_path / "agent.toml"
    path.write_text(f'[[pools]]\nname = "api"\ndomains = ["{A}", "{B}"]\n'
                    '[control]\nsigning_key_file = "control.key"\nmaintenance_file = "maintenance.jws"\n')
    return path


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["maintenance", *args])
    return result.exit_code, result.stdout, result.stderr


def _reader(tmp_path: Path) -> MaintenanceFile:
    return MaintenanceFile(tmp_path / "maintenance.jws", load_key(tmp_path / "control.key"))


def test_start_then_end_through_the_signed_file(agent_toml: Path, tmp_path: Path) -> None:
    """start writes a window the agent's reader takes (in maintenance now); end removes it."""
    code, out, err = _run("start", str(agent_toml), "--pool", "api", "--domain", A, "--for", "30m",
                          "--drain", "5m", "--reason", "upgrade")
    assert (code, err) == (0, ""), err
    ident = out.strip()
    reader = _reader(tmp_path)
    (window,) = reader.current()
    assert (window.source, window.pool, window.domains, window.drain, window.reason) == (
        ident, "api", frozenset({A}), 300.0, "upgrade")
    assert window.end - window.start == 1800
    assert decide(reader.current(), time.time()).is_active("api", A)
    code, out, _ = _run("list", str(agent_toml))
    assert out.startswith(f"{ident}\tapi\t") and out.rstrip().endswith(f"{A}\tupgrade")
    code, out, err = _run("end", str(agent_toml), ident)
    assert (code, out, err) == (0, f"{ident} ended\n", "")
    time.sleep(0.01)  # a new mtime for the reader  (bounded: once)
    (tmp_path / "maintenance.jws").touch()
    assert reader.current() == ()
    assert reader.version > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pool", "apl", "--for", "1h"], "Error: --pool: no pool named 'apl': did you mean 'api'?\n"),
        (["--pool", "api", "--domain", "https://web.example.com", "--for", "1h"],
         f"Error: --domain: 'https://web.example.com' is not a domain of pool 'api' ({A}, {B})\n"),
        (["--pool", "api", "--for", "an hour"],
         "Error: Invalid value: --for takes whole numbers of s (seconds), m (minutes), h (hours) or d (days), "
         "the largest unit first, such as '90s', '5m', '2h' or '1h30m': not 'an hour'\n"),
        (["--pool", "api", "--for", "1h", "--at", "2026-12-05T02:00:00"],
         "Error: Invalid value for --at: '2026-12-05T02:00:00' has no UTC offset: add one, such as "
         "2026-12-05T02:00:00Z\n"),
        (["--pool", "api", "--for", "1h", "--at", "2020-01-01T00:00:00Z"],
         "Error: the window would have ended already: check --at and --for\n"),
    ],
    ids=["pool-misspelt", "domain-not-in-pool", "bad-duration", "no-offset", "in-the-past"],
)
def test_a_bad_start_is_a_clear_error_and_writes_nothing(agent_toml: Path, tmp_path: Path, args: list[str],
                                                         message: str) -> None:
    code, out, err = _run("start", str(agent_toml), *args)
    assert (code, out) == (2, "")
    assert err.startswith(message.rstrip("\n")), err
    assert not (tmp_path / "maintenance.jws").exists()


def test_a_file_signed_by_another_key_is_refused_and_left_alone(agent_toml: Path, tmp_path: Path) -> None:
    """A file signed with another key: the command refuses to build on it, the agent ignores it."""
    forged = sign_windows([Window(pool="api", domains=frozenset({A}), start=0, end=2e9, source="x")], 1,
                          generate_key("EdDSA"))
    (tmp_path / "maintenance.jws").write_bytes(forged)
    code, _out, err = _run("start", str(agent_toml), "--pool", "api", "--for", "1h")
    assert code == 2 and "maintenance.jws: not signed with" in err and "nothing changed" in err
    assert (tmp_path / "maintenance.jws").read_bytes() == forged
    assert _reader(tmp_path).current() == ()
    code, _out, err = _run("end", str(agent_toml), "x")
    assert code == 2 and "not signed with" in err


def test_the_reader_refuses_an_older_file_and_a_control_document(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An older signed file copied back keeps the newer windows; a control document signed with the
    same key is not a maintenance file."""
    key = generate_key("HS256")
    path = tmp_path / "m.jws"
    reader = MaintenanceFile(path, key)
    one = Window(pool="api", domains=frozenset({A}), start=0, end=2e9, source="one")
    path.write_bytes(sign_windows([one], 5, key))
    assert reader.current() == (one,)
    caplog.set_level(logging.ERROR)
    path.write_bytes(sign_windows([], 4, key))
    reader._mtime = -1.0  # the file changed (whatever the file system's mtime resolution)
    assert reader.current() == (one,)
    assert "version 4 is older than 5" in caplog.text
    path.write_bytes(ControlDocument.sign(version=9, pools={}, expires_in=60, key=key))
    reader._mtime = -1.0
    assert reader.current() == (one,)
    assert "not a maintenance file" in caplog.text
    with pytest.raises(ValueError, match="not a maintenance file"):
        read_windows(path.read_bytes(), key)


def test_without_a_maintenance_file_the_command_says_what_to_add(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f'[[pools]]\nname = "api"\ndomains = ["{A}"]\n')
    code, _out, err = _run("start", str(path), "--pool", "api", "--for", "1h")
    assert code == 2
    assert err == (f"Error: {path} sets no control.maintenance_file: the run-time windows live in that signed "
                   'file (add maintenance_file = "maintenance.jws" to [control])\n')


async def test_a_running_agent_takes_the_window_the_command_starts(agent_toml: Path, tmp_path: Path) -> None:
    """The agent's own decision (metric, page, drain) includes a window started by the command."""
    from failover_agent.config import load_config
    from failover_agent.runner import Agent

    config = load_config(agent_toml)
    agent = Agent(config.model_copy(update={"exporters": config.exporters.model_copy(
        update={"prometheus": config.exporters.prometheus.model_copy(update={"enabled": False})}),
        "control": config.control and config.control.model_copy(update={"output_file": tmp_path / "c.jws"})}))
    await agent.start()
    try:
        assert not agent.maintenance().is_active("api", B)
        code, out, _err = _run("start", str(agent_toml), "--pool", "api", "--domain", B, "--for", "10m")
        assert code == 0
        assert agent.maintenance().active[("api", B)].source == out.strip()
    finally:
        await agent.stop(flush_timeout=1.0)
