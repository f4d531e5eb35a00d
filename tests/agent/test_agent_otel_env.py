"""The SDK's ``OTEL_*`` variables in the agent and the demo, against real OTLP receivers on loopback.

Precedence under test: a key written in agent.toml, then the variable, then the agent's default.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

import pytest
from agent_support import config, cors_handler, eventually, fake_domains, pick, running, scrape
from failover_agent.telemetry import OtelEnvironmentError, Telemetry
from test_agent_otlp import Scope, grpc_receiving, receiving

from pytest_failover import __version__
from pytest_failover.semconv import SCHEMA_URL
from pytest_failover.simulator import FakeDomains

__all__ = ["fake_domains"]

PRIMARY = "https://api.example.com"
FAST = {"OTEL_METRIC_EXPORT_INTERVAL": "200", "OTEL_BSP_SCHEDULE_DELAY": "100"}
"""Milliseconds, as the SDK reads them: exports within a fraction of a second."""


def _setenv(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for name, value in values.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def _clean_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the OTEL_* variables it is about, and no others."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


async def test_the_endpoint_variable_alone_exports_with_the_environment_s_resource_and_headers(
    fake_domains: FakeDomains, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No [exporters.otlp]: OTEL_EXPORTER_OTLP_ENDPOINT turns OTLP on; OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS and OTEL_METRIC_EXPORT_INTERVAL apply."""
    fake_domains.add("api.example.com", cors_handler())
    async with receiving() as receiver:
        _setenv(monkeypatch, **FAST, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                OTEL_SERVICE_NAME="synthetics-eu",
                OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=staging,service.namespace=sre",
                OTEL_EXPORTER_OTLP_HEADERS="x-scope-orgid=team-a")
        cfg = config(fake_domains, tmp_path, [PRIMARY])
        assert cfg.exporters.otlp is None
        async with running(cfg):
            await eventually(lambda: {"failover.probe.success", "failover.attempts"} <= receiver.metric_names,
                             timeout=8)
            await eventually(lambda: "failover api" in receiver.span_names, timeout=8)
        assert receiver.paths == {"/v1/traces", "/v1/metrics"}
        assert receiver.headers["x-scope-orgid"] == "team-a"
        assert receiver.resource["service.name"] == "synthetics-eu"  # not our default
        assert receiver.resource["deployment.environment.name"] == "staging"
        assert receiver.resource["service.namespace"] == "sre"
        assert receiver.resource["probe.location"] == "test-lab"
        assert receiver.metric_scopes["failover.probe.success"] == Scope("failover_agent", __version__, SCHEMA_URL)


