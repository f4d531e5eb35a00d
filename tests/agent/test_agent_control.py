"""The control document writer: probe results plus the operator's override, never a whole pool."""

from __future__ import annotations

from pathlib import Path

import pytest
from failover_agent.checks.result import ProbeResult
from failover_agent.config import ControlConfig, parse_config
from failover_agent.control_writer import ControlWriter, Override, decide_disabled, load_override
from failover_agent.state import AgentState, DomainStatus

from pytest_failover import ControlDocument

A, B, C = "https://a.example.com", "https://b.example.com", "https://c.example.com"
KEY = b"0123456789abcdef-control"


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
    """Each update is a newer signed document that ControlDocument.parse accepts; the
    override file is re-read when it changes and a broken one keeps the previous overrides."""
    key = tmp_path / "key"
    key.write_bytes(KEY + b"\n")
    override = tmp_path / "override.toml"
    out = tmp_path / "out" / "control.json"
    cfg = ControlConfig(signing_key_file=key, override_file=override, output_file=out,
                        interval=1.0, expires_in=60.0, disable_after=1)
    writer = ControlWriter(cfg, POOLS)
    state = _state({A: 1, B: 0, C: 0})
    first = ControlDocument.parse(writer.update(state, now=1000.0), hmac_key=KEY, now=1000.0)
    assert first.disabled["api"] == frozenset({A})
    assert state.control is not None and out.read_bytes() == state.control.document

    override.write_text(f'[pools.api]\nenable = ["{A}"]\ndisable = ["{C}"]\n')
    second = ControlDocument.parse(writer.update(state, now=1000.0), hmac_key=KEY, now=1000.0)
    assert second.version > first.version
    assert second.disabled["api"] == frozenset({C})
    second.check([POOLS[0].to_pool()], first.version)

    override.write_text("not [valid toml")
    import os
    os.utime(override, (2_000_000_000, 2_000_000_000))
    third = ControlDocument.parse(writer.update(state, now=1000.0), hmac_key=KEY, now=1000.0)
    assert third.disabled["api"] == frozenset({C})


def test_override_file_errors_are_specific(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    path.write_text('{"pools": {"api": {"disable": ["ftp://x"]}}}')
    with pytest.raises(ValueError, match=r"pools\.api\.disable"):
        load_override(path)
    path.write_text('{"pool": {}}')
    with pytest.raises(ValueError, match="only a 'pools' table"):
        load_override(path)
