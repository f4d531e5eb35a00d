"""The control document writer: probe results plus the operator's override, never a whole pool."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from failover_agent.checks.result import ProbeResult
from failover_agent.config import ControlConfig, parse_config
from failover_agent.control_writer import ControlWriter, Override, decide_disabled, load_override
from failover_agent.state import AgentState, DomainStatus

from pytest_failover import ControlDocument
from pytest_failover.control import ControlKey, generate_key, load_key, save_key

A, B, C = "https://a.example.com", "https://b.example.com", "https://c.example.com"
SECRET = b"0123456789abcdef-control-0123456"
KEY = ControlKey.from_secret(SECRET, kid="agent-test")


def _state(failures: dict[str, int]) -> AgentState:
    state = AgentState(location="x")
    for url, n in failures.items():
        d = DomainStatus("api", url, url[8:])
        for _ in range(n):
            d.record(ProbeResult(False, None, "dns_error", 0.01))
        if n == 0:
            d.record(ProbeResult(True, 200, None, 0.01))
        state.domains[("api", url)] = d
    return state


POOLS = parse_config({"pools": [{"name": "api", "domains": [A, B, C]}]}).pools


def test_domains_failing_long_enough_are_disabled() -> None:
    """A domain is disabled after ``disable_after`` consecutive failed probes, not before."""
    assert decide_disabled(POOLS, _state({A: 2, B: 1, C: 0}), 2, Override({}, {})) == {"api": frozenset({A})}


def test_the_override_wins_both_ways() -> None:
    """``enable`` keeps a failing domain on; ``disable`` turns a healthy one off."""
    override = Override({"api": frozenset({C})}, {"api": frozenset({A})})
    assert decide_disabled(POOLS, _state({A: 5, B: 0, C: 0}), 2, override) == {"api": frozenset({C})}


def test_never_every_domain_of_a_pool() -> None:
    """All domains down: nothing is disabled automatically; an override of all keeps the first."""
    assert decide_disabled(POOLS, _state({A: 3, B: 3, C: 3}), 2, Override({}, {})) == {"api": frozenset()}
    everything = Override({"api": frozenset({A, B, C})}, {})
    assert decide_disabled(POOLS, _state({A: 0, B: 0, C: 0}), 2, everything) == {"api": frozenset({B, C})}
    # Automatic decisions are dropped first, the operator's remain.
    partial = Override({"api": frozenset({B})}, {})
    assert decide_disabled(POOLS, _state({A: 3, B: 0, C: 3}), 2, partial) == {"api": frozenset({B})}


def test_writer_signs_increasing_versions_and_reads_the_override_file(tmp_path: Path) -> None:
    """Each update is a newer signed document; the override file is re-read on change, and a broken one keeps the last."""
    key = tmp_path / "key"
    key.write_text(KEY.to_json(private=True) + "\n\n")  # whitespace around the JWK is nothing
    override = tmp_path / "override.toml"
    out = tmp_path / "out" / "control.json"
    cfg = ControlConfig(signing_key_file=key, override_file=override, output_file=out,
                        interval=1.0, expires_in=60.0, disable_after=1)
    writer = ControlWriter(cfg, POOLS)
    state = _state({A: 1, B: 0, C: 0})
    first = ControlDocument.parse(writer.update(state, now=1000.0), key=load_key(key), now=1000.0)
    assert first.disabled["api"] == frozenset({A})
    assert state.control is not None and out.read_bytes() == state.control.document

    override.write_text(f'[pools.api]\nenable = ["{A}"]\ndisable = ["{C}"]\n')
    second = ControlDocument.parse(writer.update(state, now=1000.0), key=KEY, now=1000.0)
    assert second.version > first.version
    assert second.disabled["api"] == frozenset({C})
    second.check([POOLS[0].to_pool()], first.version)

    override.write_text("not [valid toml")
    import os
    os.utime(override, (2_000_000_000, 2_000_000_000))
    third = ControlDocument.parse(writer.update(state, now=1000.0), hmac_key=SECRET, now=1000.0)
    assert third.disabled["api"] == frozenset({C})


def test_override_file_errors_are_specific(tmp_path: Path) -> None:
    """A broken override file is refused with the path of the entry that is wrong."""
    path = tmp_path / "o.json"
    path.write_text('{"pools": {"api": {"disable": ["ftp://x"]}}}')
    with pytest.raises(ValueError, match=r"pools\.api\.disable"):
        load_override(path)
    path.write_text('{"pool": {}}')
    with pytest.raises(ValueError, match="only a 'pools' table"):
        load_override(path)


def _config(key: Path, **changes: object) -> ControlConfig:
    """A control config signing with ``key``."""
    return ControlConfig.model_validate({"signing_key_file": key, "interval": 1.0, "expires_in": 60.0, **changes})


def test_writer_and_client_read_the_key_file_with_one_loader(tmp_path: Path) -> None:
    """The agent signs with load_key(file) and a client given the same file verifies: no side strips anything."""
    key = generate_key("EdDSA", kid="2026-11")
    save_key(tmp_path / "control.key", key, private=True)
    save_key(tmp_path / "control.pub.jwk", key.public(), private=False)
    writer = ControlWriter(_config(tmp_path / "control.key"), POOLS)
    raw = writer.update(_state({A: 0, B: 0, C: 0}), now=1000.0)
    doc = ControlDocument.parse(raw, key=load_key(tmp_path / "control.pub.jwk"), now=1000.0)
    assert doc.version == writer.version


def test_writer_refuses_keys_it_cannot_sign_with(tmp_path: Path) -> None:
    """A public key, a raw secret or a PEM file as signing_key_file fails at start, naming the file and the fix."""
    key = generate_key("EdDSA", kid="k")
    save_key(tmp_path / "public.jwk", key.public(), private=False)
    (tmp_path / "raw.key").write_bytes(SECRET + b"\n")
    (tmp_path / "old.pem").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    for name, words in [
        ("public.jwk", "private key file"),
        ("raw.key", "failover-agent control keygen"),
        ("old.pem", "PEM file, not a JWK"),
    ]:
        with pytest.raises(ValueError, match=re.escape(str(tmp_path / name))) as info:
            ControlWriter(_config(tmp_path / name), POOLS)
        assert words in str(info.value)


def test_key_id_must_agree_with_the_keys_kid(tmp_path: Path) -> None:
    """control.key_id names a key without kid, must equal a key's own kid, and is then the header's kid."""
    save_key(tmp_path / "named.key", generate_key("HS256", kid="mine"), private=True)
    with pytest.raises(ValueError, match="must agree"):
        ControlWriter(_config(tmp_path / "named.key", key_id="other"), POOLS)
    ControlWriter(_config(tmp_path / "named.key", key_id="mine"), POOLS)
    anonymous = ControlKey.from_secret(SECRET)
    save_key(tmp_path / "anonymous.key", anonymous, private=True)
    writer = ControlWriter(_config(tmp_path / "anonymous.key", key_id="given"), POOLS)
    raw = writer.update(_state({A: 0, B: 0, C: 0}), now=1000.0)
    ControlDocument.parse(raw, key=anonymous.with_kid("given"), now=1000.0)
    with pytest.raises(ValueError, match="no configured key"):
        ControlDocument.parse(raw, key=anonymous.with_kid("else"), now=1000.0)