async def test_per_signal_endpoint_and_an_exporter_set_to_none(
    fake_domains: FakeDomains, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as written (no /v1/traces added), and
    OTEL_METRICS_EXPORTER=none keeps metrics to /metrics."""
    fake_domains.add("api.example.com", cors_handler())
    async with receiving({"/collector/spans": "traces"}) as receiver:
        _setenv(monkeypatch, **FAST, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{receiver.endpoint}/collector/spans",
                OTEL_METRICS_EXPORTER="none")
        async with running(config(fake_domains, tmp_path, [PRIMARY])) as agent:
            await eventually(lambda: "failover api" in receiver.span_names, timeout=8)
            await asyncio.sleep(0.5)  # two and a half metric intervals, had metrics been on
            assert pick(await scrape(agent), "failover_probe_success")  # still on /metrics
        assert receiver.paths == {"/collector/spans"}
        assert not receiver.metric_names


async def test_agent_toml_wins_over_the_environment_key_by_key(
    fake_domains: FakeDomains, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's endpoint beats OTEL_EXPORTER_OTLP_ENDPOINT; OTEL_METRIC_EXPORT_INTERVAL still
    applies, as the file does not set export_interval (the agent's default is 10 s)."""
    fake_domains.add("api.example.com", cors_handler())
    async with receiving() as chosen, receiving() as ignored:
        _setenv(monkeypatch, **FAST, OTEL_EXPORTER_OTLP_ENDPOINT=ignored.endpoint)
        cfg = config(fake_domains, tmp_path, [PRIMARY], exporters={
            "prometheus": {"listen": "127.0.0.1:0"}, "otlp": {"endpoint": chosen.endpoint}})
        async with running(cfg):
            await eventually(lambda: "failover.probe.success" in chosen.metric_names, timeout=5)
            await eventually(lambda: "failover api" in chosen.span_names, timeout=5)
        assert not ignored.paths


async def test_an_otlp_section_without_endpoint_takes_the_environment_s(
    fake_domains: FakeDomains, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[exporters.otlp] that sets headers but no endpoint exports to OTEL_EXPORTER_OTLP_ENDPOINT,
    with the file's headers on top of the environment's."""
    fake_domains.add("api.example.com", cors_handler())
    async with receiving() as receiver:
        _setenv(monkeypatch, **FAST, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                OTEL_EXPORTER_OTLP_HEADERS="x-scope-orgid=team-a")
        cfg = config(fake_domains, tmp_path, [PRIMARY], exporters={
            "prometheus": {"listen": "127.0.0.1:0"}, "otlp": {"headers": {"x-team": "sre"}}})
        assert cfg.exporters.otlp is not None and cfg.exporters.otlp.endpoint is None
        async with running(cfg):
            await eventually(lambda: "failover.probe.success" in receiver.metric_names, timeout=8)
            await eventually(lambda: "failover api" in receiver.span_names, timeout=8)
        assert receiver.paths == {"/v1/traces", "/v1/metrics"}
        assert receiver.headers["x-team"] == "sre"
        assert receiver.headers["x-scope-orgid"] == "team-a"


async def test_otlp_protocol_grpc_from_the_environment(
    fake_domains: FakeDomains, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc picks the gRPC exporters for the variable's endpoint."""
    fake_domains.add("api.example.com", cors_handler())
    async with grpc_receiving() as (port, seen):
        _setenv(monkeypatch, **FAST, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
        async with running(config(fake_domains, tmp_path, [PRIMARY])):
            await eventually(lambda: "failover.probe.success" in seen["metrics"], timeout=8)
            await eventually(lambda: "failover api" in seen["spans"], timeout=8)


async def test_sdk_disabled_records_nothing_while_the_checks_run(
    fake_domains: FakeDomains, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OTEL_SDK_DISABLED=true: nothing goes over OTLP and /metrics has no series, says so once,
    and the probes still run."""
    fake_domains.add("api.example.com", cors_handler())
    async with receiving() as receiver:
        _setenv(monkeypatch, **FAST, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_SDK_DISABLED="true")
        caplog.set_level(logging.WARNING, logger="failover_agent.telemetry")
        async with running(config(fake_domains, tmp_path, [PRIMARY])) as agent:
            status = agent.state.domains[("api", PRIMARY)]
            await eventually(lambda: status.last is not None and status.last.success)
            await asyncio.sleep(0.5)
            assert not [name for name, _ in await scrape(agent) if name.startswith("failover_")]
        assert not receiver.paths
    assert [r.getMessage() for r in caplog.records if "OTEL_SDK_DISABLED" in r.getMessage()] == [
        "OTEL_SDK_DISABLED=true: the agent records no metrics and no spans (/metrics is empty, "
        "nothing goes over OTLP); the checks and the status page run on"
    ]


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
         "OTEL_EXPORTER_OTLP_PROTOCOL='http/json': the agent's OTLP exporters speak 'grpc' or 'http/protobuf'"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"},
         "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='thrift': the agent's OTLP exporters speak 'grpc' or 'http/protobuf'"),
    ],
)
def test_a_protocol_the_agent_cannot_speak_is_named(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    """A bad protocol variable stops the start with the variable and its value."""
    _setenv(monkeypatch, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", **variables)
    with pytest.raises(OtelEnvironmentError) as raised:
        Telemetry(location="x", prometheus=False)
    assert str(raised.value) == message


async def _agent(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """``python -m failover_agent ARGS``: exit code and output (bounded to 60 s)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "failover_agent", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def _environment(**otel: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, **otel}


async def test_the_demo_exports_otlp_when_the_environment_says_where(tmp_path: Path) -> None:
    """``failover-agent demo`` with OTEL_EXPORTER_OTLP_ENDPOINT: its spans and metrics reach the
    receiver under the demo's service name, and the run still ends cleanly."""
    async with receiving() as receiver:
        env = _environment(**FAST, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
        code, out = await _agent("demo", "--duration", "3", "--listen", "127.0.0.1:0", "--plain",
                                 env=env, cwd=tmp_path)
    assert code == 0, out
    assert "Traceback" not in out
    assert f"OTLP span export to {receiver.endpoint}/v1/traces" in out
    assert {"failover.probe.success", "failover.pool.available", "failover.attempts"} <= receiver.metric_names
    assert "failover api" in receiver.span_names
    assert receiver.resource["service.name"] == "failover-agent"
    assert receiver.resource["probe.location"] == "demo"


async def test_run_with_a_bad_protocol_variable_is_a_one_line_error(tmp_path: Path) -> None:
    """``failover-agent run`` refuses OTEL_EXPORTER_OTLP_PROTOCOL=http/json in one line, exit 2."""
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[[pools]]\nname = "api"\ndomains = ["https://api.example.com"]\n'
                   '[exporters.prometheus]\nlisten = "127.0.0.1:0"\n')
    env = _environment(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
    code, out = await _agent("run", str(cfg), "--plain", env=env, cwd=tmp_path)
    assert code == 2, out
    assert out.strip().splitlines() == [
        "Error: OTEL_EXPORTER_OTLP_PROTOCOL='http/json': the agent's OTLP exporters speak 'grpc' or 'http/protobuf'"
    ]

